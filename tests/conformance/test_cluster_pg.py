"""Two ``switchboard serve`` instances on one PostgreSQL database as one system (issue 18, "The cluster as
one system"): a todo created through instance A rings a session on instance B at once (the cluster
relay, store/relay.py), and one hook's 120 notifications per minute hold for the cluster, not per
instance (store/windows.py).

Both servers run with a doorbell heartbeat of an hour, so a ring within the test's bound can only come
from the relay, never from the heartbeat that used to be the only path between instances."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ResourceUpdatedNotification

from tests.conformance.conftest import _checked
from tests.conformance.harness import FLEET, Conf, ServerSpec, tenant
from tests.support.pg import PostgresServer

COMMON = {"notify_hook_allow_cidrs": "127.0.0.1/32", "doorbell_heartbeat_seconds": 3600}
ONE = ServerSpec("cluster-one", COMMON, humans=("alice",))
TWO = ServerSpec("cluster-two", COMMON, humans=())
RINGS = 200
P99_BOUND = 0.100  # seconds: issue 18, "within 100 ms (p99)"


@pytest.fixture(scope="module")
def cluster(pg_server: PostgresServer) -> Iterator[tuple[Conf, Conf]]:
    url = pg_server.create_database(f"cluster_{uuid.uuid4().hex[:10]}")
    first = FLEET.prestart(ONE, url)
    assert first.migrated.wait(timeout=120)  # the schema is current before the second instance starts
    FLEET.prestart(TWO, url)
    one, two = FLEET.get(ONE, url), FLEET.get(TWO, url)
    yield one, two
    for conf, spec in ((one, ONE), (two, TWO)):
        _checked(conf)
        FLEET.release(spec)


@asynccontextmanager
async def client_on(conf: Conf, token: str, **kwargs: Any) -> AsyncIterator[Client]:
    """An official SDK client in a task of its own (its anyio scopes must be left by that task)."""
    ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    hooks = kwargs.pop("response_hooks", [])

    async def own() -> None:
        try:
            async with (
                httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {token}"}, timeout=30, event_hooks={"response": hooks}
                ) as http,
                Client(streamable_http_client(conf.mcp_url, http_client=http), **kwargs) as client,
            ):
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
                return
            raise

    task = asyncio.create_task(own())
    try:
        yield await ready
    finally:
        stop.set()
        await task


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def test_a_todo_created_through_a_rings_a_session_on_b_within_100_ms(
    cluster: tuple[Conf, Conf],
) -> None:
    one, two = cluster
    legacy_rings: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
    stream_open = asyncio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            meta = (message.params.meta or {}).get("switchboard/doorbell") or {}
            legacy_rings.put_nowait((time.time(), str(meta.get("todo_id"))))

    async def on_response(response: httpx2.Response) -> None:
        if response.request.method == "GET" and response.status_code == 200:
            stream_open.set()  # the legacy session's GET stream: rings sent before it opens are lost

    modern_rung: dict[str, float] = {}
    legacy_rung: dict[str, float] = {}
    sent: dict[str, float] = {}
    async with tenant(one) as a:
        uri = f"switchboard://endpoints/{a.slug}/todos"
        async with (
            client_on(two, a.token) as modern,
            modern.listen(resource_subscriptions=[uri]) as sub,
            client_on(
                two, a.token, mode="legacy", message_handler=on_message, response_hooks=[on_response]
            ) as legacy,
        ):
            await asyncio.wait_for(stream_open.wait(), 30)
            await legacy.list_tools()  # the session is registered with B's doorbell
            events = aiter(sub)
            async with one.http() as http:
                for i in range(RINGS):  # one at a time, so each ring is this todo's
                    started = time.time()
                    r = await http.post(a.inbound["inbox"], json={"title": f"ring {i}"})
                    assert r.status_code == 202, r.text
                    (todo_id,) = r.json()["todos"]
                    sent[todo_id] = started
                    event = await asyncio.wait_for(anext(events), 10)
                    modern_rung[todo_id] = time.time()
                    assert event.uri == uri  # type: ignore[union-attr]
                    at, rung = await asyncio.wait_for(legacy_rings.get(), 10)
                    assert rung == todo_id  # one ring per todo, in order: none came from elsewhere
                    legacy_rung[todo_id] = at
        listed = (await a.ok("list_todos", {"status": "pending", "limit": RINGS}))["todos"]
    # The todo's created_at is stamped by A before its INSERT commits (same host, same clock as this
    # test); the ring is timed when the client on B has it.
    created = {
        t["id"]: datetime.fromisoformat(t["created_at"].replace("Z", "+00:00")).timestamp() for t in listed
    }
    assert set(created) == set(sent)
    modern_latency = [modern_rung[t] - created[t] for t in sent]
    legacy_latency = [legacy_rung[t] - created[t] for t in sent]
    end_to_end = [legacy_rung[t] - sent[t] for t in sent]  # includes A's ingest: reported, not bounded
    print(
        f"ring on B after the todo's creation on A: p99 modern {p99(modern_latency) * 1000:.1f} ms, legacy "
        f"{p99(legacy_latency) * 1000:.1f} ms, p50 legacy {sorted(legacy_latency)[RINGS // 2] * 1000:.1f} ms; webhook sent to ring p99 {p99(end_to_end) * 1000:.1f} ms"
    )
    assert p99(modern_latency) < P99_BOUND, f"modern p99 {p99(modern_latency) * 1000:.1f} ms"
    assert p99(legacy_latency) < P99_BOUND, f"legacy p99 {p99(legacy_latency) * 1000:.1f} ms"
    metrics = await two.metrics()
    assert metrics.get("switchboard_cluster_relay_events_total", result="received") >= RINGS
    assert metrics.get("switchboard_cluster_relay_connected") == 1.0
