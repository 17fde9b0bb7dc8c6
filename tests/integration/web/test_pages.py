"""What a human does in the UI, over plain HTTP: first-run setup, vend (wizard and quick-vend), the
endpoint card's controls (hooks, presence, scope, credential, OAuth connections) and sources/routes.
The browser tests (tests/browser) cover the same ground in Chromium; these are the fast, exhaustive ones."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from switchboard.core.clock import ManualClock
from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.notify.component import NotifyComponent
from switchboard.notify.reads import HookReads
from switchboard.web.component import WebComponent
from tests.integration.web.helpers import PASSWORD, Human, ManualFlow, csrf_of, human
from tests.support.mcp_client import agent
from tests.support.server import Instance, make_settings, run_instance

TOKEN = re.compile(r"sbt_[A-Za-z0-9_-]{40,}")


async def test_first_run_setup_link_creates_the_operator_once(
    tmp_path: Path, wall_clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with run_instance(make_settings(tmp_path), clock=wall_clock) as inst:
        component = inst.services.parts.need(WebComponent)
        assert isinstance(component, WebComponent)
        token = component.web.setup_token
        assert token
        lines = [r for r in caplog.records if "setup link" in r.getMessage()]
        assert len(lines) == 1
        assert getattr(lines[0], "fields", {})["setup_url"].endswith(f"/setup/{token}")
        person = Human(inst, "root@example.com")
        try:
            assert (await person.http.get("/setup/wrong-token")).status_code == 404
            page = await person.http.get(f"/setup/{token}")
            assert page.status_code == 200
            short = await person.http.post(
                f"/setup/{token}",
                data={
                    "csrf": csrf_of(page.text),
                    "email": "root@example.com",
                    "password": "short",
                    "password2": "short",
                },
            )
            assert short.status_code == 400 and await inst.services.accounts.list_humans() == []
            done = await person.http.post(
                f"/setup/{token}",
                data={
                    "csrf": csrf_of(page.text),
                    "email": "root@example.com",
                    "password": PASSWORD,
                    "password2": PASSWORD,
                },
            )
            assert done.status_code == 303 and done.headers["location"].startswith("/endpoints")
            humans = await inst.services.accounts.list_humans()
            assert [(h.email, bool(h.is_operator)) for h in humans] == [("root@example.com", True)]
            assert (await person.http.get("/instance")).status_code == 200  # signed in, as operator
            assert (await person.http.get(f"/setup/{token}")).status_code == 404  # used up
        finally:
            await person.close()


async def test_no_setup_link_once_a_human_exists(tmp_path: Path, wall_clock: ManualClock) -> None:
    settings = make_settings(tmp_path)
    async with run_instance(settings, clock=wall_clock) as inst:
        await inst.services.accounts.create_human("a@example.com", PASSWORD)
    async with run_instance(settings, clock=wall_clock) as inst:
        assert inst.services.parts.need(WebComponent).web.setup_token is None


async def test_quick_vend_uses_the_default_grant_and_shows_the_token_once(inst: Instance) -> None:
    async with human(inst, "qv@example.com") as (person, _):
        page = await person.http.get("/endpoints")
        assert "No endpoints yet" in page.text
        assert NOTIFY_HOOKS.label in page.text  # the quick-vend grant list names them, unchecked
        r = await person.post("/vend/quick", {"slug": "ci-runner", "queues": "inbox, builds"})
        assert r.status_code == 200 and "shown once" in r.text
        token = TOKEN.search(r.text)
        assert token
        endpoint = await inst.services.accounts.endpoint_by_slug("ci-runner")
        assert endpoint is not None
        assert set(endpoint.verbs) == set(DEFAULT_GRANT)
        assert not set(endpoint.verbs) & set(NOTIFY_HOOKS.verbs)
        assert endpoint.queues == ("builds", "inbox")
        card = await person.http.get("/endpoints/ci-runner")
        assert token.group(0) not in card.text  # never shown again
        async with agent(inst.mcp_url, token.group(0)) as a:
            assert (await a.ok("whoami"))["endpoint"] == "ci-runner"


async def test_wizard_groups_the_outbound_verbs_and_never_prechecks_them(inst: Instance) -> None:
    async with human(inst, "wz@example.com") as (person, _):
        page = (await person.http.get("/vend")).text
        group = re.search(
            r'<fieldset class="grant-group outbound" data-group="notify_hooks">(.*?)</fieldset>', page, re.S
        )
        assert group, "the notify-hook verbs have their own group"
        assert NOTIFY_HOOKS.label in group.group(1)
        for verb in NOTIFY_HOOKS.verbs:
            assert re.search(rf'value="{verb}">', group.group(1)), verb  # present and not checked
        assert " checked" not in group.group(1)
        assert 'value="claim_next" checked' in page  # the consumer verbs are
        r = await person.post(
            "/vend",
            {"slug": "hooked", "queues": "inbox", "verbs": ["claim_next", "create_notify_hook"]},
            csrf_from="/vend",
        )
        assert r.status_code == 200
        endpoint = await inst.services.accounts.endpoint_by_slug("hooked")
        assert endpoint is not None and endpoint.verbs == ("claim_next", "create_notify_hook")


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"slug": "Bad Slug", "queues": "inbox", "verbs": ["ack"]}, "slug must be"),
        ({"slug": "ok", "queues": "", "verbs": ["ack"]}, "at least one queue"),
        ({"slug": "ok", "queues": "in box!", "verbs": ["ack"]}, "Not a queue name"),
        ({"slug": "ok", "queues": "inbox", "verbs": ["ack", "drop_tables"]}, "Unknown verbs"),
        ({"slug": "ok", "queues": "inbox"}, "at least one verb"),
    ],
)
async def test_wizard_bad_input_is_explained_and_stores_nothing(
    inst: Instance, form: dict[str, object], message: str
) -> None:
    async with human(inst, "bad@example.com") as (person, _):
        r = await person.post("/vend", form, csrf_from="/vend")  # type: ignore[arg-type]
        assert r.status_code == 400 and message in r.text
        assert await inst.services.accounts.list_endpoints() == []


async def test_hook_controls_on_the_card(inst: Instance) -> None:
    services = inst.services
    notify = services.parts.need(NotifyComponent)
    assert isinstance(notify, NotifyComponent)
    async with human(inst, "hk@example.com") as (person, human_id):
        endpoint, token = await services.accounts.vend_endpoint(
            human_id, "hooky", ["inbox"], [*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs]
        )
        hook, _ = await notify.store.create(
            endpoint.id, "https://dispatch.example.com/sb?sig=abc", [], False, 5
        )
        card = await person.http.get("/endpoints/hooky")
        assert "https://dispatch.example.com/sb" in card.text and "sig=abc" not in card.text
        metric = services.metrics.notify_disabled.labels("operator")
        before = metric._value.get()
        r = await person.post(f"/endpoints/hooky/hooks/{hook.id}/disable", {})
        assert r.status_code == 303 and r.headers["location"] == "/endpoints/hooky?msg=hook_disabled"
        assert metric._value.get() == before + 1
        async with agent(inst.mcp_url, token) as a:
            listed = (await a.ok("list_notify_hooks"))["hooks"]
            assert [(h["hook_id"], h["enabled"], h["disabled_reason"]) for h in listed] == [
                (hook.id, False, "operator")
            ]
            assert (await HookReads(notify.store).sendable(hook.id)) is None  # stops firing at once
            r = await person.post(f"/endpoints/hooky/hooks/{hook.id}/enable", {})
            assert r.status_code == 303
            listed = (await a.ok("list_notify_hooks"))["hooks"]
            assert (listed[0]["enabled"], listed[0]["disabled_reason"]) == (True, None)
            r = await person.post(f"/endpoints/hooky/hooks/{hook.id}/delete", {})
            assert r.status_code == 303
            assert (await a.ok("list_notify_hooks"))["hooks"] == []
        r = await person.post(f"/endpoints/hooky/hooks/{hook.id}/disable", {})
        assert r.status_code == 404


async def test_presence_scope_and_credential_controls(inst: Instance) -> None:
    accounts = inst.services.accounts
    async with human(inst, "pc@example.com") as (person, human_id):
        endpoint, token = await accounts.vend_endpoint(human_id, "ctl", ["inbox"], list(DEFAULT_GRANT))
        assert (await person.post("/endpoints/ctl/presence", {"state": "out"})).status_code == 303
        assert (await accounts.endpoint(endpoint.id)).effective_presence == "out"  # type: ignore[union-attr]
        assert (await person.post("/endpoints/ctl/presence", {"state": "clear"})).status_code == 303
        assert (await accounts.endpoint(endpoint.id)).presence_override is None  # type: ignore[union-attr]
        assert (await person.post("/endpoints/ctl/presence", {"state": "sideways"})).status_code == 400
        r = await person.post(
            "/endpoints/ctl/scope", {"queues": "inbox reviews", "verbs": ["claim_next", "ack"]}
        )
        assert r.status_code == 303
        fresh = await accounts.endpoint(endpoint.id)
        assert (
            fresh is not None
            and fresh.verbs == ("ack", "claim_next")
            and fresh.queues == ("inbox", "reviews")
        )
        bad = await person.post("/endpoints/ctl/scope", {"queues": "", "verbs": ["ack"]})
        assert bad.status_code == 400 and (await accounts.endpoint(endpoint.id)) == fresh
        revend = await person.post("/endpoints/ctl/credential/revend", {})
        new_token = TOKEN.search(revend.text)
        assert revend.status_code == 200 and new_token and new_token.group(0) != token
        assert await accounts.endpoint_by_token(token) is None
        assert (await person.post("/endpoints/ctl/credential/revoke", {})).status_code == 303
        assert await accounts.endpoint_by_token(new_token.group(0)) is None


async def test_oauth_connection_is_listed_and_revocable_on_the_card(inst: Instance) -> None:
    async with human(inst, "oc@example.com") as (person, human_id):
        await inst.services.accounts.vend_endpoint(human_id, "conn", ["inbox"], list(DEFAULT_GRANT))
        flow = ManualFlow(inst, person)
        tokens = (
            await flow.exchange(await flow.code(target="existing", endpoint="conn", verbs=["ack"]))
        ).json()
        card = await person.http.get("/endpoints/conn")
        assert "Manual client" in card.text
        grant = re.search(r"/endpoints/conn/connections/(og_[A-Z0-9]+)/revoke", card.text)
        assert grant
        assert (
            await person.post(f"/endpoints/conn/connections/{grant.group(1)}/revoke", {})
        ).status_code == 303
        refused = await flow.token({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]})
        assert refused.status_code == 400
        assert "No MCP client is connected" in (await person.http.get("/endpoints/conn")).text


async def test_sources_and_routes(inst: Instance) -> None:
    sources = inst.services.sources
    async with human(inst, "src@example.com") as (person, human_id):
        await inst.services.accounts.vend_endpoint(human_id, "sink", ["inbox"], list(DEFAULT_GRANT))
        page = await person.http.get("/sources")
        assert "No sources yet" in page.text
        r = await person.post(
            "/sources/new",
            {"slug": "gitea-main", "kind": "gitea", "trust": "signature"},
            csrf_from="/sources",
        )
        assert r.status_code == 200 and "shown once" in r.text and "/in/gitea-main" in r.text
        opened = await sources.by_slug("gitea-main")
        assert opened is not None and opened[1] in r.text  # the secret, revealed once
        token_src = await person.post(
            "/sources/new", {"slug": "tok", "kind": "generic", "trust": "token"}, csrf_from="/sources"
        )
        tok = await sources.by_slug("tok")
        assert tok is not None and f"/in/tok/{tok[1]}" in token_src.text
        listing = await person.http.get("/sources")
        assert opened[1] not in listing.text and tok[1] not in listing.text
        bad = await person.post(
            "/sources/new",
            {"slug": "gitea-main", "kind": "gitea", "trust": "signature"},
            csrf_from="/sources",
        )
        assert bad.status_code == 400 and "exists already" in bad.text
        r = await person.post("/sources/gitea-main/quarantine", {"quarantined": "on"}, csrf_from="/sources")
        assert r.status_code == 303 and (await sources.by_slug("gitea-main"))[0].quarantined  # type: ignore[index]
        r = await person.post(
            "/routes/new",
            {"source": "gitea-main", "kind": "", "queue": "reviews", "endpoint": "sink"},
            csrf_from="/sources",
        )
        assert r.status_code == 303
        listing = await person.http.get("/sources")
        assert "not in scope" in listing.text  # reviews is not a queue sink may drain
        routes = await sources.list_routes(human_id)
        assert [(x.source, x.queue, x.endpoint) for x in routes] == [("gitea-main", "reviews", "sink")]
        r = await person.post(f"/routes/{routes[0].id}/delete", {}, csrf_from="/sources")
        assert r.status_code == 303 and await sources.list_routes(human_id) == []
        r = await person.post(
            "/routes/new",
            {"source": "gitea-main", "queue": "inbox", "endpoint": "someone-else"},
            csrf_from="/sources",
        )
        assert r.status_code == 400 and "Pick one of your endpoints" in r.text
