"""Two ``switchboard serve`` instances on one PostgreSQL database (the suite's own server,
tests/support/pg.py): SPEC-0024 REQ-6 "Two instances, one notification", REQ-13's ceiling across
instances, and the A2A cluster rule that any instance handling a task writes its outbox rows, with
instance 2 running with A2A push disabled."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver

from switchboard.core.verbs import A2A, DEFAULT_GRANT
from tests.conformance.conftest import _checked
from tests.conformance.harness import (
    FLEET,
    Conf,
    ServerSpec,
    body_for,
    ip_url,
    receiver,
    tenant,
    unique,
    wait_until,
)
from tests.conformance.test_a2a_push import pair, push_config
from tests.support.mcp_client import agent
from tests.support.pg import PostgresServer

COMMON = {"notify_hook_allow_cidrs": "127.0.0.1/32", "a2a_push_allow_cidrs": "127.0.0.1/32"}
ONE = ServerSpec("pg-one", COMMON, humans=("alice",))
TWO = ServerSpec("pg-two", {**COMMON, "a2a_push_enabled": "false"}, humans=())


@pytest.fixture(scope="module")
def cluster(pg_server: PostgresServer) -> Iterator[tuple[Conf, Conf]]:
    url = pg_server.create_database(f"conformance_{uuid.uuid4().hex[:10]}")
    first = FLEET.prestart(ONE, url)
    assert first.migrated.wait(timeout=120)  # the schema is current before the second instance starts
    FLEET.prestart(TWO, url)
    one, two = FLEET.get(ONE, url), FLEET.get(TWO, url)
    yield one, two
    for conf, spec in ((one, ONE), (two, TWO)):
        _checked(conf)
        FLEET.release(spec)


async def test_req06_two_instances_one_notification(cluster: tuple[Conf, Conf]) -> None:
    one, two = cluster
    async with receiver() as rcv, tenant(one) as a:
        hook = await a.hook(ip_url(rcv))
        todo = await a.todo("created through instance 1")
        first = await body_for(rcv, todo)
        sentinel = await a.todo("a second one, also through instance 1")
        await body_for(rcv, sentinel)
        assert len([r for r in rcv.requests if todo.encode() in r.body]) == 1
        lines_one = await one.wait_lines("notify attempt", 2, hook_id=hook["hook_id"])
        assert {line["notification_id"] for line in lines_one} >= {rcv.requests[0].header("webhook-id")}
        assert two.lines("notify attempt", hook_id=hook["hook_id"]) == []
        assert first["reason"] == "created"
        async with two.http() as http:  # the same source through instance 2: instance 2 sends it
            r = await http.post(a.inbound["inbox"], json={"title": "through instance 2"})
        (via_two,) = r.json()["todos"]
        await body_for(rcv, via_two)
        await two.wait_lines("notify attempt", 1, hook_id=hook["hook_id"])


async def test_req13_concurrent_creates_at_the_ceiling_across_instances(cluster: tuple[Conf, Conf]) -> None:
    one, two = cluster
    async with receiver() as rcv, tenant(one) as a:
        for i in range(4):
            await a.hook(ip_url(rcv, f"/h{i}"))
        async with agent(two.mcp_url, a.token) as via_two:
            results = await asyncio.gather(
                a.agent.call("create_notify_hook", {"url": ip_url(rcv, "/race-1")}),
                via_two.call("create_notify_hook", {"url": ip_url(rcv, "/race-2")}),
            )
        assert sorted(r.ok for r in results) == [False, True]
        assert next(r for r in results if not r.ok).code == "ceiling_exceeded"


async def test_a2a_push_an_instance_with_push_disabled_refuses_configs(cluster: tuple[Conf, Conf]) -> None:
    _, two = cluster
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, two.base_url).get_agent_card()
    assert card.capabilities.push_notifications is False
    async with conf_human_sender(two) as (token, queue):
        calls: list[tuple[str, dict[str, Any]]] = [
            ("CreateTaskPushNotificationConfig", {"taskId": "td_x", "url": "https://127.0.0.1:1/h"}),
            ("GetTaskPushNotificationConfig", {"taskId": "td_x", "id": "pnc_x"}),
            ("ListTaskPushNotificationConfigs", {"taskId": "td_x"}),
            ("DeleteTaskPushNotificationConfig", {"taskId": "td_x", "id": "pnc_x"}),
            (
                "SendMessage",
                {
                    "message": {
                        "messageId": "m1",
                        "role": "ROLE_USER",
                        "parts": [{"text": "x"}],
                        "metadata": {"queue": queue},
                    },
                    "configuration": {
                        "taskPushNotificationConfig": {"url": "https://127.0.0.1:1/h"},
                        "returnImmediately": True,
                    },
                },
            ),
        ]
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
        ) as http:
            for method, params in calls:
                r = await http.post(
                    f"{two.base_url}/a2a",
                    json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                )
                assert r.json()["error"]["code"] == -32003, (method, r.json())


def conf_human_sender(conf: Conf) -> Any:
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def cm() -> Any:
        queue = unique("q")
        async with tenant(conf, queues=(queue,), verbs=DEFAULT_GRANT), conf.human("alice") as person:
            yield await person.vend(unique("sender"), ("outbox",), A2A.verbs), queue

    return cm()


async def test_a2a_push_any_instance_that_handles_a_task_writes_its_outbox_rows(
    cluster: tuple[Conf, Conf],
) -> None:
    """The config is accepted by instance 1; the task is claimed and acked through instance 2, which
    delivers nothing itself: its transitions still reach the receiver (delivered by instance 1)."""
    one, two = cluster
    async with receiver() as rcv, pair(one) as p:
        task = await p.send("handled elsewhere", push=push_config(f"https://127.0.0.1:{rcv.port}/a2a"))
        async with agent(two.mcp_url, p.worker.token) as worker_on_two:
            claimed = await worker_on_two.ok("claim", {"todo_id": task.id})
            lease = claimed["todo"]["lease"]
            await worker_on_two.ok("ack", {"todo_id": task.id, "lease": lease, "result": "done on two"})
        await wait_until(lambda: len(rcv.requests) >= 3, timeout=20, what="all three transitions pushed")
        seqs = sorted(int(r.header("x-switchboard-sequence") or 0) for r in rcv.requests)
        assert seqs == [1, 2, 3]
