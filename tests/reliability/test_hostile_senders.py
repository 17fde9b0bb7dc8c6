"""Issue 8, hostile senders: Hypothesis throws arbitrary bodies and headers at the inbound endpoint and
arbitrary arguments at every MCP verb. Never a 500 or an unstructured error, never a partial write, and
a forged signature never becomes push-eligible."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import MCPError
from mcp_types import INVALID_PARAMS
from sqlalchemy import func, select

from switchboard.core.clock import ManualClock
from switchboard.core.verbs import ALL_VERBS
from switchboard.mcp.server import McpSurface
from switchboard.store.schema import todos
from tests.support.mcp_client import Agent, agent
from tests.support.receivers import StaticResolver
from tests.support.server import Instance, make_settings, run_instance
from tests.support.world import World, make_world

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
ALLOWED_STATUSES = {202, 400, 401, 404, 413, 429}
MCP_CODES = {
    "forbidden",
    "not_found",
    "invalid_argument",
    "rate_limited",
    "unavailable",
    "conflict",
    "ceiling_exceeded",
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
header_names = st.sampled_from(
    [
        "x-gitea-signature",
        "x-gitea-event",
        "x-gitea-delivery",
        "x-hub-signature-256",
        "x-github-event",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "content-type",
        "idempotency-key",
        "x-event-type",
    ]
)
header_values = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=80)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(lambda t: json.dumps({"title": t, "action": "opened"}).encode(), st.text(max_size=200)),
)


class Worlds:
    def __init__(self, inst: Instance, signed: World, none: World, token: World, standard: World) -> None:
        self.inst, self.signed, self.none, self.token, self.standard = inst, signed, none, token, standard


@pytest.fixture
async def worlds(tmp_path: Path) -> AsyncIterator[Worlds]:
    # Ceiling 0: fuzzed notify-hook URLs never get stored, so nothing can ever be dialled.
    settings_ = make_settings(tmp_path, notify_hook_ceiling=0)
    async with run_instance(settings_, clock=ManualClock(), resolver=StaticResolver()) as inst:
        all_verbs = sorted(ALL_VERBS)
        yield Worlds(
            inst,
            await make_world(inst, slug="signed", kind="gitea", trust="signature", verbs=all_verbs),
            await make_world(inst, slug="unsigned", kind="github", trust="none"),
            await make_world(inst, slug="tokened", kind="generic", trust="token"),
            await make_world(inst, slug="standard", kind="standard", trust="signature"),
        )


async def count_todos(inst: Instance, **where: Any) -> int:
    stmt = select(func.count()).select_from(todos)
    for column, value in where.items():
        stmt = stmt.where(getattr(todos.c, column) == value)
    async with inst.services.db.read() as conn:
        return int((await conn.execute(stmt)).scalar_one())


@FUZZ
@given(body=bodies, headers=st.dictionaries(header_names, header_values, max_size=6))
async def test_inbound_fuzz_never_500_never_partial(
    worlds: Worlds, body: bytes, headers: dict[str, str]
) -> None:
    before = await count_todos(worlds.inst)
    created = 0
    async with worlds.inst.client() as http:
        for world in (worlds.signed, worlds.none, worlds.token, worlds.standard):
            r = await http.post(world.inbound_path, content=body, headers=headers)
            assert r.status_code in ALLOWED_STATUSES, (r.status_code, r.text)
            data = r.json()
            if r.status_code == 202:
                created += len(data["todos"])
                if world in (worlds.signed, worlds.standard):
                    pytest.fail("a fuzzed signature verified")  # forged signatures are refused outright
                if world is worlds.none:
                    assert data["verified"] is False  # a forged signature is never push-eligible
            else:
                assert set(data) == {"error", "message"} and data["error"] and data["message"]
    assert await count_todos(worlds.inst) == before + created


async def test_forged_deliveries_never_become_push_eligible(worlds: Worlds) -> None:
    async with worlds.inst.client() as http:
        for i in range(20):
            await http.post(
                worlds.none.inbound_path,
                content=json.dumps({"action": "opened", "issue": {"number": i, "title": "x"}}).encode(),
                headers={"x-github-event": "issues", "x-hub-signature-256": f"sha256={'0' * 63}{i % 10}"},
            )
    assert await count_todos(worlds.inst, verified=True) == 0
    assert await count_todos(worlds.inst) == 20


VERB_ARGS = st.dictionaries(
    st.sampled_from(
        [
            "todo_id",
            "queues",
            "queue",
            "lease_seconds",
            "result",
            "error",
            "retry",
            "status",
            "limit",
            "before",
            "url",
            "hook_id",
            "ignore_presence",
            "bogus",
        ]
    ),
    json_values,
    max_size=4,
)


@pytest.fixture
async def fuzz_agent(worlds: Worlds) -> AsyncIterator[Agent]:
    async with agent(worlds.inst.mcp_url, worlds.signed.token) as a:
        yield a


@FUZZ
@given(verb=st.sampled_from(sorted(ALL_VERBS | {"whoami", "not_a_verb"})), args=VERB_ARGS)
async def test_mcp_verb_fuzz_always_structured(
    worlds: Worlds, fuzz_agent: Agent, verb: str, args: dict[str, Any]
) -> None:
    if not worlds.inst.services.parts.need(McpSurface).server.offers(verb):
        # A tool this server does not offer at all is the spec's protocol error, not a tool result.
        with pytest.raises(MCPError) as err:
            await fuzz_agent.call(verb, args)
        assert err.value.error.code == INVALID_PARAMS
        return
    result = await fuzz_agent.call(verb, args)
    if not result.ok:
        assert result.code in MCP_CODES, result.data
        assert isinstance(result.data.get("message"), str) and result.data["message"]
