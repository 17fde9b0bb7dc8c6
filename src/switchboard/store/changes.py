"""How a cached endpoint row is known to be current, without reading it again (docs/mcp.md, "Grants").

* :class:`EndpointChanges`: a generation per endpoint, bumped by every write to an endpoint row that
  this process commits (scope, token re-vend and revoke, presence, delete), and on PostgreSQL by the
  same writes committed by other instances and the CLI (:func:`announce`, carried by the cluster
  relay). A cached row whose generation moved is stale at once.
* :class:`SqliteDataVersion`: SQLite's ``PRAGMA data_version`` on a connection of its own, which moves
  whenever any other connection commits a change to the file, in this process or another (the CLI,
  a restore). Equal values mean the file has not changed at all since the row was read, so the row is
  exactly what a fresh read would return. It is a few microseconds on the event loop (it reads the WAL
  index, never waits for a lock: a busy file counts as changed). PostgreSQL has no such cheap check.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

ENDPOINTS_CHANNEL = "switchboard_endpoints"
EVERY_ENDPOINT = "*"
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


async def announce(conn: AsyncConnection, endpoint_id: str | None) -> None:
    """Inside the transaction that writes an endpoint row (``None``: several, as a human's delete): on
    PostgreSQL, tell every other instance at commit (the cluster relay, ``store/relay.py``), so their
    cached rows go stale at once instead of at the end of their trust window. Nothing on SQLite, whose
    file version already tells every process."""
    if conn.dialect.name == "postgresql":
        await conn.execute(_NOTIFY, {"channel": ENDPOINTS_CHANNEL, "payload": endpoint_id or EVERY_ENDPOINT})


class EndpointChanges:
    """Per-endpoint write generations of this process (ints; one entry per endpoint ever changed)."""

    def __init__(self) -> None:
        self._generations: dict[str, int] = {}
        self._all = 0
        self.total = 0  # every bump of either kind: a reader compares it around a read

    def bump(self, endpoint_id: str) -> None:
        """Call after a write to the endpoint's row has committed."""
        self._generations[endpoint_id] = self._generations.get(endpoint_id, 0) + 1
        self.total += 1

    def bump_all(self) -> None:
        """Call after a write that may have changed several endpoints (a human's delete cascades)."""
        self._all += 1
        self.total += 1

    def generation(self, endpoint_id: str) -> tuple[int, int]:
        return self._all, self._generations.get(endpoint_id, 0)


class SqliteDataVersion:
    """``PRAGMA data_version`` of a SQLite file, on a private connection used for nothing else."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def current(self) -> int | None:
        """The file's data version as this connection sees it, or None when it cannot be read now
        (then nothing cached may be trusted)."""
        try:
            if self._conn is None:
                # timeout=0: never wait on the event loop; autocommit, so no transaction stays open.
                uri = f"file:{self.path}?mode=rw"  # never creates a file
                self._conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
            row = self._conn.execute("PRAGMA data_version").fetchone()
        except sqlite3.Error:
            self.close()
            return None
        return int(row[0]) if row else None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
