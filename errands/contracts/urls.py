"""The one way a URL is shown (``errands config``, a refusal, a log line): its secrets masked.

A URL can carry a credential in three places: its user info (the password in
``postgresql://app:hunter2@db/app``; in an ``http(s)://TOKEN@host/`` URL with no password the
user itself, which is then commonly a token), its query string (``?api-key=…``, ``sslpassword=…``,
``access_token=…``, Azure's ``sig=…``) and its fragment (``#access_token=…`` from an OAuth
redirect). ``masked_url`` replaces each such value with ``****`` and leaves the rest exactly as
written, so the URL still says where it points.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

MASK = "****"
SECRET_PARAMETERS = frozenset(
    {
        *("apikey", "api_key", "key", "token", "access_token", "password", "sslpassword"),
        *("secret", "sig", "signature"),
    }
)
"""Query parameters whose value is a secret, by name (lower case, ``-`` read as ``_``)."""
_SECRET_ENDINGS = ("_key", "_token", "_secret", "password", "apikey", "_signature")
"""A parameter whose name ends so (``x_api_key``, ``refresh_token``, ``client_secret``,
``x_amz_signature``) too."""
_FRAGMENT_PAIR = re.compile(r"(?:^|(?<=[?&]))[^=&?]*=[^&]*")
_TOKEN_USER_SCHEMES = frozenset({"http", "https", "ws", "wss"})
"""Where a user without a password is a credential (``https://TOKEN@host/``); elsewhere
(``postgresql://app@db/app``) it is a name."""


def is_secret_parameter(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a secret."""
    key = unquote(name).strip().lower().replace("-", "_")
    return key in SECRET_PARAMETERS or key.endswith(_SECRET_ENDINGS)


def masked_url(url: str) -> str:
    """``url`` with its user-info credential and every secret query or fragment value as
    ``****``."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL urllib can read: show nothing that might be a secret
        return url if not any(c in url for c in "@?#") else MASK
    shown = url
    userinfo, at, host = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if at and (colon or parts.scheme.lower() in _TOKEN_USER_SCHEMES):
        # The netloc is the first thing after the scheme: its first occurrence is it.
        masked = f"{user}:{MASK}@{host}" if colon else f"{MASK}@{host}"
        shown = shown.replace(parts.netloc, masked, 1)
    # The first "#" starts the fragment; the first "?" before it the query (a netloc holds
    # neither).
    shown, hash_, fragment = shown.partition("#")
    if parts.query:
        head, _, query = shown.partition("?")
        shown = f"{head}?{_masked_pairs(query)}"
    # A fragment may hold pairs after a route too (``#/callback?access_token=…``).
    return shown + hash_ + _FRAGMENT_PAIR.sub(_masked_match, fragment)


def _masked_pairs(text: str) -> str:
    return "&".join(_masked_parameter(pair) for pair in text.split("&"))


def _masked_match(pair: re.Match[str]) -> str:
    return _masked_parameter(pair[0])


def _masked_parameter(pair: str) -> str:
    name, eq, _ = pair.partition("=")
    return f"{name}={MASK}" if eq and is_secret_parameter(name) else pair
