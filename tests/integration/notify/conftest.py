"""The notify-hook scenario harness: a real server, real HTTPS receivers on 127.0.0.1 with trustme
certificates, test hostnames resolved to loopback by an injected resolver, and real MCP clients."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trustme

from switchboard.core.clock import ManualClock
from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.notify.component import NotifyComponent
from switchboard.services import Services
from switchboard.web.component import WebComponent
from tests.support.logcapture import LogCapture
from tests.support.mcp_client import Agent, agent
from tests.support.receivers import HTTPSReceiver, StaticResolver, client_ssl_context
from tests.support.server import Instance, make_settings, run_instance
from tests.support.world import World, gitea_delivery, make_world, pr_payload

HOOK_VERBS = (*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs)
FAST_RETRIES = (0.05, 0.1)


@dataclass
class Env:
    inst: Instance
    receiver: HTTPSReceiver
    resolver: StaticResolver
    ca: trustme.CA
    clock: ManualClock
    logs: LogCapture
    stack: AsyncExitStack
    agents: dict[str, Agent] = field(default_factory=dict)

    @property
    def services(self) -> Services:
        return self.inst.services

    @property
    def notify(self) -> NotifyComponent:
        component = self.services.parts.need(NotifyComponent)
        assert isinstance(component, NotifyComponent)
        return component

    async def settle(self) -> None:
        """Wait until every transition so far is matched and every notification finished."""
        for _ in range(2):
            await self.services.hub.idle()
            await self.notify.dispatcher.idle()

    async def tenant(self, slug: str, *, verbs: Sequence[str] = HOOK_VERBS, **kw: Any) -> tuple[World, Agent]:
        world = await make_world(self.inst, slug=slug, verbs=verbs, **kw)
        self.agents[slug] = await self.stack.enter_async_context(agent(self.inst.mcp_url, world.token))
        return world, self.agents[slug]

    async def deliver(self, world: World, *, title: str = "Add the thing", **payload: Any) -> list[str]:
        """A verified Gitea delivery through real HTTP; returns the created todo ids."""
        body, headers = gitea_delivery(world.secret, {**pr_payload(title=title), **payload})
        async with self.inst.client() as http:
            r = await http.post(world.inbound_path, content=body, headers=headers)
        assert r.status_code == 202, r.text
        return list(r.json()["todos"])

    def hook_url(self, path: str = "/hook", hostname: str = "hooks.test", query: str = "") -> str:
        return self.receiver.url(path + (f"?{query}" if query else ""), hostname=hostname)

    def metric(self, name: str, **labels: str) -> float:
        value = self.services.metrics.registry.get_sample_value(name, labels)
        return float(value or 0.0)


@asynccontextmanager
async def notify_env(
    tmp_path: Path,
    *,
    database_url: str | None = None,
    allow_cidrs: str = "127.0.0.1/32",
    retry_delays: Sequence[float] = FAST_RETRIES,
    resolver: StaticResolver | None = None,
    ca: trustme.CA | None = None,
    clock: ManualClock | None = None,
    notify_process: bool = False,
    notify_processes: int = 1,
    **settings: Any,
) -> AsyncIterator[Env]:
    """``notify_process``: the dispatcher runs in its own process (SWITCHBOARD_NOTIFY_PROCESS), started
    through tests/support/notify_worker.py with the same resolver answers and CA; its clock is real.
    ``notify_processes``: how many (one unless a test says otherwise, whatever this machine's cores)."""
    ca = ca or trustme.CA()
    resolver = resolver or StaticResolver({"hooks.test": ["127.0.0.1"]})
    clock = clock or ManualClock(
        datetime.now(UTC).timestamp()
    )  # receivers check timestamps against real time
    logs = LogCapture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(logs)
    root.setLevel(logging.INFO)
    try:
        async with AsyncExitStack() as stack:
            receiver = await stack.enter_async_context(HTTPSReceiver(ca=ca, cert_hostnames=("hooks.test",)))
            inst = await stack.enter_async_context(
                run_instance(
                    make_settings(
                        tmp_path,
                        database_url,
                        notify_hook_allow_cidrs=allow_cidrs,
                        notify_process=notify_process,
                        notify_processes=notify_processes,
                        **settings,
                    ),
                    clock=clock,
                    resolver=resolver,
                    ssl_context=client_ssl_context(ca),
                    components=lambda services: [
                        NotifyComponent(
                            _worker_seams(services, tmp_path, resolver, ca), retry_delays=retry_delays
                        ),
                        WebComponent(services),  # REQ-10: the endpoint card's hook controls
                    ],
                )
            )
            yield Env(inst, receiver, resolver, ca, clock, logs, stack)
    finally:
        root.removeHandler(logs)
        root.setLevel(old_level)


def _worker_seams(services: Services, tmp_path: Path, resolver: StaticResolver, ca: trustme.CA) -> Services:
    """Where the worker process would start, start it with this harness's resolver answers and CA."""
    if services.settings.notify_process:
        hosts = {host: list(a) for host, a in resolver.answers.items() if isinstance(a, (list, tuple))}
        pem = tmp_path / "notify-worker-ca.pem"
        ca.cert_pem.write_to_path(str(pem))
        services.notify_worker_command = [
            sys.executable,
            "-m",
            "tests.support.notify_worker",
            json.dumps(hosts),
            str(pem),
        ]
    return services


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with notify_env(tmp_path) as e:
        yield e
