"""errands API keys (SPEC §10): minted with a token shown once, stored only as a SHA-256 under a
public key id, verified against the store on every call (a revoked key is refused at once), and
managed with `errands principals add|list|revoke`, on SQLite and on PostgreSQL. No token or
secret appears in a listing, a stored row or an error."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from errands.adapters.identity import looks_like_key, mint, verify_key
from errands.adapters.store import SessionStore, open_store
from errands.contracts.principals import ADMIN_TOKEN_ID, LOCAL_ID, OPERATOR_ID, Principal
from errands.errors import InvalidRequest, Unauthorized
from tests.conftest import ROOT, CliResult, run_cli
from tests.test_cli_usage import a_clean_refusal
from tests.test_store import PG_URL, pg_admin, pg_url_in

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
TOKEN_SHAPE = re.compile(r"ek_[0-9a-f]{8}\.[A-Za-z0-9_-]{43}")


@dataclass
class Keys:
    """A store of the test's own, with a way to read its principals table row by row."""

    backend: str
    url: str
    store: SessionStore
    sqlite_file: Path | None = None
    schema: str | None = None

    def rows(self) -> list[tuple[Any, ...]]:
        """Every column of every row of the principals table, as the database holds them."""
        if self.sqlite_file is not None:
            with closing(sqlite3.connect(self.sqlite_file)) as db:
                return list(db.execute("SELECT * FROM principals"))
        with psycopg.connect(PG_URL, autocommit=True) as db:
            return list(db.execute(f'SELECT * FROM "{self.schema}".principals'))


@pytest.fixture(params=["sqlite", "postgres"])
def keys(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Keys]:
    if request.param == "sqlite":
        path = tmp_path / "sessions.db"
        url = f"sqlite:///{path}"
        store = open_store(url)
        try:
            yield Keys("sqlite", url, store, sqlite_file=path)
        finally:
            store.close()
        return
    schema = f"errands_keys_{uuid.uuid4().hex[:10]}"
    with pg_admin() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            url = pg_url_in(schema)
            store = open_store(url)
            try:
                yield Keys("postgres", url, store, schema=schema)
            finally:
                store.close()
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def added(keys: Keys, name: str, role: Any = "user") -> str:
    token, record = mint(name, role, NOW)
    keys.store.add_principal(record)
    return token


def secret_of(token: str) -> str:
    return token.partition(".")[2]


# -- minting -----------------------------------------------------------------------------------


@pytest.mark.fast
def test_a_minted_token_is_its_key_id_and_a_secret_and_the_record_holds_only_its_digest() -> None:
    token, record = mint("alice@example.com", "approver", NOW)
    assert TOKEN_SHAPE.fullmatch(token), token
    assert token.startswith(record.key_id + ".")
    assert record.token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert (record.name, record.role, record.created_at, record.revoked_at) == (
        "alice@example.com",
        "approver",
        NOW,
        None,
    )
    assert secret_of(token) not in repr(record)


@pytest.mark.fast
def test_every_mint_draws_a_new_key_id_and_secret() -> None:
    tokens = [mint("alice", "user", NOW)[0] for _ in range(50)]
    assert len({t.partition(".")[0] for t in tokens}) == 50
    assert len({secret_of(t) for t in tokens}) == 50


@pytest.mark.fast
@pytest.mark.parametrize(
    ("name", "role", "named"),
    [
        ("a b", "user", "cannot name a principal"),
        ("", "user", "cannot name a principal"),
        ("o'brien", "user", "cannot name a principal"),
        ("x" * 201, "user", "cannot name a principal"),
        ("alice", "boss", "'boss' is not a role"),
    ],
)
def test_a_name_that_cannot_be_a_principal_or_an_unknown_role_is_refused(
    name: str, role: Any, named: str
) -> None:
    with pytest.raises(InvalidRequest, match=named):
        mint(name, role, NOW)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("name", "whom"),
    [
        (ADMIN_TOKEN_ID, "the admin token (ERRANDS_API_TOKEN)"),
        (LOCAL_ID, "the one user of a gateway on loopback"),
        (OPERATOR_ID, "the operator at the CLI"),
    ],
)
def test_a_reserved_principal_id_cannot_name_a_key(name: str, whom: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        mint(name, "admin", NOW)
    assert str(refused.value).startswith(f"{name!r} is reserved for {whom}")
    assert str(refused.value).endswith("; choose another name")
    assert mint(f"{name}2", "admin", NOW)[1].name == f"{name}2"  # only the id itself


@pytest.mark.fast
def test_a_name_shaped_like_a_key_id_is_refused_so_revoke_is_never_ambiguous() -> None:
    key_id = mint("alice", "user", NOW)[1].key_id
    for name in (key_id, "ek_0123abcd", "ek_ffffffff"):
        with pytest.raises(InvalidRequest, match="has the shape of a key id"):
            mint(name, "user", NOW)
    for name in ("ek_0123abc", "ek_0123abcde", "ek_0123abcg", "EK_0123ABCD", "ek-0123abcd"):
        assert mint(name, "user", NOW)[1].name == name


@pytest.mark.fast
def test_only_the_shape_of_an_errands_key_looks_like_one() -> None:
    token, _ = mint("alice", "user", NOW)
    assert looks_like_key(token)
    jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
    for other in (jwt, "s3cret-admin-token", "ek_1234.abc", "ek_0123456g." + "a" * 43, token[:-44]):
        assert not looks_like_key(other), other


# -- verifying against the store -------------------------------------------------------------


def test_a_stored_key_verifies_as_its_principal(keys: Keys) -> None:
    token = added(keys, "alice", "approver")
    assert verify_key(keys.store, token) == Principal(id="alice", role="approver", via="key")


def test_the_store_keeps_the_digest_and_never_the_token_or_its_secret(keys: Keys) -> None:
    tokens = [added(keys, "alice"), added(keys, "bob", "admin")]
    rows = keys.rows()
    assert len(rows) == 2
    cells = [str(cell) for row in rows for cell in row]
    for token in tokens:
        assert hashlib.sha256(token.encode()).hexdigest() in cells
        for cell in cells:
            assert secret_of(token) not in cell and token not in cell


def test_a_real_key_id_with_a_wrong_secret_is_refused_without_echoing_it(keys: Keys) -> None:
    token = added(keys, "alice")
    key_id = token.partition(".")[0]
    forged = f"{key_id}.{'A' * 43}"
    assert looks_like_key(forged)
    with pytest.raises(Unauthorized, match=f"unknown API key {key_id}") as refused:
        verify_key(keys.store, forged)
    assert "A" * 20 not in str(refused.value)
    assert secret_of(token) not in str(refused.value)


def test_an_unknown_key_and_a_non_key_are_refused_saying_why(keys: Keys) -> None:
    added(keys, "alice")
    stranger, _ = mint("mallory", "admin", NOW)  # never stored
    with pytest.raises(Unauthorized, match="unknown API key") as refused:
        verify_key(keys.store, stranger)
    assert secret_of(stranger) not in str(refused.value)
    with pytest.raises(Unauthorized, match="not an errands API key") as refused:
        verify_key(keys.store, "my-admin-token-s3cret")
    assert "s3cret" not in str(refused.value)


def test_a_revoked_key_is_refused_at_once_by_a_verifier_on_another_connection(
    keys: Keys,
) -> None:
    token = added(keys, "alice")
    kept = added(keys, "bob")
    assert verify_key(keys.store, token).id == "alice"
    other_replica = open_store(keys.url)  # a second gateway on the same store
    try:
        revoked = other_replica.revoke_principal(token.partition(".")[0], datetime.now(UTC))
    finally:
        other_replica.close()
    assert [r.name for r in revoked] == ["alice"]
    with pytest.raises(Unauthorized, match="this API key was revoked") as refused:
        verify_key(keys.store, token)
    assert "ask an admin for a new one" in str(refused.value)
    assert secret_of(token) not in str(refused.value)
    assert verify_key(keys.store, kept).id == "bob"


# -- `errands principals` ----------------------------------------------------------------------


def cli_env_for(url: str) -> dict[str, str]:
    """The environment of a CLI that reaches only the session store at ``url``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "ERRANDS_", "TEMPORAL_"))
    }
    env.update(ERRANDS_DATABASE_URL=url, PYTHONPATH=str(ROOT))
    return env


async def principals(keys: Keys, *args: str) -> CliResult:
    return await run_cli(cli_env_for(keys.url), "principals", *args)


async def test_add_prints_the_token_once_with_its_header_and_stores_only_its_digest(
    keys: Keys,
) -> None:
    made = await principals(keys, "add", "alice", "--role", "approver")
    assert made.code == 0, made.stderr
    (token,) = TOKEN_SHAPE.findall(made.stdout)
    assert "Authorization: Bearer <token>" in made.stdout
    assert verify_key(keys.store, token) == Principal(id="alice", role="approver", via="key")
    assert all(secret_of(token) not in str(cell) for row in keys.rows() for cell in row)

    as_json = await principals(keys, "add", "bob", "--json")
    assert as_json.code == 0, as_json.stderr
    shown = as_json.json()
    assert (shown["name"], shown["role"], shown["revoked_at"]) == ("bob", "user", None)
    assert shown["token"].startswith(shown["key_id"] + ".")
    assert shown["header"] == f"Authorization: Bearer {shown['token']}"
    assert verify_key(keys.store, shown["token"]).id == "bob"


async def test_list_shows_every_key_and_never_a_token_or_digest(keys: Keys) -> None:
    tokens = [added(keys, "alice", "admin"), added(keys, "bob")]
    keys.store.revoke_principal("bob", NOW)
    listed = await principals(keys, "list", "--json")
    text = await principals(keys, "list")
    assert listed.code == text.code == 0, listed.stderr + text.stderr
    shown = sorted(listed.json(), key=lambda k: k["name"])  # both were made at NOW
    assert [(k["name"], k["role"], k["revoked_at"] is not None) for k in shown] == [
        ("alice", "admin", False),
        ("bob", "user", True),
    ]
    assert set(listed.json()[0]) == {"name", "role", "key_id", "created_at", "revoked_at"}
    for token in tokens:
        key_id = token.partition(".")[0]
        digest = hashlib.sha256(token.encode()).hexdigest()
        assert key_id in text.stdout and key_id in listed.stdout
        for output in (listed.stdout, text.stdout, listed.stderr, text.stderr):
            assert secret_of(token) not in output and digest not in output


async def test_revoke_by_key_id_or_by_name_says_how_many_and_refuses_them_at_once(
    keys: Keys,
) -> None:
    first, second, other = added(keys, "bob"), added(keys, "bob"), added(keys, "carol")
    one = await principals(keys, "revoke", first.partition(".")[0], "--json")
    assert one.code == 0, one.stderr
    assert [r["key_id"] for r in one.json()["revoked"]] == [first.partition(".")[0]]
    with pytest.raises(Unauthorized, match="revoked"):
        verify_key(keys.store, first)
    assert verify_key(keys.store, second).id == "bob"

    by_name = await principals(keys, "revoke", "bob")
    assert by_name.code == 0, by_name.stderr
    assert "revoked 1 API key of bob" in by_name.stdout
    with pytest.raises(Unauthorized, match="revoked"):
        verify_key(keys.store, second)
    assert verify_key(keys.store, other).id == "carol"

    for _ in range(2):
        added(keys, "dave")
    both = await principals(keys, "revoke", "dave")
    assert "revoked 2 API keys of dave" in both.stdout


async def test_revoke_that_matches_nothing_live_is_one_line_and_exit_2(keys: Keys) -> None:
    token = added(keys, "erin")
    keys.store.revoke_principal("erin", NOW)
    nobody = await principals(keys, "revoke", "zed")
    again = await principals(keys, "revoke", "erin", "--json")
    assert nobody.code == again.code == 2
    assert "no API key has the id or principal name zed" in a_clean_refusal(nobody.stderr)
    assert "revoked already" in a_clean_refusal(again.stderr)
    assert secret_of(token) not in again.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["a b"], "cannot name a principal"),
        (["frank", "--role", "boss"], "is not a role"),
        (["admin", "--role", "admin"], "'admin' is reserved for the admin token"),
        (["ek_0123abcd"], "has the shape of a key id"),
    ],
    ids=["bad-name", "bad-role", "reserved-name", "key-id-name"],
)
async def test_a_bad_name_or_role_is_one_line_exit_2_and_stores_nothing(
    keys: Keys, args: list[str], named: str
) -> None:
    refused = await principals(keys, "add", *args)
    assert refused.code == 2
    assert named in a_clean_refusal(refused.stderr)
    assert refused.stdout == ""
    assert keys.store.list_principals() == []


async def test_list_on_a_store_that_does_not_exist_shows_none_and_creates_none(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere" / "sessions.db"
    env = cli_env_for(f"sqlite:///{missing}")
    listed = await run_cli(env, "principals", "list", "--json")
    revoked = await run_cli(env, "principals", "revoke", "alice")
    assert (listed.code, listed.json()) == (0, [])
    assert revoked.code == 2
    assert "no API key has the id or principal name alice" in a_clean_refusal(revoked.stderr)
    assert not missing.parent.exists()
