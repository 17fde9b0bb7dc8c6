"""The admin CLI's work commands (issue 17 item 6) against a running ``switchboard serve``: ``hook
list|disable|enable|delete`` (the owner's view, as the endpoint card), ``todo list|show|requeue|cancel``
(the console's), ``endpoint revoke-token`` and ``source rotate-secret``. Each acts on the live server at
once, and each output is one JSON object that never carries a hook secret."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from tests.reliability.procs import CliFailed, ServerProcess, cli, provision, server_env, servers
from tests.support.mcp_client import agent
from tests.support.server import free_port


async def _refused(env: dict[str, str], data: Path, *args: str) -> str:
    try:
        await cli(env, data, *args)
    except CliFailed as exc:
        return str(exc)
    raise AssertionError(f"switchboard {' '.join(args)} succeeded")


async def test_hook_commands_act_as_the_owner_on_a_live_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = server_env(notify_hook_allow_cidrs="127.0.0.1/32")
    tenant = await provision(env, data, slug="hk", verbs=(*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs))
    await provision(env, data, slug="other", verbs=DEFAULT_GRANT)
    server = ServerProcess(data, env, name="hooks")
    with servers(server):
        server.start()
        await server.ready()
        async with agent(server.mcp_url, tenant.token) as a:
            made = await a.ok("create_notify_hook", {"url": f"https://127.0.0.1:{free_port()}/h?k=v"})
            hook_id = made["hook_id"]

            listed = await cli(env, data, "hook", "list", "hk")
            (hook,) = listed["hooks"]
            assert hook["hook_id"] == hook_id and hook["enabled"] is True
            assert made["signing_secret"] not in json.dumps(listed) and "k=v" not in json.dumps(listed)

            off = await cli(env, data, "hook", "disable", "hk", hook_id)
            assert off["changed"] is True and off["hook"]["disabled_reason"] == "operator"
            seen = (await a.ok("list_notify_hooks"))["hooks"][0]
            assert seen["enabled"] is False and seen["disabled_reason"] == "operator"
            assert (await cli(env, data, "hook", "disable", "hk", hook_id))["changed"] is False

            on = await cli(env, data, "hook", "enable", "hk", hook_id)
            assert on["changed"] is True and on["hook"]["enabled"] is True
            assert (await a.ok("list_notify_hooks"))["hooks"][0]["enabled"] is True

            # Another endpoint's hook is not found, as on the web card; nothing changes.
            assert "exited 1: error: no hook" in await _refused(
                env, data, "hook", "disable", "other", hook_id
            )
            assert (await a.ok("list_notify_hooks"))["hooks"][0]["enabled"] is True

            gone = await cli(env, data, "hook", "delete", "hk", hook_id)
            assert gone["deleted"] == hook_id
            assert (await a.ok("list_notify_hooks"))["hooks"] == []
            assert (await cli(env, data, "hook", "list", "hk"))["hooks"] == []


async def test_todo_token_and_secret_commands_on_a_live_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = server_env()
    tenant = await provision(env, data, slug="wk", verbs=DEFAULT_GRANT)
    other = await provision(env, data, slug="ot", verbs=DEFAULT_GRANT)
    server = ServerProcess(data, env, name="work")
    with servers(server):
        server.start()
        await server.ready()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:

            async def deliver(path: str, key: str) -> httpx.Response:
                return await http.post(
                    path,
                    content=json.dumps({"title": f"job {key}"}).encode(),
                    headers={"content-type": "application/json", "idempotency-key": key},
                )

            assert (await deliver(tenant.inbound_path, "one")).status_code == 202
            assert (await deliver(other.inbound_path, "two")).status_code == 202

            everyone = (await cli(env, data, "todo", "list"))["todos"]
            assert sorted(t["endpoint"] for t in everyone) == ["ot", "wk"]
            (mine,) = (await cli(env, data, "todo", "list", "--human", tenant.email))["todos"]
            assert mine["title"] == "job one" and mine["status"] == "pending"
            assert (await cli(env, data, "todo", "list", "--state", "dead"))["todos"] == []

            async with agent(server.mcp_url, tenant.token) as a:
                held = (await a.ok("claim_next"))["todo"]
                assert held["id"] == mine["id"]
                await a.ok(
                    "fail",
                    {"todo_id": mine["id"], "lease": held["lease"], "error": "no disk", "retry": False},
                )
                assert "is dead: only a pending" in await _refused(env, data, "todo", "cancel", mine["id"])
                requeued = await cli(env, data, "todo", "requeue", mine["id"])
                assert requeued["was"] == "dead" and requeued["todo"]["status"] == "pending"
                assert (await a.ok("claim_next"))["todo"]["id"] == mine["id"]  # the server hands it out

                shown = await cli(env, data, "todo", "show", mine["id"])
                assert shown["todo"]["payload"] == {"title": "job one"}
                steps = [(e["transition"], e["actor"]) for e in shown["timeline"]]
                assert ("requeued", "cli") in steps, steps

                canceled = await cli(env, data, "todo", "cancel", mine["id"])
                assert canceled["todo"]["status"] == "canceled"
                assert "is canceled: only a failed or dead" in await _refused(
                    env, data, "todo", "requeue", mine["id"]
                )
                assert "exited 1: error: no todo" in await _refused(
                    env, data, "todo", "show", "td_" + "0" * 26
                )

                revoked = await cli(env, data, "endpoint", "revoke-token", "wk")
                assert revoked == {"endpoint": "wk", "token_revoked": True}
            async with httpx.AsyncClient(timeout=10) as mcp:
                r = await mcp.post(
                    server.mcp_url,
                    headers={"authorization": f"Bearer {tenant.token}", "accept": "application/json"},
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                )
                assert r.status_code == 401

            rotated = await cli(env, data, "source", "rotate-secret", tenant.source_slug)
            assert rotated["secret"] != tenant.secret and rotated["inbound_path"].endswith(rotated["secret"])
            assert (await deliver(tenant.inbound_path, "three")).status_code in (401, 404)
            assert (await deliver(rotated["inbound_path"], "four")).status_code == 202
            assert [s["slug"] for s in (await cli(env, data, "source", "list"))["sources"]].count(
                "wk-src"
            ) == 1
            assert "secret" not in json.dumps((await cli(env, data, "source", "list"))["sources"])


async def test_a_cli_requeue_of_an_a2a_task_is_pushed_by_the_server(tmp_path: Path) -> None:
    """The CLI writes the A2A push outbox in the requeue's own transaction, as a server instance does;
    the server's push worker delivers it (the CLI process itself sends nothing)."""
    from tests.integration.a2a.conftest import a2a_env, message, push_config, send

    async with a2a_env(tmp_path) as env:
        _, token = await env.endpoint("client")
        worker = await env.worker()
        client = await env.client(token)
        task = await send(client, message("requeue me"), push=push_config(env.url()))
        lease = (await worker.ok("claim_next"))["todo"]["lease"]
        await worker.ok("fail", {"todo_id": task.id, "lease": lease, "error": "flaky", "retry": False})
        await env.settle()
        before = [p.seq for p in env.pushes()]

        requeued = await cli(server_env(), tmp_path, "todo", "requeue", task.id)
        assert requeued["todo"]["status"] == "pending"
        # The CLI's rows are due at its (real) clock, seconds ahead of this server's manual one.
        await env.advance(30)
        after = env.pushes()
        assert [p.seq for p in after] == [*before, before[-1] + 1], [p.seq for p in after]
        assert after[-1].task_id == task.id
        assert after[-1].state == "TASK_STATE_SUBMITTED", after[-1].state

        await cli(server_env(), tmp_path, "todo", "cancel", task.id)
        await env.advance(30)
        assert env.pushes()[-1].state == "TASK_STATE_CANCELED"
        assert (await env.outbox_statuses())[-1] == (before[-1] + 2, "delivered")
