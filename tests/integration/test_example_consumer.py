"""examples/mcp_consumer.py, the reference claim loop, against the real ``switchboard serve``: it drains
the queue with claim_next + ack (one call per todo, leases and request keys included), and every todo
ends done with the loop's result after one claim."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx

from switchboard.core.verbs import DEFAULT_GRANT
from tests.reliability.procs import ServerProcess, provision, server_env, servers
from tests.support.mcp_client import agent

ROOT = Path(__file__).resolve().parents[2]
CONSUMER = ROOT / "examples" / "mcp_consumer.py"


async def test_the_reference_consumer_drains_the_queue_and_acks_each_todo(tmp_path: Path) -> None:
    env = server_env()
    server = ServerProcess(tmp_path / "data", env)
    server.start()
    with servers(server):
        await server.ready()
        tenant = await provision(env, server.data_dir, slug="worker", verbs=DEFAULT_GRANT)
        async with httpx.AsyncClient(base_url=server.base_url) as http:
            created = []
            for n in range(5):
                r = await http.post(tenant.inbound_path, json={"title": f"job {n}"})
                assert r.status_code == 202, r.text
                created += r.json()["todos"]
        run = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CONSUMER),
            "--url",
            server.mcp_url,
            "--wait",
            "1",
            "--idle-exit",
            env={**os.environ, "SWITCHBOARD_TOKEN": tenant.token},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(run.communicate(), timeout=60)
        assert run.returncode == 0, err.decode()
        assert out.decode().strip().endswith("done: 5"), (out, err)
        async with agent(server.mcp_url, tenant.token) as a:
            listed = (await a.ok("list_todos", {"limit": 50}))["todos"]
        by_id = {t["id"]: t for t in listed}
        assert {by_id[t]["status"] for t in created} == {"done"}
        assert all(by_id[t]["result"]["handled"] == t for t in created)
        assert all(by_id[t]["attempt"] == 1 for t in created)
