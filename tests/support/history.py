"""Databases as earlier builds left them: the schema at any earlier revision, from the migration files
as they are now or as they were released before 0003 and 0004 were edited in place (kept verbatim in
``released_migrations/<commit>/``), with one row in every table.

Why both histories: a database created by the released files has 0004 without
``oauth_clients.first_grant_at`` and 0003 with ``a2a_push_outbox.slot_at``; the repair revision must bring
it to the same head as one created from today's files.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    BigInteger,
    Boolean,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    func,
    select,
)
from sqlalchemy.engine import Connection

from switchboard.store.db import MIGRATIONS, Database

RELEASED = Path(__file__).parent / "released_migrations"
EARLIER = (
    "0001",
    "0002",
    "0003",
    "0004",
    "console",
    "a2a_dedup",
    "delivery_log",
    "claim_index",
    "a2a_input",
    "repair",
)


# Revisions that only inspect and add what is missing: a database stamped back below one upgrades again.
IDEMPOTENT = (
    "a2a_push_replay",
    "hook_rate_limit",
    "retention",
    "todo_leases",
    "todo_state_indexes",
    "endpoint_epoch",
    "rate_buckets",
    "rate_windows",
    "repair",
    "a2a_input",
)


def head() -> str:
    from alembic.script import ScriptDirectory

    from switchboard.store.db import alembic_config

    (only,) = ScriptDirectory.from_config(alembic_config()).get_heads()
    return str(only)


def before_repair() -> str:
    """The revision under the head, which must be idempotent (``repair``, ``a2a_input``: they only
    inspect and add what is missing), so a database stamped back to it upgrades again safely (the
    readiness and first-hour tests use this)."""
    from alembic.script import ScriptDirectory

    from switchboard.store.db import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    top = head()
    assert top in IDEMPOTENT, "the head must be idempotent for the stamp-behind tests"
    below = script.get_revision(top).down_revision
    assert isinstance(below, str)
    return below


# history name -> the commit whose released files it replays (None: the files in the tree)
HISTORIES = {"current": None, "released-59580ec": "59580ec", "released-80ca7e6": "80ca7e6"}
NOW_MS = 1_800_000_000_000

# Text columns the code parses as JSON, and columns whose value is one of a few words.
_VALUES: dict[str, Any] = {
    "verbs": '["claim_next"]',
    "queues": '["inbox"]',
    "scopes": '["claim_next"]',
    "payload": "{}",
    "info": "{}",
    "body": "{}",
    "status": "pending",
    "state": "submitted",
    "presence": "in",
    "presence_seen": "in",
    "presence_override": None,
    "kind": "generic",
    "trust": "token",
}


def script_location(history: str, into: Path) -> Path:
    """An alembic script folder holding ``history``'s files for every revision up to the repair (the
    revisions after it replay from the tree itself, when the test migrates to head)."""
    into.mkdir(parents=True, exist_ok=True)
    for name in ("env.py", "script.py.mako"):
        shutil.copy(MIGRATIONS / name, into / name)
    versions = into / "versions"
    versions.mkdir(exist_ok=True)
    for path in sorted((MIGRATIONS / "versions").glob("*.py")):
        if int(path.name[:4]) > 10:  # after the repair: from the tree, at the upgrade to head
            continue
        shutil.copy(path, versions / path.name)
    commit = HISTORIES[history]
    if commit is not None:
        for released in (RELEASED / commit).glob("*.py.txt"):
            shutil.copy(released, versions / released.name.removesuffix(".txt"))
    return into


async def build_at(url: str, history: str, revision: str, scratch: Path) -> dict[str, int]:
    """Migrate an empty database to ``revision`` with ``history``'s files and put one row in every
    table; returns the row count per table."""
    location = script_location(history, scratch / f"migrations-{history}")
    db = Database(url)
    try:
        async with db.begin() as conn:
            await conn.run_sync(_upgrade_to, location, revision)
        async with db.begin() as conn:
            return await conn.run_sync(_fill)
    finally:
        await db.dispose()


async def row_counts(url: str, tables: list[str]) -> dict[str, int]:
    db = Database(url)
    try:
        async with db.read() as conn:
            return await conn.run_sync(_counts, tables)
    finally:
        await db.dispose()


def _upgrade_to(sync_conn: Connection, location: Path, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(location))
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, revision)


def _fill(sync_conn: Connection) -> dict[str, int]:
    """One row per table, parents first, each foreign key pointing at its parent's row."""
    reflected = MetaData()
    reflected.reflect(bind=sync_conn)
    inserted: dict[str, dict[str, Any]] = {}
    for table in reflected.sorted_tables:
        if table.name == "alembic_version":
            continue
        row: dict[str, Any] = {}
        for column in table.columns:
            fks = list(column.foreign_keys)
            if fks:
                target = fks[0].column
                row[column.name] = inserted[target.table.name][target.name]
            else:
                row[column.name] = _value(table.name, column)
        sync_conn.execute(table.insert().values(**row))
        inserted[table.name] = row
    return _counts(sync_conn, list(inserted))


def _value(table: str, column: Any) -> Any:
    kind = column.type
    if column.name in _VALUES and not isinstance(kind, Integer | BigInteger | Boolean):
        return _VALUES[column.name]
    if isinstance(kind, Boolean):
        return False
    if isinstance(kind, Integer | BigInteger):
        return NOW_MS if column.name.endswith("_at") else 0
    if isinstance(kind, LargeBinary):
        return b"\x00sealed"
    if isinstance(kind, Text):
        return "{}"
    if isinstance(kind, String):
        text = f"{table}-{column.name}".replace("_", "-")
        return text[: kind.length] if kind.length else text
    raise AssertionError(f"no sample value for {table}.{column.name} ({kind!r})")


def _counts(sync_conn: Connection, tables: list[str]) -> dict[str, int]:
    reflected = MetaData()
    reflected.reflect(bind=sync_conn, only=tables)
    return {
        name: int(sync_conn.execute(select(func.count()).select_from(reflected.tables[name])).scalar_one())
        for name in tables
    }
