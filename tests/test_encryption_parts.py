"""The pieces of payload encryption that need no server: task ids without the session, the
session's digests and how they are searched, the codec ``ErrandsPlugin`` puts on a client and a
replayer (tests/test_encryption.py runs them against the dev server)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.worker import Replayer

from errands.adapters.encryption import (
    ENCODING,
    AesGcmCodec,
    FailureConverter,
    SessionTags,
    data_converter,
    encrypts_with,
    new_key,
    parse_keys,
)
from errands.client import new_task_id
from errands.contracts.search import session_filter
from errands.errors import ConfigError
from errands.plugin import ErrandsPlugin
from errands.settings import Settings, load_settings

pytestmark = pytest.mark.fast

KEY_A, KEY_B = new_key(), new_key()


def test_with_keys_a_new_task_id_carries_no_session_id() -> None:
    assert "my-secret-project" in new_task_id("my-secret-project")
    private = {new_task_id("my-secret-project", private=True) for _ in range(1000)}
    assert len(private) == 1000
    assert all(t.startswith("task-") and "secret" not in t for t in private)


def test_a_session_is_searched_by_every_keys_digest_and_its_own_id() -> None:
    tags = SessionTags(parse_keys(f"B={KEY_B},A={KEY_A}"))
    written = tags.written("s-mine")
    assert written.startswith("B:") and "s-mine" not in written and tags.is_tag(written)
    older = SessionTags(parse_keys(f"A={KEY_A}")).written("s-mine")
    assert tags.searched("s-mine") == [written, older, "s-mine"]
    assert session_filter(tags.searched("s-mine")) == (
        f"ErrandsSession IN ('{written}', '{older}', 's-mine')"
    )
    assert not tags.is_tag("s-mine") and not tags.is_tag("C:" + "0" * 32)
    assert session_filter(SessionTags(None).searched("s-mine")) == "ErrandsSession = 's-mine'"


class OtherCodec(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def configured(plugin: ErrandsPlugin, converter: DataConverter) -> DataConverter:
    """The converter ``plugin`` gives a client that comes with ``converter``."""
    config: Any = {"data_converter": converter}
    return plugin.configure_client(config)["data_converter"]


def test_the_plugin_adds_the_codec_keeps_a_users_own_without_keys_and_refuses_both() -> None:
    keyed, plain = Settings(ERRANDS_ENCRYPTION_KEYS=SecretStr(f"A={KEY_A}")), Settings()
    converter = configured(ErrandsPlugin(keyed), DataConverter.default)
    assert (
        isinstance(converter.payload_codec, AesGcmCodec) and converter.payload_codec.key_id == "A"
    )
    assert converter.failure_converter_class is FailureConverter
    assert configured(ErrandsPlugin(plain), DataConverter.default).payload_codec is None

    theirs = dataclasses.replace(pydantic_data_converter, payload_codec=OtherCodec())
    assert isinstance(configured(ErrandsPlugin(plain), theirs).payload_codec, OtherCodec)
    with pytest.raises(ConfigError, match="already has a payload codec"):
        configured(ErrandsPlugin(keyed), theirs)
    same = data_converter(keyed)
    assert configured(ErrandsPlugin(keyed), same) is same
    other_key = data_converter(Settings(ERRANDS_ENCRYPTION_KEYS=SecretStr(f"A={KEY_B}")))
    with pytest.raises(
        ConfigError, match=r"other keys \(ids A\) than ERRANDS_ENCRYPTION_KEYS \(ids A\)"
    ):
        configured(ErrandsPlugin(keyed), other_key)


async def test_the_replayer_the_plugin_configures_reads_encrypted_payloads() -> None:
    keyed = Settings(ERRANDS_ENCRYPTION_KEYS=SecretStr(f"A={KEY_A}"))
    replayer = Replayer(workflows=[], plugins=[ErrandsPlugin(keyed)])
    converter = replayer.config(active_config=True)["data_converter"]
    [sealed] = await data_converter(keyed).encode(["what a user wrote"])
    assert sealed.metadata["encoding"] == ENCODING
    assert await converter.decode([sealed], [str]) == ["what a user wrote"]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (KEY_A, "entry 1 looks like a key without an id; give ID=BASE64, e.g. k1=$(python -c"),
        (KEY_A.rstrip("="), "entry 1 looks like a key without an id"),
        (KEY_A.replace("+", "-").replace("/", "_"), "entry 1 looks like a key without an id"),
        (f"A={KEY_B},{KEY_A}", "entry 2 looks like a key without an id"),
        (f'{{"{KEY_A}": "{KEY_B}"}}', "entry 1's key id is not 1 to 64 letters"),
        (f'{{"A": "{KEY_B}", "B": "{KEY_A[:20]}"}}', "entry 2's key is 15 bytes"),
        (f"A={KEY_A[:20]}", "entry 1's key is 15 bytes; an AES-256 key is 32 random bytes"),
        (f"A={KEY_A[:20]}", 'e.g. k1=$(python -c "import base64, os;'),
        (f"{KEY_A[:30]}!={KEY_B}", "entry 1's key id is not"),
        (f"A={KEY_A},A={KEY_B}", "entries 1 and 2 have the same key id"),
    ],
)
def test_a_wrong_key_is_named_by_its_entry_and_never_shown(given: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:  # as every command reads the variable
        load_settings(ERRANDS_ENCRYPTION_KEYS=SecretStr(given))
    error = refused.value
    assert said in str(error) and error.setting == "ERRANDS_ENCRYPTION_KEYS"
    for shown in (KEY_A, KEY_B, KEY_A[:8], KEY_B[:8], KEY_A[-8:], KEY_B[-8:], KEY_A[12:20]):
        assert shown not in str(error)


def test_a_bare_key_in_the_keys_file_is_refused_naming_the_file_not_the_key(
    tmp_path: Any,
) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"{KEY_A}\n")
    with pytest.raises(ConfigError) as refused:  # the file is read when the keys are used
        data_converter(load_settings(ERRANDS_ENCRYPTION_KEYS_FILE=keys_file))
    error = refused.value
    assert error.setting == "ERRANDS_ENCRYPTION_KEYS_FILE"
    assert str(error).startswith(f"ERRANDS_ENCRYPTION_KEYS_FILE ({keys_file}) is wrong: entry 1")
    assert "looks like a key without an id" in str(error)
    assert KEY_A[:8] not in str(error) and KEY_A[-8:] not in str(error)
    keys_file.write_text(f"k1={KEY_A}\nk0={KEY_B}\n")
    assert list(parse_keys(keys_file.read_text())) == ["k1", "k0"]


def test_an_id_with_an_empty_key_is_not_taken_for_a_bare_key() -> None:
    with pytest.raises(ValueError, match="entry 1's key is 0 bytes"):
        parse_keys("k1=")
    with pytest.raises(ValueError, match="entry 1 has no '='"):
        parse_keys("k1")


def test_the_same_keys_in_another_order_are_other_keys() -> None:
    """The first key encrypts: a client encrypting with B first is not what settings that put A
    first ask for (the rotation to A would silently not apply)."""
    keyed = Settings(ERRANDS_ENCRYPTION_KEYS=SecretStr(f"A={KEY_A},B={KEY_B}"))
    b_first = data_converter(Settings(ERRANDS_ENCRYPTION_KEYS=SecretStr(f"B={KEY_B},A={KEY_A}")))
    with pytest.raises(
        ConfigError, match=r"other keys \(ids B, A\) than ERRANDS_ENCRYPTION_KEYS \(ids A, B\)"
    ):
        configured(ErrandsPlugin(keyed), b_first)
    assert not encrypts_with(b_first, parse_keys(f"A={KEY_A},B={KEY_B}"))
    assert encrypts_with(b_first, parse_keys(f"B={KEY_B},A={KEY_A}"))
    same = data_converter(keyed)
    assert configured(ErrandsPlugin(keyed), same) is same
