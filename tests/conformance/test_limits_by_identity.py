"""Every per-endpoint limit keys on the endpoint the request authenticated as, never on the text of its
``Authorization`` header (issue 28, item 6; docs/mcp.md "Limits key on identity", docs/a2a.md).

The hole this closes, measured with a held-out hostile client: the MCP session cap keyed on the *last*
``Authorization`` header and on its raw text, while the bearer check read the *first* one and matched
``Bearer`` in any case. One endpoint with one valid token (a random second header, or another case of
``Bearer`` on each ``initialize``) was a new "credential" every time and filled the instance's session
cap, and another tenant's ``initialize`` got 503 ``Too many open sessions``.

The server has the default settings but for small limits, so a few requests reach them: 8 sessions for
the instance, 2 sessions and 2 streams per endpoint, 8 MCP tool calls and 6 A2A calls per endpoint per
minute, 2 A2A streams per endpoint. Every test vends endpoints of its own, so the per-endpoint windows never meet across tests. The
hostile client is plain httpx (the SDK clients send one well-formed header); the victim is the official
MCP SDK client or a2a-sdk's spelling of a raw JSON-RPC call.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost

from switchboard.core.verbs import A2A
from switchboard.mcp.doorbell import doorbell_uri
from tests.conformance.harness import Conf, ServerSpec, tenant, unique, wait_until
from tests.support.mcp_client import agent

SESSIONS_PER_ENDPOINT = 2
# Every way of writing one bearer token that RFC 6750 and RFC 9110 allow (the scheme in any case, one
# or more spaces or tabs before the token): each is the same endpoint.
SPELLINGS = ("Bearer {}", "bearer {}", "BEARER {}", "BeArEr {}", "Bearer   {}", "bEARER \t {}")
# Under the old keying (one "credential" per header text) each spelling held 2 sessions: exactly the
# instance's cap, so the next tenant's initialize got 503.
MAX_SESSIONS = len(SPELLINGS) * SESSIONS_PER_ENDPOINT
MCP_RATE = 8
A2A_RATE = 6
A2A_STREAMS = 2

SERVER = ServerSpec(
    "limits-identity",
    {
        "mcp_max_sessions": MAX_SESSIONS,
        "mcp_sessions_per_endpoint": SESSIONS_PER_ENDPOINT,
        "mcp_streams_per_endpoint": 2,
        "mcp_rate_per_minute": MCP_RATE,
        "a2a_rate_per_minute": A2A_RATE,
        "a2a_streams_per_endpoint": A2A_STREAMS,
    },
    humans=("alice", "bob"),
)

PROTOCOL = "2025-11-25"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "h", "version": "1"}},
}
ACCEPT = "application/json, text/event-stream"
OPENED: list[tuple[str, str]] = []  # (session id, authorization) of every raw session, closed after each test


@pytest.fixture(autouse=True)
async def close_sessions(conf: Conf) -> AsyncIterator[None]:
    """The instance's cap is shared by the module's tests: each closes the sessions it opened."""
    yield
    async with conf.http() as http:
        while OPENED:
            sid, authorization = OPENED.pop()
            await http.delete("/mcp", headers={"mcp-session-id": sid, "authorization": authorization})


def fake_token() -> str:
    return "sbt_" + secrets.token_urlsafe(24)


async def vend(conf: Conf, verbs: Sequence[str], who: str = "alice") -> str:
    async with conf.human(who) as person:
        return await person.vend(unique("lim"), ("inbox",), verbs)


def auth(*values: str) -> list[tuple[str, str]]:
    return [("authorization", v) for v in values]


async def initialize(http: httpx.AsyncClient, *authorization: str) -> httpx.Response:
    r = await http.post("/mcp", json=INIT, headers=[("accept", ACCEPT), *auth(*authorization)])
    if "mcp-session-id" in r.headers:
        OPENED.append((r.headers["mcp-session-id"], authorization[0]))
    return r


async def rpc(
    http: httpx.AsyncClient, sid: str, method: str, params: dict[str, Any] | None, *authorization: str
) -> httpx.Response:
    """One request on a session (a notification when ``method`` starts with ``notifications/``)."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if not method.startswith("notifications/"):
        body["id"] = 2
    if params is not None:
        body["params"] = params
    headers = [
        ("accept", ACCEPT),
        ("mcp-session-id", sid),
        ("mcp-protocol-version", PROTOCOL),
        *auth(*authorization),
    ]
    return await http.post("/mcp", json=body, headers=headers)


async def session(http: httpx.AsyncClient, authorization: str) -> str:
    opened = await initialize(http, authorization)
    assert opened.status_code == 200, opened.text
    sid = opened.headers["mcp-session-id"]
    done = await rpc(http, sid, "notifications/initialized", None, authorization)
    assert done.status_code == 202, done.text
    return sid


def tool_result(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    data: dict[str, Any] = result.get("structuredContent") or json.loads(result["content"][0]["text"])
    return {"is_error": bool(result.get("isError")), **data}


def assert_refused_duplicate(r: httpx.Response) -> None:
    assert r.status_code == 400, (r.status_code, r.text)
    assert r.json()["error"] == "invalid_request"
    assert "more than one" in r.json()["error_description"]
    assert "mcp-session-id" not in r.headers


# -- two Authorization headers: 400 on every face, nothing opened or counted --------------------------


async def test_two_authorization_headers_get_400_on_every_face_and_open_nothing(conf: Conf) -> None:
    greedy = await vend(conf, ["claim_next"])
    sender = await vend(conf, A2A.verbs)
    valid = f"Bearer {greedy}"
    async with conf.http() as http:
        # MCP: first valid, second random (the measured attack); the other way round; both valid.
        for pair in ((valid, f"Bearer {fake_token()}"), (f"Bearer {fake_token()}", valid), (valid, valid)):
            assert_refused_duplicate(await initialize(http, *pair))
        # Far more of them than the instance holds sessions: none opened one, so the endpoint still
        # opens its own and another endpoint's initialize is answered.
        refused = await asyncio.gather(
            *(initialize(http, valid, f"bearer {fake_token()}") for _ in range(3 * MAX_SESSIONS))
        )
        for r in refused:
            assert_refused_duplicate(r)
        assert (await initialize(http, valid)).status_code == 200
        # A2A: the same refusal, before authentication, rate or dispatch.
        a2a = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        r = await http.post(
            "/a2a", json=a2a, headers=[("a2a-version", "1.0"), *auth(f"Bearer {sender}", "Bearer x")]
        )
        assert_refused_duplicate(r)
        # The OAuth token endpoint (client credentials may come as Basic) and any other path.
        r = await http.post(
            "/token",
            data={"grant_type": "refresh_token", "refresh_token": "x"},
            headers=auth("Basic YTpi", "Basic Yzpk"),
        )
        assert_refused_duplicate(r)
        assert_refused_duplicate(await http.get("/healthz", headers=auth(valid, valid)))
    async with agent(conf.mcp_url, await vend(conf, ["claim_next"], "bob")) as other:
        assert (await other.ok("claim_next"))["todo"] is None


async def test_two_authorization_headers_on_ingest_store_nothing(conf: Conf) -> None:
    async with conf.human("alice") as person:
        slug = unique("ing")
        token = await person.vend(slug, ("inbox",), ["claim_next", "list_todos"])
        path, _ = await person.source(f"{slug}-src", "generic", "token")
        await person.route(f"{slug}-src", "inbox", slug)
    async with conf.http() as http:
        r = await http.post(path, json={"title": "twice"}, headers=auth("Bearer a", "Bearer b"))
        assert_refused_duplicate(r)
    async with agent(conf.mcp_url, token) as a:
        assert (await a.ok("list_todos"))["todos"] == []


# -- sessions: every spelling of Bearer is one endpoint ----------------------------------------------


async def test_no_spelling_of_bearer_lets_one_endpoint_fill_the_instance(conf: Conf) -> None:
    greedy = await vend(conf, ["claim_next"])
    victim = await vend(conf, ["claim_next"], "bob")
    async with conf.http() as http:
        # Three times the instance's cap, each spelling in turn: one endpoint, so at most its 2 sessions.
        sids = []
        for n in range(3 * MAX_SESSIONS):
            r = await initialize(http, SPELLINGS[n % len(SPELLINGS)].format(greedy))
            assert r.status_code == 200, (n, r.status_code, r.text)
            sids.append(r.headers["mcp-session-id"])
        # The newest sessions work, whichever spelling asks; an older one was closed for the cap.
        for sid in sids[-SESSIONS_PER_ENDPOINT:]:
            await rpc(http, sid, "notifications/initialized", None, f"BEARER {greedy}")
            assert (await rpc(http, sid, "ping", None, f"bearer {greedy}")).status_code == 200
        assert (await rpc(http, sids[0], "ping", None, f"Bearer {greedy}")).status_code == 404

        # The same at once, while the other endpoint opens sessions: none of its initializes fails.
        async def greedy_burst() -> list[int]:
            burst = await asyncio.gather(
                *(initialize(http, SPELLINGS[n % len(SPELLINGS)].format(greedy)) for n in range(24))
            )
            return [r.status_code for r in burst]

        async def victim_opens() -> list[int]:
            return [(await initialize(http, f"Bearer {victim}")).status_code for _ in range(4)]

        statuses, mine = await asyncio.gather(greedy_burst(), victim_opens())
        # An initialize that finds every one of its endpoint's slots opening at that moment is told to
        # retry (429); none is refused for the instance's cap (503).
        assert set(statuses) <= {200, 429} and 200 in statuses, statuses
        assert mine == [200] * 4
    async with agent(conf.mcp_url, victim) as other:
        assert (await other.ok("claim_next"))["todo"] is None


# -- rate windows: keyed on the endpoint, and only what authenticated counts ---------------------------


async def test_the_mcp_rate_is_the_endpoints_whatever_the_spelling(conf: Conf) -> None:
    greedy = await vend(conf, ["claim_next"])
    victim = await vend(conf, ["claim_next"], "bob")
    call = {"name": "claim_next", "arguments": {}}
    async with conf.http() as http:
        sid = await session(http, f"Bearer {greedy}")
        answers = [
            tool_result(
                await rpc(http, sid, "tools/call", call, SPELLINGS[n % len(SPELLINGS)].format(greedy))
            )
            for n in range(MCP_RATE + 1)
        ]
        assert [a["is_error"] for a in answers] == [False] * MCP_RATE + [True]
        assert answers[-1]["code"] == "rate_limited"
        # Requests that did not authenticate as the victim count against nobody: the victim's token as a
        # second header (refused 400), a wrong token in the victim's spelling (401).
        victim_sid = await session(http, f"Bearer {victim}")
        for _ in range(2 * MCP_RATE):
            r = await rpc(http, victim_sid, "tools/call", call, f"Bearer {greedy}", f"Bearer {victim}")
            assert r.status_code == 400
            r = await rpc(http, victim_sid, "tools/call", call, f"Bearer {fake_token()}")
            assert r.status_code == 401
    # The victim has its whole minute: MCP_RATE calls, through the SDK client.
    async with agent(conf.mcp_url, victim) as other:
        for _ in range(MCP_RATE):
            assert (await other.ok("claim_next"))["todo"] is None


async def test_the_a2a_rate_is_the_endpoints_whatever_the_spelling(conf: Conf) -> None:
    greedy = await vend(conf, A2A.verbs)
    victim = await vend(conf, A2A.verbs, "bob")
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    version = [("a2a-version", "1.0")]
    async with conf.http() as http:

        async def call(*authorization: str) -> httpx.Response:
            return await http.post("/a2a", json=body, headers=[*version, *auth(*authorization)])

        statuses = [
            (await call(SPELLINGS[n % len(SPELLINGS)].format(greedy))).status_code
            for n in range(A2A_RATE + 1)
        ]
        assert statuses == [200] * A2A_RATE + [429]
        for _ in range(2 * A2A_RATE):  # nothing here authenticates as the victim: none of it counts
            assert (await call(f"Bearer {greedy}", f"Bearer {victim}")).status_code == 400
            assert (await call(f"Bearer {victim}", f"Bearer {victim}")).status_code == 400
            assert (await call(f"BEARER {fake_token()}")).status_code == 401
        for n in range(A2A_RATE):  # the victim's whole window, in any spelling
            r = await call(SPELLINGS[n % len(SPELLINGS)].format(victim))
            assert r.status_code == 200, r.text
            assert "result" in r.json(), r.text


# -- streams: every spelling counts toward the one endpoint's streams ------------------------------------


async def test_streams_are_counted_per_endpoint_whatever_the_spelling(conf: Conf) -> None:
    """Two GET streams of one endpoint (its cap), opened with different spellings, then a request in a
    third: the endpoint's oldest stream is ended. The other endpoint's stream, opened first, stays."""
    greedy = await vend(conf, ["claim_next"])
    victim = await vend(conf, ["claim_next"], "bob")
    async with httpx.AsyncClient(base_url=conf.base_url, timeout=httpx.Timeout(60, read=None)) as http:
        victim_sid = await session(http, f"Bearer {victim}")
        sids = [await session(http, f"Bearer {greedy}"), await session(http, f"BEARER {greedy}")]
        ended: dict[str, asyncio.Event] = {}
        opened: dict[str, asyncio.Event] = {}

        async def stream(sid: str, authorization: str) -> None:
            headers = [
                ("accept", "text/event-stream"),
                ("mcp-session-id", sid),
                ("mcp-protocol-version", PROTOCOL),
                *auth(authorization),
            ]
            async with http.stream("GET", "/mcp", headers=headers) as r:
                assert r.status_code == 200
                opened[sid].set()
                async for _ in r.aiter_bytes():  # ends cleanly: an incomplete body raises here
                    pass
            ended[sid].set()

        tasks = []
        for sid, authorization in (
            (victim_sid, f"Bearer {victim}"),
            (sids[0], f"bearer {greedy}"),
            (sids[1], f"BeArEr {greedy}"),
        ):
            opened[sid], ended[sid] = asyncio.Event(), asyncio.Event()
            tasks.append(asyncio.create_task(stream(sid, authorization)))
            await asyncio.wait_for(opened[sid].wait(), 15)
        try:
            await asyncio.sleep(5.5)  # a request open longer than 5 s is a stream (sessioncap.STREAM_AGE)
            assert (await rpc(http, sids[1], "ping", None, f"Bearer   {greedy}")).status_code == 200
            await asyncio.wait_for(ended[sids[0]].wait(), 15)  # the endpoint's oldest stream
            assert not ended[sids[1]].is_set()
            # The victim's stream, older than both, was not the one ended, and its session answers.
            assert (await rpc(http, victim_sid, "ping", None, f"Bearer {victim}")).status_code == 200
            assert not ended[victim_sid].is_set()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_listen_streams_are_counted_per_endpoint_whatever_the_spelling(conf: Conf) -> None:
    """2026-07-28 ``subscriptions/listen`` streams through the official SDK client: two of one endpoint
    (its cap), each client with another spelling of ``Bearer``, then a call from a third: the endpoint's
    oldest listen ends (the SDK client raises ``SubscriptionLost``: re-listen and refetch). Another
    endpoint's listen, opened first, still hears its doorbell."""
    greedy_slug = unique("lim")
    async with conf.human("alice") as person:
        greedy = await person.vend(greedy_slug, ("inbox",), ["claim_next"])
    async with tenant(conf, who="bob", verbs=["claim_next"]) as victim:
        heard: dict[str, list[Any]] = {}
        opened: dict[str, asyncio.Event] = {}
        ended: dict[str, asyncio.Event] = {}

        async def listener(name: str, authorization: str, uri: str) -> None:
            try:
                async with (
                    httpx2.AsyncClient(headers={"Authorization": authorization}, timeout=60) as http,
                    Client(streamable_http_client(conf.mcp_url, http_client=http)) as client,
                    client.listen(resource_subscriptions=[uri]) as sub,
                ):
                    opened[name].set()
                    async for event in sub:
                        heard[name].append(event)
            except* SubscriptionLost:  # what the SDK client says of a listen the cap ended: re-listen
                pass
            ended[name].set()

        listeners = (
            ("victim", f"Bearer {victim.token}", doorbell_uri(victim.slug)),
            ("first", f"bearer {greedy}", doorbell_uri(greedy_slug)),
            ("second", f"BEARER   {greedy}", doorbell_uri(greedy_slug)),
        )
        tasks = []
        for name, authorization, uri in listeners:
            heard[name], opened[name], ended[name] = [], asyncio.Event(), asyncio.Event()
            tasks.append(asyncio.create_task(listener(name, authorization, uri)))
            await asyncio.wait_for(opened[name].wait(), 30)
        try:
            await asyncio.sleep(5.5)  # a request open longer than 5 s is a stream (sessioncap.STREAM_AGE)
            async with agent(conf.mcp_url, greedy) as third:
                assert (await third.ok("claim_next"))["todo"] is None
            await asyncio.wait_for(ended["first"].wait(), 15)  # the endpoint's oldest listen
            assert not ended["second"].is_set() and not ended["victim"].is_set()
            todo_id = await victim.todo("the victim still hears its doorbell")
            await wait_until(lambda: heard["victim"], timeout=15, what="the victim's ring")
            assert not ended["victim"].is_set(), todo_id
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_a2a_streams_are_counted_per_endpoint_whatever_the_spelling(conf: Conf) -> None:
    """One endpoint's two A2A streams (its cap), opened with different spellings of ``Bearer``, then a
    third: that endpoint's oldest stream ends cleanly (its SSE body closed, not the connection cut) and
    the other two stay open. The other endpoint's stream, opened first, is never touched."""
    queue = unique("streams")  # drained by one endpoint of each human: a message names no endpoint
    async with conf.human("alice") as alice:
        greedy = await alice.vend(unique("lim"), (queue,), A2A.verbs)
    async with conf.human("bob") as bob:
        victim = await bob.vend(unique("lim"), (queue,), A2A.verbs)
    version = [("a2a-version", "1.0"), ("accept", "text/event-stream")]
    opened: dict[str, asyncio.Event] = {}
    ended: dict[str, asyncio.Event] = {}
    async with httpx.AsyncClient(base_url=conf.base_url, timeout=httpx.Timeout(60, read=None)) as http:

        async def stream(name: str, authorization: str) -> None:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendStreamingMessage",
                "params": {
                    "message": {
                        "messageId": unique(f"m-{name}"),
                        "role": "ROLE_USER",
                        "parts": [{"text": f"stream {name}"}],
                        "metadata": {"queue": queue},
                    }
                },
            }
            async with http.stream("POST", "/a2a", json=body, headers=[*version, *auth(authorization)]) as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                async for line in r.aiter_lines():  # ends cleanly: an incomplete body raises here
                    if line.startswith("data:") and not opened[name].is_set():
                        assert (
                            json.loads(line[5:])["result"]["task"]["status"]["state"]
                            == "TASK_STATE_SUBMITTED"
                        )
                        opened[name].set()
            ended[name].set()

        tasks = []
        for name, authorization in (
            ("victim", f"Bearer {victim}"),
            ("first", f"bearer {greedy}"),
            ("second", f"BEARER {greedy}"),
            ("third", f"BeArEr   {greedy}"),
        ):
            if name == "third":  # the endpoint's two and the other's one: all open, none ended
                assert not any(e.is_set() for e in ended.values())
            opened[name], ended[name] = asyncio.Event(), asyncio.Event()
            tasks.append(asyncio.create_task(stream(name, authorization)))
            await asyncio.wait_for(opened[name].wait(), 15)
        try:
            await asyncio.wait_for(ended["first"].wait(), 15)  # the endpoint's oldest stream
            for name in ("victim", "second", "third"):
                assert not ended[name].is_set(), name
                assert not tasks[["victim", "first", "second", "third"].index(name)].done(), name
            closed = "a2a streams closed: too many open for one endpoint"
            await conf.wait_lines(closed, streams=A2A_STREAMS)
        finally:
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        assert results[1] is None  # the ended stream's task finished without an error
