"""errands API keys (SPEC §10): minted by ``errands principals add``, verified on every request.

A token is ``ek_<8 hex>.<secret>``. Its first part is the key id: public, listed, the handle by
which a key is found and revoked. The store keeps only the SHA-256 of the whole token, so a copy
of the database lets nobody act as anyone. Verification reads the store on every call (no cache):
a revoked key is refused at once, by every gateway in front of the same store.

No message here carries a token or its secret part; a key id may be named.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import UTC, datetime

from errands.adapters.store import PrincipalRecord, SessionStore
from errands.contracts.principals import (
    ADMIN_TOKEN_ID,
    LOCAL_ID,
    OPERATOR_ID,
    ROLES,
    Principal,
    Role,
    principal_id,
)
from errands.errors import InvalidRequest, Unauthorized

KEY_PREFIX = "ek_"
KEY_ID_PATTERN = r"ek_[0-9a-f]{8}"
_TOKEN = re.compile(rf"({KEY_ID_PATTERN})\.[A-Za-z0-9_-]{{16,200}}")
_NO_DIGEST = "0" * 64
"""Compared against when no key has the id, so an unknown id costs what a wrong secret does."""
RESERVED_IDS = {
    ADMIN_TOKEN_ID: "the admin token (ERRANDS_API_TOKEN)",
    LOCAL_ID: "the one user of a gateway on loopback with no auth",
    OPERATOR_ID: "the operator at the CLI",
}
"""The principal ids errands gives itself, with whom each is for: no API key and no OIDC
token may name one, or its holder would own what the admin, the loopback user or the CLI
started."""


def reserved_for(name: str) -> str | None:
    """Whom principal id ``name`` is reserved for, or None when anyone may have it."""
    return RESERVED_IDS.get(name)


def mint(name: str, role: Role, now: datetime) -> tuple[str, PrincipalRecord]:
    """A new API key for principal ``name``: the token (shown once, never stored) and the
    record the store keeps (its key id and the token's SHA-256). ``InvalidRequest`` for a name
    that cannot be a principal id, is reserved (``RESERVED_IDS``) or has a key id's shape (so
    ``errands principals revoke NAME|KEY_ID`` always knows which was meant), or a role that is
    not one of ``ROLES``."""
    try:
        principal_id(name)
    except ValueError as error:
        raise InvalidRequest(str(error), field="name") from None
    if (whom := reserved_for(name)) is not None:
        raise InvalidRequest(f"{name!r} is reserved for {whom}; choose another name", field="name")
    if re.fullmatch(KEY_ID_PATTERN, name):
        raise InvalidRequest(
            f"{name!r} has the shape of a key id (ek_ and 8 hex digits), which `errands "
            "principals revoke` also takes; choose another name",
            field="name",
        )
    if role not in ROLES:
        raise InvalidRequest(
            f"{str(role)[:40]!r} is not a role: use one of {', '.join(ROLES)}", field="role"
        )
    key_id = KEY_PREFIX + secrets.token_hex(4)
    token = f"{key_id}.{secrets.token_urlsafe(32)}"
    record = PrincipalRecord(
        name=name, role=role, key_id=key_id, token_sha256=digest(token), created_at=now
    )
    return token, record


def digest(token: str) -> str:
    """The hex SHA-256 of a whole token, as the store keeps it."""
    return hashlib.sha256(token.encode()).hexdigest()


def looks_like_key(token: str) -> bool:
    """Whether a bearer token has the shape of an errands API key (not a JWT, not the admin
    token); says nothing about whether it is valid."""
    return _TOKEN.fullmatch(token) is not None


def key_id_of(token: str) -> str | None:
    """The public key id of a token shaped like an errands API key, else None."""
    shaped = _TOKEN.fullmatch(token)
    return shaped.group(1) if shaped else None


def verify_key(store: SessionStore, token: str) -> Principal:
    """The principal an API key stands for; ``Unauthorized`` (saying why, naming at most the key
    id) for a token that is not an errands key, an unknown key, a wrong secret or a revoked key.

    The secret is checked before revocation, so only the key's holder learns it was revoked.
    """
    key_id = key_id_of(token)
    if key_id is None:
        raise Unauthorized(
            "the bearer token is not an errands API key (ek_XXXXXXXX.SECRET); send the token "
            "`errands principals add` printed"
        )
    record = store.find_key(key_id)
    stored = record.token_sha256 if record is not None else _NO_DIGEST
    matches = hmac.compare_digest(digest(token), stored)
    if record is None or not matches:
        raise Unauthorized(
            f"unknown API key {key_id}: no key has that id and secret; check the token, or ask "
            "an admin for a new one (`errands principals add`)"
        )
    if record.revoked_at is not None:
        revoked = record.revoked_at.astimezone(UTC)
        raise Unauthorized(
            f"this API key was revoked ({key_id}, {revoked:%Y-%m-%d %H:%M} UTC); ask an admin "
            "for a new one",
            guess=False,  # its secret was right: its holder, not a guesser
        )
    if (whom := reserved_for(record.name)) is not None:
        # A key no errands mints now (one from before the ids were reserved): it would act as
        # the built-in principal.
        raise Unauthorized(
            f"API key {key_id} names {record.name!r}, reserved for {whom}; revoke it "
            f"(`errands principals revoke {key_id}`) and add a key under another name",
            guess=False,
        )
    return Principal(id=record.name, role=record.role, via="key")
