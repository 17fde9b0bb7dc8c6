"""Issue 15 against the real ``switchboard serve`` process, from outside: a scope cut in the web editor
stops the endpoint's hooks and its tasks' A2A push configs on the next notification (and the card says
why, and lists the configs for deletion); titles reach MCP results neutralized; the web UI refuses a
``Host`` that is not its public one."""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trustme
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import SendMessageRequest

from switchboard.core.verbs import A2A, DEFAULT_GRANT, NOTIFY_HOOKS
from tests.integration.a2a.conftest import message, push_config
from tests.reliability.notify_served import TimedReceiver
from tests.reliability.procs import ServerProcess, Tenant, cli, provision, server_env, servers
from tests.support.mcp_client import agent
from tests.support.secrets import reveal
from tests.support.waits import wait_until

PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
WAIT = 30.0
HOOKS_PAUSED = "paused: the endpoint no longer holds the notify-hook verbs"


async def until(what: str, check: Any, server: ServerProcess, timeout: float = WAIT) -> Any:
    """Poll a child's state (a process boundary offers nothing to await), bounded."""
    return await wait_until(check, timeout, what, server.log_tail)


async def signed_in(http: httpx.AsyncClient, email: str) -> None:
    page = await http.get("/login")
    r = await http.post("/login", data={"csrf": csrf_of(page.text), "email": email, "password": PASSWORD})
    assert r.status_code == 303, r.text[-500:]


def csrf_of(text: str) -> str:
    match = CSRF.search(text)
    assert match, "no CSRF token on the page"
    return match.group(1)


async def metric(http: httpx.AsyncClient, name: str, **labels: str) -> float:
    total = 0.0
    for line in (await http.get("/metrics")).text.splitlines():
        head, _, value = line.rpartition(" ")
        found = dict(re.findall(r'(\w+)="([^"]*)"', head))
        if head.split("{")[0] == name and all(found.get(k) == v for k, v in labels.items()):
            total += float(value)
    return total


@asynccontextmanager
async def running(
    tmp_path: Path, **settings: Any
) -> AsyncIterator[tuple[dict[str, str], ServerProcess, trustme.CA]]:
    ca = trustme.CA()
    pem = tmp_path / "test-ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    env = server_env(
        notify_hook_allow_cidrs="127.0.0.1/32",
        a2a_push_allow_cidrs="127.0.0.0/8",
        mcp_rate_per_minute=1_000_000,
        SSL_CERT_FILE=str(pem),
        **settings,
    )
    data = tmp_path / "data"
    yield env, ServerProcess(data, env, name="scope"), ca


async def test_scope_cut_in_the_web_editor_stops_hooks_and_push_configs(tmp_path: Path) -> None:
    async with running(tmp_path) as (env, server, ca), AsyncExitStack() as stack:
        data = server.data_dir
        cut_verbs = (*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs, *A2A.verbs)
        # "cut": hooks on its queue "hooks", and an A2A sender whose tasks land on "inbox" (worked by
        # "worker", same human). "sentinel": another tenant whose hook must still fire afterwards.
        cut: Tenant = await provision(env, data, slug="cut", verbs=cut_verbs, queue="hooks")
        sentinel: Tenant = await provision(
            env, data, slug="sentinel", verbs=(*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs)
        )
        worker = await cli(
            env, data, "endpoint", "vend", "--human", cut.email, "--slug", "worker",
            "--queues", "inbox", "--verbs", ",".join(DEFAULT_GRANT),
        )  # fmt: skip
        reveal(cut.token, sentinel.token, worker["token"])
        receiver = await stack.enter_async_context(TimedReceiver(ca=ca))
        with servers(server):
            server.start()
            await server.ready()
            http = await stack.enter_async_context(httpx.AsyncClient(base_url=server.base_url, timeout=15))
            cut_agent = await stack.enter_async_context(agent(server.mcp_url, cut.token))
            sentinel_agent = await stack.enter_async_context(agent(server.mcp_url, sentinel.token))
            work = await stack.enter_async_context(agent(server.mcp_url, worker["token"]))
            await cut_agent.ok("create_notify_hook", {"url": receiver.hook_url("/cut-hook")})
            await sentinel_agent.ok("create_notify_hook", {"url": receiver.hook_url("/sentinel-hook")})
            a2a_http = await stack.enter_async_context(
                httpx.AsyncClient(headers={"Authorization": f"Bearer {cut.token}"}, timeout=60)
            )
            client = await create_client(
                server.base_url, ClientConfig(httpx_client=a2a_http, streaming=False)
            )
            stack.push_async_callback(client.close)

            def paths() -> list[str]:
                return [r.path for r in receiver.requests]

            # Before the cut both outbound paths work: a todo rings the hook; a task pushes "submitted".
            r = await http.post(cut.inbound_path, json={"title": "before"})
            assert r.status_code == 202, r.text
            await until("the cut endpoint's hook fired", lambda: "/cut-hook" in paths(), server)
            request = message("before the cut", queue="inbox")
            request_push = push_config(receiver.hook_url("/cut-push"), token="tok-scope-cut-17")
            send = SendMessageRequest(message=request)
            send.configuration.return_immediately = True
            send.configuration.task_push_notification_config.CopyFrom(request_push)
            tasks = [event.task async for event in client.send_message(send)]
            task = tasks[0]
            await until("the task's first push", lambda: "/cut-push" in paths(), server)
            seen = len(receiver.requests)

            # The owner cuts every notify-hook and A2A verb in the web scope editor.
            await signed_in(http, cut.email)
            card = await http.get("/endpoints/cut")
            assert card.status_code == 200 and HOOKS_PAUSED not in card.text
            assert "tok-scope-cut-17" not in card.text
            saved = await http.post(
                "/endpoints/cut/scope",
                data={"csrf": csrf_of(card.text), "queues": "hooks", "verbs": list(DEFAULT_GRANT)},
            )
            assert saved.status_code == 303, saved.text[-500:]
            revoked_before = await metric(http, "switchboard_a2a_push_deliveries_total", outcome="revoked")

            # The next notifications: the task moves twice (claimed, done), a todo for the cut endpoint...
            todo = await until("the task on the worker's queue", lambda: _claim(work), server)
            assert todo["id"] == task.id
            await work.ok("ack", {"todo_id": todo["id"], "lease": todo["lease"], "result": "done"})
            r = await http.post(cut.inbound_path, json={"title": "after"})
            assert r.status_code == 202, r.text
            # ...then the sentinel: another tenant's hook, which does fire.
            r = await http.post(sentinel.inbound_path, json={"title": "sentinel"})
            assert r.status_code == 202, r.text
            await until("the sentinel hook fired", lambda: "/sentinel-hook" in paths()[seen:], server)
            await until(
                "the A2A worker ended the task's two deliveries as revoked",
                lambda: _at_least(http, revoked_before + 2),
                server,
            )
            after = paths()[seen:]
            assert "/cut-hook" not in after and "/cut-push" not in after, after

            # The card says why, and lists the task's push config for deletion.
            card = await http.get("/endpoints/cut")
            text = html.unescape(card.text)
            assert HOOKS_PAUSED in text
            assert 'data-testid="push-paused"' in card.text
            assert f'data-push-config="{_config_id(card.text)}"' in card.text
            config_id = _config_id(card.text)
            # A foreign or unknown config is not found; the owner's own delete removes it (the same
            # store call as A2A DeleteTaskPushNotificationConfig).
            missing = await http.post(
                f"/endpoints/cut/push-configs/{task.id}/nope/delete", data={"csrf": csrf_of(card.text)}
            )
            assert missing.status_code == 404
            foreign = await http.post(
                f"/endpoints/sentinel/push-configs/{task.id}/{config_id}/delete",
                data={"csrf": csrf_of(card.text)},
            )
            assert foreign.status_code == 404
            no_csrf = await http.post(f"/endpoints/cut/push-configs/{task.id}/{config_id}/delete")
            assert no_csrf.status_code in (400, 403)
            gone = await http.post(
                f"/endpoints/cut/push-configs/{task.id}/{config_id}/delete", data={"csrf": csrf_of(card.text)}
            )
            assert gone.status_code == 303
            card = await http.get(gone.headers["location"])
            assert "data-push-config=" not in card.text
            assert "Push config deleted" in card.text


def _config_id(page: str) -> str:
    match = re.search(r'data-push-config="([^"]+)"', page)
    assert match, "no push config listed on the card"
    return match.group(1)


async def _claim(work: Any) -> dict[str, Any] | None:
    todo: dict[str, Any] | None = (await work.ok("claim_next"))["todo"]
    return todo


async def _at_least(http: httpx.AsyncClient, n: float) -> bool:
    return await metric(http, "switchboard_a2a_push_deliveries_total", outcome="revoked") >= n


BIDI = "pay\u202e gnp.exe\u200b\x07 now\u2066x\u2069"


async def test_mcp_results_show_titles_neutralized_and_payloads_untouched(tmp_path: Path) -> None:
    env = server_env(mcp_rate_per_minute=1_000_000)
    data = tmp_path / "data"
    tenant = await provision(env, data, slug="display", verbs=DEFAULT_GRANT)
    server = ServerProcess(data, env, name="display")
    with servers(server):
        server.start()
        await server.ready()
        async with httpx.AsyncClient(base_url=server.base_url) as http:
            r = await http.post(tenant.inbound_path, json={"title": BIDI, "body": BIDI})
            assert r.status_code == 202, r.text
        async with agent(server.mcp_url, tenant.token) as a:
            for verb, args in (("list_todos", {"status": "pending"}), ("claim_next", {})):
                raw = await a.client.call_tool(verb, args)
                texts = [json.loads(getattr(c, "text", "")) for c in raw.content]
                for shown in (raw.structured_content, *texts):
                    assert shown is not None
                    todo = shown["todos"][0] if verb == "list_todos" else shown["todo"]
                    assert todo["title"] == "pay gnp.exe now x"
                    assert not any(ch in todo["title"] for ch in "\u202e\u200b\x07\u2066\u2069")
                    if verb == "claim_next":
                        assert todo["payload"]["body"] == BIDI  # data, not display: untouched


async def test_web_ui_refuses_a_host_that_is_not_its_public_one(tmp_path: Path) -> None:
    env = server_env(public_url="https://switchboard.example.test")
    data = tmp_path / "data"
    tenant = await provision(env, data, slug="hosts", verbs=DEFAULT_GRANT)
    server = ServerProcess(data, env, name="hosts")
    with servers(server):
        server.start()
        await server.ready()
        async with httpx.AsyncClient(base_url=server.base_url) as http:
            for host in (
                "evil.example",
                "switchboard.example.test.evil.example",
                "switchboard.example.test:8443",
            ):
                r = await http.get("/login", headers={"host": host})
                assert r.status_code == 400 and "Unknown host" in r.text, host
                assert "set-cookie" not in r.headers
            for host in (
                "switchboard.example.test",
                "switchboard.example.test:443",
                "SWITCHBOARD.example.test",
            ):
                assert (await http.get("/login", headers={"host": host})).status_code == 200, host
            assert (await http.get("/login")).status_code == 200  # loopback: the operator's own address
            # /in is not checked: forges call it by whatever name the operator gave them.
            r = await http.post(
                tenant.inbound_path, json={"title": "t"}, headers={"host": "forge-facing.example"}
            )
            assert r.status_code == 202, r.text
