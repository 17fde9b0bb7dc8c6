"""The SQLite writer's WAL reset (issue 28's soak found 740 MiB of WAL after 60,000 todos: a PASSIVE
checkpoint never restarts the WAL while some reader still reads from it). ``reset_wal`` empties the
WAL when the readers let it, and waits for them only briefly when they do not, so the writer it runs
on is never held for long."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from switchboard.store.sqlite_writer import WAL_RESET_WAIT_MS, reset_wal


def _wal_with_frames(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # as the writer's own connection
    conn.execute("CREATE TABLE filler (b BLOB)")
    for _ in range(50):
        conn.execute("INSERT INTO filler VALUES (zeroblob(20000))")
    return conn


def _wal(path: Path) -> int:
    return os.path.getsize(path.with_name(path.name + "-wal"))


def test_the_reset_empties_the_wal_when_no_reader_is_on_it(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    writer = _wal_with_frames(path)
    assert _wal(path) > 1_000_000
    assert reset_wal(writer) is True
    assert _wal(path) == 0
    assert writer.execute("SELECT count(*) FROM filler").fetchone()[0] == 50  # nothing lost
    writer.close()


def test_a_reader_on_the_old_frames_makes_it_give_up_quickly_and_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    writer = _wal_with_frames(path)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM filler").fetchone()  # a snapshot that needs the WAL
    writer.execute("INSERT INTO filler VALUES (zeroblob(20000))")  # frames past the reader's snapshot
    before = _wal(path)
    started = time.monotonic()
    assert reset_wal(writer) is False
    assert time.monotonic() - started < 10 * WAL_RESET_WAIT_MS / 1000  # bounded, not the 30 s timeout
    assert _wal(path) == before
    reader.execute("COMMIT")
    assert reset_wal(writer) is True and _wal(path) == 0  # the next try, once the reader is done
    busy = writer.execute("PRAGMA busy_timeout").fetchone()[0]
    assert busy > WAL_RESET_WAIT_MS  # the writer's own timeout is back
    reader.close()
    writer.close()
