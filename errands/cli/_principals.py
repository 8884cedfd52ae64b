"""``errands principals add|list|revoke``: the API keys the gateway accepts (SPEC §10).

These read and write the session store (``ERRANDS_DATABASE_URL``), not Temporal: whoever can
reach the store is the operator. A token is printed once, by ``add``; the store keeps only its
SHA-256, so nothing here (a listing, a revocation, an error) can show it again.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from errands.adapters.identity import mint
from errands.adapters.store import PrincipalRecord, SessionStore, open_store, sqlite_path
from errands.cli._output import note
from errands.cli._terminal import one_line
from errands.contracts.principals import ROLES
from errands.errors import Conflict, NotFound
from errands.settings import Settings, load_settings

MINT_ATTEMPTS = 5
"""Key ids are 32 random bits: a clash with a stored one is rare, and another draw clears it."""


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``errands principals`` and its three verbs on the CLI's subcommands."""
    parsed = sub.add_parser("principals", help="add, list and revoke the gateway's API keys")
    verbs = parsed.add_subparsers(required=True, metavar="VERB")

    add = verbs.add_parser("add", help="make an API key for a principal; its token is shown once")
    add.add_argument("name", help="the principal's id, e.g. alice or alice@example.com")
    # Checked by mint, not argparse: a bad role is a one-line refusal like a bad name.
    add.add_argument("--role", default="user", metavar="|".join(ROLES), help="default: user")
    add.set_defaults(handler=add_key)

    listed = verbs.add_parser("list", help="every API key: name, role, key id, created, revoked")
    listed.set_defaults(handler=list_keys)

    revoke = verbs.add_parser("revoke", help="revoke a key (KEY_ID) or every key of a principal")
    revoke.add_argument("target", metavar="NAME|KEY_ID")
    revoke.set_defaults(handler=revoke_keys)

    for verb in (add, listed, revoke):
        verb.add_argument("--json", action="store_true")
        verb.set_defaults(stops_by_signal=False)


async def add_key(args: argparse.Namespace) -> int:
    settings = load_settings()
    store = open_store(settings.session_database_url())
    try:
        for attempt in range(MINT_ATTEMPTS):
            token, record = mint(args.name, args.role, datetime.now(UTC))
            try:
                store.add_principal(record)
                break
            except Conflict:
                if attempt == MINT_ATTEMPTS - 1:
                    raise
    finally:
        store.close()
    if args.json:
        shown = {**public(record), "token": token, "header": f"Authorization: Bearer {token}"}
        print(json.dumps(shown, ensure_ascii=False))
        return 0
    print(one_line(f"API key {record.key_id} for {record.name} ({record.role}). Its token:"))
    print()
    print(f"    {token}")
    print()
    print("Send it to the gateway as `Authorization: Bearer <token>`. It is shown this once:")
    print("errands keeps only its SHA-256. Lost, it cannot be recovered; revoke it and add another")
    print(one_line(f"(`errands principals revoke {record.key_id}`)."))
    return 0


async def list_keys(args: argparse.Namespace) -> int:
    settings = load_settings()
    store = _existing_store(settings)
    records: list[PrincipalRecord] = []
    if store is not None:
        try:
            records = store.list_principals()
        finally:
            store.close()
    if args.json:
        print(json.dumps([public(r) for r in records], ensure_ascii=False))
        return 0
    if not records:
        note("errands: no API keys; `errands principals add NAME` makes one")
        return 0
    rows = [("KEY ID", "NAME", "ROLE", "CREATED", "REVOKED")]
    rows += [
        (r.key_id, one_line(r.name), r.role, _when(r.created_at), _when(r.revoked_at) or "-")
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


async def revoke_keys(args: argparse.Namespace) -> int:
    settings = load_settings()
    store = _existing_store(settings)
    if store is None:
        raise NotFound(_nothing_matched(args.target, []))
    try:
        revoked = store.revoke_principal(args.target, datetime.now(UTC))
        if not revoked:
            matching = [r for r in store.list_principals() if args.target in (r.key_id, r.name)]
            raise NotFound(_nothing_matched(args.target, matching))
    finally:
        store.close()
    if args.json:
        print(json.dumps({"revoked": [public(r) for r in revoked]}, ensure_ascii=False))
        return 0
    keys = ", ".join(r.key_id for r in revoked)
    count = "1 API key" if len(revoked) == 1 else f"{len(revoked)} API keys"
    print(one_line(f"revoked {count} of {revoked[0].name}: {keys}; refused from now on"))
    return 0


def public(record: PrincipalRecord) -> dict[str, Any]:
    """What may be shown of a key: never its digest."""
    return {
        "name": record.name,
        "role": record.role,
        "key_id": record.key_id,
        "created_at": record.created_at.isoformat(),
        "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None,
    }


def _existing_store(settings: Settings) -> SessionStore | None:
    """The store to read, or None when its SQLite file does not exist: a read creates none."""
    url = settings.session_database_url()
    path = sqlite_path(url)
    if path is not None and not Path(path).exists():
        return None
    return open_store(url)


def _nothing_matched(target: str, matching: list[PrincipalRecord]) -> str:
    if matching:
        return (
            f"{one_line(target)} has no live API key: every key it names is revoked already; "
            "nothing changed "
            "(`errands principals list` shows them)"
        )
    return (
        f"no API key has the id or principal name {one_line(target)}; nothing revoked "
        "(`errands principals list` shows the keys)"
    )


def _when(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if moment else ""
