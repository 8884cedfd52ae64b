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
    new_key,
    parse_keys,
)
from errands.client import new_task_id
from errands.contracts.search import session_filter
from errands.errors import ConfigError
from errands.plugin import ErrandsPlugin
from errands.settings import Settings

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
