"""Two ``switchboard serve`` instances on one PostgreSQL database as one system (issue 18, "The cluster as
one system"): a todo created through instance A rings a session on instance B at once (the cluster
relay, store/relay.py), and one hook's 120 notifications per minute hold for the cluster, not per
instance (store/windows.py).

Both servers run with a doorbell heartbeat of an hour, so a ring within the test's bound can only come
from the relay, never from the heartbeat that used to be the only path between instances."""

from __future__ import annotations

import asyncio
import json
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

from switchboard.mcp.auth import VERIFIED_TTL
from tests.conformance.conftest import _checked
from tests.conformance.harness import (
    FLEET,
    HOOK_VERBS,
    Conf,
    Metrics,
    ServerSpec,
    delta,
    ip_url,
    receiver,
    tenant,
    wait_until,
)
from tests.support.pg import PostgresServer

COMMON = {"notify_hook_allow_cidrs": "127.0.0.1/32", "doorbell_heartbeat_seconds": 3600}
ONE = ServerSpec("cluster-one", COMMON, humans=("alice",))
TWO = ServerSpec("cluster-two", COMMON, humans=())
RINGS = 200
P99_BOUND = 0.100  # seconds: issue 18, "within 100 ms (p99)"
NOTIFIED = "switchboard_notify_hook_notifications_total"


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


@pytest.mark.alone  # a 100 ms p99: run with the machine to itself (scripts/test)
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


def most_in_any_window(times: list[float], window: float) -> int:
    """The largest number of ``times`` inside any closed interval of ``window`` seconds."""
    ordered = sorted(times)
    most, first = 0, 0
    for last, t in enumerate(ordered):
        while t - ordered[first] > window:
            first += 1
        most = max(most, last - first + 1)
    return most


async def test_two_instances_one_hook_no_60_second_window_holds_more_than_120(
    cluster: tuple[Conf, Conf],
) -> None:
    """The spec's own numbers (default settings, 120 in any 60 s): 200 todos for one hook, half through
    each instance, all within one minute. Each instance alone would send its 100; the cluster sends
    120 and drops the rest."""
    one, two = cluster
    before = [await conf.metrics() for conf in (one, two)]
    started = time.monotonic()
    async with receiver() as rcv, tenant(one) as a:
        await a.hook(ip_url(rcv))
        path = a.inbound["inbox"]

        async def burst(conf: Conf, count: int) -> None:
            async with conf.http() as http:

                async def post(i: int) -> None:
                    r = await http.post(path, json={"title": f"{conf.spec.name} {i}"})
                    assert r.status_code == 202, r.text

                for start in range(0, count, 16):
                    await asyncio.gather(*(post(i) for i in range(start, min(count, start + 16))))

        await asyncio.gather(burst(one, 100), burst(two, 100))

        async def accounted() -> list[Metrics]:
            now = [await conf.metrics() for conf in (one, two)]
            done = sum(
                delta(after, earlier, NOTIFIED, type="todo.ready", outcome=outcome)
                for after, earlier in zip(now, before, strict=True)
                for outcome in ("delivered", "dropped", "failed")
            )
            return now if done >= 200 else []

        left = 58 - (time.monotonic() - started)  # the whole run must fit in one 60 s window
        after = await wait_until(accounted, timeout=left, what="every notification delivered or dropped")
        elapsed = time.monotonic() - started
    assert elapsed < 60  # every request below lies in one 60-second window, as the spec's window
    first_arrival: dict[str, float] = {}
    for request, at in zip(rcv.requests, rcv.arrived, strict=True):
        first_arrival.setdefault(request.header("webhook-id") or "", at)
    assert most_in_any_window(list(first_arrival.values()), 60.0) <= 120
    assert len(first_arrival) == 120  # the window is full, not split: the cluster's 120 went out
    delivered = [
        delta(x, b, NOTIFIED, type="todo.ready", outcome="delivered")
        for x, b in zip(after, before, strict=True)
    ]
    dropped = [
        delta(x, b, NOTIFIED, type="todo.ready", outcome="dropped")
        for x, b in zip(after, before, strict=True)
    ]
    assert sum(delivered) == 120 and sum(dropped) == 80, (delivered, dropped)
    assert all(d > 0 for d in dropped)  # both instances held to the one window
    assert all(d > 0 for d in delivered)


async def test_two_instances_one_hook_hold_its_own_lower_limit_together(cluster: tuple[Conf, Conf]) -> None:
    """Issue 29: a hook whose endpoint set 10 a minute. 30 todos, half through each instance, within one
    minute: each instance alone would send 10; the cluster sends 10 and drops 20."""
    one, two = cluster
    before = [await conf.metrics() for conf in (one, two)]
    started = time.monotonic()
    async with receiver() as rcv, tenant(one) as a:
        hook = await a.hook(ip_url(rcv), rate_per_minute=10)
        assert hook["rate_per_minute"] == 10
        path = a.inbound["inbox"]

        async def burst(conf: Conf, count: int) -> None:
            async with conf.http() as http:
                for i in range(count):
                    r = await http.post(path, json={"title": f"{conf.spec.name} limited {i}"})
                    assert r.status_code == 202, r.text

        await asyncio.gather(burst(one, 15), burst(two, 15))

        async def accounted() -> list[Metrics]:
            now = [await conf.metrics() for conf in (one, two)]
            done = sum(
                delta(after, earlier, NOTIFIED, type="todo.ready", outcome=outcome)
                for after, earlier in zip(now, before, strict=True)
                for outcome in ("delivered", "dropped", "failed")
            )
            return now if done >= 30 else []

        left = 58 - (time.monotonic() - started)
        after = await wait_until(accounted, timeout=left, what="every notification delivered or dropped")
    assert time.monotonic() - started < 60  # every request lies in one 60-second window
    assert len({r.header("webhook-id") for r in rcv.requests}) == 10
    delivered = [
        delta(x, b, NOTIFIED, type="todo.ready", outcome="delivered")
        for x, b in zip(after, before, strict=True)
    ]
    dropped = [
        delta(x, b, NOTIFIED, type="todo.ready", outcome="dropped")
        for x, b in zip(after, before, strict=True)
    ]
    assert sum(delivered) == 10 and sum(dropped) == 20, (delivered, dropped)
    assert all(d > 0 for d in dropped)  # both instances held to the hook's one window


async def test_two_instances_one_endpoint_share_the_mcp_call_limit(cluster: tuple[Conf, Conf]) -> None:
    """600 calls per endpoint in any 60 s (the default), for the cluster: 800 calls, half through each
    instance, inside one minute. Each instance alone would answer its 400; the cluster answers at most
    600 and refuses the rest with rate_limited."""
    one, two = cluster
    started = time.monotonic()
    async with tenant(one) as a, client_on(two, a.token) as via_two:
        codes: list[str] = []

        async def caller(call: Any, count: int) -> None:
            for _ in range(count):
                result = await call("whoami", {})
                if result.is_error:
                    body = json.loads(result.content[0].text)
                    codes.append(str(body["code"]))
                else:
                    codes.append("ok")

        on_one = a.agent.client.call_tool
        on_two = via_two.call_tool
        await asyncio.gather(*(caller(on_one if i % 2 else on_two, 100) for i in range(8)))
    elapsed = time.monotonic() - started
    assert elapsed < 60  # every call in one 60 s window
    ok = codes.count("ok")
    print(f"MCP calls answered across the cluster: {ok} of 800 in {elapsed:.1f} s")
    assert len(codes) == 800 and set(codes) <= {"ok", "rate_limited"}, set(codes)
    # At most 600. A lease left unused when the window fills is lost (never more than a chunk, a tenth
    # of the limit, per instance), so at least 600 - 2 x 60 went through.
    assert 480 <= ok <= 600, ok


@pytest.mark.alone  # a bound under the credential cache's 2 s: run with the machine to itself
async def test_a_scope_change_through_one_instance_applies_on_the_other_before_its_cache_runs_out(
    cluster: tuple[Conf, Conf],
) -> None:
    """Instance two answers a verified credential from its cache for up to VERIFIED_TTL (2 s). A scope
    change made through instance one's web UI must not wait for that: the write's pg_notify reaches two
    over the cluster relay and makes its cached row stale, so two's next call sees the new scope."""
    one, two = cluster
    name, label = "switchboard_cluster_relay_events_total", "endpoint_changed"
    async with tenant(one) as a, client_on(two, a.token) as on_two:

        async def rescope(queues: str) -> None:
            r = await a.human.post(
                f"/endpoints/{a.slug}/scope", {"queues": queues, "verbs": list(HOOK_VERBS)}
            )
            assert r.status_code in (200, 303), r.text[-300:]

        async def relayed(since: Metrics) -> bool:
            return delta(await two.metrics(), since, name, result=label) >= 1

        async def queues_on_two() -> list[str]:
            answer = await on_two.call_tool("whoami", {})
            assert not answer.is_error and answer.structured_content is not None
            return list(answer.structured_content["queues"])

        before = await two.metrics()
        await rescope("inbox,first")
        await wait_until(lambda: relayed(before), timeout=10, what="the scope change relayed to two")
        # Two's cached row is stale now, so this whoami verifies afresh: its cache entry is younger
        # than cached_at and would be trusted until cached_at + VERIFIED_TTL at the earliest.
        cached_at = time.monotonic()
        assert await queues_on_two() == ["first", "inbox"]
        await rescope("inbox,second")
        while (seen := await queues_on_two()) != ["inbox", "second"]:
            elapsed = time.monotonic() - cached_at
            assert elapsed < VERIFIED_TTL, f"two answered {seen} from its cache for {elapsed:.2f} s"
            await asyncio.sleep(0.02)  # another process's state: nothing here to await
        assert time.monotonic() - cached_at < VERIFIED_TTL
