"""The one way a URL is shown (``errands config``, a refusal, a log line): its secrets masked.

A URL can carry a credential in two places: the password of its user info
(``postgresql://app:hunter2@db/app``) and its query string (``?api-key=…``, ``sslpassword=…``,
``access_token=…``). ``masked_url`` replaces each such value with ``****`` and leaves the rest
exactly as written, so the URL still says where it points.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

MASK = "****"
SECRET_PARAMETERS = frozenset(
    {"apikey", "api_key", "key", "token", "access_token", "password", "sslpassword", "secret"}
)
"""Query parameters whose value is a secret, by name (lower case, ``-`` read as ``_``)."""
_SECRET_ENDINGS = ("_key", "_token", "_secret", "password", "apikey")
"""A parameter whose name ends so (``x_api_key``, ``refresh_token``, ``client_secret``) too."""


def is_secret_parameter(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a secret."""
    key = unquote(name).strip().lower().replace("-", "_")
    return key in SECRET_PARAMETERS or key.endswith(_SECRET_ENDINGS)


def masked_url(url: str) -> str:
    """``url`` with the password of its user info and every secret query value as ``****``."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL urllib can read: show nothing that might be a secret
        return url if "@" not in url and "?" not in url else MASK
    shown = url
    userinfo, at, host = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        # The netloc is the first thing after the scheme: its first occurrence is it.
        masked = f"{userinfo.partition(':')[0]}:{MASK}@{host}"
        shown = shown.replace(parts.netloc, masked, 1)
    if parts.query:
        # The first "?" starts the query (a netloc cannot hold one); "#" ends it.
        head, _, rest = shown.partition("?")
        query, hash_, fragment = rest.partition("#")
        query = "&".join(_masked_parameter(pair) for pair in query.split("&"))
        shown = f"{head}?{query}{hash_}{fragment}"
    return shown


def _masked_parameter(pair: str) -> str:
    name, eq, _ = pair.partition("=")
    return f"{name}={MASK}" if eq and is_secret_parameter(name) else pair
