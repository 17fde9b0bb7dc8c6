"""The web UI's security requirements, route by route: CSRF on every state-changing form, the
secureHeaders set on every response, same-origin redirects only, session cookies, sign-in errors and
limits, and "another human's endpoint is not found and nothing changes"."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from starlette.routing import Route

from switchboard.core.clock import ManualClock
from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.notify.component import NotifyComponent
from switchboard.store.tables import metadata
from switchboard.store.todos import NewTodo
from switchboard.web.component import WebComponent
from switchboard.web.page import COOKIE, Page
from switchboard.web.security import SecureHeaders
from tests.integration.web.helpers import PASSWORD, Human, ManualFlow, csrf_of, human
from tests.support.server import Instance, make_settings, run_instance

SECURE_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}


def assert_secure_headers(response: Any) -> None:
    csp = response.headers.get("content-security-policy", "")
    assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, response.url
    assert "'unsafe-inline'" not in csp
    for name, value in SECURE_HEADERS.items():
        assert response.headers.get(name) == value, (response.url, name)


async def snapshot(inst: Instance) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table: "nothing changed" means exactly this is equal. Backlog samples are
    left out: the server writes them on its own schedule, whatever a request does."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    async with inst.services.db.read() as conn:
        for table in metadata.sorted_tables:
            if table.name == "backlog_samples":
                continue
            rows = (await conn.execute(select(table))).all()
            out[table.name] = sorted((tuple(r) for r in rows), key=repr)
    return out


@dataclass
class Tenant:
    person: Human
    human_id: str
    slug: str
    hook_id: str
    grant_id: str
    route_id: str
    source: str
    todo_id: str


async def make_tenant(inst: Instance, person: Human, human_id: str, slug: str = "agent") -> Tenant:
    services = inst.services
    endpoint, _ = await services.accounts.vend_endpoint(
        human_id, slug, ["inbox"], [*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs]
    )
    notify = services.parts.need(NotifyComponent)
    assert isinstance(notify, NotifyComponent)
    hook, _secret = await notify.store.create(
        endpoint.id, "https://dispatch.example.com/sb?key=s3cr3t", [], False, 5
    )
    source = await services.sources.create(human_id, f"{slug}-src", "gitea", "signature", "x" * 40)
    route_id = await services.sources.add_route(source.slug, "inbox", endpoint.slug, None)
    (todo_id,) = (
        await services.todos.create(
            [NewTodo(endpoint.id, "inbox", "<script>alert(1)</script> hostile title", {})]
        )
    ).created
    flow = ManualFlow(inst, person)
    await flow.exchange(await flow.code(target="existing", endpoint=slug, verbs=["claim_next"]))
    grants = await services.parts.need(WebComponent).web.store.grants_for_endpoint(endpoint.id)
    return Tenant(person, human_id, slug, hook.id, grants[0].id, route_id, source.slug, todo_id)


def ui_routes(inst: Instance) -> list[tuple[str, set[str]]]:
    component = inst.services.parts.need(WebComponent)
    assert isinstance(component, WebComponent)
    out: list[tuple[str, set[str]]] = []
    for r in component.routes():
        if isinstance(r, Route):
            assert isinstance(r.app, SecureHeaders) and isinstance(r.app.app, Page), r.path
            out.append((r.path, r.app.app.methods))
    return out


def fill(path: str, t: Tenant, **extra: str) -> str:
    values = {
        "slug": t.slug,
        "hook_id": t.hook_id,
        "action": "disable",
        "grant_id": t.grant_id,
        "route_id": t.route_id,
        "todo_id": t.todo_id,
        "task_id": t.todo_id,  # an A2A task is a todo; this one has no push config
        "config_id": "pnc-none",
        "human_id": t.human_id,
        "token": "not-the-token",
        **extra,
    }
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path).replace(
        f"/sources/{t.slug}/", f"/sources/{t.source}/"
    )


async def test_every_state_changing_route_refuses_a_post_without_the_csrf_token(inst: Instance) -> None:
    async with human(inst, "ann@example.com") as (person, human_id):
        tenant = await make_tenant(inst, person, human_id)
        posts = [path for path, methods in ui_routes(inst) if "POST" in methods]
        assert len(posts) >= 15  # every form the UI has
        before = await snapshot(inst)
        for path in posts:
            for action in ("disable", "enable", "delete"):
                url = fill(path, tenant, action=action)
                form = {
                    "state": "out",
                    "queues": "inbox",
                    "verbs": "claim_next",
                    "slug": "x-new",
                    "kind": "gitea",
                    "trust": "token",
                    "quarantined": "on",
                    "email": person.email,
                    "password": PASSWORD,
                    "source": tenant.source,
                    "queue": "inbox",
                    "endpoint": tenant.slug,
                }
                missing = await person.http.post(url, data=form)
                forged = await person.http.post(url, data={**form, "csrf": "0" * 64})
                for r in (missing, forged):
                    assert r.status_code == 403, (url, r.status_code)
                    assert "This form has expired" in r.text
                    assert_secure_headers(r)
                if "{action}" not in path:
                    break
        assert await snapshot(inst) == before


async def test_every_ui_response_carries_the_security_headers(inst: Instance) -> None:
    async with human(inst, "bea@example.com") as (person, human_id):
        tenant = await make_tenant(inst, person, human_id)
        seen = 0
        for path, methods in ui_routes(inst):
            url = fill(path, tenant)
            if "GET" in methods:
                r = await person.http.get(url)
                assert r.status_code in (200, 303, 400, 404), (url, r.status_code)
                assert_secure_headers(r)
                assert r.headers["cache-control"] == "no-store"
                seen += 1
            else:
                r = await person.http.get(url)
                assert r.status_code == 405, url
                assert_secure_headers(r)
        assert seen >= 8
        for extra in (
            "/static/app.css",
            "/static/app.js",
            "/endpoints/nobody-has-this",
            "/oauth/consent?req=forged",
        ):
            r = await person.http.get(extra)
            assert_secure_headers(r)
        anonymous = Human(inst, "nobody@example.com")
        try:
            for url in ("/", "/login", "/endpoints", "/setup/wrong"):
                assert_secure_headers(await anonymous.http.get(url))
        finally:
            await anonymous.close()
        assert "strict-transport-security" not in r.headers  # plain http here; see the TLS test


async def test_hsts_when_served_over_tls(tmp_path: Path, wall_clock: ManualClock) -> None:
    settings = make_settings(tmp_path, public_url="https://switchboard.example.com")
    async with run_instance(settings, clock=wall_clock) as inst, Human(inst, "x@example.com").http as http:
        r = await http.get("/login")
    assert r.headers["strict-transport-security"].startswith("max-age=")
    assert "secure" in r.headers["set-cookie"].lower()


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
        "javascript:alert(1)",
        "/%0d%0aSet-Cookie:x",
        "",
    ],
)
async def test_sign_in_redirects_only_to_same_origin_pages(inst: Instance, target: str) -> None:
    await inst.services.accounts.create_human("cai@example.com", PASSWORD)
    person = Human(inst, "cai@example.com")
    try:
        page = await person.http.get("/login", params={"next": target})
        r = await person.http.post(
            "/login",
            data={"csrf": csrf_of(page.text), "email": person.email, "password": PASSWORD, "next": target},
        )
        assert r.status_code == 303
        location = r.headers["location"]
        assert location.startswith("/") and not location.startswith("//") and "\\" not in location
        assert location in ("/endpoints", target)
        assert "evil" not in location
    finally:
        await person.close()


async def test_session_cookie_flags_rotation_and_sign_out(inst: Instance) -> None:
    await inst.services.accounts.create_human("dee@example.com", PASSWORD)
    person = Human(inst, "dee@example.com")
    try:
        await person.http.get("/login")
        anonymous_cookie = person.http.cookies[COOKIE]
        r = await person.sign_in()
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie and "path=/" in cookie
        signed_in_cookie = person.http.cookies[COOKIE]
        assert signed_in_cookie != anonymous_cookie  # a new session id at sign-in: no fixation
        assert (await person.http.get("/endpoints")).status_code == 200
        out = await person.post("/logout", {})
        assert out.status_code == 303 and out.headers["location"].startswith("/login")
        person.http.cookies.clear()
        person.http.cookies[COOKIE] = signed_in_cookie  # the old cookie is dead on the server
        again = await person.http.get("/endpoints")
        assert again.status_code == 303 and again.headers["location"].startswith("/login")
        person.http.cookies[COOKIE] = signed_in_cookie[:-3] + "abc"  # and a tampered one is ignored
        assert (await person.http.get("/endpoints")).status_code == 303
    finally:
        await person.close()


async def test_bad_sign_in_says_the_same_for_either_part_and_is_rate_limited(inst: Instance) -> None:
    await inst.services.accounts.create_human("eve@example.com", PASSWORD)
    person = Human(inst, "eve@example.com")
    try:
        wrong_password = await person.sign_in("not the password")
        person.email = "nobody@example.com"
        unknown_email = await person.sign_in(PASSWORD)
        assert wrong_password.status_code == unknown_email.status_code == 401
        message = "That email and password do not match an account."
        assert message in wrong_password.text and message in unknown_email.text
        assert PASSWORD not in unknown_email.text and "not the password" not in wrong_password.text
        statuses = [(await person.sign_in("guess")).status_code for _ in range(12)]
        assert statuses[-1] == 429
        person.email = "eve@example.com"
        assert (await person.sign_in()).status_code == 429  # the client address is limited too
    finally:
        await person.close()


async def test_another_humans_endpoint_is_not_found_and_nothing_changes(inst: Instance) -> None:
    async with (
        human(inst, "fay@example.com") as (owner, owner_id),
        human(inst, "gil@example.com", operator=True) as (other, _),
    ):
        tenant = await make_tenant(inst, owner, owner_id, slug="private")
        before = await snapshot(inst)
        csrf = await other.csrf()
        for path, methods in ui_routes(inst):
            if "{slug}" not in path and "{todo_id}" not in path:
                continue
            for action in ("disable", "enable", "delete"):
                url = fill(path, tenant, action=action)
                if "GET" in methods:
                    r = await other.http.get(url)
                else:
                    r = await other.http.post(
                        url, data={"csrf": csrf, "state": "out", "queues": "inbox", "verbs": "claim_next"}
                    )
                assert r.status_code == 404, (url, r.status_code)
                assert "private" not in r.text and tenant.hook_id not in r.text
                assert tenant.todo_id not in r.text and "hostile title" not in r.text
                if "{action}" not in path:
                    break
        r = await other.post("/routes/" + tenant.route_id + "/delete", {})
        assert r.status_code == 404
        r = await other.post(f"/sources/{tenant.source}/quarantine", {"quarantined": "on"})
        assert r.status_code == 404
        assert await snapshot(inst) == before
        # The operator sees counts, never the tenant's rows.
        page = await other.http.get("/instance")
        assert (
            page.status_code == 200 and "private" not in page.text and "dispatch.example.com" not in page.text
        )
        assert "private" not in (await other.http.get("/endpoints")).text
        assert tenant.source not in (await other.http.get("/sources")).text
        # The console's lists: none of the tenant's todos, queues or endpoints, filtered or not.
        for path in (
            "/queues",
            "/todos",
            "/todos?state=pending",
            "/todos?endpoint=private",
            "/todos?queue=inbox",
            "/dead-letters",
            "/people",
        ):
            r = await other.http.get(path)
            assert r.status_code == 200, path
            assert tenant.todo_id not in r.text and "hostile title" not in r.text, path
            assert ">private<" not in r.text and tenant.hook_id not in r.text, path


async def test_instance_page_is_for_the_operator_only(inst: Instance) -> None:
    async with human(inst, "hal@example.com") as (person, _):
        assert (await person.http.get("/instance")).status_code == 404


async def test_sender_text_is_escaped(inst: Instance) -> None:
    async with human(inst, "ida@example.com") as (person, human_id):
        tenant = await make_tenant(inst, person, human_id)
        page = await person.http.get(f"/endpoints/{tenant.slug}")
        assert "<script>alert(1)</script>" not in page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt; hostile title" in page.text
        assert "s3cr3t" not in page.text  # the hook URL's query string is redacted
        assert "dispatch.example.com/sb" in page.text
