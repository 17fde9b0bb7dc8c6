"""The SQLite writer keeps the WAL bounded under steady load (issue 28's soak found 740 MiB of WAL for
60,000 todos): with a reader always inside a read transaction, a PASSIVE checkpoint never restarts the
WAL, so the file grew for as long as the load lasted; past ``wal_reset_frames`` the checkpointer now
empties it with a TRUNCATE checkpoint that waits only briefly for the readers."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

from switchboard.store.sqlite_writer import SqliteWriter

ROW = b"\x00" * 20_000  # five pages a commit


def _busy_reader(path: Path, stop: threading.Event) -> threading.Thread:
    """Short read transactions back to back, overlapping every checkpoint (as a loaded server's are)."""

    def read() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            while not stop.is_set():
                conn.execute("BEGIN")
                conn.execute("SELECT count(*) FROM filler").fetchone()
                conn.execute("SELECT count(*) FROM filler").fetchone()
                conn.execute("COMMIT")
        finally:
            conn.close()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


async def _wal_after_load(tmp_path: Path, reset_frames: int) -> tuple[int, int]:
    path = tmp_path / f"w{reset_frames}.db"
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE filler (b BLOB)")
    setup.close()
    writer = SqliteWriter(path, checkpoint_commits=4, wal_reset_frames=reset_frames)
    stop = threading.Event()

    def write(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO filler VALUES (?)", (ROW,))
        conn.execute("DELETE FROM filler WHERE rowid < (SELECT max(rowid) - 20 FROM filler)")

    await writer.run(write)
    reader = _busy_reader(path, stop)
    wal = path.with_name(path.name + "-wal")
    largest = 0
    try:
        for _ in range(1500):  # one at a time: one commit each, about 30 MiB of WAL frames in all
            await writer.run(write)
            largest = max(largest, os.path.getsize(wal))
    finally:
        stop.set()
        reader.join(10)
        await writer.close()
    return largest, writer.wal_resets


async def test_the_wal_stays_bounded_while_readers_never_stop(tmp_path: Path) -> None:
    """The same load twice: with the reset past 256 frames (1 MiB), and with it out of reach (what the
    server did before). A reset must have run, and the WAL stayed a small fraction of the unbounded one."""
    bounded, resets = await _wal_after_load(tmp_path, 256)
    unbounded, none = await _wal_after_load(tmp_path, 10**9)
    assert none == 0 and unbounded > 16 * 2**20, f"the load made only {unbounded / 2**20:.1f} MiB of WAL"
    assert resets > 0
    assert bounded < unbounded / 4, (
        f"WAL {bounded / 2**20:.1f} MiB with resets, {unbounded / 2**20:.1f} without"
    )
