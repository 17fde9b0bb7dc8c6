"""Issue 8, tenant isolation: every surface (MCP verbs, web UI routes, A2A methods) answers another
tenant's identifier as not-found, exactly like an unknown one, and changes nothing.

One table drives it. Each row acts as Bob against one of Alice's ids; after every row a snapshot of every
tenant table must equal the snapshot before it.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from a2a.client import Client, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import TaskNotFoundError
from mcp import MCPError
from mcp.client.session import ClientSession
from mcp_types import INVALID_PARAMS
from sqlalchemy import select

from switchboard.core.clock import ManualClock
from switchboard.core.verbs import ALL_VERBS
from switchboard.store.schema import endpoints, humans, notify_hooks, routes, sources, todos
from switchboard.store.schema_a2a import a2a_push_outbox, a2a_tasks, push_notification_configs
from switchboard.store.schema_console import human_invites, todo_events
from switchboard.store.todos import NewTodo
from tests.integration.web.helpers import Human, csrf_of
from tests.support.mcp_client import Agent, agent
from tests.support.receivers import StaticResolver, client_ssl_context
from tests.support.server import Instance, make_settings, run_instance
from tests.support.tasks_client import TasksClient, cancel_task, get_task, update_task
from tests.support.world import World, make_world

TENANT_TABLES = (
    todos,
    notify_hooks,
    endpoints,
    sources,
    routes,
    a2a_tasks,
    push_notification_configs,
    a2a_push_outbox,
    todo_events,
    human_invites,
    humans,
)
UNKNOWN_TODO = "td_01JZZZZZZZZZZZZZZZZZZZZZZZ"
UNKNOWN_HOOK = "nh_01JZZZZZZZZZZZZZZZZZZZZZZZ"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Tenants:
    inst: Instance
    alice: World
    bob: World
    bob_agent: Agent
    bob_web: Human
    bob_a2a: Client
    pending: str
    claimed: str
    hook: str
    task: str
    config: str
    route: str
    claimed_lease: str  # alice's real lease on `claimed`: bob holding it must still not reach the todo


NO_LEASE = "ls_" + "0" * 32


async def snapshot(inst: Instance) -> dict[str, list[tuple[Any, ...]]]:
    async with inst.services.db.read() as conn:
        return {
            t.name: sorted(tuple(r) for r in (await conn.execute(select(t))).all()) for t in TENANT_TABLES
        }


async def a2a_client(stack: AsyncExitStack, inst: Instance, token: str) -> Client:
    http = await stack.enter_async_context(
        httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=10)
    )
    client = await create_client(inst.base_url, ClientConfig(httpx_client=http, streaming=False))
    stack.push_async_callback(client.close)
    return client


@pytest.fixture
async def tenants(tmp_path: Path) -> AsyncIterator[Tenants]:
    ca = trustme.CA()
    settings = make_settings(
        tmp_path, notify_hook_allow_cidrs="127.0.0.1/32", a2a_push_allow_cidrs="127.0.0.1/32"
    )
    async with AsyncExitStack() as stack:
        inst = await stack.enter_async_context(
            run_instance(
                settings,
                clock=ManualClock(datetime.now(UTC).timestamp()),
                resolver=StaticResolver({"hooks.test": ["127.0.0.1"]}),
                ssl_context=client_ssl_context(ca),
            )
        )
        s = inst.services
        verbs = sorted(ALL_VERBS)
        alice_id = await s.accounts.create_human("alice@example.com", "correct horse battery")
        bob_id = await s.accounts.create_human("bob@example.com", "correct horse battery")
        alice = await make_world(inst, slug="alice-ep", human_id=alice_id, verbs=verbs)
        bob = await make_world(inst, slug="bob-ep", human_id=bob_id, verbs=verbs)

        created = await s.todos.create(
            [
                NewTodo(endpoint_id=alice.endpoint.id, queue="inbox", title=f"alice {i}", payload={})
                for i in range(2)
            ]
        )
        pending, claimed = created.created
        claim_row = await s.todos.claim(alice.endpoint.id, claimed, ["inbox"], 3600)
        assert claim_row is not None
        claimed_lease = claim_row.lease_id

        alice_a2a = await a2a_client(stack, inst, alice.token)
        message = Message(
            message_id="m-1", role=Role.ROLE_USER, parts=[Part(text="hi")], metadata={"queue": "inbox"}
        )
        # returnImmediately: the SDK client otherwise waits (docs/a2a.md) for a task no one works here.
        request = SendMessageRequest(message=message)
        request.configuration.return_immediately = True
        (task,) = [e.task async for e in alice_a2a.send_message(request)]
        config = await alice_a2a.create_task_push_notification_config(
            TaskPushNotificationConfig(
                task_id=task.id, url=f"https://hooks.test:{closed_port()}/a2a", token="t" * 16
            )
        )
        await s.hub.idle()

        alice_agent = await stack.enter_async_context(agent(inst.mcp_url, alice.token))
        hook = (await alice_agent.ok("create_notify_hook", {"url": f"https://hooks.test:{closed_port()}/h"}))[
            "hook_id"
        ]

        bob_agent = await stack.enter_async_context(agent(inst.mcp_url, bob.token))
        bob_web = Human(inst, "bob@example.com")
        stack.push_async_callback(bob_web.close)
        assert (await bob_web.sign_in("correct horse battery")).status_code == 303
        bob_a2a = await a2a_client(stack, inst, bob.token)
        route = (await s.sources.list_routes(alice_id))[0].id
        yield Tenants(
            inst,
            alice,
            bob,
            bob_agent,
            bob_web,
            bob_a2a,
            pending,
            claimed,
            hook,
            task.id,
            config.id,
            route,
            claimed_lease,
        )


Row = tuple[str, str, Callable[[Tenants], Awaitable[None]]]


def mcp(
    verb: str, args: Callable[[Tenants], dict[str, Any]], unknown: dict[str, Any]
) -> Callable[[Tenants], Awaitable[None]]:
    async def run(t: Tenants) -> None:
        foreign = await t.bob_agent.call(verb, args(t))
        control = await t.bob_agent.call(verb, unknown)
        assert foreign.code == "not_found", foreign.data
        assert foreign.data == control.data  # indistinguishable from an unknown id

    return run


def ui(
    path: Callable[[Tenants], str], data: dict[str, str] | None = None
) -> Callable[[Tenants], Awaitable[None]]:
    async def run(t: Tenants) -> None:
        if data is None:
            r = await t.bob_web.http.get(path(t))
        else:
            token = csrf_of((await t.bob_web.http.get("/endpoints")).text)
            r = await t.bob_web.http.post(path(t), data={"csrf": token, **data})
        assert r.status_code == 404, (path(t), r.status_code)

    return run


def a2a(call: Callable[[Tenants], Awaitable[Any]]) -> Callable[[Tenants], Awaitable[None]]:
    async def run(t: Tenants) -> None:
        with pytest.raises(TaskNotFoundError) as caught:
            await call(t)
        assert caught.value.message == "task not found"

    return run


def mcp_task(
    call: Callable[[ClientSession, str], Awaitable[Any]],
) -> Callable[[Tenants], Awaitable[None]]:
    """A Tasks-extension method (tasks/get, /update, /cancel) on Alice's A2A task, from a client of
    Bob's that declared the extension: the same -32602 as for an unknown id."""

    async def run(t: Tenants) -> None:
        async with agent(t.inst.mcp_url, t.bob.token, extensions=[TasksClient()]) as tasks_agent:
            answers = []
            for task_id in (t.task, UNKNOWN_TODO):
                with pytest.raises(MCPError) as caught:
                    await call(tasks_agent.client.session, task_id)
                answers.append((caught.value.error.code, caught.value.error.message))
        assert answers[0] == answers[1] and answers[0][0] == INVALID_PARAMS, answers

    return run


async def submit_work_to_alice(t: Tenants) -> None:
    sent = await t.bob_agent.call("submit_work", {"message": "hi", "queue": "inbox", "endpoint": "alice-ep"})
    assert sent.code == "invalid_argument", sent.data


ANSWER = {"ask-x": {"action": "accept", "content": {"answer": "x"}}}


async def list_shows_nothing_of_alice(t: Tenants) -> None:
    todos_seen = str(await t.bob_agent.ok("list_todos"))
    hooks_seen = str(await t.bob_agent.ok("list_notify_hooks"))
    for alice_id in (t.pending, t.claimed, t.task, t.hook):
        assert alice_id not in todos_seen and alice_id not in hooks_seen
    page = (await t.bob_web.http.get("/endpoints")).text + (await t.bob_web.http.get("/sources")).text
    assert "alice-ep" not in page and t.alice.source.slug not in page


async def console_shows_nothing_of_alice(t: Tenants) -> None:
    """The console's lists, with and without filters that name Alice's endpoint, queue and source."""
    for path in (
        "/queues",
        "/todos",
        "/todos?endpoint=alice-ep",
        f"/todos?source={t.alice.source.slug}",
        "/todos?queue=inbox&state=pending",
        "/todos?state=claimed",
        "/dead-letters",
    ):
        r = await t.bob_web.http.get(path)
        assert r.status_code == 200, (path, r.status_code)
        for alice_id in (t.pending, t.claimed, t.task, t.hook):
            assert alice_id not in r.text, (path, alice_id)
        assert "alice-ep" not in r.text, path


async def create_route_into_alice_source(t: Tenants) -> None:
    token = csrf_of((await t.bob_web.http.get("/sources")).text)
    r = await t.bob_web.http.post(
        "/routes/new",
        data={
            "csrf": token,
            "source": t.alice.source.slug,
            "queue": "inbox",
            "endpoint": "bob-ep",
            "kind": "",
        },
    )
    assert r.status_code in (400, 404), r.status_code


TABLE: list[Row] = [
    ("mcp", "claim", mcp("claim", lambda t: {"todo_id": t.pending}, {"todo_id": UNKNOWN_TODO})),
    (
        "mcp",
        "heartbeat",
        mcp(
            "heartbeat",
            lambda t: {"todo_id": t.claimed, "lease": t.claimed_lease},
            {"todo_id": UNKNOWN_TODO, "lease": NO_LEASE},
        ),
    ),
    (
        "mcp",
        "ack",
        mcp(
            "ack",
            lambda t: {"todo_id": t.claimed, "lease": t.claimed_lease},
            {"todo_id": UNKNOWN_TODO, "lease": NO_LEASE},
        ),
    ),
    (
        "mcp",
        "fail",
        mcp(
            "fail",
            lambda t: {"todo_id": t.claimed, "lease": t.claimed_lease, "error": "x"},
            {"todo_id": UNKNOWN_TODO, "lease": NO_LEASE, "error": "x"},
        ),
    ),
    ("mcp", "claim (A2A task)", mcp("claim", lambda t: {"todo_id": t.task}, {"todo_id": UNKNOWN_TODO})),
    (
        "mcp",
        "rotate_notify_hook",
        mcp("rotate_notify_hook", lambda t: {"hook_id": t.hook}, {"hook_id": UNKNOWN_HOOK}),
    ),
    (
        "mcp",
        "delete_notify_hook",
        mcp("delete_notify_hook", lambda t: {"hook_id": t.hook}, {"hook_id": UNKNOWN_HOOK}),
    ),
    (
        "mcp",
        "recover_notify_hook",
        mcp(
            "recover_notify_hook",
            lambda t: {"hook_id": t.hook, "since": "2000-01-01T00:00:00Z"},
            {"hook_id": UNKNOWN_HOOK, "since": "2000-01-01T00:00:00Z"},
        ),
    ),
    (
        "mcp",
        "update_notify_hook",
        mcp(
            "update_notify_hook",
            lambda t: {"hook_id": t.hook, "rate_per_minute": 5},
            {"hook_id": UNKNOWN_HOOK, "rate_per_minute": 5},
        ),
    ),
    (
        "mcp",
        "recover_a2a_push",
        mcp(
            "recover_a2a_push",
            lambda t: {"task_id": t.task, "config_id": t.config, "since": "0"},
            {"task_id": UNKNOWN_TODO, "config_id": "no-such-config", "since": "0"},
        ),
    ),
    ("mcp+ui", "lists", list_shows_nothing_of_alice),
    ("ui", "GET endpoint card", ui(lambda t: "/endpoints/alice-ep")),
    ("ui", "presence", ui(lambda t: "/endpoints/alice-ep/presence", {"state": "out"})),
    ("ui", "scope", ui(lambda t: "/endpoints/alice-ep/scope", {"queues": "inbox", "verbs": "claim_next"})),
    ("ui", "credential revoke", ui(lambda t: "/endpoints/alice-ep/credential/revoke", {})),
    ("ui", "credential re-vend", ui(lambda t: "/endpoints/alice-ep/credential/revend", {})),
    ("ui", "hook disable", ui(lambda t: f"/endpoints/alice-ep/hooks/{t.hook}/disable", {})),
    ("ui", "hook enable", ui(lambda t: f"/endpoints/alice-ep/hooks/{t.hook}/enable", {})),
    ("ui", "hook delete", ui(lambda t: f"/endpoints/alice-ep/hooks/{t.hook}/delete", {})),
    ("ui", "alice hook via bob's card", ui(lambda t: f"/endpoints/bob-ep/hooks/{t.hook}/disable", {})),
    ("ui", "hook send test", ui(lambda t: f"/endpoints/alice-ep/hooks/{t.hook}/test", {})),
    ("ui", "hook rotate", ui(lambda t: f"/endpoints/alice-ep/hooks/{t.hook}/rotate", {})),
    ("ui", "alice hook test via bob's card", ui(lambda t: f"/endpoints/bob-ep/hooks/{t.hook}/test", {})),
    ("ui", "alice hook rotate via bob's card", ui(lambda t: f"/endpoints/bob-ep/hooks/{t.hook}/rotate", {})),
    ("ui", "hook recover", ui(lambda t: f"/endpoints/alice-ep/hooks/{t.hook}/recover", {"since": "0"})),
    (
        "ui",
        "alice hook recover via bob's card",
        ui(lambda t: f"/endpoints/bob-ep/hooks/{t.hook}/recover", {"since": "2000-01-01T00:00:00Z"}),
    ),
    (
        "ui",
        "push config recover",
        ui(lambda t: f"/endpoints/alice-ep/push-configs/{t.task}/{t.config}/recover", {"since": "0"}),
    ),
    (
        "ui",
        "alice push config recover via bob's card",
        ui(lambda t: f"/endpoints/bob-ep/push-configs/{t.task}/{t.config}/recover", {"since": "0"}),
    ),
    (
        "ui",
        "source quarantine",
        ui(lambda t: f"/sources/{t.alice.source.slug}/quarantine", {"quarantined": "on"}),
    ),
    ("ui", "route delete", ui(lambda t: f"/routes/{t.route}/delete", {})),
    ("ui", "route into alice's source", create_route_into_alice_source),
    ("ui", "console lists", console_shows_nothing_of_alice),
    ("ui", "GET todo detail", ui(lambda t: f"/todos/{t.pending}")),
    ("ui", "GET todo detail (claimed)", ui(lambda t: f"/todos/{t.claimed}")),
    ("ui", "GET todo detail (A2A task)", ui(lambda t: f"/todos/{t.task}")),
    ("ui", "todo requeue", ui(lambda t: f"/todos/{t.claimed}/requeue", {})),
    ("ui", "todo cancel", ui(lambda t: f"/todos/{t.pending}/cancel", {})),
    ("ui", "GET endpoint delete", ui(lambda t: "/endpoints/alice-ep/delete")),
    ("ui", "endpoint delete", ui(lambda t: "/endpoints/alice-ep/delete", {})),
    ("ui", "GET source delete", ui(lambda t: f"/sources/{t.alice.source.slug}/delete")),
    ("ui", "source delete", ui(lambda t: f"/sources/{t.alice.source.slug}/delete", {})),
    ("ui", "GET people (not an operator)", ui(lambda t: "/people")),
    (
        "ui",
        "grant operator (not an operator)",
        ui(lambda t: f"/people/{t.alice.human_id}/operator", {"operator": "on"}),
    ),
    ("ui", "remove human (not an operator)", ui(lambda t: f"/people/{t.alice.human_id}/delete", {})),
    ("ui", "invite (not an operator)", ui(lambda t: "/people/invite", {"email": "mallory@example.com"})),
    ("mcp", "submit_work to alice's endpoint", submit_work_to_alice),
    ("mcp-tasks", "tasks/get", mcp_task(get_task)),
    ("mcp-tasks", "tasks/update", mcp_task(lambda s, task_id: update_task(s, task_id, ANSWER))),
    ("mcp-tasks", "tasks/cancel", mcp_task(cancel_task)),
    ("a2a", "GetTask", a2a(lambda t: t.bob_a2a.get_task(GetTaskRequest(id=t.task)))),
    ("a2a", "CancelTask", a2a(lambda t: t.bob_a2a.cancel_task(CancelTaskRequest(id=t.task)))),
    (
        "a2a",
        "CreateTaskPushNotificationConfig",
        a2a(
            lambda t: t.bob_a2a.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=t.task, url="https://hooks.test/x")
            )
        ),
    ),
    (
        "a2a",
        "GetTaskPushNotificationConfig",
        a2a(
            lambda t: t.bob_a2a.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=t.task, id=t.config)
            )
        ),
    ),
    (
        "a2a",
        "ListTaskPushNotificationConfigs",
        a2a(
            lambda t: t.bob_a2a.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=t.task)
            )
        ),
    ),
    (
        "a2a",
        "DeleteTaskPushNotificationConfig",
        a2a(
            lambda t: t.bob_a2a.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=t.task, id=t.config)
            )
        ),
    ),
]


async def test_every_surface_answers_another_tenants_ids_as_not_found_and_changes_nothing(
    tenants: Tenants,
) -> None:
    failures: list[str] = []
    for surface, name, run in TABLE:
        before = await snapshot(tenants.inst)
        try:
            await run(tenants)
        except AssertionError as err:
            failures.append(f"{surface} {name}: {err}")
            continue
        await tenants.inst.services.hub.idle()
        if await snapshot(tenants.inst) != before:
            failures.append(f"{surface} {name}: changed stored state")
    assert not failures, "\n".join(failures)
    assert len(TABLE) >= 25
