"""A real ``switchboard serve`` with its default process layout (notify worker processes included),
set up through the CLI, with HTTPS receivers on loopback: the harness of the issue-14 notify tests.

The only windows in are the ones an operator has: MCP, the inbound webhook URL, the web UI, ``/metrics``
and the JSON log on the server's stderr (the worker processes' lines included). The server trusts the
test CA through ``SSL_CERT_FILE`` and reaches receivers by IP literal under
``SWITCHBOARD_NOTIFY_HOOK_ALLOW_CIDRS=127.0.0.1/32``: a subprocess cannot take an injected resolver.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11
import httpx
import trustme
from prometheus_client.parser import text_string_to_metric_families

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from tests.reliability.procs import ServerProcess, Tenant, provision, server_env, servers
from tests.support.mcp_client import Agent, agent
from tests.support.receivers import HTTPSReceiver, RecordedRequest
from tests.support.waits import wait_until

HOOK_VERBS = (*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs)
WAIT = 30.0  # the bound of every poll here


@dataclass
class TimedReceiver(HTTPSReceiver):
    """An ``HTTPSReceiver`` for the IP-literal URLs the subprocess dials, recording when each request
    arrived (``times``, monotonic) and its ``webhook-id``."""

    cert_hostnames: Sequence[str] = ("127.0.0.1",)
    answer_after: float = 0.0  # a slow receiver: its answer comes this long after the request
    times: list[float] = field(default_factory=list, init=False)

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> RecordedRequest | None:
        request = await super()._read_request(conn, reader)
        if request is not None:
            self.times.append(time.monotonic())
            if self.answer_after:
                await asyncio.sleep(self.answer_after)  # the behaviour under test: slowness
        return request

    def hook_url(self, path: str = "/hook") -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def ids(self) -> list[str]:
        return [r.header("webhook-id") or "" for r in self.requests]


@dataclass
class Served:
    server: ServerProcess
    tenant: Tenant
    ca: trustme.CA
    stack: AsyncExitStack
    http: httpx.AsyncClient
    sent: int = 0

    async def receiver(self, **kw: Any) -> TimedReceiver:
        return await self.stack.enter_async_context(TimedReceiver(ca=self.ca, **kw))

    async def agent(self) -> Agent:
        return await self.stack.enter_async_context(agent(self.server.mcp_url, self.tenant.token))

    async def deliver(self, n: int = 1, *, concurrency: int = 16) -> list[str]:
        """``n`` inbound deliveries on the tenant's token-trust source; the todo ids created."""
        gate = asyncio.Semaphore(concurrency)
        created: list[str] = []

        async def post(key: str) -> None:
            body = json.dumps({"title": f"delivery {key}", "key": key}).encode()
            headers = {"content-type": "application/json", "idempotency-key": key}
            async with gate:
                r = await self.http.post(self.tenant.inbound_path, content=body, headers=headers)
            assert r.status_code == 202, (r.status_code, r.text)
            created.extend(r.json()["todos"])

        keys = [f"d{self.sent + i:05d}" for i in range(n)]
        self.sent += n
        await asyncio.gather(*(post(k) for k in keys))
        return created

    async def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = (await self.http.get("/metrics")).text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    async def metric(self, name: str, **labels: str) -> float:
        return (await self.metrics()).get((name, tuple(sorted(labels.items()))), 0.0)

    async def until(self, what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
        """Poll ``check`` (sync or async) until it returns something truthy; bounded (a subprocess and
        its log offer nothing to await)."""
        return await wait_until(check, timeout, what, self.server.log_tail)

    def log(self, event: str | None = None) -> list[dict[str, Any]]:
        """The JSON log lines of the server and its worker processes (``event`` only, if given)."""
        out = []
        for raw in self.server.log_path.read_text(errors="replace").splitlines():
            if not raw.startswith("{"):
                continue
            with contextlib.suppress(ValueError):
                entry = json.loads(raw)
                if event is None or entry.get("event") == event:
                    out.append(entry)
        return out

    async def stop(self) -> None:
        """SIGTERM and wait, without blocking this loop (the receivers live on it)."""
        await asyncio.to_thread(self.server.stop)

    def log_text(self) -> str:
        return self.server.log_path.read_text(errors="replace")

    def workers(self) -> dict[int, int]:
        """Notify worker process index -> pid of its newest start, from the server's log."""
        return {int(e["worker"]): int(e["pid"]) for e in self.log("notify worker started")}


@asynccontextmanager
async def served(tmp_path: Path, slug: str = "ep", **settings: str | int | float) -> AsyncIterator[Served]:
    """A tenant (human, endpoint with the hook verbs, token-trust source, route) made with the CLI, then
    ``switchboard serve`` on it with default settings but for ``settings``."""
    ca = trustme.CA()
    pem = tmp_path / "test-ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    env = server_env(
        notify_hook_allow_cidrs="127.0.0.1/32",
        mcp_rate_per_minute=1_000_000,  # the MCP limiter is not under test
        SSL_CERT_FILE=str(pem),
        **settings,
    )
    data = tmp_path / "data"
    tenant = await provision(env, data, slug=slug, verbs=HOOK_VERBS)
    server = ServerProcess(data, env, name=slug)
    async with AsyncExitStack() as stack:
        with servers(server):
            server.start()
            await server.ready()
            http = await stack.enter_async_context(httpx.AsyncClient(base_url=server.base_url, timeout=15))
            s = Served(server, tenant, ca, stack, http)
            # The worker processes take transitions from the start (they wait in the pipe), but on a
            # loaded machine they can take seconds to be ready: tests that time things wait for them.
            await s.until(
                "the notify worker processes ready",
                lambda: s.workers() and len(s.log("notify worker ready")) >= len(s.workers()),
            )
            yield s
