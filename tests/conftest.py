"""Suite-wide fixtures: a real database per test (SQLite, or PostgreSQL where asked) and real servers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from switchboard.core.clock import ManualClock
from switchboard.obs.logs import quiet_noisy_loggers
from switchboard.obs.metrics import Metrics
from switchboard.store.db import Database
from switchboard.store.transitions import TransitionHub
from tests.support.pg import fresh_database
from tests.support.secrets import SCANNER, leaks
from tests.support.templates import copy_migrated_sqlite, migrated_pg_template

pytest_plugins = ["tests.support.pg_fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    root = logging.getLogger()
    root.addHandler(SCANNER)
    quiet_noisy_loggers()  # exactly as `switchboard serve` configures them
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


# What pytest-xdist's workers found (filled in the controller only): lines scanned, and every leak.
_worker_lines: list[int] = []
_worker_leaks: list[tuple[str, str]] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's controller: gather what each worker's secrecy scan found (see below)."""
    output = getattr(node, "workeroutput", {})
    _worker_lines.append(int(output.get("scanned_lines", 0)))
    _worker_leaks.extend((str(needle), str(line)) for needle, line in output.get("secret_leaks", []))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Issue 8: no revealed secret or query-string canary in any log line of the whole run. Under
    pytest-xdist each worker scans its own lines and hands the result to the controller, which fails
    the run; a worker's own exit status would not reach it."""
    found = leaks(SCANNER.lines)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: every leak, so the controller's count is true
        workeroutput["scanned_lines"] = len(SCANNER.lines)
        workeroutput["secret_leaks"] = found
        return
    found += _worker_leaks
    scanned = len(SCANNER.lines) + sum(_worker_lines)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if found:
        if reporter is not None:
            reporter.write_line(
                f"SECRET LEAK: {len(found)} log lines contain a revealed secret or canary:", red=True
            )
            for needle, line in found[:20]:
                reporter.write_line(f"  {needle}: {line}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif reporter is not None:
        reporter.write_line(
            f"secrecy scan: {scanned} log lines checked against the secrets revealed in this run: clean"
        )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000.0)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'switchboard.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The storage contract runs on both engines: a new database at the schema's head, copied from one
    migrated once per test process (tests/support/templates.py)."""
    if request.param == "sqlite":
        path = tmp_path / "switchboard.db"
        await copy_migrated_sqlite(path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    server = request.getfixturevalue("pg_server")
    if not server.is_running:  # a fault test may have left it killed
        server.start()
    with fresh_database(server, request.node.name, await migrated_pg_template(server)) as url:
        yield url


@pytest.fixture
async def database(db_url: str) -> AsyncIterator[Database]:
    db = Database(db_url)
    await db.migrate()  # at head already: checks it
    yield db
    await db.dispose()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
async def hub(metrics: Metrics) -> AsyncIterator[TransitionHub]:
    h = TransitionHub(metrics, instance_id="test")
    await h.start()
    yield h
    await h.stop()
