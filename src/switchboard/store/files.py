"""File modes for what Switchboard keeps on disk: the data directory 0700, SQLite files 0600.

The database holds argon2 hashes, sealed secrets and every tenant's payloads; no other local user may
read it. Modes are set when a file is created and again at every start (an install from before this
rule, or a restore that copied files with a loose umask, is tightened the next time it runs).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def secure_data_dir(path: Path) -> None:
    """Create ``path`` (0700) if missing, else tighten it to 0700."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):  # a directory owned by someone else: leave it be
        os.chmod(path, DIR_MODE)


def secure_sqlite(db_path: Path) -> None:
    """Create the database file 0600 before SQLite opens it (SQLite then gives its -wal and -shm the
    same mode), and tighten an existing one and its side files."""
    if not db_path.parent.exists():
        db_path.parent.mkdir(mode=DIR_MODE, parents=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(db_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    for path in (db_path, *(db_path.with_name(db_path.name + s) for s in SQLITE_SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.chmod(path, FILE_MODE)
