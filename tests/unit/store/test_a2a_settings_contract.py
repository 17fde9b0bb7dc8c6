"""The ``a2a_endpoint_settings`` home's contract, run against SQLite and a real PostgreSQL."""

from __future__ import annotations

from switchboard.core.clock import ManualClock
from switchboard.store import a2a_settings
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database


async def _endpoint(database: Database, clock: ManualClock) -> str:
    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("owner@example.com", "correct horse battery")
    ep, _ = await accounts.vend_endpoint(hid, "ep-a", ["inbox", "reviews"], ["claim_next"])
    return ep.id


async def test_put_replaces_and_clear_forgets(database: Database, clock: ManualClock) -> None:
    ep = await _endpoint(database, clock)
    assert await a2a_settings.get_default_queue(database, ep) is None
    await a2a_settings.put_default_queue(database, ep, "reviews", 1)
    await a2a_settings.put_default_queue(database, ep, "inbox", 2)  # the upsert, not a second row
    assert await a2a_settings.get_default_queue(database, ep) == "inbox"
    await a2a_settings.clear_default_queue(database, ep)
    assert await a2a_settings.get_default_queue(database, ep) is None
    await a2a_settings.clear_default_queue(database, ep)  # clearing twice is no error


async def test_settings_are_per_endpoint(database: Database, clock: ManualClock) -> None:
    ep = await _endpoint(database, clock)
    await a2a_settings.put_default_queue(database, ep, "reviews", 1)
    assert await a2a_settings.get_default_queue(database, "no-such-endpoint") is None
