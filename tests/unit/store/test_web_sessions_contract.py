"""The ``web_sessions`` home's contract, run against SQLite and a real PostgreSQL."""

from __future__ import annotations

from switchboard.core.clock import ManualClock
from switchboard.store import web_sessions
from switchboard.store.accounts import AccountStore, count_humans
from switchboard.store.db import Database
from switchboard.store.web_sessions import Human


async def test_a_session_signs_in_until_it_expires_or_ends(database: Database, clock: ManualClock) -> None:
    hid = await AccountStore(database, clock).create_human("a@example.com", "correct horse battery")
    await web_sessions.start(database, "h1", hid, 100, 200)
    assert await web_sessions.human_of(database, "h1", 199) == Human(hid, "a@example.com", False)
    assert await web_sessions.human_of(database, "h1", 200) is None  # expired
    assert await web_sessions.human_of(database, "other", 150) is None
    async with database.read() as conn:
        assert await web_sessions.count_live(conn, 150) == 1
    await web_sessions.end(database, "h1")
    assert await web_sessions.human_of(database, "h1", 150) is None


async def test_signing_out_everywhere_keeps_the_one_asked(database: Database, clock: ManualClock) -> None:
    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("a@example.com", "correct horse battery")
    other = await accounts.create_human("b@example.com", "correct horse battery")
    for h, human in (("h1", hid), ("h2", hid), ("h3", hid), ("o1", other)):
        await web_sessions.start(database, h, human, 100, 1000)
    async with database.begin() as conn:
        assert await web_sessions.end_all_in(conn, hid, "h2") == 2
    assert await web_sessions.human_of(database, "h2", 150) is not None
    assert await web_sessions.human_of(database, "o1", 150) is not None  # another human's session
    async with database.begin() as conn:
        assert await web_sessions.end_all_in(conn, hid, None) == 1
        assert await count_humans(conn) == 2


async def test_the_sweep_drops_expired_sessions_only(database: Database, clock: ManualClock) -> None:
    hid = await AccountStore(database, clock).create_human("a@example.com", "correct horse battery")
    await web_sessions.start(database, "old", hid, 100, 200)
    await web_sessions.start(database, "new", hid, 100, 300)
    assert await web_sessions.sweep(database, 200) == 1
    assert await web_sessions.sweep(database, 200) == 0
    assert await web_sessions.human_of(database, "new", 250) is not None
