"""What users write is theirs (DESIGN invariant 12): every payload errands writes to Temporal is
encrypted with AES-256-GCM when ``ERRANDS_ENCRYPTION_KEYS`` (or ``_FILE``) holds keys.

The first key encrypts; its id travels in the payload's metadata, so every key listed decrypts
what it encrypted and keys rotate by putting a new one first. A payload that is not encrypted
(written before encryption was turned on) is read as it is. Failures' messages and stack traces
go into an encoded payload too, so they are encrypted with the rest; only a missing key's failure
stays readable, as it names key ids and nothing else.

Search attributes cannot be encrypted: the session a task belongs to is searched by a keyed digest
of its id (``session_tags``), one per key, so a search still finds the tasks started under an
older key (and, by the id itself, those started before encryption was on).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
    PayloadConverter,
)

from errands.errors import ConfigError, UnreadablePayload

if TYPE_CHECKING:
    from errands.settings import Settings

ENCODING = b"binary/encrypted"
"""The ``encoding`` of an encrypted payload (as in Temporal's samples, so tools recognise it)."""
KEY_ID = "encryption-key-id"
"""The metadata entry naming the key that encrypted a payload."""
KEY_BYTES = 32
NONCE_BYTES = 12
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
SESSION_TAG_CONTEXT = b"errands: the ErrandsSession search attribute"


NEW_KEY_COMMAND = (
    'k1=$(python -c "import base64, os; print(base64.b64encode(os.urandom(32)).decode())")'
)
"""How to make an entry of ``ERRANDS_ENCRYPTION_KEYS``: an id, '=', a fresh key."""


def parse_keys(text: str) -> dict[str, bytes]:
    """The keys in ``text``, first (the encrypting one) first: ``id=BASE64`` comma- or
    newline-separated, or a JSON object of id to base64. ``ValueError`` says what is wrong
    naming entries by position: it never shows a key, nor an id (a bad id may be a key)."""
    text = text.strip()
    pairs: list[tuple[object, object]] = []
    if text.startswith("{"):
        try:
            pairs = list(json.loads(text).items())
        except (ValueError, AttributeError):
            raise ValueError("it is not a JSON object of key id to base64 key") from None
    else:
        for n, item in enumerate(filter(None, (i.strip() for i in re.split(r"[,\n]", text))), 1):
            if _looks_like_a_bare_key(item):
                raise ValueError(
                    f"entry {n} looks like a key without an id; give ID=BASE64, e.g. "
                    f"{NEW_KEY_COMMAND}"
                )
            key_id, sep, encoded = item.partition("=")
            if not sep:
                raise ValueError(f"entry {n} has no '='; give ID=BASE64, comma-separated")
            pairs.append((key_id.strip(), encoded.strip()))
    if not pairs:
        raise ValueError("it holds no key; give ID=BASE64, comma-separated")
    keys: dict[str, bytes] = {}
    first: dict[str, int] = {}
    for n, (key_id, encoded) in enumerate(pairs, 1):
        if not isinstance(key_id, str) or not KEY_ID_PATTERN.fullmatch(key_id):
            raise ValueError(
                f"entry {n}'s key id is not 1 to 64 letters, digits, '.', '_' or '-'; "
                "give ID=BASE64, e.g. k1=…"
            )
        if key_id in keys:
            raise ValueError(f"entries {first[key_id]} and {n} have the same key id")
        try:
            key = base64.b64decode(str(encoded), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"entry {n}'s key is not base64") from None
        if len(key) != KEY_BYTES:
            raise ValueError(
                f"entry {n}'s key is {len(key)} bytes; an AES-256 key is {KEY_BYTES} random "
                f"bytes, give ID=BASE64, e.g. {NEW_KEY_COMMAND}"
            )
        keys[key_id] = key
        first[key_id] = n
    return keys


def _looks_like_a_bare_key(item: str) -> bool:
    """Whether ``item`` is a key given without ``id=``: it has no '=' but trailing base64
    padding, and the padding follows a long stem or the whole decodes to a key's length."""
    stem = item.rstrip("=")
    if "=" in stem:
        return False  # ID=VALUE
    if stem != item and len(stem) >= 16:
        return True  # padding after a long stem: base64, not an id with an empty key
    for altchars in (b"+/", b"-_"):  # base64, and its URL-safe form
        try:
            padded = stem + "=" * (-len(stem) % 4)
            if len(base64.b64decode(padded, altchars=altchars, validate=True)) == KEY_BYTES:
                return True
        except (binascii.Error, ValueError):
            pass
    return False


def new_key() -> str:
    """A fresh key in base64, as ``ERRANDS_ENCRYPTION_KEYS`` takes it."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode()


def configured_keys(settings: Settings) -> dict[str, bytes] | None:
    """The keys the settings give (the variable, else the file), or None: no encryption."""
    if settings.encryption_keys is not None:
        setting, text = "ERRANDS_ENCRYPTION_KEYS", settings.encryption_keys.get_secret_value()
        source = setting
    elif settings.encryption_keys_file is not None:
        setting = "ERRANDS_ENCRYPTION_KEYS_FILE"
        source = f"{setting} ({settings.encryption_keys_file})"
        try:
            text = settings.encryption_keys_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "it is not UTF-8 text"
            raise ConfigError(
                f"{source} cannot be read: {reason}; give a readable file of id=BASE64 keys",
                setting=setting,
            ) from None
    else:
        return None
    try:
        return parse_keys(text)
    except ValueError as error:  # it names entries by position, never a key
        raise ConfigError(f"{source} is wrong: {error}", setting=setting) from None


class FailureConverter(DefaultFailureConverterWithEncodedAttributes):
    """Failures' messages and stack traces go into an encoded payload, so the codec encrypts
    them; except an unreadable payload's: it names key ids only, and must be read by whoever
    lacks the key (a query's caller gets the message alone)."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        super().to_failure(exception, payload_converter, failure)
        if isinstance(exception, UnreadablePayload):
            failure.message = str(exception)


class AesGcmCodec(PayloadCodec):
    """AES-256-GCM over whole payloads (metadata included): the first key encrypts, every key
    decrypts what names it; payloads that are not encrypted pass through."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise ValueError("an encryption codec needs at least one key")
        self.keys: dict[str, bytes] = dict(keys)
        """Every key, by id, the encrypting one first (two codecs agree when they hold the same
        keys in the same order)."""
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self.key_id = next(iter(keys))
        """The id of the key that encrypts."""
        self._cipher = self._ciphers[self.key_id]
        self._key_id_bytes = self.key_id.encode()

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._cipher.encrypt(nonce, payload.SerializeToString(), self._key_id_bytes)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID: self._key_id_bytes}, data=nonce + sealed
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before encryption was on
        key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise UnreadablePayload(
                f"a payload is encrypted with key {key_id!r}, which the configured keys "
                f"({', '.join(self._ciphers)}) do not hold; add it back to "
                "ERRANDS_ENCRYPTION_KEYS (after the first) to read it"
            )
        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
        except InvalidTag:
            raise UnreadablePayload(
                f"a payload encrypted with key {key_id!r} does not decrypt with the key of that "
                "id: the key was changed under the same id, or the payload was altered"
            ) from None
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded


def encrypting(settings: Settings) -> bool:
    """Whether the settings give encryption keys (without reading a key file)."""
    return settings.encryption_keys is not None or settings.encryption_keys_file is not None


def data_converter(settings: Settings) -> DataConverter:
    """The converter of every client errands builds: pydantic payloads, and, with keys
    configured, the encryption codec and failures whose messages are encrypted too."""
    keys = configured_keys(settings)
    if keys is None:
        return pydantic_data_converter
    return encrypted(pydantic_data_converter, keys)


def encrypted(converter: DataConverter, keys: Mapping[str, bytes]) -> DataConverter:
    """``converter`` with the encryption codec and encoded failure attributes."""
    return replace(
        converter,
        payload_codec=AesGcmCodec(keys),
        failure_converter_class=FailureConverter,
    )


def with_encryption(converter: DataConverter, keys: Mapping[str, bytes] | None) -> DataConverter:
    """``converter`` encrypting with ``keys``: a codec of its own is kept only when no keys are
    set or it is this codec with the same keys; any other is refused (two codecs cannot both
    decide what the payloads are)."""
    if not keys:
        return converter
    codec = converter.payload_codec
    if codec is None:
        return encrypted(converter, keys)
    if isinstance(codec, AesGcmCodec) and not _same_keys(codec, keys):
        raise ConfigError(
            f"the Temporal client already encrypts with other keys (ids {', '.join(codec.keys)}) "
            f"than ERRANDS_ENCRYPTION_KEYS (ids {', '.join(keys)}); give both the same keys, "
            "in the same order (the first encrypts)",
            setting="ERRANDS_ENCRYPTION_KEYS",
        )
    if not isinstance(codec, AesGcmCodec):
        raise ConfigError(
            f"the Temporal client already has a payload codec ({type(codec).__qualname__}) and "
            "ERRANDS_ENCRYPTION_KEYS asks errands for its own; unset the keys to keep yours, or "
            "connect without a codec and let errands encrypt",
            setting="ERRANDS_ENCRYPTION_KEYS",
        )
    if converter.failure_converter_class is DefaultFailureConverter:
        return replace(converter, failure_converter_class=FailureConverter)
    return converter


def encrypts_with(converter: DataConverter, keys: Mapping[str, bytes]) -> bool:
    """Whether ``converter`` encrypts with exactly ``keys``."""
    codec = converter.payload_codec
    return isinstance(codec, AesGcmCodec) and _same_keys(codec, keys)


def _same_keys(codec: AesGcmCodec, keys: Mapping[str, bytes]) -> bool:
    """Whether ``codec`` holds ``keys`` in their order: the first encrypts, so the same keys in
    another order encrypt with another key (a rotation not applied)."""
    return list(codec.keys.items()) == list(keys.items())


@dataclass(frozen=True)
class SessionTags:
    """How a session id is written into (and searched in) the ``ErrandsSession`` attribute."""

    keys: Mapping[str, bytes] | None

    def written(self, session_id: str) -> str:
        """The value a new task carries: the id itself, or its digest under the first key."""
        if not self.keys:
            return session_id
        key_id, key = next(iter(self.keys.items()))
        return _tag(key_id, key, session_id)

    def searched(self, session_id: str) -> list[str]:
        """Every value a task of the session may carry: one digest per key (keys rotate), then
        the id itself (tasks started before encryption was on). Only the visibility query the
        client sends names the id; no history does."""
        if not self.keys:
            return [session_id]
        return [*(_tag(key_id, key, session_id) for key_id, key in self.keys.items()), session_id]

    def is_tag(self, value: str) -> bool:
        """Whether ``value`` is a digest this errands writes, not a session id."""
        key_id, sep, digest = value.rpartition(":")
        return bool(
            self.keys and sep and key_id in self.keys and re.fullmatch(r"[0-9a-f]{32}", digest)
        )


def _tag(key_id: str, key: bytes, session_id: str) -> str:
    # A key of its own for the digest (derived), so the AES key is used for one purpose only.
    derived = hmac.new(key, SESSION_TAG_CONTEXT, hashlib.sha256).digest()
    digest = hmac.new(derived, session_id.encode(), hashlib.sha256).hexdigest()
    return f"{key_id}:{digest[:32]}"


def session_tags(settings: Settings) -> SessionTags:
    return SessionTags(configured_keys(settings))


__all__ = [
    "ENCODING",
    "KEY_ID",
    "AesGcmCodec",
    "FailureConverter",
    "UnreadablePayload",
    "SessionTags",
    "configured_keys",
    "data_converter",
    "encrypted",
    "encrypting",
    "encrypts_with",
    "new_key",
    "parse_keys",
    "session_tags",
    "with_encryption",
]
