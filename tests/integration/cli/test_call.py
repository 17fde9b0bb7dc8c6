"""``switchboard call`` (issue 17): an MCP verb called as the endpoint with the official mcp client, the
token read from stdin: a hook created by its endpoint from a shell, errors as one JSON object."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from tests.reliability.procs import ServerProcess, provision, server_env, servers, switchboard_command
from tests.support.server import free_port


async def call(env: dict[str, str], port: int, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*switchboard_command(), "call", *args, "--token-stdin", "--listen", f"127.0.0.1:{port}", "--json"]
    return await asyncio.to_thread(
        subprocess.run, argv, input=stdin, env=env, capture_output=True, text=True, timeout=60
    )


async def test_call_creates_a_hook_as_the_endpoint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = server_env(notify_hook_allow_cidrs="127.0.0.1/32")
    tenant = await provision(
        env, data, slug="caller", verbs=("claim_next", "create_notify_hook", "list_notify_hooks")
    )
    url = f"https://127.0.0.1:{free_port()}/hook"
    server = ServerProcess(data, env, name="call")
    with servers(server):
        server.start()
        await server.ready()
        made = await call(
            env, server.port, tenant.token + "\n", "create_notify_hook", f"url={url}", 'queues=["inbox"]'
        )
        assert made.returncode == 0, made.stderr
        hook = json.loads(made.stdout)
        assert hook["hook_id"] and hook["signing_secret"].startswith("whsec_") and hook["queues"] == ["inbox"]
        assert tenant.token not in made.stdout + made.stderr

        listed = await call(env, server.port, tenant.token + "\n", "list_notify_hooks")
        assert [h["hook_id"] for h in json.loads(listed.stdout)["hooks"]] == [hook["hook_id"]]

        forbidden = await call(
            env, server.port, tenant.token + "\n", "delete_notify_hook", f"hook_id={hook['hook_id']}"
        )
        assert forbidden.returncode == 1 and json.loads(forbidden.stdout)["error"]
        assert forbidden.stderr.startswith("error: delete_notify_hook:")

        no_token = await call(env, server.port, "", "list_notify_hooks")
        assert no_token.returncode == 2 and "no token on stdin" in no_token.stderr
        bad_arg = await call(env, server.port, tenant.token + "\n", "list_notify_hooks", "oops")
        assert bad_arg.returncode == 2 and "is not key=value" in bad_arg.stderr
