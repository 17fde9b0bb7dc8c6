"""SessionCap's stream cap: an endpoint holding its cap of open streams has its oldest one ended when
another request arrives; quick requests in flight never count (the scan is skipped under the cap). It
keys on the endpoint the request authenticated as (``scope["user"]``), never on the header text; a
request without an authenticated user passes uncounted. The session cap, end to end:
tests/conformance/test_limits_by_identity.py."""

from __future__ import annotations

import asyncio

import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.edge import sessioncap
from switchboard.edge.sessioncap import SessionCap
from switchboard.mcp.auth import ENDPOINT_CLAIM, EndpointAccess, authenticated_endpoint


def _scope(endpoint: str, header: bytes | None = None) -> Scope:
    """A GET as the SDK's authentication hands it on: the verified endpoint in ``user``; the header
    text is whatever the client sent (it must not matter)."""
    access = EndpointAccess(token="t", client_id=endpoint, scopes=[], claims={ENDPOINT_CLAIM: endpoint})
    return {
        "type": "http",
        "method": "GET",
        "path": "/mcp",
        "headers": [(b"authorization", header or b"Bearer " + endpoint.encode())],
        "user": AuthenticatedUser(access),
    }


async def test_the_oldest_stream_past_the_cap_is_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessioncap, "STREAM_AGE", 0.0)  # every earlier request in flight is a stream
    ended: list[int] = []
    listening: list[asyncio.Event] = [asyncio.Event() for _ in range(3)]
    closed = asyncio.Event()

    def app_for(n: int) -> ASGIApp:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            assert (await receive())["type"] == "http.request"
            listening[n].set()
            if (await receive())["type"] == "http.disconnect":  # a stream listens until it is ended
                ended.append(n)

        return app

    def server_receive() -> Receive:  # as uvicorn: the (empty) body at once, then the hang-up
        read = False

        async def receive() -> Message:
            nonlocal read
            if not read:
                read = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await closed.wait()  # the connection stays open for the whole test
            return {"type": "http.disconnect"}

        return receive

    async def send(_message: Message) -> None:
        return None

    apps = [app_for(n) for n in range(3)]

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        await apps[scope["n"]](scope, receive, send)

    cap = SessionCap(route, authenticated_endpoint, sessions=8, streams=2)
    first = asyncio.create_task(cap({**_scope("a", b"Bearer x"), "n": 0}, server_receive(), send))
    await listening[0].wait()
    second = asyncio.create_task(cap({**_scope("a", b"bearer y"), "n": 1}, server_receive(), send))
    await listening[1].wait()
    other = asyncio.create_task(cap({**_scope("b", b"Bearer x"), "n": 2}, server_receive(), send))
    await listening[2].wait()
    assert ended == []  # two streams for "a" is its cap, one for "b": nothing ended
    apps.append(app_for(0))
    listening.append(asyncio.Event())
    # Another spelling of the header, the same endpoint: its oldest stream goes.
    third = asyncio.create_task(cap({**_scope("a", b"BEARER z"), "n": 3}, server_receive(), send))
    await asyncio.wait_for(first, 5)  # "a"'s oldest stream was told its client went away
    assert ended == [0]
    closed.set()
    await asyncio.wait_for(asyncio.gather(second, other, third), 5)


async def test_a_request_that_did_not_authenticate_is_not_counted() -> None:
    seen: list[Scope] = []

    async def app(scope: Scope, _receive: Receive, _send: Send) -> None:
        seen.append(scope)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_message: Message) -> None:
        return None

    cap = SessionCap(app, authenticated_endpoint, sessions=1, streams=1)
    scope = {**_scope("a"), "user": None}
    await cap(scope, receive, send)
    assert seen == [scope]  # handed on untouched (the SDK answers 401)
    assert cap.credentials == {}


def _initialize(endpoint: str) -> Scope:
    from switchboard.edge.boundary import PARSED_BODY

    return {**_scope(endpoint), "method": "POST", PARSED_BODY: {"method": "initialize"}}


async def test_an_endpoint_never_holds_more_sessions_than_its_cap_not_even_in_a_burst() -> None:
    """A session is closed before another opens past the cap; when every slot is an initialize still
    being answered, the next one is refused with 429 (the SDK would have opened one past the cap)."""
    release = asyncio.Event()
    ids = iter(range(100))
    live: set[str] = set()
    most = 0

    async def app(scope: Scope, _receive: Receive, send: Send) -> None:
        nonlocal most
        if scope["method"] == "DELETE":
            live.discard(dict(scope["headers"])[b"mcp-session-id"].decode())
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await release.wait()
        sid = f"s{next(ids)}"
        live.add(sid)
        most = max(most, len(live))
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"mcp-session-id", sid.encode())]}
        )
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    statuses: list[int] = []
    refused = asyncio.Event()

    def recorder() -> Send:
        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
                if statuses.count(429) == 3:
                    refused.set()

        return send

    cap = SessionCap(app, authenticated_endpoint, sessions=2, streams=8)
    burst = [asyncio.create_task(cap(_initialize("a"), receive, recorder())) for _ in range(5)]
    other = asyncio.create_task(cap(_initialize("b"), receive, recorder()))  # another endpoint's own slots
    await asyncio.wait_for(refused.wait(), 5)
    assert sorted(statuses) == [429, 429, 429]  # the two slots are initializes still being answered
    release.set()
    await asyncio.wait_for(asyncio.gather(*burst, other), 5)
    assert sorted(statuses) == [200, 200, 200, 429, 429, 429]
    for _ in range(4):  # one at a time past the cap: the oldest is closed first, each time
        await cap(_initialize("a"), receive, recorder())
    assert most <= 3 and len(cap.credentials["a"].sessions) == 2  # 2 of "a" and 1 of "b", at most
