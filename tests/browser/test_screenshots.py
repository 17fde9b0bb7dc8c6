"""The main pages with a lived-in tenant, in Chromium: they render and their local times are rewritten
by the shipped script. (The screenshots of every page, at both widths, come from test_console.py.)"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.async_api import expect

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.notify.component import NotifyComponent
from switchboard.store.todos import NewTodo
from tests.integration.web.helpers import PASSWORD, Human, ManualFlow
from tests.support import hook_health
from tests.support.server import Instance

pytestmark = pytest.mark.asyncio(loop_scope="module")

EMAIL = "maria@acme.dev"


async def seed(server: Instance) -> None:
    s = server.services
    accounts, todos = s.accounts, s.todos
    notify = s.parts.need(NotifyComponent)
    assert isinstance(notify, NotifyComponent)
    me = await accounts.create_human(EMAIL, PASSWORD, operator=True)
    other = await accounts.create_human("someone@else.dev", PASSWORD)
    await accounts.vend_endpoint(other, "their-agent", ["inbox"], list(DEFAULT_GRANT))

    review, _ = await accounts.vend_endpoint(
        me, "review-bot", ["reviews", "inbox"], [*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs]
    )
    ci, _ = await accounts.vend_endpoint(me, "ci-runner", ["builds"], list(DEFAULT_GRANT))
    await accounts.vend_endpoint(me, "triage-agent", ["inbox"], ["claim_next", "ack", "fail", "list_todos"])
    await s.presence.set_clocked(ci.id, "out")

    healthy, _ = await notify.store.create(
        review.id, "https://dispatch.acme.dev/switchboard?key=abc", [], False, 5
    )
    await hook_health.delivered(notify.store, healthy.id, 204)
    dead, _ = await notify.store.create(review.id, "https://old-runner.acme.dev/wake", ["reviews"], True, 5)
    for _ in range(10):
        await hook_health.failed(notify.store, dead.id, None, "timeout")
    noisy, _ = await notify.store.create(review.id, "https://ci.acme.dev/hooks/sb", ["inbox"], False, 5)
    await hook_health.failed(notify.store, noisy.id, 503, "5xx")
    await notify.store.set_enabled_by_owner(review.id, noisy.id, False)

    titles = [
        ("reviews", "PR 482 opened in acme/widgets: Add retry budget to the fetcher", "pull_request"),
        ("reviews", "PR 479 synchronized in acme/widgets: Drop the legacy exporter", "pull_request"),
        ("inbox", "Issue 1203 opened in acme/api: 500 on /v2/orders when the cart is empty", "issues"),
        ("inbox", "Issue 1199 commented in acme/api: flaky test in payments suite", "issue_comment"),
        ("reviews", "PR 475 opened in acme/infra: Bump postgres to 17.2", "pull_request"),
    ]
    await todos.create([NewTodo(review.id, q, t, {}, kind=k, source="gitea-main") for q, t, k in titles])
    claimed = await todos.claim_next(review.id, ["reviews"], 300)
    assert claimed is not None
    done = await todos.claim_next(review.id, ["inbox"], 300)
    assert done is not None
    await todos.ack(review.id, done.id, done.lease_id, {"ok": True})
    await todos.create([NewTodo(ci.id, "builds", "Nightly build of acme/widgets", {}, source="ci-token")])

    gitea = await s.sources.create(me, "gitea-main", "gitea", "signature", "x" * 40)
    github = await s.sources.create(me, "github-org", "github", "signature", "y" * 40)
    await s.sources.create(me, "ci-token", "generic", "token", "z" * 43)
    await s.sources.set_quarantine(github.id, True)
    await s.sources.add_route(gitea.slug, "reviews", "review-bot", "pull_request")
    await s.sources.add_route(gitea.slug, "inbox", "review-bot", "issues")
    await s.sources.add_route("ci-token", "builds", "ci-runner", None)
    await s.sources.add_route(github.slug, "triage", "triage-agent", None)

    person = Human(server, EMAIL)  # an OAuth connection on review-bot, made over the protocol
    try:
        await person.sign_in()
        flow = ManualFlow(server, person)
        flow_code = await flow.code(
            target="existing", endpoint="review-bot", verbs=["claim_next", "ack", "list_todos"]
        )
        assert (await flow.exchange(flow_code)).status_code == 200
    finally:
        await person.close()


async def test_main_pages(page: Any, server: Instance) -> None:
    await seed(server)
    await page.goto(server.base_url + "/login")
    await page.get_by_label("Email").fill(EMAIL)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(re.compile(r"/endpoints$"))
    await expect(page.locator("tbody tr")).to_have_count(3)
    await expect(page.locator("body")).not_to_contain_text("their-agent")
    # The shipped script rewrote the UTC fallback into the viewer's zone (Europe/Berlin here).
    await expect(page.locator("time").first).not_to_contain_text("UTC")
    await expect(page.locator("#viewer-zone")).to_have_text("Europe/Berlin")

    await page.get_by_role("link", name="review-bot").click()
    await expect(page.locator("#hooks tbody tr")).to_have_count(3)
    await expect(page.locator("#hooks")).to_contain_text("consecutive_failures")
    await expect(page.locator("#connections")).to_contain_text("Manual client")
    await expect(page.locator("#todos tbody tr")).to_have_count(5)

    await page.goto(server.base_url + "/sources")
    await expect(page.locator("body")).to_contain_text("quarantined")

    await page.goto(server.base_url + "/instance")
    await expect(page.get_by_role("heading", name="Instance")).to_be_visible()
    await expect(page.locator("body")).not_to_contain_text("their-agent")
