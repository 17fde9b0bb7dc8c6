"""Upgrades from every earlier revision, on SQLite and PostgreSQL (issue 17).

A database is built at each earlier revision, from today's migration files and from the files as they
were released before 0003 and 0004 were edited in place, with a row in every table. Upgraded to head it
holds the declared schema exactly and keeps every row. A real ``switchboard serve`` started on such a
database upgrades it itself and works: sign-in, OAuth discovery and client registration (which answered
503 on the released history before the repair revision), a hook delivery and a claim.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from standardwebhooks import Webhook

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.store.db import Database
from switchboard.store.tables import metadata
from tests.integration.web.helpers import csrf_of, register_client
from tests.reliability.procs import ServerProcess, cli, provision, server_env, servers
from tests.support.history import EARLIER, HISTORIES, build_at, row_counts
from tests.support.mcp_client import agent
from tests.support.receivers import HTTPSReceiver

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _url(engine: str, data: Path, request: pytest.FixtureRequest) -> str:
    if engine == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    data.mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{(data / 'switchboard.db').resolve()}"


def _schema_diff(sync_conn: Any) -> list[Any]:
    ctx = MigrationContext.configure(sync_conn, opts={"compare_type": True, "compare_server_default": False})
    return list(compare_metadata(ctx, metadata))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("history", list(HISTORIES))
@pytest.mark.parametrize("revision", EARLIER)
async def test_upgrade_from_every_earlier_revision_keeps_rows_and_reaches_the_declared_schema(
    engine: str, history: str, revision: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _url(engine, tmp_path / "data", request)
    before = await build_at(url, history, revision, tmp_path)
    assert before and all(count == 1 for count in before.values()), before

    db = Database(url)
    try:
        assert (await db.schema_status()).state == "behind"
        await db.migrate()
        status = await db.schema_status()
        assert status.state == "head" and status.current == status.head
        async with db.read() as conn:
            assert await conn.run_sync(_schema_diff) == []
    finally:
        await db.dispose()
    assert await row_counts(url, list(before)) == before


# The app-level check: the oldest start, and the released history at its last revision (the drift).
APP_STARTS = [("current", "0001"), ("released-59580ec", "0004")]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("history", "revision"), APP_STARTS)
async def test_serve_upgrades_an_old_database_and_works(
    engine: str, history: str, revision: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "data"
    url = _url(engine, data, request)
    await build_at(url, history, revision, tmp_path)
    ca = trustme.CA()
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    env = server_env(
        database_url=url if engine == "postgresql" else None,
        notify_hook_allow_cidrs="127.0.0.1/32",
        SSL_CERT_FILE=str(pem),
    )
    server = ServerProcess(data, env, name="upgraded")
    with servers(server):
        server.start()
        await server.ready()
        status = await cli(env, data, "db", "status")
        assert status["schema"]["state"] == "head"

        tenant = await provision(env, data, slug="upg", verbs=(*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs))
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10, follow_redirects=False) as http:
            page = await http.get("/login")
            signed_in = await http.post(
                "/login",
                data={"csrf": csrf_of(page.text), "email": tenant.email, "password": "correct horse battery"},
            )
            assert signed_in.status_code == 303, signed_in.text
            assert (await http.get("/endpoints")).status_code == 200

            meta = await http.get("/.well-known/oauth-authorization-server")
            assert meta.status_code == 200 and meta.json()["registration_endpoint"].endswith("/register")
            registered = await register_client(http, redirect_uris=["http://127.0.0.1:9/cb"])
            assert registered.status_code == 201, registered.text

        async with (
            HTTPSReceiver(ca=ca, cert_hostnames=("127.0.0.1",)) as receiver,
            agent(server.mcp_url, tenant.token) as a,
        ):
            hook = await a.ok("create_notify_hook", {"url": f"https://127.0.0.1:{receiver.port}/hook"})
            async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
                r = await http.post(
                    tenant.inbound_path,
                    content=json.dumps({"title": "after upgrade"}).encode(),
                    headers={"content-type": "application/json", "idempotency-key": "upg-1"},
                )
            assert r.status_code == 202, r.text
            (todo_id,) = r.json()["todos"]
            async with asyncio.timeout(15):
                while True:
                    req = await receiver.next_request(timeout=15)
                    if json.loads(req.body).get("todo_id") == todo_id:
                        break
            Webhook(hook["signing_secret"]).verify(req.body, req.header_map)
            claimed = await a.ok("claim_next", {})
            assert claimed["todo"]["id"] == todo_id

        # The delivery's latency, observed in the notify worker child, reaches the server's /metrics.
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http, asyncio.timeout(15):
            while True:
                text = (await http.get("/metrics")).text
                count = re.search(
                    r"^switchboard_notify_hook_delivery_seconds_count (\S+)$", text, re.MULTILINE
                )
                if count and float(count.group(1)) >= 1:
                    break
                await asyncio.sleep(0.2)  # relayed by the child on its own schedule: nothing to await
        inf = re.search(
            r'^switchboard_notify_hook_delivery_seconds_bucket\{le="\+Inf"\} (\S+)$', text, re.MULTILINE
        )
        assert inf and float(inf.group(1)) == float(count.group(1))
