"""How a cached endpoint row is known to be current, without reading it again (docs/mcp.md, "Grants").

* :class:`EndpointChanges`: a generation per endpoint, bumped by every write to an endpoint row that
  this process commits (scope, token re-vend and revoke, presence, delete), and on PostgreSQL by the
  same writes committed by other instances and the CLI (:func:`announce`, carried by the cluster
  relay). A cached row whose generation moved is stale at once.
* :class:`EndpointEpoch`: on SQLite, the one row of ``endpoint_epoch``, whose ``n`` triggers on
  ``endpoints`` move in the same transaction as any insert, update or delete of an endpoint row,
  whatever connection or process commits it (this server, the CLI). Equal values mean no endpoint row
  has changed since the cached row was read, so it is exactly what a fresh read would return; writes to
  other tables (every claim, ack and ingest) leave it alone. It is read on a connection of its own, a
  few microseconds on the event loop, never waiting for a lock (a busy file counts as changed).
  PostgreSQL has no such cheap check.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

ENDPOINTS_CHANNEL = "switchboard_endpoints"
EVERY_ENDPOINT = "*"
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")
_EPOCH = "SELECT n FROM endpoint_epoch WHERE id = 1"


async def announce(conn: AsyncConnection, endpoint_id: str | None) -> None:
    """Inside the transaction that writes an endpoint row (``None``: several, as a human's delete): on
    PostgreSQL, tell every other instance at commit (the cluster relay, ``store/relay.py``), so their
    cached rows go stale at once instead of at the end of their trust window. Nothing on SQLite, whose
    endpoint epoch (its triggers) already tells every process."""
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


class EndpointEpoch:
    """``endpoint_epoch.n`` of a SQLite file (migration 0013), on a private connection used for nothing
    else: how many endpoint writes have committed to the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def current(self) -> int | None:
        """The epoch as committed now, or None when it cannot be read now (a busy or missing file, a
        schema without the table or its row): then nothing cached may be trusted."""
        try:
            if self._conn is None:
                # timeout=0: never wait on the event loop; autocommit, so no transaction stays open.
                uri = f"{self.path.resolve().as_uri()}?mode=rw"  # never creates a file
                self._conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
            row = self._conn.execute(_EPOCH).fetchone()
        except sqlite3.Error:
            self.close()
            return None
        return int(row[0]) if row else None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
