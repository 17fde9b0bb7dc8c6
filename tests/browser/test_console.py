"""Every page of the console in real Chromium at a phone's width (390 px) and a desktop's (1280 px):
no horizontal scroll, zero axe-core WCAG 2.1 AA violations; a right-to-left override in sender text
renders neutralized on every page that shows it. Each page is saved as a screenshot per width
(docs/screenshots/ with SWITCHBOARD_SCREENSHOTS=1)."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import expect
from sqlalchemy import insert

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.notify.component import NotifyComponent
from switchboard.store.schema_console import backlog_samples
from switchboard.store.todos import NewTodo
from tests.browser.conftest import TIMEOUT_MS, WIDTHS, fits_and_passes_axe, shoot
from tests.integration.web.helpers import PASSWORD, Human, ManualFlow, register_client
from tests.support import hook_health
from tests.support.server import Instance

pytestmark = pytest.mark.asyncio(loop_scope="module")

EMAIL = "maria@acme.dev"
RLO = "\u202e"
BIDI_TITLE = f"Deploy {RLO}txt.exe\u202c now\u200b please"
BIDI_SHOWN = "Deploy txt.exe now please"


class Seeded:
    dead_id = ""
    bidi_id = ""
    other_id = ""
    invite_url = ""


SEED = Seeded()


async def seed(server: Instance) -> None:
    s = server.services
    accounts, todos = s.accounts, s.todos
    notify = s.parts.need(NotifyComponent)
    assert isinstance(notify, NotifyComponent)
    me = await accounts.create_human(EMAIL, PASSWORD, operator=True)
    other = await accounts.create_human("someone@else.dev", PASSWORD)
    theirs, _ = await accounts.vend_endpoint(other, "their-agent", ["inbox"], list(DEFAULT_GRANT))
    (SEED.other_id,) = (await todos.create([NewTodo(theirs.id, "inbox", "Their secret todo", {})])).created

    review, _ = await accounts.vend_endpoint(
        me, "review-bot", ["reviews", "inbox"], [*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs]
    )
    ci, _ = await accounts.vend_endpoint(me, "ci-runner", ["builds"], list(DEFAULT_GRANT))
    healthy, _ = await notify.store.create(
        review.id, "https://dispatch.acme.dev/switchboard?key=abc", [], False, 5
    )
    await hook_health.delivered(notify.store, healthy.id, 204)
    noisy, _ = await notify.store.create(review.id, "https://ci.acme.dev/hooks/sb", ["inbox"], False, 5)
    await hook_health.failed(notify.store, noisy.id, 503, "5xx")
    await notify.store.set_enabled_by_owner(review.id, noisy.id, False)

    titles = [
        ("reviews", "PR 482 opened in acme/widgets: Add retry budget to the fetcher", "pull_request"),
        ("inbox", "Issue 1203 opened in acme/api: 500 on /v2/orders when the cart is empty", "issues"),
        ("reviews", "PR 475 opened in acme/infra: Bump postgres to 17.2", "pull_request"),
    ]
    await todos.create([NewTodo(review.id, q, t, {}, kind=k, source="gitea-main") for q, t, k in titles])
    (SEED.bidi_id,) = (
        await todos.create(
            [NewTodo(review.id, "inbox", BIDI_TITLE, {}, kind=f"push{RLO}gnp", source="gitea-main")]
        )
    ).created
    claimed = await todos.claim_next(review.id, ["reviews"], 300)
    assert claimed is not None
    await todos.fail(review.id, claimed.id, claimed.lease_id, "upstream returned 502", retry=False)
    SEED.dead_id = claimed.id
    done = await todos.claim_next(review.id, ["reviews"], 300)
    assert done is not None
    await todos.ack(review.id, done.id, done.lease_id, {"ok": True})
    await todos.create([NewTodo(ci.id, "builds", "Nightly build of acme/widgets", {}, source="ci-token")])
    # A day of backlog history, as the sampler would have written it every 5 minutes (the sparkline).
    now_ms = int(s.clock.now() * 1000)
    bucket = 300_000
    start = now_ms - now_ms % bucket - 24 * 3_600_000
    history = [
        {"endpoint_id": review.id, "queue": q, "bucket": start + i * bucket, "pending": n}
        for i in range(1, 288)
        for q, n in (("inbox", round(5 + 4 * math.sin(i / 24))), ("reviews", max(0, 9 - abs(i - 150) // 12)))
    ]
    async with s.db.begin() as conn:
        await conn.execute(insert(backlog_samples), history)
    await s.console.sample_backlog()

    gitea = await s.sources.create(me, "gitea-main", "gitea", "signature", "x" * 40)
    await s.sources.create(me, "ci-token", "generic", "token", "z" * 43)
    await s.sources.add_route(gitea.slug, "reviews", "review-bot", "pull_request")
    await s.sources.add_route(gitea.slug, "inbox", "review-bot", "issues")
    await s.sources.add_route("ci-token", "builds", "ci-runner", None)
    token = await s.admin.invite("new.hire@acme.dev", operator=False, invited_by=me, lifetime_seconds=3600)
    SEED.invite_url = f"{server.base_url}/invite/{token}"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def seeded(server: Instance) -> AsyncIterator[Instance]:
    await seed(server)
    yield server


async def new_page(browser: Any, width: str) -> Any:
    context = await browser.new_context(
        viewport=WIDTHS[width], timezone_id="Europe/Berlin", locale="en-GB", bypass_csp=True
    )
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())
    return tab


async def sign_in(page: Any, server: Instance, email: str = EMAIL) -> None:
    await page.goto(server.base_url + "/login")
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(re.compile(r"/endpoints$"))


SIGNED_IN_PAGES = [
    ("endpoints", "/endpoints"),
    ("vend-wizard", "/vend"),
    ("endpoint-card", "/endpoints/review-bot"),
    ("endpoint-delete", "/endpoints/review-bot/delete"),
    ("queues", "/queues"),
    ("todos", "/todos"),
    ("todos-filtered", "/todos?state=pending&queue=inbox&age="),
    ("dead-letters", "/dead-letters"),
    ("todo-detail", "/todos/{dead}"),
    ("todo-bidi", "/todos/{bidi}"),
    ("sources", "/sources"),
    ("source-delete", "/sources/gitea-main/delete"),
    ("instance", "/instance"),
    ("people", "/people"),
    ("account", "/account"),
    ("not-found", "/endpoints/their-agent"),
]


@pytest.mark.parametrize("width", list(WIDTHS))
async def test_every_page_fits_and_passes_axe(
    browser: Any, seeded: Instance, axe_source: str, width: str
) -> None:
    server = seeded
    page = await new_page(browser, width)
    problems: list[str] = []
    try:
        await page.goto(server.base_url + "/login")
        problems += await fits_and_passes_axe(page, axe_source, f"login@{width}")
        await shoot(page, f"login-{width}")
        await page.goto(SEED.invite_url)
        await expect(page.get_by_role("heading", name="Join Switchboard")).to_be_visible()
        problems += await fits_and_passes_axe(page, axe_source, f"invite@{width}")
        await shoot(page, f"invite-{width}")

        await sign_in(page, server)
        for name, path in SIGNED_IN_PAGES:
            await page.goto(server.base_url + path.format(dead=SEED.dead_id, bidi=SEED.bidi_id))
            await expect(page.locator("main")).to_be_visible()
            problems += await fits_and_passes_axe(page, axe_source, f"{name}@{width}")
            await shoot(page, f"{name}-{width}")

        # The OAuth consent screen, reached the way a client reaches it.
        person = Human(server, EMAIL)
        try:
            await person.sign_in()
            start = await ManualFlow(server, person).start()
            assert start.status_code == 200, start.text
            consent_url = str(start.url)
        finally:
            await person.close()
        await page.goto(consent_url)
        await expect(page.get_by_test_id("client-name")).to_be_visible()
        problems += await fits_and_passes_axe(page, axe_source, f"consent@{width}")
        await shoot(page, f"oauth-consent-{width}")
    finally:
        await page.context.close()
    assert problems == [], "\n".join(problems)


async def test_a_bidi_title_renders_neutralized_everywhere(browser: Any, seeded: Instance) -> None:
    server = seeded
    page = await new_page(browser, "desktop")
    try:
        await sign_in(page, server)
        for path in ("/endpoints/review-bot", "/todos", "/todos?queue=inbox", f"/todos/{SEED.bidi_id}"):
            await page.goto(server.base_url + path)
            html = await page.content()
            assert RLO not in html and "\u202c" not in html and "\u200b" not in html, path
            title = page.locator(f"[data-testid=todo-title]:has-text('{BIDI_SHOWN}')")
            await expect(title.first).to_be_visible()
            assert BIDI_SHOWN in await title.first.inner_text()
        await page.goto(f"{server.base_url}/todos/{SEED.bidi_id}")
        await expect(page.locator("main")).to_contain_text("push gnp")

        # A hook path (stored percent-encoded) and an OAuth client's name (the consent screen) never
        # reach the page as a raw override either.
        review = await server.services.accounts.endpoint_by_slug("review-bot")
        assert review is not None
        await server.services.parts.need(NotifyComponent).store.create(
            review.id, f"https://hooks.acme.dev/run{RLO}gnp.exe", [], False, 5
        )
        await page.goto(f"{server.base_url}/endpoints/review-bot")
        await expect(page.locator("#hooks")).to_contain_text("https://hooks.acme.dev/run%E2%80%AEgnp.exe")
        assert RLO not in await page.content()
        person = Human(server, EMAIL)
        try:
            await person.sign_in()
            flow = ManualFlow(server, person)
            registered = await register_client(person.http, name=f"Helpful {RLO}tnega\u202c client")
            flow.client = registered.json()
            consent = await flow.start()
            assert consent.status_code == 200
        finally:
            await person.close()
        await page.goto(str(consent.url))
        await expect(page.get_by_test_id("client-name")).to_have_text("Helpful tnega client")
        assert RLO not in await page.content()
    finally:
        await page.context.close()
