"""Who a bearer token stands for: errands API keys (``keys``, checked against the session
store on every call) and OIDC JWTs (``oidc``). Each turns a token into a ``Principal`` or
refuses it with ``Unauthorized`` and a reason that never repeats the token."""

from __future__ import annotations

from errands.adapters.identity.keys import digest, key_id_of, looks_like_key, mint, verify_key
from errands.adapters.identity.oidc import OidcVerifier, looks_like_jwt

__all__ = [
    "OidcVerifier",
    "digest",
    "key_id_of",
    "looks_like_jwt",
    "looks_like_key",
    "mint",
    "verify_key",
]
