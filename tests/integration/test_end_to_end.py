"""Issue 2's end-to-end path: a real Gitea-style signed delivery over HTTP becomes a todo; a live MCP
session (the SDK's streamable HTTP client) hears the doorbell; a second client with the vended token
claims and acks it. Everything is real: HTTP, SQLite, MCP, the CLI-equivalent setup."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from switchboard.core.clock import ManualClock
from tests.integration.mcp.helpers import Bell, connect
from tests.support.mcp_client import agent
from tests.support.server import Instance, make_settings, run_instance
from tests.support.world import gitea_delivery, make_world, pr_payload


@pytest.fixture
async def inst(tmp_path: Path) -> AsyncIterator[Instance]:
    async with run_instance(make_settings(tmp_path), clock=ManualClock(datetime.now(UTC).timestamp())) as i:
        yield i


async def test_signed_delivery_to_doorbell_to_claim_and_ack(inst: Instance) -> None:
    world = await make_world(inst, slug="reviewer", kind="gitea", trust="signature")
    bell = Bell()
    async with connect(inst, world.token, mode="legacy", bell=bell):
        body, headers = gitea_delivery(world.secret, pr_payload(number=482, title="Add\u202e the thing"))
        async with inst.client() as http:
            accepted = await http.post(world.inbound_path, content=body, headers=headers)
        assert accepted.status_code == 202
        (todo_id,) = accepted.json()["todos"]

        ring = await bell.next()
        assert ring["todo_id"] == todo_id and ring["reason"] == "created"
        assert ring["uri"] == "switchboard://endpoints/reviewer/todos"
        assert "\u202e" not in ring["title"] and "482" in ring["title"]

    async with agent(inst.mcp_url, world.token) as worker:
        claimed = (await worker.ok("claim_next"))["todo"]
        assert claimed["id"] == todo_id and claimed["status"] == "claimed" and claimed["attempt"] == 1
        assert claimed["payload"]["pull_request"]["number"] == 482
        assert claimed["kind"] == "pull_request" and claimed["source"] == world.source.slug
        await worker.ok("heartbeat", {"todo_id": todo_id, "lease": claimed["lease"], "lease_seconds": 120})
        done = (
            await worker.ok(
                "ack", {"todo_id": todo_id, "lease": claimed["lease"], "result": {"review": "lgtm"}}
            )
        )["todo"]
        assert done["status"] == "done" and done["result"] == {"review": "lgtm"}
        assert (await worker.ok("claim_next"))["todo"] is None

    metrics = inst.services.metrics.render().decode()
    assert 'switchboard_ingest_total{outcome="accepted"} 1.0' in metrics
    assert 'switchboard_todo_transitions_total{transition="done"} 1.0' in metrics
