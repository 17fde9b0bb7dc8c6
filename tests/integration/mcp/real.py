"""The real product for MCP compatibility tests: a ``switchboard serve`` child with default settings and
process layout, one tenant provisioned through the CLI (endpoint, token-trust source, route to
``inbox``), and todos created the way they arrive in production: a real inbound webhook."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.reliability.procs import ServerProcess, Tenant, provision, server_env
from tests.support.secrets import reveal

VERBS = ("claim_next", "claim", "ack", "list_todos")  # what the first tenant is granted


async def start_real_server(data: Path, **settings: str | float | int) -> RealServer:
    """Provision through the CLI, start ``switchboard serve``, wait for /healthz. Stop it with
    ``proc.stop()``. ``settings`` are further ``SWITCHBOARD_*`` values for this server."""
    # The heartbeat re-ring is pushed out of the way so every notification a test sees has a cause
    # the test made; everything else is the default configuration.
    env = server_env(doorbell_heartbeat_seconds=3600, **settings)
    tenant = await provision(env, data, slug="agent-a", verbs=list(VERBS))
    reveal(tenant.token)
    proc = ServerProcess(data, env)
    proc.start()
    try:
        await proc.ready()
    except BaseException:
        proc.stop()
        raise
    return RealServer(proc, tenant)


@dataclass
class RealServer:
    proc: ServerProcess
    tenant: Tenant

    @property
    def mcp_url(self) -> str:
        return self.proc.mcp_url

    @property
    def token(self) -> str:
        return self.tenant.token

    async def webhook(self, title: str) -> tuple[float, str]:
        """POST one delivery to the tenant's inbound URL; (monotonic time before sending, todo id)."""
        body = json.dumps({"title": title}).encode()
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=self.proc.base_url, timeout=10) as http:
            r = await http.post(
                self.tenant.inbound_path, content=body, headers={"content-type": "application/json"}
            )
        assert r.status_code == 202, r.text
        (todo_id,) = r.json()["todos"]
        return started, str(todo_id)
