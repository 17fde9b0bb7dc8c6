"""A first hour without stumbles (issue 17): a misconfigured ``switchboard serve`` exits non-zero within
2 s with one line naming the setting and the forms it accepts, no traceback; ``db status|upgrade``; a
schema this build does not know is refused, and a behind one too when auto-upgrade is off."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.history import before_repair
from tests.support.server import free_port

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
FAST = 2.0  # seconds a misconfigured start may take to say so (issue 17: bad URL, taken port, data dir)
SCHEMA_CHECK = 10.0  # a schema refusal reads the database first: bounded, not held to FAST


def env_with(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update({f"SWITCHBOARD_{k.upper()}": v for k, v in settings.items()})
    return env


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SWITCHBOARD), *args],
        env=env or env_with(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def refused_fast(*args: str, env: dict[str, str] | None = None, within: float = FAST) -> tuple[int, str]:
    """Run a serve that must refuse: its exit code and its one stderr line, within ``within`` seconds."""
    started = time.monotonic()
    done = run(*args, env=env, timeout=30)
    took = time.monotonic() - started
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0, done
    assert took < within, f"took {took:.1f} s to refuse: {done.stderr}"
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    return done.returncode, lines[0]


def test_bad_database_url_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    url = "mysql://admin:hunter2-pw@db.internal/switchboard"
    code, line = refused_fast("serve", "--data", str(tmp_path), env=env_with(database_url=url))
    assert code == 2
    assert line.startswith("error: ") and "SWITCHBOARD_DATABASE_URL" in line
    assert "postgresql://" in line and "sqlite:///" in line  # the accepted forms
    assert "hunter2-pw" not in line and "mysql" not in line


def test_taken_port_is_one_line_within_two_seconds(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        code, line = refused_fast("serve", "--data", str(tmp_path), "--listen", f"127.0.0.1:{port}")
    assert code == 3
    assert f"SWITCHBOARD_LISTEN 127.0.0.1:{port}: address already in use" in line


def test_data_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "data"
    not_a_folder.write_text("oops")
    code, line = refused_fast("serve", "--data", str(not_a_folder), "--listen", f"127.0.0.1:{free_port()}")
    assert code == 3 and "SWITCHBOARD_DATA" in line and "not a folder" in line


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads and writes any folder: run as a user to check modes"
)
def test_unreadable_data_dir_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o000)
    try:
        code, line = refused_fast("serve", "--data", str(data), "--listen", f"127.0.0.1:{free_port()}")
    finally:
        data.chmod(0o700)
    assert code == 3 and "SWITCHBOARD_DATA" in line and "not readable and writable" in line


def test_db_status_and_upgrade(tmp_path: Path) -> None:
    empty = run("db", "status", "--json", "--data", str(tmp_path))
    assert empty.returncode == 0 and '"state": "empty"' in empty.stdout
    upgraded = run("db", "upgrade", "--json", "--data", str(tmp_path))
    assert upgraded.returncode == 0, upgraded.stderr
    assert '"state": "head"' in upgraded.stdout
    again = run("db", "upgrade", "--data", str(tmp_path))
    assert again.returncode == 0 and "already at head" in again.stdout


def _stamp(data: Path, revision: str) -> None:
    with sqlite3.connect(data / "switchboard.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))


def test_unknown_schema_is_refused_by_serve_and_the_admin_commands(tmp_path: Path) -> None:
    assert run("db", "upgrade", "--data", str(tmp_path)).returncode == 0
    _stamp(tmp_path, "from_the_future")
    code, line = refused_fast(
        "serve", "--data", str(tmp_path), "--listen", f"127.0.0.1:{free_port()}", within=SCHEMA_CHECK
    )
    assert code == 3 and "'from_the_future'" in line and "does not know" in line
    status = run("db", "status", "--json", "--data", str(tmp_path))
    assert status.returncode == 0 and '"state": "unknown"' in status.stdout
    listed = run("human", "list", "--json", "--data", str(tmp_path))
    assert listed.returncode == 1 and '"error": "schema"' in listed.stdout
    upgrade = run("db", "upgrade", "--data", str(tmp_path))
    assert upgrade.returncode == 1 and "does not know" in upgrade.stderr


def test_behind_schema_without_auto_upgrade_names_db_upgrade(tmp_path: Path) -> None:
    assert run("db", "upgrade", "--data", str(tmp_path)).returncode == 0
    below = before_repair()
    _stamp(tmp_path, below)  # the revision before the repair, which is idempotent: safe to re-run
    off = env_with(auto_upgrade="false")
    code, line = refused_fast(
        "serve", "--data", str(tmp_path), "--listen", f"127.0.0.1:{free_port()}", env=off, within=SCHEMA_CHECK
    )
    assert code == 3 and "`switchboard db upgrade`" in line and f"'{below}'" in line
    assert run("db", "upgrade", "--data", str(tmp_path), env=off).returncode == 0
    status = run("db", "status", "--data", str(tmp_path), env=off)
    assert status.returncode == 0 and "schema at head" in status.stdout
