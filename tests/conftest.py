"""Suite-wide fixtures: a real database per test (SQLite, or PostgreSQL where asked) and real servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from switchboard.clock import ManualClock
from switchboard.obs.metrics import Metrics
from switchboard.store.db import Database
from switchboard.store.transitions import TransitionHub

pytest_plugins = ["tests.support.pg_fixtures"]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000.0)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'switchboard.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The storage contract runs on both engines."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'switchboard.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def database(db_url: str) -> AsyncIterator[Database]:
    db = Database(db_url)
    await db.migrate()
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
