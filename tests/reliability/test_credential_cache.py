"""The verified-credential cache against the real ``switchboard serve`` on SQLite (issue 18,
docs/mcp.md "Grants"), from outside: claim traffic (every call a commit to the file) leaves a verified
credential cached, while an endpoint change made by another process (the ``switchboard`` CLI) applies
to the very next call, not at the end of the 2-second trust window.

What the server did is read from its ``/metrics`` (``switchboard_mcp_credential_cache_total``: each
endpoint credential answered from the cache, ``hit``, or by reading the endpoint, ``miss``). When the
CLI's change committed is read from the database file itself, between calls, so "the very next call"
means the first call that starts after the commit is visible.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from pathlib import Path

import httpx
from mcp import MCPError

from switchboard.core.verbs import DEFAULT_GRANT
from switchboard.mcp.auth import VERIFIED_TTL
from tests.reliability.procs import ServerProcess, Tenant, cli, provision, server_env, servers
from tests.support.mcp_client import Agent, ToolResult, agent

ROUNDS = 20  # create + claim_next + ack + whoami each
DEADLINE = 60.0  # a bound on waiting for the CLI's commit


@dataclass
class Running:
    env: dict[str, str]
    server: ServerProcess
    tenant: Tenant
    http: httpx.AsyncClient
    agent: Agent


@asynccontextmanager
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    env = server_env(mcp_rate_per_minute=1_000_000)
    data = tmp_path / "data"
    tenant = await provision(env, data, slug="cached", verbs=DEFAULT_GRANT)
    server = ServerProcess(data, env, name="cache")
    with servers(server):
        server.start()
        await server.ready()
        async with (
            httpx.AsyncClient(base_url=server.base_url, timeout=15) as http,
            agent(server.mcp_url, tenant.token) as a,
        ):
            yield Running(env, server, tenant, http, a)


async def cache_counts(http: httpx.AsyncClient) -> dict[str, float]:
    text = (await http.get("/metrics")).text
    found = re.findall(r'^switchboard_mcp_credential_cache_total\{result="(\w+)"\} (\S+)$', text, re.M)
    return {result: float(value) for result, value in found}


def committed(data: Path, sql: str) -> Callable[[], bool]:
    """Whether the database file shows ``sql``'s row now (read between calls: a process boundary
    offers nothing to await)."""

    def check() -> bool:
        with closing(sqlite3.connect(data / "switchboard.db", timeout=5)) as conn:
            return conn.execute(sql).fetchone() is not None

    return check


async def first_call_after(
    a: Agent, verb: str, shown: Callable[[], bool], change: asyncio.Task[object]
) -> ToolResult | MCPError:
    """Call ``verb`` over and over while ``change`` runs, and return the answer to the first call that
    started once ``shown()`` saw its commit in the file (a refusal at the HTTP layer comes back as
    MCPError). An earlier call may be refused only if the commit landed while it ran: that refusal is
    returned, and no call is refused before the commit."""
    deadline = time.monotonic() + DEADLINE
    while True:
        assert time.monotonic() < deadline, "the CLI's change never showed in the database"
        if change.done():
            change.result()  # a failed CLI raises here
        visible = shown()
        answer: ToolResult | MCPError
        try:
            answer = await a.call(verb)
        except MCPError as refused:
            answer = refused
        if visible:
            return answer
        if isinstance(answer, MCPError) or not answer.ok:
            assert shown(), f"{verb} refused before the change committed: {answer}"
            return answer


async def test_claim_traffic_leaves_the_credential_cached(tmp_path: Path) -> None:
    """Every create, claim_next and ack commits to the file; the endpoint is read about once per
    trust window (2 s), not once per call: with ``PRAGMA data_version`` as the check it was read on
    nearly every call."""
    async with running(tmp_path) as r:
        await r.agent.ok("whoami")
        before = await cache_counts(r.http)
        started = time.monotonic()
        for n in range(ROUNDS):
            created = await r.http.post(r.tenant.inbound_path, json={"title": f"round {n}"})
            assert created.status_code == 202, created.text
            todo = (await r.agent.ok("claim_next"))["todo"]
            assert todo is not None and todo["title"] == f"round {n}"
            await r.agent.ok("ack", {"todo_id": todo["id"], "lease": todo["lease"], "result": {"n": n}})
            assert (await r.agent.ok("whoami"))["endpoint"] == "cached"
        elapsed = time.monotonic() - started
        after = await cache_counts(r.http)
    hits = after.get("hit", 0) - before.get("hit", 0)
    misses = after.get("miss", 0) - before.get("miss", 0)
    calls = 3 * ROUNDS
    assert hits + misses >= calls, (hits, misses)  # every call's credential was verified
    # One read when the window expires, at most one per window; none caused by the commits.
    assert misses <= 1 + elapsed / VERIFIED_TTL, f"{misses} reads in {elapsed:.1f} s for {calls} calls"
    assert misses < ROUNDS, f"{misses} reads for {calls} calls"


async def test_a_token_revoked_by_the_cli_is_refused_on_the_next_call(tmp_path: Path) -> None:
    async with running(tmp_path) as r:
        await r.agent.ok("whoami")
        revoke = asyncio.create_task(
            cli(r.env, r.server.data_dir, "endpoint", "revoke-token", r.tenant.endpoint_slug)
        )
        shown = committed(
            r.server.data_dir,
            f"SELECT 1 FROM endpoints WHERE slug = '{r.tenant.endpoint_slug}' AND token_hash IS NULL",
        )
        answer = await first_call_after(r.agent, "whoami", shown, revoke)
        assert isinstance(answer, MCPError), f"the revoked token was still accepted: {answer}"
        assert (await revoke)["token_revoked"] is True
        refused = await r.http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={
                "Authorization": f"Bearer {r.tenant.token}",
                "Accept": "application/json, text/event-stream",
            },
        )
        assert refused.status_code == 401


async def test_a_scope_cut_by_the_cli_applies_to_the_next_call(tmp_path: Path) -> None:
    verb = "claim_next"
    async with running(tmp_path) as r:
        assert (await r.agent.ok(verb))["todo"] is None
        cut = asyncio.create_task(
            cli(r.env, r.server.data_dir, "endpoint", "grant", r.tenant.endpoint_slug, "--remove", verb)
        )
        shown = committed(
            r.server.data_dir,
            f"SELECT 1 FROM endpoints WHERE slug = '{r.tenant.endpoint_slug}' AND verbs NOT LIKE '%\"{verb}\"%'",
        )
        answer = await first_call_after(r.agent, verb, shown, cut)
        assert isinstance(answer, ToolResult) and answer.code == "forbidden", answer
        assert verb in (await cut)["removed"]
        assert (await r.agent.ok("whoami"))["endpoint"] == "cached"  # the token itself still works
