"""The web UI in a real headless Chromium: sign in, vend through the wizard, the outbound-HTTP group,
disable a hook from the endpoint card (and see list_notify_hooks agree), another human's endpoint,
and the OAuth consent screen completing an MCP SDK client's flow. Screenshots go to docs/screenshots/."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from playwright.async_api import expect

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.notify.component import NotifyComponent
from tests.browser.conftest import shoot
from tests.integration.web.helpers import PASSWORD, MemoryStorage
from tests.support.mcp_client import agent
from tests.support.server import Instance

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def sign_in(page: Any, server: Instance, email: str, *, operator: bool = False) -> str:
    human_id = await server.services.accounts.create_human(email, PASSWORD, operator=operator)
    await page.goto(server.base_url + "/")
    await expect(page).to_have_url(re.compile(r"/login"))
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(re.compile(r"/endpoints$"))
    return human_id


async def test_sign_in_vend_through_the_wizard_and_see_the_outbound_group(
    page: Any, server: Instance
) -> None:
    await page.goto(server.base_url + "/login")
    await page.get_by_label("Email").fill("wrong@example.com")
    await page.get_by_label("Password").fill("not the password")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("alert")).to_contain_text("do not match an account")
    await shoot(page, "login-error")

    await sign_in(page, server, "ada@example.com")
    await expect(page.get_by_role("heading", name="No endpoints yet")).to_be_visible()
    await shoot(page, "endpoints-empty")

    await page.get_by_role("link", name="Vend an endpoint").first.click()
    await expect(page).to_have_url(re.compile(r"/vend$"))
    outbound = page.locator("fieldset.grant-group.outbound[data-group=notify_hooks]")
    await expect(outbound.locator("legend")).to_contain_text(NOTIFY_HOOKS.label)
    for verb in NOTIFY_HOOKS.verbs:
        box = outbound.get_by_label(verb)
        await expect(box).to_be_visible()
        await expect(box).not_to_be_checked()
    await expect(page.locator("fieldset[data-group=consumer]").get_by_label("claim_next")).to_be_checked()

    await page.get_by_label("Slug").fill("review-bot")
    await page.get_by_label("Queues").fill("inbox, reviews")
    await outbound.get_by_label("create_notify_hook").check()
    await outbound.get_by_label("list_notify_hooks").check()
    await page.get_by_role("button", name="Vend endpoint").click()
    await expect(page.get_by_role("heading", name="review-bot is vended")).to_be_visible()
    token = (await page.get_by_test_id("token").inner_text()).strip()
    assert token.startswith("sbt_")
    await shoot(page, "token-shown-once")

    async with agent(server.mcp_url, token) as bot:
        who = await bot.ok("whoami")
        assert who["endpoint"] == "review-bot" and who["queues"] == ["inbox", "reviews"]
        assert {"create_notify_hook", "list_notify_hooks"} <= set(who["verbs"])
        assert "rotate_notify_hook" not in who["verbs"]


async def test_disable_a_hook_from_the_card(page: Any, server: Instance) -> None:
    services = server.services
    human_id = await sign_in(page, server, "bo@example.com")
    endpoint, token = await services.accounts.vend_endpoint(
        human_id, "dispatcher", ["inbox"], [*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs]
    )
    notify = services.parts.need(NotifyComponent)
    assert isinstance(notify, NotifyComponent)
    hook, _ = await notify.store.create(endpoint.id, "https://hooks.example.com/sb?key=hidden", [], False, 5)

    await page.goto(f"{server.base_url}/endpoints/dispatcher")
    row = page.locator(f"tr[data-hook='{hook.id}']")
    await expect(row.get_by_test_id("hook-enabled")).to_have_text("enabled")
    await expect(row).to_contain_text("https://hooks.example.com/sb")
    await expect(row).not_to_contain_text("hidden")
    await row.get_by_role("button", name="Disable").click()
    await expect(page.get_by_role("status")).to_contain_text("Hook disabled")
    await expect(row.get_by_test_id("hook-enabled")).to_have_text("disabled")
    await expect(row.get_by_test_id("hook-reason")).to_have_text("operator")

    async with agent(server.mcp_url, token) as bot:
        hooks = (await bot.ok("list_notify_hooks"))["hooks"]
    assert [(h["hook_id"], h["enabled"], h["disabled_reason"]) for h in hooks] == [
        (hook.id, False, "operator")
    ]


async def test_another_humans_endpoint_is_not_found(page: Any, server: Instance) -> None:
    services = server.services
    owner = await services.accounts.create_human("owner@example.com", PASSWORD)
    theirs, _ = await services.accounts.vend_endpoint(
        owner, "not-yours", ["inbox"], [*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs]
    )
    notify = services.parts.need(NotifyComponent)
    assert isinstance(notify, NotifyComponent)
    hook, _ = await notify.store.create(theirs.id, "https://hooks.example.com/theirs", [], False, 5)

    await sign_in(page, server, "cy@example.com", operator=True)
    response = await page.goto(f"{server.base_url}/endpoints/not-yours")
    assert response is not None and response.status == 404
    await expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    await expect(page.locator("body")).not_to_contain_text("hooks.example.com")

    # A forged form post with this human's own valid CSRF token changes nothing either.
    csrf = await page.locator("input[name=csrf]").first.get_attribute("value")
    forged = await page.request.post(
        f"{server.base_url}/endpoints/not-yours/hooks/{hook.id}/disable", form={"csrf": csrf or ""}
    )
    assert forged.status == 404
    assert (await notify.store.get(theirs.id, hook.id)).enabled


async def test_oauth_consent_in_the_browser(page: Any, server: Instance) -> None:
    """An MCP SDK client's OAuth flow, its authorization URL opened in Chromium by a signed-in human."""
    import httpx2
    from mcp import Client
    from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import OAuthClientMetadata

    from tests.support.mcp_client import Agent

    await sign_in(page, server, "di@example.com")
    callback = "http://127.0.0.1:9/callback"
    arrived: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def catch_callback(route: Any) -> None:  # the client's loopback listener, played by the test
        if not arrived.done():
            arrived.set_result(route.request.url)
        await route.fulfill(status=200, content_type="text/html", body="<h1>You can close this tab.</h1>")

    await page.route("http://127.0.0.1:9/**", catch_callback)

    async def redirect_handler(url: str) -> None:
        await page.goto(url)
        await expect(page.get_by_test_id("client-name")).to_have_text("Browser MCP client")
        await expect(page.locator("fieldset[data-group=notify_hooks] legend")).to_contain_text(
            NOTIFY_HOOKS.label
        )
        for verb in NOTIFY_HOOKS.verbs:
            await expect(
                page.locator("fieldset[data-group=notify_hooks]").get_by_label(verb)
            ).not_to_be_checked()
        await page.get_by_label("Slug").fill("inspector")
        await page.locator("fieldset[data-group=consumer]").get_by_label("self_test").uncheck()
        await page.get_by_role("button", name="Approve").click()

    async def callback_handler() -> AuthorizationCodeResult:
        from urllib.parse import parse_qs, urlsplit

        query = parse_qs(urlsplit(await arrived).query)
        return AuthorizationCodeResult(
            code=query["code"][0], state=query["state"][0], iss=query.get("iss", [None])[0]
        )

    auth = OAuthClientProvider(
        server_url=server.mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="Browser MCP client",
            redirect_uris=[callback],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=MemoryStorage(),
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    async with (
        httpx2.AsyncClient(auth=auth, timeout=30) as http,
        Client(streamable_http_client(server.mcp_url, http_client=http)) as client,
    ):
        mcp_agent = Agent(client)
        who = await mcp_agent.ok("whoami")
        assert who["endpoint"] == "inspector" and "self_test" not in who["verbs"]
        assert (await mcp_agent.call("self_test")).code == "forbidden"
        assert (await mcp_agent.ok("claim_next", {}))["todo"] is None

    await page.goto(f"{server.base_url}/endpoints/inspector")
    await expect(page.locator("#connections")).to_contain_text("Browser MCP client")
