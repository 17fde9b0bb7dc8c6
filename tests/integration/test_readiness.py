"""/healthz and /readyz on a real ``switchboard serve`` (issue 17): readiness answers 503 with the
reason while the database is unreachable, while the schema is behind, and while a notify worker child
is down, and 200 again once that is mended; liveness answers 200 throughout."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability.procs import ServerProcess, server_env, servers
from tests.support.history import before_repair, head
from tests.support.pg import PostgresServer

DEADLINE = 20.0


async def until(http: httpx.AsyncClient, status: int, *, timeout: float = DEADLINE) -> dict[str, Any]:
    """Poll /readyz (bounded) until it answers ``status``; its JSON body."""
    started = time.monotonic()
    last: Any = None
    while time.monotonic() - started < timeout:
        try:
            r = await http.get("/readyz")
        except httpx.TransportError as exc:
            last = exc
        else:
            last = (r.status_code, r.text)
            if r.status_code == status:
                body: dict[str, Any] = r.json()
                return body
        await asyncio.sleep(0.05)  # a child process offers nothing to await
    raise AssertionError(f"/readyz never answered {status} within {timeout} s; last: {last}")


async def live(http: httpx.AsyncClient) -> None:
    assert (await http.get("/healthz")).status_code == 200


def _stamp(data: Path, revision: str) -> None:
    with sqlite3.connect(data / "switchboard.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry))
    return found


async def test_readyz_follows_the_schema_and_the_notify_workers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, server_env(notify_processes=1), name="ready")
    with servers(server):
        server.start()
        await server.ready()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
            ready = await until(http, 200)
            assert ready == {"status": "ready", "reasons": [], "instance": ready["instance"]}

            below = before_repair()
            _stamp(data, below)  # the revision before the (idempotent) repair
            behind = await until(http, 503)
            assert behind["status"] == "not ready"
            assert behind["reasons"] == [
                f"schema at {below}, behind head {head()}: run `switchboard db upgrade`"
            ]
            await live(http)
            _stamp(data, head())
            await until(http, 200)

            (child,) = _children(server.pid)
            os.kill(child, signal.SIGKILL)  # the supervisor starts another after a 1 s pause
            down = await until(http, 503, timeout=5)
            assert down["reasons"] == ["notify worker 0 not running"]
            await live(http)
            await until(http, 200)


@pytest.mark.postgres
async def test_readyz_says_the_database_is_unreachable_while_postgresql_is_down(
    tmp_path: Path, pg_url: str, pg_server: PostgresServer
) -> None:
    server = ServerProcess(tmp_path / "data", server_env(database_url=pg_url), name="ready-pg")
    with servers(server):
        server.start()
        await server.ready()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
            await until(http, 200)
            pg_server.kill()
            try:
                started = time.monotonic()
                down = await until(http, 503)
                assert time.monotonic() - started < 5
                (reason,) = down["reasons"]
                assert reason.startswith(("database unreachable", "database did not answer"))
                await live(http)
            finally:
                pg_server.start()
            await until(http, 200)
