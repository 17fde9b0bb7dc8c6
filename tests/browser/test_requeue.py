"""Requeue from the todo page, against a real ``switchboard serve`` (default process layout, notify
worker processes included): a dead todo becomes claimable again, the endpoint's notify hook is told with
reason ``requeued`` (SPEC-0024 REQ-6; verified with the stock Standard Webhooks verifier), and the
todo's timeline names the human who did it."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from playwright.async_api import expect
from standardwebhooks import Webhook

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from tests.browser.conftest import TIMEOUT_MS
from tests.integration.web.helpers import PASSWORD
from tests.reliability.procs import ServerProcess, provision, server_env, servers
from tests.support.mcp_client import agent
from tests.support.receivers import HTTPSReceiver, RecordedRequest

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def notification(receiver: HTTPSReceiver, todo_id: str, reason: str) -> RecordedRequest:
    """The next notification about ``todo_id`` with ``reason`` (others are skipped), bounded in time."""
    async with asyncio.timeout(20):
        while True:
            request = await receiver.next_request(timeout=20)
            body = json.loads(request.body)
            if body["todo_id"] == todo_id and body["reason"] == reason:
                return request


async def test_requeue_from_the_todo_page_rings_the_hook_and_frees_the_todo(
    browser: Any, tmp_path: Path
) -> None:
    ca = trustme.CA()
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    data = tmp_path / "data"
    env = server_env(notify_hook_allow_cidrs="127.0.0.1/32", SSL_CERT_FILE=str(pem))
    tenant = await provision(env, data, slug="ops", verbs=[*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs])
    server = ServerProcess(data, env, name="requeue")
    async with HTTPSReceiver(ca=ca, cert_hostnames=("127.0.0.1",)) as receiver:
        with servers(server):
            server.start()
            await server.ready()
            async with agent(server.mcp_url, tenant.token) as bot:
                hook = await bot.ok("create_notify_hook", {"url": f"https://127.0.0.1:{receiver.port}/hook"})
                async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
                    r = await http.post(tenant.inbound_path, json={"title": "Rebuild the index"})
                assert r.status_code == 202, r.text
                (todo_id,) = r.json()["todos"]
                await notification(receiver, todo_id, "created")
                claimed = (await bot.ok("claim_next"))["todo"]
                assert claimed["id"] == todo_id
                await bot.ok(
                    "fail",
                    {"todo_id": todo_id, "lease": claimed["lease"], "error": "disk full", "retry": False},
                )
                assert (await bot.ok("claim_next"))["todo"] is None  # dead: nothing to claim

                context = await browser.new_context(viewport={"width": 390, "height": 844})
                context.set_default_timeout(TIMEOUT_MS)
                page = await context.new_page()
                try:
                    await page.goto(server.base_url + "/login")
                    await page.get_by_label("Email").fill(tenant.email)
                    await page.get_by_label("Password").fill(PASSWORD)
                    await page.get_by_role("button", name="Sign in").click()
                    await expect(page).to_have_url(re.compile(r"/endpoints$"))
                    await page.get_by_role("link", name="Dead letters").click()
                    await page.get_by_role("link", name="Rebuild the index").click()
                    await expect(page).to_have_url(re.compile(f"/todos/{todo_id}$"))
                    await expect(page.locator("main")).to_contain_text("disk full")
                    await page.get_by_role("button", name="Requeue").click()
                    await expect(page.get_by_role("status")).to_contain_text("Todo requeued")

                    request = await notification(receiver, todo_id, "requeued")
                    Webhook(hook["signing_secret"]).verify(request.body, request.header_map)
                    again = (await bot.ok("claim_next"))["todo"]
                    assert again is not None and again["id"] == todo_id and again["attempt"] == 1

                    await page.reload()
                    timeline = page.locator("#timeline li")
                    await expect(timeline).to_have_count(5)  # created, claimed, dead, requeued, claimed
                    requeued = page.locator("#timeline li[data-transition=requeued]")
                    await expect(requeued).to_contain_text(f"by {tenant.email}")
                    await expect(requeued).to_contain_text("operator")
                    await page.goto(server.base_url + "/dead-letters")
                    await expect(page.locator("main")).not_to_contain_text("Rebuild the index")
                finally:
                    await context.close()
    audit = [json.loads(line) for line in server.log_path.read_text().splitlines() if '"audit"' in line]
    # Other acts (sign-in, hook create, ...) are audited too; the todo's own acts are exactly one requeue.
    todo_acts = [
        (a["action"], a["actor"], a.get("todo_id")) for a in audit if a["action"].startswith("todo.")
    ]
    assert todo_acts == [("todo.requeue", tenant.email, todo_id)]
