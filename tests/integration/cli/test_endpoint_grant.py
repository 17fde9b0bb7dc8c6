"""``switchboard endpoint grant`` (issue 17): verbs added to or removed from an existing endpoint take
effect for its live token at once, through the scope update the web UI's editor makes; bad input changes
nothing."""

from __future__ import annotations

from pathlib import Path

from switchboard.core.verbs import DEFAULT_GRANT
from tests.reliability.procs import CliFailed, ServerProcess, cli, provision, server_env, servers
from tests.support.mcp_client import agent
from tests.support.server import free_port


async def test_grant_adds_and_removes_hook_verbs_on_a_live_endpoint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = server_env(notify_hook_allow_cidrs="127.0.0.1/32")
    tenant = await provision(env, data, slug="gr", verbs=DEFAULT_GRANT)
    url = f"https://127.0.0.1:{free_port()}/hook"
    server = ServerProcess(data, env, name="grant")
    with servers(server):
        server.start()
        await server.ready()
        async with agent(server.mcp_url, tenant.token) as a:
            refused = await a.call("create_notify_hook", {"url": url})
            assert not refused.ok

            granted = await cli(
                env, data, "endpoint", "grant", "gr", "--add", "create_notify_hook,list_notify_hooks"
            )
            assert (
                granted["added"] == ["create_notify_hook", "list_notify_hooks"] and granted["removed"] == []
            )
            assert set(granted["endpoint"]["verbs"]) == {
                *DEFAULT_GRANT,
                "create_notify_hook",
                "list_notify_hooks",
            }
            created = await a.ok("create_notify_hook", {"url": url})
            assert (await a.ok("list_notify_hooks"))["hooks"][0]["hook_id"] == created["hook_id"]

            taken = await cli(env, data, "endpoint", "grant", "gr", "--remove", "list_notify_hooks")
            assert taken["removed"] == ["list_notify_hooks"]
            assert not (await a.call("list_notify_hooks")).ok
            assert (await a.call("claim_next")).ok  # the rest of the grant is untouched

    for bad in (
        ["--add", "no_such_verb"],
        ["--add", "ack", "--remove", "ack"],
        ["--remove", ",".join((*DEFAULT_GRANT, "create_notify_hook"))],
    ):
        try:
            await cli(env, data, "endpoint", "grant", "gr", *bad)
        except CliFailed:
            continue
        raise AssertionError(f"endpoint grant {bad} succeeded")
    listed = await cli(env, data, "endpoint", "list")
    (endpoint,) = listed["endpoints"]
    assert set(endpoint["verbs"]) == {*DEFAULT_GRANT, "create_notify_hook"}
