"""Which notification URLs errands may call (SPEC §11), decided after DNS resolution.

A URL passes when its scheme is ``https`` (``http`` only for an allowed host), it carries no
user name or password, and every address its host resolves to is public: not private,
loopback, link-local, multicast, reserved, unspecified or otherwise not globally reachable,
including those addresses written inside IPv6 (IPv4-mapped, 6to4, NAT64). The policy's
``allow`` list names hosts, addresses and networks that pass anyway (a receiver on loopback in
a test, a service on the private network). The request then connects to the address checked
here, never to a second resolution of the name, so DNS cannot answer one thing to the check and
another to the connection.

Reasons name the host and the address, never the URL's path or query: those may hold a token.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from errands.errors import WebhookRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class WebhookPolicy:
    """How notifications may be delivered.

    ``allow``: host names, IP addresses or networks (CIDR) that may be called even when they
    are private, loopback or link-local, and over plain ``http``. A name matches the URL's host
    exactly (no wildcards); an address or network matches what the host resolves to.
    """

    allow: tuple[str, ...] = ()
    timeout_seconds: float = 10.0
    max_body_bytes: int = 16_384

    def __post_init__(self) -> None:
        if isinstance(self.allow, str):
            raise TypeError("WebhookPolicy.allow is a tuple of entries; use WebhookPolicy.parse")
        object.__setattr__(self, "allow", tuple(_normal_entry(e) for e in self.allow))
        if not self.timeout_seconds > 0:
            raise ValueError(f"a webhook timeout must be positive, not {self.timeout_seconds}")
        if self.max_body_bytes <= 0:
            raise ValueError(f"a webhook body limit must be positive, not {self.max_body_bytes}")

    @classmethod
    def parse(
        cls,
        allow: str | Sequence[str],
        *,
        timeout_seconds: float = 10.0,
        max_body_bytes: int = 16_384,
    ) -> WebhookPolicy:
        """A policy from a setting: ``allow`` as entries separated by commas or white space
        (``"hooks.internal, 10.0.0.0/8, ::1"``) or as a list. An entry that is neither an
        address, a network nor a host name is a ``ValueError`` naming it."""
        entries = allow.replace(",", " ").split() if isinstance(allow, str) else allow
        return cls(
            allow=tuple(entries),
            timeout_seconds=timeout_seconds,
            max_body_bytes=max_body_bytes,
        )

    def allows_name(self, host: str) -> bool:
        """Whether ``host`` (lower case, as a URL gives it) is named in ``allow``."""
        return host.rstrip(".") in self.allow

    def allows_address(self, address: IPAddress) -> bool:
        """Whether ``address`` is, or lies in, an address or network named in ``allow``."""
        return any(address in network for network in self.networks())

    def networks(self) -> list[Network]:
        """The addresses and networks of ``allow`` (its host names left out)."""
        networks = []
        for entry in self.allow:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                continue  # a host name
        return networks


def _normal_entry(entry: str) -> str:
    text = entry.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        if "/" in text:
            return str(ipaddress.ip_network(text, strict=False))
        return str(ipaddress.ip_address(text))
    except ValueError:
        if "/" in text or ":" in text:
            raise ValueError(
                f"{entry!r} is not an IP address or network; write an address (10.0.0.5, ::1) "
                "or a network in CIDR form (10.0.0.0/8, fd00::/8)"
            ) from None
    text = text.rstrip(".")
    labels = text.split(".")
    if not text or not all(_is_label(label) for label in labels):
        raise ValueError(
            f"{entry!r} is not a host name, an IP address or a network; write one of "
            "hooks.example.com, 10.0.0.5 or 10.0.0.0/8"
        )
    return text


def _is_label(label: str) -> bool:
    return (
        0 < len(label) <= 63
        and not label.startswith("-")
        and not label.endswith("-")
        and all(c.isascii() and (c.isalnum() or c in "-_") for c in label)
    )


@dataclass(frozen=True)
class Resolved:
    """A URL that passed the check and the addresses to connect to, in resolution order."""

    scheme: str
    host: str
    """The URL's host, lower case, as the ``Host`` header, SNI and the certificate check use it
    (an IPv6 literal without brackets)."""
    port: int
    addresses: tuple[str, ...]

    @property
    def address(self) -> str:
        """The first address to connect to."""
        return self.addresses[0]


def non_public(address: IPAddress) -> str | None:
    """What makes ``address`` unfit for a notification (``"private"``, ``"loopback"``…), or
    None for a public address. An IPv4 address written inside IPv6 is judged as itself."""
    inner = embedded_ipv4(address)
    if inner is not None:
        return non_public(inner)
    for kind, flag in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ):
        if flag:
            return kind
    return None if address.is_global else "non-public"


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (IPv4-mapped, 6to4, NAT64), if it carries one."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    inner = address.ipv4_mapped or address.sixtofour
    if inner is None and address in _NAT64:
        inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return inner


async def check_url(url: str, policy: WebhookPolicy) -> Resolved:
    """The addresses to deliver ``url`` to, or ``WebhookRefused`` when the policy refuses it.

    A name that does not resolve raises ``socket.gaierror`` (an ``OSError``): DNS trouble may
    pass, so it is a failure to retry, not a refusal. Names are resolved with the running
    loop's ``getaddrinfo``; an IP address in the URL is checked as it is.
    """
    if any(c <= " " or c == "\x7f" for c in url):
        raise WebhookRefused("the URL holds white space or control characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        raise WebhookRefused("the URL cannot be parsed (its host or port is malformed)") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise WebhookRefused(f"the scheme is {scheme or 'missing'}, not https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise WebhookRefused("the URL carries a user name or password; sign with the secret only")
    host = (host or "").rstrip(".")
    if not host:
        raise WebhookRefused("the URL has no host")
    name_allowed = policy.allows_name(host)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if scheme == "http" and not name_allowed and literal is None and not policy.networks():
        raise WebhookRefused(f"plain http:// to {host}; use https://, or allow the host")
    port = port or _DEFAULT_PORTS[scheme]
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        addresses = await _resolve(host, port)
    for address in addresses:
        _check_address(host, literal is not None, address, scheme, name_allowed, policy)
    return Resolved(scheme, host, port, tuple(str(a) for a in addresses))


def _check_address(
    host: str,
    is_literal: bool,
    address: IPAddress,
    scheme: str,
    name_allowed: bool,
    policy: WebhookPolicy,
) -> None:
    if name_allowed or policy.allows_address(address):
        return
    if scheme == "http":
        raise WebhookRefused(f"plain http:// to {host}; use https://, or allow the host")
    kind = non_public(address)
    if kind is None:
        return
    inner = embedded_ipv4(address)
    named = f"{address} ({inner})" if inner is not None else str(address)
    subject = f"{named} is" if is_literal else f"{host} resolves to {named},"
    article = "an" if kind[0] in "aeiou" else "a"
    raise WebhookRefused(f"{subject} {article} {kind} address")


async def _resolve(host: str, port: int) -> list[IPAddress]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    found: list[IPAddress] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        address = ipaddress.ip_address(str(sockaddr[0]))
        if address not in found:
            found.append(address)
    if not found:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} resolves to no IP address")
    return found
