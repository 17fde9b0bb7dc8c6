"""Start real Switchboard instances in the test's event loop: uvicorn on 127.0.0.1, a real database,
an injected clock and DNS resolver. Several instances may share one PostgreSQL database."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from switchboard.app import Component, create_app
from switchboard.core.clock import Clock, ManualClock
from switchboard.services import Services, build_services
from switchboard.settings import Settings
from tests.support.secrets import leaks
from tests.support.templates import copy_migrated_sqlite

TEST_CRED_KEY = "00" * 32  # several instances on one database must share the envelope key


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Below Linux's ephemeral range (32768-60999 by default): no bind to port 0 and no outgoing connection
# is ever given one of these, so a port picked here long before it is bound stays free.
RESERVED_PORTS = range(20000, 32768)
_reserved: set[int] = set()


def reserved_port() -> int:
    """A free loopback port that must stay free until much later (a setting written at import, the
    receiver bound when the test runs): :func:`free_port` hands out an ephemeral port, which any
    connection made meanwhile may be given. Spread by process id, so xdist workers pick apart."""
    span = len(RESERVED_PORTS)
    start = os.getpid() * 7919 % span
    for k in range(span):
        port = RESERVED_PORTS[(start + k) % span]
        if port in _reserved:  # handed out by this process already, not bound yet
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _reserved.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


@dataclass
class Instance:
    services: Services
    port: int
    server: uvicorn.Server
    task: asyncio.Task[None]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=10, **kwargs)

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


def make_settings(data_dir: Path, database_url: str | None = None, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "database_url": database_url,
        "cred_key": TEST_CRED_KEY,
        "reaper_interval": 3600.0,  # tests drive sweeps explicitly unless they say otherwise
        # the dispatcher in the test's process, where its clock and resolver seams reach it; the worker
        # process (the server's default) has its own tests (test_delivery_process.py)
        "notify_process": False,
    }
    values.update(overrides)
    return Settings(**values)


@asynccontextmanager
async def run_instance(
    settings: Settings,
    *,
    clock: Clock | None = None,
    resolver: Any = None,
    ssl_context: ssl.SSLContext | None = None,
    components: Callable[[Services], Sequence[Component]] | None = None,
    port: int | None = None,
) -> AsyncIterator[Instance]:
    port = port or free_port()
    settings = settings.model_copy(update={"listen": f"127.0.0.1:{port}"})
    if not settings.database_url and not (settings.data_dir / "switchboard.db").exists():
        # A fresh SQLite data folder starts at the schema's head (tests/support/templates.py); the
        # instance's start still checks it. `switchboard serve` tests migrate from empty as shipped.
        await copy_migrated_sqlite(settings.data_dir / "switchboard.db")
    services = build_services(
        settings, clock=clock or ManualClock(), resolver=resolver, ssl_context=ssl_context
    )
    app = create_app(services, components=None if components is None else components(services))
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, lifespan="on", access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises the startup error
            raise RuntimeError("server exited before it started")
        await asyncio.sleep(0.01)  # uvicorn exposes no started event; poll its flag
    instance = Instance(services, port, server, task)
    try:
        yield instance
    finally:
        metrics_page = services.metrics.render().decode()
        await instance.stop()
        leaked = leaks([metrics_page])
        assert not leaked, f"a revealed secret appears in the metrics page: {leaked[:1]}"
