"""SPEC-0024 REQ-12 scenario "Store outage during health update", from outside: ``switchboard serve``
on PostgreSQL, a receiver that holds its answer until the database is stopped, then answers 204.

The server gets **its own PostgreSQL cluster** (tests/support/pg.py), not the suite's shared one: the
test stops it under the running server, which would break every other test using the shared cluster
at that moment. It is the same hard stop ``tests/integration/test_readiness.py`` uses (``kill``: an
immediate shutdown, crash recovery on restart, on the same port)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conformance.conftest import _checked
from tests.conformance.harness import FLEET, Conf, ServerSpec, tenant, wait_until
from tests.reliability.hostile import Conn, RawTLSServer
from tests.support.pg import PostgresServer, missing_binaries
from tests.support.pg_fixtures import SKIP_ENV

OUTAGE = ServerSpec("req12-outage", {"notify_hook_allow_cidrs": "127.0.0.1/32"}, humans=("alice",))

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def outage() -> Iterator[tuple[Conf, PostgresServer]]:
    """``switchboard serve`` on a PostgreSQL cluster of its own, which the test may stop."""
    if os.environ.get(SKIP_ENV, "").strip().lower() == "skip":
        pytest.skip(f"{SKIP_ENV}=skip: PostgreSQL tests skipped")
    assert not missing_binaries(), f"PostgreSQL programs not found: {missing_binaries()}"
    pg = PostgresServer()
    pg.start()
    try:
        url = pg.create_database("req12_outage")
        conf = FLEET.get(OUTAGE, url)
        yield conf, pg
        if not pg.is_running:
            pg.start()
        _checked(conf)
        conf.stop()
        FLEET.servers.pop(OUTAGE.name, None)
    finally:
        pg.stop()


class HeldReceiver:
    """Answers 204, but each request only once ``release`` is set (so a test can act in between)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.bodies: list[bytes] = []

    async def __call__(self, conn: Conn) -> None:
        self.bodies.append(conn.request.partition(b"\r\n\r\n")[2])
        await self.release.wait()
        await conn.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        await conn.client_gone(5)


def header(conn: Conn, name: str) -> str | None:
    for line in conn.request.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.encode():
            return value.strip().decode()
    return None


async def test_req12_store_outage_during_health_update(outage: tuple[Conf, PostgresServer]) -> None:
    """WHEN recording a hook's health fails because the database is unavailable THEN the failure is
    logged with the hook id and notification id, and the delivery worker continues with the next
    notification."""
    conf, pg = outage
    held = HeldReceiver()
    workers_before = len(conf.lines("notify worker ready"))
    async with RawTLSServer(FLEET.ca, held, hostnames=("127.0.0.1",)) as rcv, tenant(conf) as a:
        url = f"https://127.0.0.1:{rcv.port}/hook"
        hook_id = (await a.hook(url))["hook_id"]
        await a.todo("its health is recorded while the database is down")
        first = await rcv.next_request(timeout=20)  # the attempt is in flight; its answer is held
        notification_id = header(first, "webhook-id")
        assert notification_id
        await asyncio.to_thread(pg.kill)
        try:
            held.release.set()  # 204 now: the health write that follows finds no database
            (failed,) = await conf.wait_lines(
                "hook health update failed", timeout=30, hook_id=hook_id, notification_id=notification_id
            )
        finally:
            await asyncio.to_thread(pg.start)
        assert failed["level"] == "error"
        text = repr(failed)
        assert url not in text and f"127.0.0.1:{rcv.port}" not in text and "whsec_" not in text
        (delivered,) = conf.lines("notify attempt", hook_id=hook_id, notification_id=notification_id)
        assert delivered["result"] == "2xx"  # the send itself succeeded; only its health write failed

        # The database is back: the next notification of the same hook is delivered.
        async def ingested() -> Any:
            with contextlib.suppress(AssertionError, httpx.TransportError):
                return await a.todo("the next notification, after the outage")
            return None

        todo_id: str = await wait_until(ingested, timeout=60, what="an ingest once PostgreSQL is back")
        body = await wait_until(
            lambda: next((b for b in held.bodies if todo_id.encode() in b), None),
            timeout=30,
            what="the next notification",
        )
        assert body
        await conf.wait_lines("notify attempt", 2, timeout=30, hook_id=hook_id, result="2xx")
        # The worker carried on: no notify worker process had to be started again.
        assert len(conf.lines("notify worker ready")) == workers_before
        health = await a.health(hook_id)
        assert health["consecutive_failures"] == 0
