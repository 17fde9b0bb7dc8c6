"""Who may call what: bearer auth, per-verb grants re-read on every call, ownership, argument errors,
the rate limit and the body cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError
from mcp_types import INVALID_PARAMS
from sqlalchemy import func, select

from switchboard.core.clock import ManualClock
from switchboard.mcp.errors import TODO_NOT_FOUND
from switchboard.mcp.holding import LEASE_LOST
from switchboard.store.errors import StoreUnavailable
from switchboard.store.schema import todos
from tests.integration.mcp.helpers import add_todo, call, connect, refuse, sample, vend
from tests.support.secrets import reveal
from tests.support.server import Instance, make_settings, run_instance

UNKNOWN_ID = "td_01J00000000000000000000000"
NO_LEASE = "ls_" + "0" * 32  # a handle no claim answered


async def count_todos(inst: Instance) -> int:
    async with inst.services.db.read() as conn:
        return int((await conn.execute(select(func.count()).select_from(todos))).scalar_one())


def rpc(method: str, params: dict[str, Any], id_: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = rpc(
    "initialize",
    {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
)


@pytest.mark.parametrize("authorization", [None, "Bearer sbt_not-a-real-token", "Basic dXNlcjpwdw=="])
async def test_unauthenticated_requests_get_401(inst: Instance, authorization: str | None) -> None:
    await vend(inst, "agent-a")
    headers = dict(MCP_HEADERS)
    if authorization:
        headers["Authorization"] = authorization
    async with inst.client() as http:
        r = await http.post("/mcp", json=INIT, headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer") and "sbt_" not in r.text


async def test_revoked_token_is_refused_at_once(inst: Instance) -> None:
    a = await vend(inst, "agent-a")
    statuses: list[int] = []
    async with connect(inst, a.token, statuses=statuses) as client:
        await call(client, "whoami")
        await inst.services.accounts.revoke_token(a.id)
        with pytest.raises(MCPError, match="error response"):  # the SDK's view of the HTTP 401
            await client.call_tool("whoami", {})
    assert 401 in statuses


async def test_database_down_at_token_check_is_503_not_401(
    inst: Instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = await vend(inst, "agent-a")

    async def down(_token: str) -> None:
        raise StoreUnavailable("database unavailable")

    monkeypatch.setattr(inst.services.accounts, "endpoint_by_token", down)
    async with inst.client() as http:
        r = await http.post("/mcp", json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {a.token}"})
    assert r.status_code == 503 and r.json()["error"] == "unavailable"


async def test_foreign_host_header_is_refused(inst: Instance) -> None:
    a = await vend(inst, "agent-a")
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {a.token}", "Host": "evil.example:80"}
    async with inst.client() as http:
        r = await http.post("/mcp", json=INIT, headers=headers)
    assert r.status_code == 421


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_ungranted_verb_is_forbidden_and_hidden(inst: Instance, mode: Any) -> None:
    a = await vend(inst, "agent-a", verbs=["claim_next", "ack"])
    todo_id = await add_todo(inst, a)
    async with connect(inst, a.token, mode=mode) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        # the batch forms ride on their verbs' grants (switchboard.core.verbs.required_grant)
        assert names == {"claim_next", "claim_many", "ack", "ack_many", "whoami", "subscribe_doorbell"}
        code, message = await refuse(client, "claim", todo_id=todo_id)
        assert code == "forbidden" and "claim" in message
        assert (await refuse(client, "create_notify_hook", url="https://example.com"))[0] == "forbidden"
        # A tool the server does not offer at all is the spec's protocol error, not a tool result.
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_verb", {})
        assert unknown.value.error.code == INVALID_PARAMS
    row = await inst.services.todos.get(a.id, todo_id)
    assert row is not None and row.status == "pending"
    assert sample(inst, "switchboard_mcp_calls_total", verb="claim", code="forbidden") == 1
    assert sample(inst, "switchboard_mcp_calls_total", verb="unknown", code="protocol_error") == 1


async def test_scope_shrink_takes_effect_on_the_next_call(inst: Instance) -> None:
    a = await vend(inst, "agent-a", queues=["inbox", "reviews"])
    await add_todo(inst, a, queue="reviews")
    async with connect(inst, a.token) as client:
        assert (await call(client, "list_todos"))["todos"]
        await inst.services.accounts.set_scope(a.id, verbs=["claim_next"], queues=["inbox"])
        assert (await refuse(client, "list_todos"))[0] == "forbidden"
        code, message = await refuse(client, "claim_next", queues=["reviews"])
        assert code == "invalid_argument" and "reviews" in message
        assert (await call(client, "claim_next"))["todo"] is None  # the reviews todo is out of scope now
        names = {t.name for t in (await client.list_tools(cache_mode="refresh")).tools}
        assert names == {"claim_next", "claim_many", "whoami", "subscribe_doorbell"}


async def test_another_endpoints_todo_is_not_found_like_an_unknown_id(inst: Instance) -> None:
    human = await inst.services.accounts.create_human("owner@example.com", "correct-horse-battery")
    a = await vend(inst, "agent-a", human_id=human)
    b = await vend(inst, "agent-b", human_id=human)  # same human, still not b's todo
    pending = await add_todo(inst, a, "a's pending")
    held = await add_todo(inst, a, "a's claimed")
    async with connect(inst, a.token) as client_a:
        lease = (await call(client_a, "claim", todo_id=held))["todo"]["lease"]  # a's, and live
    before = {t: await inst.services.todos.get(a.id, t) for t in (pending, held)}
    async with connect(inst, b.token) as client_b:
        for todo_id in (pending, held, UNKNOWN_ID, "nonsense"):
            for verb, args in (
                ("claim", {}),
                ("heartbeat", {"lease": lease}),
                ("ack", {"lease": lease, "result": "stolen"}),
                ("fail", {"lease": lease, "error": "x", "retry": False}),
            ):
                assert await refuse(client_b, verb, todo_id=todo_id, **args) == ("not_found", TODO_NOT_FOUND)
        assert (await call(client_b, "list_todos"))["todos"] == []
    after = {t: await inst.services.todos.get(a.id, t) for t in (pending, held)}
    assert after == before


async def test_a_todo_not_held_under_the_lease_is_lease_lost(inst: Instance) -> None:
    a = await vend(inst, "agent-a")
    todo_id = await add_todo(inst, a)
    async with connect(inst, a.token) as client:
        assert await refuse(client, "ack", todo_id=todo_id, lease=NO_LEASE) == ("lease_lost", LEASE_LOST)
        assert (await refuse(client, "heartbeat", todo_id=todo_id, lease=NO_LEASE))[0] == "lease_lost"
        assert (await refuse(client, "fail", todo_id=todo_id, lease=NO_LEASE, error="x"))[0] == "lease_lost"
    row = await inst.services.todos.get(a.id, todo_id)
    assert row is not None and row.status == "pending"


@pytest.mark.parametrize(
    ("verb", "arguments", "mentions"),
    [
        ("claim_next", {"queues": ["inbox", "secret", "other"]}, "secret, other"),
        ("claim_next", {"queues": []}, "queues"),
        ("claim_next", {"lease_seconds": 0}, "lease_seconds"),
        ("claim_next", {"lease_seconds": 3601}, "lease_seconds"),
        ("claim_next", {"lease_seconds": "soon"}, "lease_seconds"),
        ("claim", {}, "todo_id"),
        ("fail", {"todo_id": UNKNOWN_ID, "lease": NO_LEASE}, "error"),
        ("fail", {"todo_id": UNKNOWN_ID, "lease": NO_LEASE, "error": ""}, "error"),
        ("ack", {"todo_id": UNKNOWN_ID}, "lease"),
        ("heartbeat", {"todo_id": UNKNOWN_ID, "lease": ""}, "lease"),
        ("list_todos", {"status": "bogus"}, "status"),
        ("list_todos", {"limit": 0}, "limit"),
        ("list_todos", {"limit": 201}, "limit"),
        ("list_todos", {"before": "yesterday"}, "before"),
        ("self_test", {"queue": "elsewhere"}, "elsewhere"),
    ],
)
async def test_bad_arguments_are_invalid_argument(
    inst: Instance, verb: str, arguments: dict[str, Any], mentions: str
) -> None:
    a = await vend(inst, "agent-a")
    async with connect(inst, a.token) as client:
        code, message = await refuse(client, verb, **arguments)
    assert code == "invalid_argument" and mentions in message
    assert await count_todos(inst) == 0


async def test_ack_result_over_64_kib_is_refused(inst: Instance) -> None:
    a = await vend(inst, "agent-a")
    todo_id = await add_todo(inst, a)
    async with connect(inst, a.token) as client:
        lease = (await call(client, "claim", todo_id=todo_id))["todo"]["lease"]
        code, message = await refuse(client, "ack", todo_id=todo_id, lease=lease, result="x" * (64 * 1024))
        assert code == "invalid_argument" and "64 KiB" in message
        row = await inst.services.todos.get(a.id, todo_id)
        assert row is not None and row.status == "claimed"
        await call(
            client, "ack", todo_id=todo_id, lease=lease, result="x" * (64 * 1024 - 2)
        )  # the quotes count


async def test_rate_limit_per_endpoint(tmp_path: Path, clock: ManualClock) -> None:
    settings = make_settings(tmp_path, mcp_rate_per_minute=3, doorbell_heartbeat_seconds=3600)
    async with run_instance(settings, clock=clock) as inst:
        a = await vend(inst, "agent-a")
        b = await vend(inst, "agent-b")
        async with connect(inst, a.token) as client_a, connect(inst, b.token) as client_b:
            for _ in range(3):
                await call(client_a, "whoami")
            code, message = await refuse(client_a, "claim_next")
            assert code == "rate_limited" and "3" in message
            await call(client_b, "whoami")  # the window is per endpoint
            clock.advance(20)  # a token bucket would give one call back here; a window gives none
            assert (await refuse(client_a, "whoami"))[0] == "rate_limited"
            clock.advance(40.001)  # the first three calls left the 60 s window: three more, no fourth
            for _ in range(3):
                await call(client_a, "whoami")
            assert (await refuse(client_a, "whoami"))[0] == "rate_limited"
        assert sample(inst, "switchboard_mcp_calls_total", verb="claim_next", code="rate_limited") == 1


async def test_body_over_1_mib_is_413_and_stores_nothing(inst: Instance) -> None:
    a = await vend(inst, "agent-a")
    statuses: list[int] = []
    async with connect(inst, a.token, statuses=statuses) as client:
        await call(client, "self_test", padding="x" * (512 * 1024))  # under the cap: stored
        assert await count_todos(inst) == 1
        with pytest.raises(
            MCPError, match="capped at 1048576 bytes"
        ):  # the boundary's 413 (switchboard.edge.boundary)
            await client.call_tool("self_test", {"padding": "x" * (1024 * 1024)})
    assert 413 in statuses
    assert await count_todos(inst) == 1


async def test_raw_oversized_post_is_413(inst: Instance) -> None:
    a = await vend(inst, "agent-a")
    body = json.dumps(rpc("tools/call", {"name": "self_test", "arguments": {"padding": "x" * (1 << 20)}}))
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {a.token}", "MCP-Protocol-Version": "2026-07-28"}
    async with inst.client() as http:
        r = await http.post("/mcp", content=body, headers=headers)
    assert r.status_code == 413
    assert await count_todos(inst) == 0


async def test_a_credential_call_reads_its_endpoint_at_most_once(
    inst: Instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verifier's read by token serves the gate too, and while nothing changed in the database a
    verified credential is not read again at all; after a change the next call reads it once, by token.
    (That a change applies to the very next call: test_scope_shrink_takes_effect_on_the_next_call,
    test_revoked_token_is_refused_at_once, test_a_rotated_token_is_refused_at_once.)"""
    a = await vend(inst, "agent-a")
    accounts = inst.services.accounts
    reads: list[str] = []
    by_token, by_id = accounts.endpoint_by_token, accounts.endpoint

    async def counted_token(token: str) -> Any:
        reads.append("token")
        return await by_token(token)

    async def counted_id(endpoint_id: str) -> Any:
        reads.append("id")
        return await by_id(endpoint_id)

    async with connect(inst, a.token) as client:
        await call(client, "whoami")
        monkeypatch.setattr(accounts, "endpoint_by_token", counted_token)
        monkeypatch.setattr(accounts, "endpoint", counted_id)
        for _ in range(5):
            await call(client, "whoami")
        cached = list(reads)
        await accounts.set_scope(a.id, verbs=["claim_next", "ack"])
        reads.clear()
        assert (await call(client, "whoami"))["verbs"] == ["ack", "claim_next"]
        after_change = list(reads)
    assert cached == [], cached
    assert after_change == ["token"], after_change


async def test_a_rotated_token_is_refused_at_once(inst: Instance) -> None:
    """Re-vending replaces the credential: the old one, verified a moment ago, gets 401 on its next
    request and the new one works (the cache holds neither past the change)."""
    a = await vend(inst, "agent-a")
    statuses: list[int] = []
    async with connect(inst, a.token, statuses=statuses) as client:
        await call(client, "whoami")
        new_token = await inst.services.accounts.revend_token(a.id)
        reveal(new_token)
        with pytest.raises(MCPError, match="error response"):
            await client.call_tool("whoami", {})
    assert 401 in statuses
    async with connect(inst, new_token) as client:
        assert (await call(client, "whoami"))["endpoint"] == "agent-a"
