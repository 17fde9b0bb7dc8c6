"""Issue 29's A2A half against the real ``switchboard serve``, set up through the CLI: a delivered push and
a failed one resent over MCP, a config's three failed pushes recovered once the receiver is back, each
received with its original webhook-id and a new signature the stock Standard Webhooks verifier accepts;
another tenant's ids not found; the endpoint card's delivery log shows the ``replay`` rows."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trustme
from a2a.client import Client, ClientConfig, create_client
from a2a.types.a2a_pb2 import SendMessageRequest
from standardwebhooks import Webhook

from switchboard.core.verbs import A2A, DEFAULT_GRANT
from tests.integration.a2a.conftest import message, push_config
from tests.integration.cli.test_call import call
from tests.integration.web.helpers import csrf_of
from tests.reliability.procs import ServerProcess, cli, server_env, servers
from tests.support.mcp_client import Agent, agent
from tests.support.receivers import HTTPSReceiver, RecordedRequest, Respond
from tests.support.secrets import reveal
from tests.support.waits import wait_until

REPLAY = ("resend_a2a_push", "recover_a2a_push")
PASSWORD = "correct horse battery"
WAIT = 30.0


@dataclass
class Served:
    server: ServerProcess
    receiver: HTTPSReceiver
    tokens: dict[str, str]
    stack: AsyncExitStack
    env: dict[str, str]

    async def agent(self, slug: str) -> Agent:
        return await self.stack.enter_async_context(agent(self.server.mcp_url, self.tokens[slug]))

    async def client(self) -> Client:
        http = await self.stack.enter_async_context(
            httpx.AsyncClient(headers={"Authorization": f"Bearer {self.tokens['client']}"}, timeout=30)
        )
        client = await create_client(self.server.base_url, ClientConfig(httpx_client=http, streaming=False))
        self.stack.push_async_callback(client.close)
        return client

    async def task_with_config(self, client: Client) -> tuple[str, str, str]:
        """A task (returned at once) and a StandardWebhooks config on it: (task id, config id, secret)."""
        request = SendMessageRequest(message=message())
        request.configuration.return_immediately = True
        (task,) = [event.task async for event in client.send_message(request)]
        url = f"https://127.0.0.1:{self.receiver.port}/a2a"
        created = await client.create_task_push_notification_config(
            push_config(url, task_id=task.id, scheme="StandardWebhooks")
        )
        reveal(created.authentication.credentials)
        return task.id, created.id, created.authentication.credentials

    def of(self, task_id: str) -> list[RecordedRequest]:
        return [r for r in self.receiver.requests if r.header("x-switchboard-task-id") == task_id]


async def tenants(env: dict[str, str], data: Path) -> dict[str, str]:
    """Two humans: one with a client endpoint (A2A and replay verbs) and a worker; one stranger."""
    for email in ("owner@example.com", "stranger@example.com"):
        await cli(env, data, "human", "create", email, "--password-stdin", stdin=f"{PASSWORD}\n")
    wanted = {
        "client": ("owner@example.com", "outbox", (*A2A.verbs, *REPLAY)),
        "worker": ("owner@example.com", "inbox", DEFAULT_GRANT),
        "stranger": ("stranger@example.com", "outbox", (*A2A.verbs, *REPLAY)),
    }
    tokens = {}
    for slug, (email, queue, verbs) in wanted.items():
        vend = ("endpoint", "vend", "--human", email, "--slug", slug, "--queues", queue)
        tokens[slug] = (await cli(env, data, *vend, "--verbs", ",".join(verbs)))["token"]
        reveal(tokens[slug])
    return tokens


@asynccontextmanager
async def served(tmp_path: Path, database_url: str | None = None) -> AsyncIterator[Served]:
    ca = trustme.CA()
    pem = tmp_path / "test-ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    env = server_env(
        database_url=database_url,
        a2a_push_allow_cidrs="127.0.0.1/32",
        mcp_rate_per_minute=1_000_000,
        SSL_CERT_FILE=str(pem),
    )
    data = tmp_path / "data"
    data.mkdir(parents=True)
    tokens = await tenants(env, data)
    server = ServerProcess(data, env, name="pushreplay")
    with servers(server):
        server.start()
        await server.ready()
        async with AsyncExitStack() as stack:
            receiver = await stack.enter_async_context(HTTPSReceiver(ca=ca, cert_hostnames=("127.0.0.1",)))
            yield Served(server, receiver, tokens, stack, env)


async def card(server: ServerProcess, slug: str) -> str:
    """The endpoint card as its owner sees it, signed in over plain HTTP like a browser."""
    async with httpx.AsyncClient(base_url=server.base_url, timeout=15) as http:
        page = await http.get("/login")
        data = {"csrf": csrf_of(page.text), "email": "owner@example.com", "password": PASSWORD}
        assert (await http.post("/login", data=data)).status_code == 303
        return (await http.get(f"/endpoints/{slug}")).text


async def test_resend_and_recover_a2a_pushes_through_the_served_server(tmp_path: Path) -> None:
    await _resend_and_recover(tmp_path)


async def test_resend_and_recover_a2a_pushes_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    await _resend_and_recover(tmp_path, pg_url)


async def _resend_and_recover(tmp_path: Path, database_url: str | None = None) -> None:
    async with served(tmp_path, database_url) as s:
        client = await s.client()
        me, worker, stranger = await s.agent("client"), await s.agent("worker"), await s.agent("stranger")

        # 1. One task's claimed push is delivered; then the receiver fails every push of another
        #    task (claimed, input-required, completed): 400 is final, no retry.
        first, _, first_secret = await s.task_with_config(client)
        await wait_until(lambda: _claim(worker), WAIT, "the first task to claim")
        await wait_until(lambda: s.of(first), WAIT, "the delivered push")
        s.receiver.behaviour = Respond(400)
        second, second_config, second_secret = await s.task_with_config(client)
        held = await wait_until(lambda: _claim(worker), WAIT, "the second task to claim")
        await worker.ok("ask", {"todo_id": second, "lease": held["lease"], "question": "which branch?"})
        await worker.ok("ack", {"todo_id": second, "lease": held["lease"], "result": "done"})
        await wait_until(lambda: len(s.of(second)) >= 3, WAIT, "three failed pushes")
        (delivered,) = s.of(first)
        failed = s.of(second)
        failed_ids = [r.header("webhook-id") for r in failed]
        page = await wait_until(
            lambda: _card_with(s.server, [delivered.header("webhook-id"), *failed_ids]),
            WAIT,
            "the delivery log's rows on the card",
        )
        assert 'data-reason="replay"' not in page

        # 2. The receiver is back: recover the second task's config since before the failures.
        s.receiver.behaviour = Respond(204)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 120))
        answer = await me.ok(
            "recover_a2a_push", {"task_id": second, "config_id": second_config, "since": since}
        )
        assert answer["found"] == 3 and answer["queued"] == 3, answer
        await wait_until(lambda: len(s.of(second)) >= 6, WAIT, "three recovered pushes")
        recovered = s.of(second)[3:]
        assert [r.header("webhook-id") for r in recovered] == failed_ids  # oldest first, same ids
        for old, new in zip(failed, recovered, strict=True):
            assert new.body == old.body and new.header("x-switchboard-sequence") == old.header(
                "x-switchboard-sequence"
            )
            Webhook(second_secret).verify(new.body, new.header_map)

        # 3. Resend the delivered one from a shell (``switchboard call``, the endpoint's verb through the
        #    running server): same webhook-id and event, a new valid signature.
        delivered_id = delivered.header("webhook-id")
        token = s.tokens["client"] + "\n"
        shell = await call(s.env, s.server.port, token, "resend_a2a_push", f"notification_id={delivered_id}")
        assert shell.returncode == 0, shell.stderr
        assert json.loads(shell.stdout)["queued"] is True, shell.stdout
        await wait_until(lambda: len(s.of(first)) >= 2, WAIT, "the resent push")
        again = s.of(first)[1]
        assert again.header("webhook-id") == delivered_id and again.body == delivered.body
        Webhook(first_secret).verify(again.body, again.header_map)

        # 4. Another tenant's ids answer as unknown ones do, and nothing is sent.
        seen = len(s.receiver.requests)
        theirs = await stranger.call("resend_a2a_push", {"notification_id": delivered_id})
        unknown = await stranger.call("resend_a2a_push", {"notification_id": "msg_unknown"})
        assert theirs.code == unknown.code == "not_found" and theirs.data == unknown.data
        config = await stranger.call(
            "recover_a2a_push", {"task_id": second, "config_id": second_config, "since": since}
        )
        assert config.code == "not_found"

        # 5. The card's delivery log shows the four replays, delivered.
        page = await wait_until(lambda: _replays(s.server, 4), WAIT, "four replay rows")
        assert page.count('data-outcome="delivered" data-reason="replay"') == 4
        assert len(s.receiver.requests) == seen


async def _claim(worker: Agent) -> dict[str, Any] | None:
    todo: dict[str, Any] | None = (await worker.ok("claim_next"))["todo"]
    return todo


async def _card_with(server: ServerProcess, ids: list[str | None]) -> str | None:
    page = await card(server, "client")
    return page if all(f'data-notification="{i}"' in page for i in ids) else None


async def _replays(server: ServerProcess, n: int) -> str | None:
    page = await card(server, "client")
    return page if page.count('data-reason="replay"') >= n else None
