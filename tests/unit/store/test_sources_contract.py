"""The ``sources`` and ``routes`` home's contract (store/sources.py), run against SQLite and a real
PostgreSQL: sources and routes are created, listed and deleted; ingest's lookups (the source with its
opened secret and its routes) read what was written; a duplicate or bad write stores nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from sqlalchemy import select

from switchboard.core.clock import ManualClock
from switchboard.cred import Envelope
from switchboard.store import sources as homes
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.errors import Conflict, NotFound
from switchboard.store.schema import sources
from switchboard.store.sources import RouteTarget, SourceStore

PASSWORD = "correct-horse-battery"
SECRET = "whsec-canary-7f3a9c"


@dataclass
class World:
    store: SourceStore
    ann: str
    bob: str
    ann_ep: str
    bob_ep: str


async def _world(database: Database, clock: ManualClock) -> World:
    accounts = AccountStore(database, clock)
    ann = await accounts.create_human("ann@example.test", PASSWORD)
    bob = await accounts.create_human("bob@example.test", PASSWORD)
    ann_ep, _ = await accounts.vend_endpoint(ann, "ann-agent", ["inbox"], ["claim"])
    bob_ep, _ = await accounts.vend_endpoint(bob, "bob-agent", ["inbox"], ["claim"])
    return World(SourceStore(database, Envelope(os.urandom(32)), clock), ann, bob, ann_ep.id, bob_ep.id)


async def _counts(database: Database) -> tuple[int, int]:
    async with database.read() as conn:
        return await homes.count_sources(conn), await homes.count_routes(conn)


async def test_a_source_is_created_listed_and_read_with_its_secret(
    database: Database, clock: ManualClock
) -> None:
    w = await _world(database, clock)
    gh = await w.store.create(w.ann, "ann-github", "github", "signature", SECRET)
    clock.advance(1)
    gen = await w.store.create(w.bob, "bob-generic", "generic", "token", "other-secret")
    assert (gh.slug, gh.human_id, gh.kind, gh.trust, gh.quarantined) == (
        "ann-github",
        w.ann,
        "github",
        "signature",
        False,
    )
    assert gh.created_at == int((clock.now() - 1) * 1000)
    assert await w.store.list_sources() == [gh, gen]  # oldest first
    assert await w.store.list_sources(w.bob) == [gen]
    assert await w.store.by_slug("ann-github") == (gh, SECRET)
    assert await w.store.by_slug("nobody") is None
    (sealed,) = await database.fetch(select(sources.c.secret_enc).where(sources.c.id == gh.id))
    assert SECRET.encode() not in bytes(sealed.secret_enc)  # sealed in the cred envelope, never plain


@pytest.mark.parametrize(
    ("slug", "kind", "trust", "message"),
    [
        ("Ann GitHub", "github", "signature", "slug"),
        ("ann-github", "svn", "signature", "kind"),
        ("ann-github", "github", "hope", "trust"),
        ("ann-github", "generic", "signature", "generic"),
    ],
)
async def test_bad_source_input_is_refused_with_nothing_stored(
    database: Database, clock: ManualClock, slug: str, kind: str, trust: str, message: str
) -> None:
    w = await _world(database, clock)
    with pytest.raises(ValueError, match=message):
        await w.store.create(w.ann, slug, kind, trust, SECRET)
    assert await _counts(database) == (0, 0)


async def test_a_taken_source_slug_is_refused_with_nothing_stored(
    database: Database, clock: ManualClock
) -> None:
    w = await _world(database, clock)
    first = await w.store.create(w.ann, "shared", "github", "signature", SECRET)
    with pytest.raises(Conflict, match="slug"):
        await w.store.create(w.bob, "shared", "gitea", "token", "bob-secret")  # unique across humans
    assert await _counts(database) == (1, 0)
    assert await w.store.by_slug("shared") == (first, SECRET)


async def test_routes_feed_ingests_lookups_until_deleted(database: Database, clock: ManualClock) -> None:
    w = await _world(database, clock)
    src = await w.store.create(w.ann, "ann-github", "github", "signature", SECRET)
    empty = await w.store.for_delivery("ann-github")
    assert empty is not None and (empty.source, empty.secret, empty.routes) == (src, SECRET, ())
    catch_all = await w.store.add_route("ann-github", "inbox", "ann-agent", None)
    clock.advance(1)
    pulls = await w.store.add_route("ann-github", "reviews", "ann-agent", "pull_request")
    clock.advance(1)
    pushes = await w.store.add_route("ann-github", "builds", "ann-agent", "push")
    assert len({catch_all, pulls, pushes}) == 3
    want_pull = [
        RouteTarget(catch_all, "inbox", w.ann_ep, None),
        RouteTarget(pulls, "reviews", w.ann_ep, "pull_request"),
    ]
    assert await w.store.targets(src.id, "pull_request") == want_pull
    assert await w.store.targets(src.id, None) == want_pull[:1]  # no kind: catch-alls only
    delivery = await w.store.for_delivery("ann-github")
    assert delivery is not None and [r.route_id for r in delivery.routes] == [catch_all, pulls, pushes]
    assert homes.routes_for(delivery.routes, "push") == [
        RouteTarget(catch_all, "inbox", w.ann_ep, None),
        RouteTarget(pushes, "builds", w.ann_ep, "push"),
    ]
    listed = await w.store.list_routes(w.ann)
    assert [(r.id, r.source, r.endpoint, r.queue, r.kind) for r in listed] == [
        (catch_all, "ann-github", "ann-agent", "inbox", None),
        (pulls, "ann-github", "ann-agent", "reviews", "pull_request"),
        (pushes, "ann-github", "ann-agent", "builds", "push"),
    ]
    assert await w.store.list_routes(w.bob) == []
    async with database.read() as conn:
        assert await homes.route_of_human(conn, pulls, w.ann)
        assert not await homes.route_of_human(conn, pulls, w.bob)
    assert await w.store.delete_route(pulls)
    assert not await w.store.delete_route(pulls)  # gone already
    assert await w.store.targets(src.id, "pull_request") == want_pull[:1]
    assert await w.store.for_delivery("nobody") is None


async def test_a_duplicate_route_is_refused_with_nothing_stored(
    database: Database, clock: ManualClock
) -> None:
    w = await _world(database, clock)
    src = await w.store.create(w.ann, "ann-github", "github", "signature", SECRET)
    await w.store.add_route("ann-github", "inbox", "ann-agent", None)
    await w.store.add_route("ann-github", "inbox", "ann-agent", "push")  # a kind filter: another route
    for kind in (None, "push"):
        with pytest.raises(Conflict, match="exists"):
            await w.store.add_route("ann-github", "inbox", "ann-agent", kind)
    async with database.read() as conn:
        assert await homes.count_routes(conn, source_id=src.id) == 2
        assert await homes.count_routes(conn, endpoint_id=w.ann_ep) == 2


async def test_a_route_must_reach_the_source_owners_endpoint(database: Database, clock: ManualClock) -> None:
    w = await _world(database, clock)
    await w.store.create(w.ann, "ann-github", "github", "signature", SECRET)
    with pytest.raises(NotFound, match="owned by"):
        await w.store.add_route("ann-github", "inbox", "bob-agent", None)  # another human's agent
    with pytest.raises(NotFound, match="no endpoint"):
        await w.store.add_route("ann-github", "inbox", "nobody", None)
    with pytest.raises(NotFound, match="no source"):
        await w.store.add_route("nothing", "inbox", "ann-agent", None)
    with pytest.raises(ValueError, match="queue"):
        await w.store.add_route("ann-github", "In Box", "ann-agent", None)
    with pytest.raises(ValueError, match="kind"):
        await w.store.add_route("ann-github", "inbox", "ann-agent", "x" * 101)
    assert await _counts(database) == (1, 0)


async def test_rotate_quarantine_and_delete(database: Database, clock: ManualClock) -> None:
    w = await _world(database, clock)
    src = await w.store.create(w.ann, "ann-github", "github", "signature", SECRET)
    await w.store.add_route("ann-github", "inbox", "ann-agent", None)
    assert await w.store.rotate_secret(src.id, "new-secret") == src
    assert await w.store.by_slug("ann-github") == (src, "new-secret")  # the old secret is gone at once
    with pytest.raises(NotFound):
        await w.store.rotate_secret("src_missing", "x")
    await w.store.set_quarantine(src.id, True)
    found = await w.store.by_slug("ann-github")
    assert found is not None and found[0].quarantined
    async with database.read() as conn:
        assert await homes.count_sources(conn, quarantined=True) == 1
        assert await homes.count_sources(conn, human_id=w.bob) == 0
    async with database.begin() as conn:
        assert await homes.delete_source(conn, src.id)
    async with database.begin() as conn:
        assert not await homes.delete_source(conn, src.id)
    assert await _counts(database) == (0, 0)  # its routes cascade
    assert await w.store.for_delivery("ann-github") is None
