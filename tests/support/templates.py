"""Databases that start at the schema's head without running the migrations each time.

A migration from empty costs 0.2 to 0.3 s of a test's setup (alembic, fourteen revisions); the suite
makes hundreds of databases. Each test process migrates one SQLite file and one PostgreSQL database
once, then hands out copies (a file copy; ``CREATE DATABASE ... TEMPLATE``). The fixtures still call
``Database.migrate()``, which finds the copy at head (about 15 ms). Migrations themselves are tested
from empty and from every released revision elsewhere (tests/unit/store/test_migrations.py,
tests/integration/test_upgrades.py), and every ``switchboard serve`` a test starts on a fresh data
folder migrates from empty as shipped.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
from pathlib import Path

from switchboard.store.db import Database
from tests.support.pg import PostgresServer

_sqlite: Path | None = None
_pg: dict[int, str] = {}  # id(server) -> its template database's name


async def _migrated(url: str) -> None:
    db = Database(url)
    try:
        await db.migrate()
    finally:
        await db.dispose()  # the last connection out checkpoints the WAL into the file


async def copy_migrated_sqlite(dest: Path) -> None:
    """Write a SQLite database at head to ``dest`` (which must not exist yet)."""
    global _sqlite
    if _sqlite is None:
        folder = Path(tempfile.mkdtemp(prefix="switchboard-template-"))
        atexit.register(shutil.rmtree, folder, True)
        path = folder / "switchboard.db"
        await _migrated(f"sqlite+aiosqlite:///{path}")
        _sqlite = path
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_sqlite, dest)


async def migrated_pg_template(server: PostgresServer) -> str:
    """The name of a database at head on ``server``, made on first use, to copy with ``TEMPLATE``."""
    template = _pg.get(id(server))
    if template is None:
        template = f"t_template_{uuid.uuid4().hex[:10]}"
        await _migrated(server.create_database(template))
        _pg[id(server)] = template
    return template
