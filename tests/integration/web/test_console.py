"""The operator console over plain HTTP: queues and the backlog sparkline, todo filters, cancel, the
dead-letter view, accounts (password, sign out everywhere, invitations, the operator role) and deletes
whose confirmation says what goes with them."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from switchboard.core.clock import ManualClock
from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.notify.component import NotifyComponent
from switchboard.store.schema import notify_hooks, routes, todos
from switchboard.store.schema_web import web_sessions
from switchboard.store.todos import NewTodo
from tests.integration.web.helpers import PASSWORD, Human, csrf_of, human
from tests.support.server import Instance, make_settings, run_instance


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def inst(
    request: pytest.FixtureRequest, tmp_path: Path, wall_clock: ManualClock
) -> AsyncIterator[Instance]:
    """The console's queries on both engines."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    async with run_instance(make_settings(tmp_path, url), clock=wall_clock) as instance:
        yield instance


async def count(inst: Instance, table: object, *where: object) -> int:
    stmt = select(func.count()).select_from(table)  # type: ignore[arg-type]
    for cond in where:
        stmt = stmt.where(cond)  # type: ignore[arg-type]
    async with inst.services.db.read() as conn:
        return int((await conn.execute(stmt)).scalar_one())


async def test_queues_todos_filters_cancel_and_dead_letters(inst: Instance) -> None:
    s = inst.services
    async with human(inst, "qa@example.com") as (person, human_id):
        ep, _ = await s.accounts.vend_endpoint(human_id, "worker", ["inbox", "builds"], list(DEFAULT_GRANT))
        created = await s.todos.create(
            [
                NewTodo(ep.id, "inbox", "first inbox todo", {}, source="forge", kind="push"),
                NewTodo(ep.id, "inbox", "second inbox todo", {}, source="cron"),
                NewTodo(ep.id, "builds", "a build", {}, source="forge"),
            ]
        )
        first, second, build = created.created
        held = await s.todos.claim(ep.id, build, ["builds"], 300)
        assert held is not None
        await s.todos.fail(ep.id, build, held.lease_id, "compiler crashed", retry=False)
        assert await s.console.sample_backlog() == 2

        page = (await person.http.get("/queues")).text
        assert page.count('class="card queue-card"') == 2
        inbox = page[page.index('data-queue="worker/inbox"') :]
        assert re.search(r'data-testid="count-pending">2<', inbox)
        assert 'role="img"' in inbox and "now 2, peak 2" in inbox  # the sparkline, labelled

        def titles(html: str) -> set[str]:
            return set(re.findall(r'data-testid="todo-title">([^<]+)<', html))

        assert titles((await person.http.get("/todos")).text) == {
            "first inbox todo",
            "second inbox todo",
            "a build",
        }
        assert titles((await person.http.get("/todos?source=forge")).text) == {"first inbox todo", "a build"}
        assert titles((await person.http.get("/todos?queue=inbox&state=pending")).text) == {
            "first inbox todo",
            "second inbox todo",
        }
        assert titles((await person.http.get("/todos?state=bogus&age=zzz")).text) == titles(
            (await person.http.get("/todos")).text
        )  # unknown filter values are ignored, not errors
        assert titles((await person.http.get("/todos?age=1h")).text) == set()  # all newer than an hour
        s.clock.advance(2 * 3600)  # type: ignore[attr-defined]
        assert len(titles((await person.http.get("/todos?age=1h")).text)) == 3
        assert titles((await person.http.get("/dead-letters")).text) == {"a build"}

        r = await person.post(f"/todos/{second}/cancel", {}, csrf_from="/todos")
        assert r.status_code == 303 and r.headers["location"].endswith("msg=todo_canceled")
        row = await s.todos.get(ep.id, second)
        assert row is not None and row.status == "canceled"
        # A canceled todo cannot be requeued; a pending one cannot either: nothing changes.
        for todo_id in (second, first):
            r = await person.post(f"/todos/{todo_id}/requeue", {}, csrf_from="/todos")
            assert r.status_code == 400
        detail = (await person.http.get(f"/todos/{second}")).text
        assert 'data-transition="canceled"' in detail and "by qa@example.com" in detail


async def test_change_password_and_sign_out_everywhere(inst: Instance) -> None:
    async with human(inst, "pw@example.com") as (laptop, human_id):
        phone = Human(inst, "pw@example.com")
        try:
            assert (await phone.sign_in()).status_code == 303
            wrong = await laptop.post(
                "/account/password",
                {"current": "not it at all", "password": "a new password", "password2": "a new password"},
                csrf_from="/account",
            )
            assert wrong.status_code == 400 and "not right" in wrong.text
            r = await laptop.post(
                "/account/password",
                {"current": PASSWORD, "password": "a new password", "password2": "a new password"},
                csrf_from="/account",
            )
            assert r.status_code == 303
            assert (await laptop.http.get("/account")).status_code == 200  # this session stays
            assert (await phone.http.get("/account")).status_code == 303  # the other one ended
            assert await inst.services.accounts.check_password("pw@example.com", "a new password")

            r = await laptop.post("/account/sign-out-everywhere", {}, csrf_from="/account")
            assert r.status_code == 303 and r.headers["location"].startswith("/login")
            assert (await laptop.http.get("/account")).status_code == 303
            assert await count(inst, web_sessions, web_sessions.c.human_id == human_id) == 0
        finally:
            await phone.close()


async def test_invite_grant_revoke_and_remove(inst: Instance) -> None:
    async with human(inst, "boss@example.com", operator=True) as (boss, boss_id):
        page = await boss.post(
            "/people/invite", {"email": "New@Example.com", "operator": "on"}, csrf_from="/people"
        )
        assert page.status_code == 200
        url = re.search(r'data-testid="invite-url">([^<]+)<', page.text)
        assert url is not None
        path = url.group(1).removeprefix(inst.base_url)
        assert "new@example.com" in (await boss.http.get("/people")).text  # open invitation listed

        newcomer = Human(inst, "new@example.com")
        try:
            form = await newcomer.http.get(path)
            assert form.status_code == 200 and "as an instance operator" in form.text
            r = await newcomer.http.post(
                path,
                data={
                    "csrf": csrf_of(form.text),
                    "password": "long enough pw",
                    "password2": "long enough pw",
                },
            )
            assert r.status_code == 303
            assert (await newcomer.http.get("/people")).status_code == 200  # an operator now
            assert (await newcomer.http.get(path)).status_code == 404  # spent
        finally:
            await newcomer.close()
        row = await inst.services.accounts.human_by_email("new@example.com")
        assert row is not None and row.is_operator

        r = await boss.post(f"/people/{row.id}/operator", {"operator": "off"}, csrf_from="/people")
        assert r.status_code == 303
        # Now boss is the last operator: revoking boss's own role is refused, nothing changes.
        r = await boss.post(f"/people/{boss_id}/operator", {"operator": "off"}, csrf_from="/people")
        assert r.status_code == 400 and "last operator" in r.text
        assert (await inst.services.accounts.human_by_id(boss_id)).is_operator  # type: ignore[union-attr]

        ep, _ = await inst.services.accounts.vend_endpoint(row.id, "new-ep", ["inbox"], list(DEFAULT_GRANT))
        confirm = await boss.http.get(f"/people/{row.id}/delete")
        assert confirm.status_code == 200 and "<strong>1</strong> endpoints" in confirm.text
        assert "new-ep" not in confirm.text  # counts only, never another tenant's rows
        r = await boss.post(f"/people/{row.id}/delete", {}, csrf_from="/people")
        assert r.status_code == 303
        assert await inst.services.accounts.human_by_email("new@example.com") is None
        assert await inst.services.accounts.endpoint(ep.id) is None


async def test_delete_an_endpoint_and_a_source_says_what_goes(inst: Instance) -> None:
    s = inst.services
    async with human(inst, "del@example.com") as (person, human_id):
        ep, _ = await s.accounts.vend_endpoint(
            human_id, "doomed", ["inbox"], [*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs]
        )
        notify = s.parts.need(NotifyComponent)
        await notify.store.create(ep.id, "https://hooks.example.com/x", [], False, 5)
        src = await s.sources.create(human_id, "doomed-src", "gitea", "signature", "x" * 40)
        await s.sources.add_route(src.slug, "inbox", ep.slug, None)
        await s.todos.create(
            [NewTodo(ep.id, "inbox", f"todo {i}", {}, source=src.slug, source_id=src.id) for i in range(3)]
        )

        confirm = await person.http.get("/endpoints/doomed/delete")
        goes = re.findall(r"<li><strong>(\d+)</strong> ([^<]+)</li>", confirm.text)
        assert goes[:4] == [
            ("3", "todos (all states)"),
            ("3", "of them still pending, claimed or failed"),
            ("1", "notify hooks"),
            ("1", "routes to it"),
        ]
        source_confirm = await person.http.get("/sources/doomed-src/delete")
        assert "<strong>1</strong> routes from it" in source_confirm.text
        assert "The 3 todos it already made stay" in source_confirm.text

        r = await person.post("/sources/doomed-src/delete", {}, csrf_from="/sources")
        assert r.status_code == 303 and await count(inst, routes) == 0
        assert await count(inst, todos) == 3  # a source's todos stay
        r = await person.post("/endpoints/doomed/delete", {}, csrf_from="/endpoints")
        assert r.status_code == 303 and r.headers["location"].startswith("/endpoints?")
        assert await count(inst, todos) == 0 and await count(inst, notify_hooks) == 0
        assert (await person.http.get("/endpoints/doomed")).status_code == 404


async def test_an_invitation_expires_and_is_swept(inst: Instance, wall_clock: ManualClock) -> None:
    admin = inst.services.admin
    async with human(inst, "lead@example.com", operator=True) as (_, lead_id):
        token = await admin.invite(
            "late@example.com", operator=False, invited_by=lead_id, lifetime_seconds=60
        )
        assert await admin.open_invite(token) is not None
        assert await admin.sweep_invites() == 0
        wall_clock.advance(61)
        assert await admin.open_invite(token) is None
        newcomer = Human(inst, "late@example.com")
        try:
            assert (await newcomer.http.get(f"/invite/{token}")).status_code == 404
        finally:
            await newcomer.close()
        assert await admin.sweep_invites() == 1
        assert await admin.list_invites() == []
