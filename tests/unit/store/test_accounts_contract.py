"""The ``endpoints`` and ``humans`` home's contract (store/accounts.py), run against SQLite and a real
PostgreSQL: a bearer token is shown once and stored only as its sha256, scope and token changes land,
and a refused vend (taken slug, the per-human cap, bad input) stores nothing."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from switchboard.core.clock import ManualClock
from switchboard.store import accounts as homes
from switchboard.store.accounts import TOKEN_PREFIX, AccountStore, hash_token
from switchboard.store.db import Database
from switchboard.store.errors import Conflict, NotFound
from switchboard.store.schema import endpoints

PASSWORD = "correct-horse-battery"


async def _stored(database: Database, endpoint_id: str) -> tuple[str | None, str | None]:
    rows = await database.fetch(
        select(endpoints.c.token_hash, endpoints.c.token_hint).where(endpoints.c.id == endpoint_id)
    )
    return (rows[0].token_hash, rows[0].token_hint)


async def _count(database: Database, human_id: str | None = None) -> int:
    async with database.read() as conn:
        return await homes.count_endpoints(conn, human_id=human_id)


async def test_a_vended_token_is_returned_once_and_stored_hashed(
    database: Database, clock: ManualClock
) -> None:
    accounts = AccountStore(database, clock)
    human = await accounts.create_human("Ann@Example.test", PASSWORD)
    ep, token = await accounts.vend_endpoint(human, "agent-a", ["inbox", "inbox", "b"], ["claim", "ack"])
    assert token.startswith(TOKEN_PREFIX) and len(token) > 40
    assert (ep.slug, ep.human_id, ep.queues, ep.verbs) == ("agent-a", human, ("b", "inbox"), ("ack", "claim"))
    assert ep.created_at == int(clock.now() * 1000) and ep.effective_presence == "in"
    token_hash, hint = await _stored(database, ep.id)
    assert token_hash == hash_token(token) and token not in (token_hash or "")
    assert hint == token[:8] == ep.token_hint
    assert token not in repr(ep)  # the Endpoint carries only the hint
    assert await accounts.endpoint_by_token(token) == ep
    assert await accounts.endpoint(ep.id) == ep and await accounts.endpoint_by_slug("agent-a") == ep
    assert (await accounts.human_by_email(" ANN@example.TEST ")).id == human  # type: ignore[union-attr]


async def test_lookup_by_token_refuses_what_is_not_a_live_token(
    database: Database, clock: ManualClock
) -> None:
    accounts = AccountStore(database, clock)
    human = await accounts.create_human("ann@example.test", PASSWORD)
    _ep, token = await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim"])
    assert await accounts.endpoint_by_token(token + "x") is None
    assert await accounts.endpoint_by_token(token[len(TOKEN_PREFIX) :]) is None  # no prefix: not looked up
    assert await accounts.endpoint_by_token(TOKEN_PREFIX + "a" * 200) is None
    assert await accounts.endpoint_by_token(hash_token(token)) is None  # the stored hash is no credential
    assert await accounts.endpoint("ep_missing") is None and await accounts.endpoint_by_slug("nobody") is None


async def test_scope_updates_verbs_and_queues_each_alone(database: Database, clock: ManualClock) -> None:
    accounts = AccountStore(database, clock)
    human = await accounts.create_human("ann@example.test", PASSWORD)
    ep, token = await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim"])
    before = accounts.changes.generation(ep.id)
    await accounts.set_scope(ep.id, verbs=["ack", "claim", "claim"])
    after = await accounts.endpoint(ep.id)
    assert after is not None and after.verbs == ("ack", "claim") and after.queues == ("inbox",)
    await accounts.set_scope(ep.id, queues=["reviews", "inbox"])
    after = await accounts.endpoint(ep.id)
    assert after is not None and after.verbs == ("ack", "claim") and after.queues == ("inbox", "reviews")
    assert accounts.changes.generation(ep.id) == (before[0], before[1] + 2)  # caches see each change
    assert await accounts.endpoint_by_token(token) == after  # a scope change keeps the credential


async def test_rotate_replaces_the_token_and_revoke_removes_it(
    database: Database, clock: ManualClock
) -> None:
    accounts = AccountStore(database, clock)
    human = await accounts.create_human("ann@example.test", PASSWORD)
    ep, old = await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim"])
    new = await accounts.revend_token(ep.id)
    assert new != old and new.startswith(TOKEN_PREFIX)
    assert await accounts.endpoint_by_token(old) is None
    found = await accounts.endpoint_by_token(new)
    assert found is not None and found.id == ep.id and found.token_hint == new[:8]
    assert await _stored(database, ep.id) == (hash_token(new), new[:8])
    await accounts.revoke_token(ep.id)
    assert await accounts.endpoint_by_token(new) is None
    assert await _stored(database, ep.id) == (None, None)
    kept = await accounts.endpoint(ep.id)
    assert kept is not None and kept.token_hint is None and kept.queues == ("inbox",)  # the endpoint stays


async def test_bad_scope_and_unknown_endpoints_are_refused_with_nothing_changed(
    database: Database, clock: ManualClock
) -> None:
    accounts = AccountStore(database, clock)
    human = await accounts.create_human("ann@example.test", PASSWORD)
    ep, token = await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim"])
    generation = accounts.changes.generation(ep.id)
    for scope in ({"verbs": ["claim", "launch_missiles"]}, {"queues": []}, {"queues": ["Bad Queue"]}):
        with pytest.raises(ValueError):
            await accounts.set_scope(ep.id, **scope)  # type: ignore[arg-type]
    kept = await accounts.endpoint(ep.id)
    assert kept is not None and (kept.verbs, kept.queues) == (("claim",), ("inbox",))
    with pytest.raises(NotFound):
        await accounts.set_scope("ep_missing", verbs=["ack"])
    with pytest.raises(NotFound):
        await accounts.revend_token("ep_missing")
    with pytest.raises(NotFound):
        await accounts.revoke_token("ep_missing")
    assert accounts.changes.generation(ep.id) == generation  # no change was announced
    assert await accounts.endpoint_by_token(token) == kept


async def test_delete_removes_only_that_endpoint(database: Database, clock: ManualClock) -> None:
    accounts = AccountStore(database, clock)
    human = await accounts.create_human("ann@example.test", PASSWORD)
    a, token = await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim"])
    b, _ = await accounts.vend_endpoint(human, "agent-b", ["inbox"], ["claim"])
    async with database.begin() as conn:
        assert await homes.delete_endpoint(conn, a.id)
    async with database.begin() as conn:
        assert not await homes.delete_endpoint(conn, a.id)  # no such row any more
    assert await accounts.endpoint(a.id) is None and await accounts.endpoint_by_token(token) is None
    assert [e.id for e in await accounts.list_endpoints(human)] == [b.id]
    async with database.read() as conn:
        assert await homes.id_and_owner(conn, "agent-b") == (b.id, human)
        assert await homes.id_and_owner(conn, "agent-a") is None
        assert await homes.owns(conn, human, b.id) and not await homes.owns(conn, human, a.id)


async def test_the_per_human_cap_refuses_with_nothing_stored(database: Database, clock: ManualClock) -> None:
    accounts = AccountStore(database, clock, endpoints_per_human=2)
    ann = await accounts.create_human("ann@example.test", PASSWORD)
    bob = await accounts.create_human("bob@example.test", PASSWORD)
    await accounts.vend_endpoint(ann, "a1", ["inbox"], ["claim"])
    await accounts.vend_endpoint(ann, "a2", ["inbox"], ["claim"])
    with pytest.raises(Conflict, match="SWITCHBOARD_ENDPOINTS_PER_HUMAN"):
        await accounts.vend_endpoint(ann, "a3", ["inbox"], ["claim"])
    assert await _count(database, ann) == 2 and await accounts.endpoint_by_slug("a3") is None
    b1, _ = await accounts.vend_endpoint(bob, "b1", ["inbox"], ["claim"])  # the cap is per human
    assert b1.human_id == bob and await _count(database) == 3


async def test_a_taken_slug_is_refused_with_nothing_stored(database: Database, clock: ManualClock) -> None:
    accounts = AccountStore(database, clock)
    ann = await accounts.create_human("ann@example.test", PASSWORD)
    bob = await accounts.create_human("bob@example.test", PASSWORD)
    first, token = await accounts.vend_endpoint(ann, "agent-a", ["inbox"], ["claim"])
    with pytest.raises(Conflict, match="slug"):
        await accounts.vend_endpoint(bob, "agent-a", ["other"], ["claim"])  # unique across humans
    assert await _count(database) == 1 and await _count(database, bob) == 0
    assert await accounts.endpoint_by_slug("agent-a") == first
    assert await accounts.endpoint_by_token(token) == first


@pytest.mark.parametrize(
    ("slug", "queues", "verbs", "message"),
    [
        ("Agent A", ["inbox"], ["claim"], "slug"),
        ("agent-a", [], ["claim"], "queues"),
        ("agent-a", ["In Box"], ["claim"], "queues"),
        ("agent-a", ["inbox"], ["claim", "fly"], "unknown verbs: fly"),
    ],
)
async def test_bad_vend_input_is_refused_with_nothing_stored(
    database: Database, clock: ManualClock, slug: str, queues: list[str], verbs: list[str], message: str
) -> None:
    accounts = AccountStore(database, clock)
    ann = await accounts.create_human("ann@example.test", PASSWORD)
    with pytest.raises(ValueError, match=message):
        await accounts.vend_endpoint(ann, slug, queues, verbs)
    assert await _count(database) == 0


async def test_humans_refuse_bad_input_and_check_passwords(database: Database, clock: ManualClock) -> None:
    accounts = AccountStore(database, clock)
    with pytest.raises(ValueError, match="email"):
        await accounts.create_human("not-an-address", PASSWORD)
    with pytest.raises(ValueError, match="password"):
        await accounts.create_human("ann@example.test", "short")
    async with database.read() as conn:
        assert await homes.count_humans(conn) == 0
    ann = await accounts.create_human("ann@example.test", PASSWORD, operator=True)
    row = await accounts.check_password("ANN@example.test", PASSWORD)
    assert row is not None and row.id == ann and row.is_operator
    assert PASSWORD not in row.password_hash
    assert await accounts.check_password("ann@example.test", PASSWORD + "!") is None
    assert await accounts.check_password("nobody@example.test", PASSWORD) is None
    assert [h.id for h in await accounts.list_humans()] == [ann]


async def test_racing_vends_keep_the_cap_and_the_slug_unique(database: Database, clock: ManualClock) -> None:
    """Vends at once (PostgreSQL: separate connections and transactions) count against the cap once
    each and take a slug once; every loser gets the store's Conflict, never a driver error."""
    accounts = AccountStore(database, clock, endpoints_per_human=3)
    ann = await accounts.create_human("ann@example.test", PASSWORD)
    bob = await accounts.create_human("bob@example.test", PASSWORD)
    capped = await asyncio.gather(
        *(accounts.vend_endpoint(ann, f"a{i}", ["inbox"], ["claim"]) for i in range(8)),
        return_exceptions=True,
    )
    assert sum(not isinstance(r, BaseException) for r in capped) == 3
    assert all(isinstance(r, Conflict) for r in capped if isinstance(r, BaseException))
    assert await _count(database, ann) == 3
    same = await asyncio.gather(
        *(accounts.vend_endpoint((ann, bob)[i % 2], "shared", ["inbox"], ["claim"]) for i in range(6)),
        return_exceptions=True,
    )
    won = [r for r in same if not isinstance(r, BaseException)]
    assert len(won) == 1 and all(isinstance(r, Conflict) for r in same if isinstance(r, BaseException))
    assert await accounts.endpoint_by_slug("shared") == won[0][0]
    assert won[0][0].human_id == bob  # ann is at her cap: only bob's vends could take it
    assert await _count(database) == 4
