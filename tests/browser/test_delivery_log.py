"""The endpoint card's delivery log, send test and rotate, against a real ``switchboard serve`` (default
process layout, notify worker processes included) and receivers on loopback (issue 19, part 6):

* "Send test" reaches the receiver signed (the stock Standard Webhooks verifier accepts it), marked as a
  test, and the card's history shows it delivered with a 2xx attempt.
* "Rotate secret" shows the new secret once and says until when the old one signs; the next test is
  signed with both.
* A hook whose receiver answers 503 shows one notification with three attempts, each HTTP 503.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from playwright.async_api import Locator, Page, expect
from standardwebhooks import Webhook

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from tests.browser.conftest import TIMEOUT_MS, WIDTHS, fits_and_passes_axe, shoot
from tests.integration.web.helpers import PASSWORD
from tests.reliability.procs import ServerProcess, provision, server_env, servers
from tests.support.mcp_client import agent
from tests.support.receivers import HTTPSReceiver, Respond

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEADLINE = 30.0


async def reload_until(page: Page, card: str, rows: Locator, count: int) -> None:
    """The history is written by the worker's next flush: load the card again (a GET: reloading the page a
    POST answered would send the form again) until ``rows`` has ``count``."""
    end = time.monotonic() + DEADLINE
    while await rows.count() < count:
        assert time.monotonic() < end, f"the card never showed {count} matching deliveries"
        await asyncio.sleep(0.2)
        await page.goto(card)


async def test_card_sends_a_test_rotates_and_shows_every_attempt(
    browser: Any, tmp_path: Path, axe_source: str
) -> None:
    ca = trustme.CA()
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    data = tmp_path / "data"
    env = server_env(notify_hook_allow_cidrs="127.0.0.1/32", SSL_CERT_FILE=str(pem))
    tenant = await provision(env, data, slug="ops", verbs=[*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs])
    server = ServerProcess(data, env, name="delivery-log")
    good = HTTPSReceiver(ca=ca, cert_hostnames=("127.0.0.1",))
    bad = HTTPSReceiver(ca=ca, cert_hostnames=("127.0.0.1",), behaviour=Respond(status=503))
    async with good, bad:
        with servers(server):
            server.start()
            await server.ready()
            async with agent(server.mcp_url, tenant.token) as bot:
                ok_hook = await bot.ok("create_notify_hook", {"url": f"https://127.0.0.1:{good.port}/ok"})
                dead_hook = await bot.ok("create_notify_hook", {"url": f"https://127.0.0.1:{bad.port}/dead"})

            context = await browser.new_context(viewport=WIDTHS["desktop"], bypass_csp=True)  # axe injection
            context.set_default_timeout(TIMEOUT_MS)
            page = await context.new_page()
            page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
            try:
                await page.goto(server.base_url + "/login")
                await page.get_by_label("Email").fill(tenant.email)
                await page.get_by_label("Password").fill(PASSWORD)
                await page.get_by_role("button", name="Sign in").click()
                await expect(page).to_have_url(re.compile(r"/endpoints$"))
                card_url = server.base_url + "/endpoints/ops"
                await page.goto(card_url)

                # -- send test: signed, marked as a test, shown inline and in the history
                ok_card = page.locator(f"[data-testid=hook-detail][data-hook={ok_hook['hook_id']}]")
                await ok_card.get_by_role("button", name="Send test").click()
                result = page.locator("[data-testid=test-result]")
                await expect(result).to_have_attribute("data-outcome", "delivered")
                request = await good.next_request(timeout=DEADLINE)
                Webhook(ok_hook["signing_secret"]).verify(request.body, request.header_map)
                body = json.loads(request.body)
                assert body["type"] == "todo.ready" and body["test"] is True and body["reason"] == "test"
                await expect(result).to_contain_text(request.header_map["webhook-id"])
                await expect(result).to_contain_text("HTTP 204")  # what the receiver answers
                problems = await fits_and_passes_axe(page, axe_source, "card with a test result")

                ok_card = page.locator(f"[data-testid=hook-detail][data-hook={ok_hook['hook_id']}]")
                delivered = ok_card.locator(
                    f"[data-testid=delivery][data-notification='{request.header_map['webhook-id']}']"
                )
                await reload_until(page, card_url, delivered, 1)
                await expect(delivered).to_have_attribute("data-outcome", "delivered")
                attempts = delivered.locator("[data-testid=attempt]")
                await expect(attempts).to_have_count(1)
                status = await attempts.first.get_attribute("data-status")
                assert status is not None and 200 <= int(status) < 300
                await expect(delivered).to_contain_text("test")

                # -- rotate: the new secret once, and when the old one stops signing
                await ok_card.get_by_role("button", name="Rotate secret").click()
                new_secret = await page.locator("[data-testid=new-secret]").inner_text()
                assert new_secret.startswith("whsec_") and new_secret != ok_hook["signing_secret"]
                await expect(page.locator("[data-testid=rotated]")).to_contain_text("keeps signing")
                problems += await fits_and_passes_axe(page, axe_source, "card with a new secret")
                ok_card = page.locator(f"[data-testid=hook-detail][data-hook={ok_hook['hook_id']}]")
                await ok_card.get_by_role("button", name="Send test").click()
                await expect(page.locator("[data-testid=test-result]")).to_have_attribute(
                    "data-outcome", "delivered"
                )
                request = await good.next_request(timeout=DEADLINE)
                Webhook(new_secret).verify(request.body, request.header_map)  # new and old both sign
                Webhook(ok_hook["signing_secret"]).verify(request.body, request.header_map)
                assert len(request.header_map["webhook-signature"].split(" ")) == 2
                # -- a receiver answering 503: one notification, three attempts, each HTTP 503
                async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
                    r = await http.post(tenant.inbound_path, json={"title": "Rotate the logs"})
                assert r.status_code == 202, r.text
                (todo_id,) = r.json()["todos"]
                for _ in range(3):
                    await bad.next_request(timeout=DEADLINE)
                dead_card = page.locator(f"[data-testid=hook-detail][data-hook={dead_hook['hook_id']}]")
                failed = dead_card.locator("[data-testid=delivery][data-outcome=failed]")
                await reload_until(page, card_url, failed, 1)
                await expect(failed).to_contain_text(todo_id)
                tries = failed.locator("[data-testid=attempt]")
                await expect(tries).to_have_count(3)
                assert [await tries.nth(i).get_attribute("data-status") for i in range(3)] == ["503"] * 3
                await expect(failed).to_contain_text("server_error")
                for width, size in WIDTHS.items():  # the card with its history, at both widths
                    await page.set_viewport_size(size)
                    await page.goto(card_url)
                    problems += await fits_and_passes_axe(page, axe_source, f"card with history@{width}")
                    if os.environ.get("SWITCHBOARD_SCREENSHOTS"):
                        await shoot(page, f"endpoint-card-deliveries-{width}")
                assert not problems, "\n".join(problems)
            finally:
                await context.close()
    assert len(bad.requests) == 3  # never a fourth attempt
    tests = [r for r in good.requests if json.loads(r.body).get("test") is True]
    assert len(tests) == 2  # one per click of "Send test", never sent again
