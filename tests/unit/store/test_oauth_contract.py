"""The OAuth home's contract (``store/oauth.py``, ``store/oauth_clients.py``), run against SQLite and a
real PostgreSQL: a code is spent once, a refresh token once, and the sweep keeps what is alive."""

from __future__ import annotations

import asyncio

import pytest

from switchboard.core.clock import ManualClock
from switchboard.store import oauth, oauth_clients
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.errors import Conflict
from switchboard.store.oauth import CodeRecord, NewToken


async def _code(database: Database, clock: ManualClock) -> CodeRecord:
    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("a@example.com", "correct horse battery")
    ep, _ = await accounts.vend_endpoint(hid, "ep-a", ["inbox"], ["claim_next"])
    await oauth_clients.insert_client(database, "cl_1", "Client", '{"client_id": "cl_1"}', b"sealed", 100)
    return CodeRecord("cl_1", hid, ep.id, ("claim_next", "ack"), "chal", "https://c.test/cb", True, None, 500)


async def test_clients_are_kept_once_and_read_back(database: Database, clock: ManualClock) -> None:
    await _code(database, clock)
    row = await oauth_clients.client_row(database, "cl_1")
    assert row == oauth_clients.ClientRow('{"client_id": "cl_1"}', b"sealed")
    with pytest.raises(Conflict):
        await oauth_clients.insert_client(database, "cl_1", None, "{}", None, 100)
    assert await oauth_clients.update_client(database, "cl_1", "Renamed", '{"v": 2}')
    assert not await oauth_clients.update_client(database, "cl_missing", None, "{}")
    assert (await oauth_clients.client_row(database, "cl_1")) == oauth_clients.ClientRow(
        '{"v": 2}', b"sealed"
    )
    assert await oauth_clients.client_row(database, "cl_missing") is None


async def test_a_code_is_spent_by_one_exchange_only(database: Database, clock: ManualClock) -> None:
    record = await _code(database, clock)
    await oauth.insert_code(database, "code-hash", record, 100)
    got = await oauth.live_code(database, "code-hash", "cl_1", 499)
    assert got is not None and got.verbs == ("ack", "claim_next") and got.redirect_uri_explicit
    assert await oauth.live_code(database, "code-hash", "cl_other", 499) is None
    assert await oauth.live_code(database, "code-hash", "cl_1", 500) is None  # expired

    async def exchange() -> bool:
        async with database.begin() as conn:
            return await oauth.consume_code_in(conn, "code-hash", 200)

    assert sorted(await asyncio.gather(exchange(), exchange())) == [False, True]


async def test_a_refresh_token_is_spent_once_and_revoking_takes_the_tokens(
    database: Database, clock: ManualClock
) -> None:
    record = await _code(database, clock)
    async with database.begin() as conn:
        await oauth.open_grant_in(conn, "og_1", record, 100)
        await oauth.insert_tokens_in(
            conn,
            "og_1",
            record.verbs,
            [NewToken("a-hash", "access", 300), NewToken("r-hash", "refresh", 900)],
            100,
        )
    access = await oauth.live_token(database, "a-hash", "access", 299)
    assert access is not None and (access.grant_id, access.endpoint_id, access.rotated) == (
        "og_1",
        record.endpoint_id,
        False,
    )
    assert await oauth.live_token(database, "a-hash", "refresh", 200) is None  # the wrong kind
    assert await oauth.live_token(database, "a-hash", "access", 300) is None  # expired
    refresh = await oauth.live_token(database, "r-hash", "refresh", 200)
    assert refresh is not None
    async with database.begin() as conn:
        assert await oauth.spend_refresh_in(conn, refresh, 200)
    async with database.begin() as conn:
        assert not await oauth.spend_refresh_in(conn, refresh, 201)  # reuse
    spent = await oauth.live_token(database, "r-hash", "refresh", 202)
    assert spent is not None and spent.rotated
    (view,) = await oauth.grants_for_endpoint(database, record.endpoint_id)
    assert (view.id, view.client_name, view.last_used_at) == ("og_1", "Client", 200)
    async with database.read() as conn:
        assert await oauth.count_grants(conn, endpoint_id=record.endpoint_id) == 1
        assert await oauth.count_grants(conn, endpoint_id="ep_other") == 0
    assert not await oauth.delete_grant(database, "og_1", endpoint_id="ep_other")
    assert await oauth.delete_grant(database, "og_1", endpoint_id=record.endpoint_id)
    assert await oauth.live_token(database, "a-hash", "access", 200) is None  # went with its grant


async def test_the_sweep_keeps_what_is_alive(database: Database, clock: ManualClock) -> None:
    record = await _code(database, clock)
    await oauth_clients.insert_client(database, "cl_unused", None, "{}", None, 100)
    await oauth.insert_code(database, "old-code", record, 100)
    async with database.begin() as conn:
        await oauth.open_grant_in(conn, "og_1", record, 100)  # cl_1 has been granted
        await oauth.insert_tokens_in(conn, "og_1", record.verbs, [NewToken("a-hash", "access", 1000)], 100)
        await oauth.open_grant_in(conn, "og_2", record, 100)
        await oauth.insert_tokens_in(conn, "og_2", record.verbs, [NewToken("b-hash", "access", 400)], 100)
    await oauth.sweep(database, 600, unused_client_before_ms=100)
    assert await oauth.live_code(database, "old-code", "cl_1", 0) is None  # expired at 500
    assert await oauth.live_token(database, "a-hash", "access", 600) is not None
    assert [g.id for g in await oauth.grants_for_endpoint(database, record.endpoint_id)] == ["og_1"]
    assert await oauth_clients.client_row(database, "cl_unused") is None  # never granted
    assert await oauth_clients.client_row(database, "cl_1") is not None
    async with database.read() as conn:
        assert await oauth_clients.count_clients(conn) == 1
