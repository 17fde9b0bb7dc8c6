"""Operator commands that look after the installation rather than its tenants: the schema
(``db status``, ``db upgrade``), ``backup``, and the checks ``serve`` makes before it binds.

Kept apart from cli.py so the admin CLI stays about humans, endpoints and sources; cli.py registers
these handlers and owns the output contract (docs/cli.md).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from switchboard.process.preflight import sqlite_path as sqlite_path  # re-exported: `backup` reads it here
from switchboard.settings import Settings
from switchboard.store.db import (
    Database,
    SchemaMismatch,
    SchemaStatus,
    behind_schema_message,
    unknown_schema_message,
)

SCHEMA_CHECK_TIMEOUT = 10.0  # serve's preflight: a database that does not answer in this is "unreachable"


class OpsError(Exception):
    """A refusal with a stable ``code`` for ``--json``; the message is one line and names the fix."""

    def __init__(self, message: str, code: str = "failed") -> None:
        super().__init__(message)
        self.message, self.code = message, code


def status_json(status: SchemaStatus) -> dict[str, Any]:
    return {"current": status.current, "head": status.head, "state": status.state}


def status_text(status: SchemaStatus) -> str:
    lines = {
        "head": f"schema at head ({status.head})",
        "empty": f"empty database: `switchboard db upgrade` (or serve) creates the schema ({status.head})",
        "behind": f"schema at {status.current}, behind head {status.head}: run `switchboard db upgrade`",
        "unknown": unknown_schema_message(status),
    }
    return lines[status.state]


async def ensure_schema(db: Database, settings: Settings) -> SchemaStatus:
    """What serve and the admin commands do first: upgrade a behind schema when SWITCHBOARD_AUTO_UPGRADE
    allows (the default), else refuse; always refuse a schema this build does not know. Tightens the
    SQLite files' modes first, at head or not."""
    db.secure_files()
    status = await db.schema_status()
    if status.state == "unknown":
        raise SchemaMismatch(unknown_schema_message(status))
    if status.state != "head":
        if not settings.auto_upgrade:
            raise SchemaMismatch(behind_schema_message(status))
        await db.migrate()
        status = await db.schema_status()
    return status


def backup_sqlite(source: Path, dest_dir: Path, key_file: Path | None) -> dict[str, Any]:
    """A consistent copy of a live SQLite database through its online backup API (safe while serve
    writes), plus the envelope key file that opens its sealed secrets."""
    if not source.exists():
        raise OpsError(f"no database at {source}: nothing to back up", "not_found")
    dest_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = dest_dir / source.name
    if target.exists():
        raise OpsError(f"{target} exists: back up into an empty folder", "conflict")
    src = sqlite3.connect(source.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()
    out: dict[str, Any] = {"database": str(target), "key_file": None}
    if key_file is not None and key_file.exists():
        copied = dest_dir / key_file.name
        fd = os.open(copied, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key_file.read_text())
        out["key_file"] = str(copied)
    return out


# -- serve's preflight (the rest is in switchboard.process.preflight) --------------------------------------------


async def check_schema(settings: Settings, url: str) -> None:
    """Refuse a schema this build does not know; refuse a behind one when auto-upgrade is off.
    (A behind schema is upgraded by the server's own startup, under PostgreSQL's migration lock.)"""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return  # a first start: the server creates it
    db = Database(url, pool_size=1)
    try:
        async with asyncio.timeout(SCHEMA_CHECK_TIMEOUT):
            status = await db.schema_status()
    except (TimeoutError, SQLAlchemyError, OSError) as exc:
        raise OpsError(
            f"SWITCHBOARD_DATABASE_URL: database unreachable ({type(exc).__name__})", "unavailable"
        ) from None
    finally:
        await db.dispose()
    if status.state == "unknown":
        raise OpsError(unknown_schema_message(status), "schema")
    if status.state != "head" and not settings.auto_upgrade:
        raise OpsError(behind_schema_message(status), "schema")
