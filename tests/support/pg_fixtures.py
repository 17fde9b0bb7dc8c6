"""pytest fixtures: one PostgreSQL server per test session, one fresh database per test.

Why a database per test: tests stay independent without truncation logic, and
CREATE DATABASE on this fsync=off server costs a few tens of milliseconds.

Register with ``pytest_plugins = ["tests.support.pg_fixtures"]`` in the root conftest.
A missing PostgreSQL install fails the tests that need it (scripts/test installs it);
``SWITCHBOARD_TEST_PG=skip`` skips them instead, for quick local runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.pg import PostgresServer, fresh_database, missing_binaries

SKIP_ENV = "SWITCHBOARD_TEST_PG"

# The server is shared per process and reference-counted, so a test module that also
# imports these fixtures (giving pytest a second session-scoped definition) reuses it
# instead of booting another cluster.
_shared: PostgresServer | None = None
_users = 0


def _acquire() -> PostgresServer:
    global _shared, _users
    if _shared is None:
        server = PostgresServer()
        server.start()
        _shared = server
    _users += 1
    return _shared


def _release() -> None:
    global _shared, _users
    _users -= 1
    if _users == 0 and _shared is not None:
        _shared.stop()
        _shared = None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (started on first use, removed at session end)."""
    if os.environ.get(SKIP_ENV, "").strip().lower() == "skip":
        pytest.skip(f"{SKIP_ENV}=skip: PostgreSQL tests skipped")
    missing = missing_binaries()
    if missing:
        pytest.fail(
            f"PostgreSQL programs not found: {', '.join(missing)} (looked on PATH and in "
            f"/usr/lib/postgresql/*/bin). Run scripts/test, which installs Debian's postgresql "
            f"package, or set {SKIP_ENV}=skip to skip these tests.",
            pytrace=False,
        )
    server = _acquire()
    try:
        yield server
    finally:
        _release()


@pytest.fixture
def pg_url(pg_server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """SQLAlchemy URL (``postgresql+asyncpg://...``) of a new empty database for this test."""
    if not pg_server.is_running:  # a fault test may have left it killed
        pg_server.start()
    with fresh_database(pg_server, request.node.name) as url:
        yield url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the server ``postgres``, so ``-m "not postgres"`` works."""
    for item in items:
        if "pg_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
