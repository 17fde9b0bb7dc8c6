"""Inbound sources (SPEC-0003) and routes (SPEC-0006). Source secrets live only in the cred envelope."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, String, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import new_id
from switchboard.core.names import KINDS as KINDS  # re-exported: the web form offers them
from switchboard.core.names import QUEUE, SLUG
from switchboard.core.names import TRUSTS as TRUSTS
from switchboard.core.text import admit_label
from switchboard.cred import Envelope
from switchboard.store import accounts
from switchboard.store.db import Database
from switchboard.store.errors import Conflict, NotFound
from switchboard.store.schema import routes, sources

# Built once: ingest runs both for every delivery (a statement built per call cost more CPU than its
# execution). ``kind = NULL`` is never true, so a delivery without a kind matches catch-all routes only.
_BY_SLUG = select(sources).where(sources.c.slug == bindparam("p_slug", type_=String))
_TARGETS = (
    select(routes.c.id, routes.c.queue, routes.c.endpoint_id, routes.c.kind)
    .where(
        routes.c.source_id == bindparam("p_source_id", type_=String),
        or_(routes.c.kind.is_(None), routes.c.kind == bindparam("p_kind", type_=String)),
    )
    .order_by(routes.c.created_at)
)
# Ingest's one read per delivery: the source by slug with every route of it (none: one row of NULLs),
# oldest route first. The routes for the delivery's kind are picked after the body is parsed
# (:func:`routes_for`): one trip to the database where the source and then its routes took two.
_FOR_DELIVERY = (
    select(
        sources,
        routes.c.id.label("route_id"),
        routes.c.queue.label("route_queue"),
        routes.c.endpoint_id.label("route_endpoint_id"),
        routes.c.kind.label("route_kind"),
    )
    .select_from(sources.outerjoin(routes, routes.c.source_id == sources.c.id))
    .where(sources.c.slug == bindparam("p_slug", type_=String))
    .order_by(routes.c.created_at, routes.c.id)
)


@dataclass(frozen=True, slots=True)
class Source:
    id: str
    slug: str
    human_id: str
    kind: str
    trust: str
    quarantined: bool
    created_at: int

    @classmethod
    def from_row(cls, row: Row[Any]) -> Source:
        return cls(row.id, row.slug, row.human_id, row.kind, row.trust, bool(row.quarantined), row.created_at)

    @property
    def aad(self) -> str:
        return f"sources:{self.id}:secret"


@dataclass(frozen=True, slots=True)
class RouteTarget:
    route_id: str
    queue: str
    endpoint_id: str
    kind: str | None


def routes_for(candidates: Sequence[RouteTarget], kind: str | None) -> list[RouteTarget]:
    """The routes a delivery of ``kind`` takes (as :meth:`SourceStore.targets` reads them): those for its
    kind and those with no kind filter, in order; a kind route and a catch-all to the same place make one
    todo. A delivery without a kind takes catch-all routes only."""
    seen: set[tuple[str, str]] = set()
    out: list[RouteTarget] = []
    for r in candidates:
        if r.kind is not None and (kind is None or r.kind != kind):
            continue
        key = (r.queue, r.endpoint_id)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


@dataclass(frozen=True, slots=True)
class Delivery:
    """What ingest reads for one delivery: the source, its opened secret and all its routes."""

    source: Source
    secret: str
    routes: tuple[RouteTarget, ...]


class SourceStore:
    def __init__(self, db: Database, envelope: Envelope, clock: Clock) -> None:
        self.db, self.envelope, self.clock = db, envelope, clock

    async def create(self, human_id: str, slug: str, kind: str, trust: str, secret: str) -> Source:
        if not SLUG.match(slug):
            raise ValueError("slug must be 1-64 lower-case letters, digits or dashes")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        if trust not in TRUSTS:
            raise ValueError(f"trust must be one of {', '.join(TRUSTS)}")
        if kind == "generic" and trust == "signature":
            raise ValueError("generic sources have no signature scheme: use trust token or none")
        sid = new_id("src")
        async with self.db.begin() as conn:
            if (await conn.execute(select(sources.c.id).where(sources.c.slug == slug))).first():
                raise Conflict("a source with that slug exists already")
            await conn.execute(
                insert(sources).values(
                    id=sid,
                    slug=slug,
                    human_id=human_id,
                    kind=kind,
                    trust=trust,
                    secret_enc=self.envelope.seal(secret, f"sources:{sid}:secret"),
                    quarantined=False,
                    created_at=ms(self.clock.now()),
                )
            )
            row = (await conn.execute(select(sources).where(sources.c.id == sid))).one()
        return Source.from_row(row)

    async def by_slug(self, slug: str) -> tuple[Source, str] | None:
        """The source and its opened secret, for verifying one delivery. One statement outside any
        transaction (``Database.fetch``): ingest reads it per delivery, and a BEGIN and ROLLBACK around
        it were two more trips to the database for nothing."""
        rows = await self.db.fetch(_BY_SLUG, {"p_slug": slug})
        if not rows:
            return None
        row = rows[0]
        source = Source.from_row(row)
        return source, self.envelope.open(row.secret_enc, source.aad)

    async def for_delivery(self, slug: str) -> Delivery | None:
        """:meth:`by_slug` and every route of the source, in one statement outside any transaction
        (ingest: pick the delivery's routes with :func:`routes_for`)."""
        rows = await self.db.fetch(_FOR_DELIVERY, {"p_slug": slug})
        if not rows:
            return None
        source = Source.from_row(rows[0])
        found = tuple(
            RouteTarget(r.route_id, r.route_queue, r.route_endpoint_id, r.route_kind)
            for r in rows
            if r.route_id is not None
        )
        return Delivery(source, self.envelope.open(rows[0].secret_enc, source.aad), found)

    async def list_sources(self, human_id: str | None = None) -> list[Source]:
        stmt = select(sources).order_by(sources.c.created_at)
        if human_id is not None:
            stmt = stmt.where(sources.c.human_id == human_id)
        async with self.db.read() as conn:
            return [Source.from_row(r) for r in (await conn.execute(stmt)).all()]

    async def rotate_secret(self, source_id: str, secret: str) -> Source:
        """Replace the source's secret (sealed as at create); the old one stops verifying at once, and
        for token trust the old inbound URL stops working. No grace: a sender is re-keyed by hand."""
        async with self.db.begin() as conn:
            moved = await conn.execute(
                update(sources)
                .where(sources.c.id == source_id)
                .values(secret_enc=self.envelope.seal(secret, f"sources:{source_id}:secret"))
            )
            if moved.rowcount != 1:
                raise NotFound("no such source")
            row = (await conn.execute(select(sources).where(sources.c.id == source_id))).one()
        return Source.from_row(row)

    async def set_quarantine(self, source_id: str, quarantined: bool) -> None:
        async with self.db.begin() as conn:
            await conn.execute(
                update(sources).where(sources.c.id == source_id).values(quarantined=quarantined)
            )

    # -- routes ------------------------------------------------------------------------------------

    async def add_route(self, source_slug: str, queue: str, endpoint_slug: str, kind: str | None) -> str:
        if not QUEUE.match(queue):
            raise ValueError("queue must be lower-case letters, digits, '.', '_' or '-'")
        if kind is not None and not (0 < len(kind) <= 100):
            raise ValueError("kind must be 1-100 characters")
        if kind is not None:
            admit_label(kind, "kind")
        rid = new_id("rt")
        async with self.db.begin() as conn:
            src = (
                await conn.execute(
                    select(sources.c.id, sources.c.human_id).where(sources.c.slug == source_slug)
                )
            ).first()
            if src is None:
                raise NotFound(f"no source {source_slug!r}")
            ep = await accounts.id_and_owner(conn, endpoint_slug)
            if ep is None:
                raise NotFound(f"no endpoint {endpoint_slug!r}")
            endpoint_id, owner = ep
            if owner != src.human_id:
                # Whichever face asks (CLI, web): a route would hand one human's deliveries to another's
                # agent. Same answer as an unknown endpoint, so it reveals nothing about other tenants.
                raise NotFound(f"no endpoint {endpoint_slug!r} owned by the source's human")
            dup = await conn.execute(
                select(routes.c.id).where(
                    routes.c.source_id == src.id,
                    routes.c.queue == queue,
                    routes.c.endpoint_id == endpoint_id,
                    routes.c.kind.is_(None) if kind is None else routes.c.kind == kind,
                )
            )
            if dup.first():
                raise Conflict("that route exists already")
            await conn.execute(
                insert(routes).values(
                    id=rid,
                    source_id=src.id,
                    kind=kind,
                    queue=queue,
                    endpoint_id=endpoint_id,
                    created_at=ms(self.clock.now()),
                )
            )
        return rid

    async def delete_route(self, route_id: str) -> bool:
        async with self.db.begin() as conn:
            return (await conn.execute(delete(routes).where(routes.c.id == route_id))).rowcount == 1

    async def targets(self, source_id: str, kind: str | None) -> list[RouteTarget]:
        """Routes matching a delivery: those for its kind, and those with no kind filter (one statement
        outside any transaction, as :meth:`by_slug`)."""
        rows = await self.db.fetch(_TARGETS, {"p_source_id": source_id, "p_kind": kind})
        return routes_for([RouteTarget(r.id, r.queue, r.endpoint_id, r.kind) for r in rows], kind)

    async def list_routes(self, human_id: str | None = None) -> list[Any]:
        stmt = (
            select(
                routes.c.id,
                routes.c.kind,
                routes.c.queue,
                routes.c.created_at,
                sources.c.slug.label("source"),
                accounts.slug_of(routes.c.endpoint_id).label("endpoint"),
            )
            .join(sources, sources.c.id == routes.c.source_id)
            .order_by(routes.c.created_at)
        )
        if human_id is not None:
            stmt = stmt.where(sources.c.human_id == human_id)
        async with self.db.read() as conn:
            return list((await conn.execute(stmt)).all())


# -- statements other parts run on ``sources`` and ``routes`` ----------------------------------------
# The sources-and-routes home (tests/unit/test_sql_homes.py): each takes the caller's connection.


async def delete_source(conn: AsyncConnection, source_id: str) -> bool:
    """Delete the source row (its routes cascade; its todos stay). False: no such row."""
    return (await conn.execute(delete(sources).where(sources.c.id == source_id))).rowcount == 1


async def count_sources(
    conn: AsyncConnection, *, human_id: str | None = None, quarantined: bool = False
) -> int:
    stmt = select(func.count()).select_from(sources)
    if human_id is not None:
        stmt = stmt.where(sources.c.human_id == human_id)
    if quarantined:
        stmt = stmt.where(sources.c.quarantined.is_(True))
    return int((await conn.execute(stmt)).scalar_one())


async def count_routes(
    conn: AsyncConnection, *, source_id: str | None = None, endpoint_id: str | None = None
) -> int:
    stmt = select(func.count()).select_from(routes)
    if source_id is not None:
        stmt = stmt.where(routes.c.source_id == source_id)
    if endpoint_id is not None:
        stmt = stmt.where(routes.c.endpoint_id == endpoint_id)
    return int((await conn.execute(stmt)).scalar_one())


async def route_of_human(conn: AsyncConnection, route_id: str, human_id: str) -> bool:
    """True when the route's source belongs to this human (routes are managed by the source owner)."""
    stmt = (
        select(routes.c.id)
        .join(sources, sources.c.id == routes.c.source_id)
        .where(routes.c.id == route_id, sources.c.human_id == human_id)
    )
    return (await conn.execute(stmt)).first() is not None
