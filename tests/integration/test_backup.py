"""Backup and restore as docs/self-hosting.md tells it (issue 17): ``switchboard backup`` of a live
SQLite server (online backup API, with the envelope key file), and pg_dump/pg_restore for PostgreSQL;
a server started on the restored copy serves the data: the todo is claimable, and the source's sealed
secret still opens (a new delivery is accepted)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.reliability.procs import ServerProcess, Tenant, cli, provision, server_env, servers
from tests.support.mcp_client import agent
from tests.support.pg import PostgresServer, find_pg_bin, to_asyncpg_dsn


async def deliver(server: ServerProcess, tenant: Tenant, key: str) -> str:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
        r = await http.post(
            tenant.inbound_path,
            content=json.dumps({"title": f"delivery {key}"}).encode(),
            headers={"content-type": "application/json", "idempotency-key": key},
        )
    assert r.status_code == 202, r.text
    (todo_id,) = r.json()["todos"]
    return str(todo_id)


async def serves_the_data(server: ServerProcess, tenant: Tenant, todo_id: str) -> None:
    async with agent(server.mcp_url, tenant.token) as a:
        claimed = await a.ok("claim_next", {})
    assert claimed["todo"]["id"] == todo_id
    await deliver(server, tenant, "after-restore")  # the sealed source secret opens with the restored key


async def test_sqlite_backup_of_a_live_server_restores_into_a_fresh_data_dir(tmp_path: Path) -> None:
    data, restored = tmp_path / "data", tmp_path / "restored"
    env = server_env()
    del env["SWITCHBOARD_CRED_KEY"]  # the key file in the data folder: the backup must carry it
    tenant = await provision(env, data, slug="bk", verbs=("claim_next",))
    original = ServerProcess(data, env, name="original")
    with servers(original):
        original.start()
        await original.ready()
        todo_id = await deliver(original, tenant, "before-backup")
        done = await cli(env, data, "backup", str(restored))  # while the server runs
    assert done["backup"] == {
        "database": str(restored / "switchboard.db"),
        "key_file": str(restored / "cred.key"),
    }
    for name in ("switchboard.db", "cred.key"):
        assert stat.S_IMODE(os.stat(restored / name).st_mode) == 0o600
    again = await _cli_fails(env, data, "backup", str(restored))
    assert "exists" in again

    copy = ServerProcess(restored, env, name="restored")
    with servers(copy):
        copy.start()
        await copy.ready()
        await serves_the_data(copy, tenant, todo_id)


async def _cli_fails(env: dict[str, str], data: Path, *args: str) -> str:
    try:
        await cli(env, data, *args)
    except AssertionError as exc:
        return str(exc)
    raise AssertionError(f"switchboard {' '.join(args)} succeeded")


@pytest.mark.postgres
async def test_pg_dump_restores_into_a_fresh_database(
    tmp_path: Path, pg_url: str, pg_server: PostgresServer
) -> None:
    pg_dump, pg_restore = find_pg_bin("pg_dump"), find_pg_bin("pg_restore")
    if pg_dump is None or pg_restore is None:
        pytest.fail("pg_dump/pg_restore not found next to the test PostgreSQL", pytrace=False)
    env = server_env(database_url=pg_url)
    data = tmp_path / "data"
    tenant = await provision(env, data, slug="bkpg", verbs=("claim_next",))
    original = ServerProcess(data, env, name="original-pg")
    with servers(original):
        original.start()
        await original.ready()
        todo_id = await deliver(original, tenant, "before-dump")
        refused = await _cli_fails(env, data, "backup", str(tmp_path / "nope"))
        assert "pg_dump" in refused
        dump = tmp_path / "switchboard.dump"
        subprocess.run(
            [pg_dump, "--format=custom", f"--file={dump}", to_asyncpg_dsn(pg_url)], check=True, timeout=120
        )

    fresh = pg_server.create_database(f"restored_{os.getpid()}_{tmp_path.name[-8:].lower()}")
    subprocess.run(
        [pg_restore, "--no-owner", f"--dbname={to_asyncpg_dsn(fresh)}", str(dump)], check=True, timeout=120
    )
    copy = ServerProcess(tmp_path / "data2", server_env(database_url=fresh), name="restored-pg")
    with servers(copy):
        copy.start()
        await copy.ready()
        await serves_the_data(copy, tenant, todo_id)
