"""A2A push against hostile or misbehaving receivers: DNS rebinding, redirects, slow hosts, bursts,
and nothing secret in logs, metrics or API answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

from a2a.types.a2a_pb2 import ListTaskPushNotificationConfigsRequest

from tests.integration.a2a.conftest import Env, a2a_env, message, push_config, send
from tests.support.receivers import (
    HangBeforeHeaders,
    HTTPSReceiver,
    ListeningSocket,
    StaticResolver,
    redirect,
)

TOKEN = "tok-never-in-a-log-line-73"
CREDENTIALS = "cred-never-in-a-log-line-74"


async def test_a_dns_rebind_before_delivery_opens_no_connection(tmp_path: Path) -> None:
    resolver = StaticResolver({"rebind.test": ["93.184.215.14"]})
    async with a2a_env(tmp_path, allow_cidrs="", resolver=resolver) as env, ListeningSocket() as trap:
        _, token = await env.endpoint("client")
        worker = await env.worker()
        client = await env.client(token)
        task = await send(client, message())
        await client.create_task_push_notification_config(
            push_config(f"https://rebind.test:{trap.port}/hook", task_id=task.id)
        )
        resolver.answers["rebind.test"] = ["127.0.0.1"]  # the attacker flips DNS before delivery
        await worker.ok("claim_next")
        await env.settle()
        await trap.assert_untouched(timeout=0.2)
        assert await env.outbox_statuses() == [(2, "failed")]  # refused: never retried
        assert env.metric("switchboard_a2a_push_attempts_total", result="rejected_ssrf") == 1
        assert env.metric("switchboard_a2a_push_deliveries_total", outcome="failed") == 1
        (line,) = env.logs.events("a2a push attempt")
        assert line["error"] == "loopback" and line["host"] == "rebind.test"


async def test_a_302_to_the_metadata_address_is_a_failure_and_not_followed(env: Env) -> None:
    async with ListeningSocket() as metadata_stand_in:
        env.resolver.answers["metadata.test"] = ["169.254.169.254"]
        env.receiver.behaviour = redirect("http://169.254.169.254/latest/meta-data/")
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        await send(client, message(), push=push_config(env.url()))
        await env.settle()
        env.receiver.behaviour = redirect(f"https://hooks.test:{metadata_stand_in.port}/latest/meta-data/")
        await send(client, message("again"), push=push_config(env.url()))
        await env.advance(3600)
        await metadata_stand_in.assert_untouched(timeout=0.2)
    assert len(env.receiver.requests) == 2  # one each: a 3xx is final, and its Location is never dialled
    assert {host for host, _ in env.resolver.calls} == {"hooks.test"}
    assert await env.outbox_statuses() == [(1, "failed"), (1, "failed")]
    assert env.metric("switchboard_a2a_push_attempts_total", result="3xx") == 2


async def test_a_slow_receiver_does_not_delay_another(env: Env) -> None:
    async with HTTPSReceiver(ca=env.ca, cert_hostnames=("slow.test",), behaviour=HangBeforeHeaders()) as slow:
        env.resolver.answers["slow.test"] = ["127.0.0.1"]
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        await send(client, message("slow one"), push=push_config(slow.url("/hook", hostname="slow.test")))
        await slow.next_request()  # the attempt is now stuck waiting for headers
        loop = asyncio.get_running_loop()
        started = loop.time()
        await send(client, message("fast one"), push=push_config(env.url()))
        fast = await env.receiver.next_request(timeout=2.0)
        assert loop.time() - started < 2.0
        assert b"fast one" not in fast.body  # bodies carry states, not message text
        assert len(slow.requests) == 1 and env.a2a.worker._inflight  # the slow attempt still waits
    await env.a2a.worker.idle()  # the slow receiver went away: that attempt ends too


async def test_a_burst_to_one_address_is_spread_at_the_rate_while_another_keeps_its_latency(
    tmp_path: Path,
) -> None:
    resolver = StaticResolver({"busy.test": ["127.0.0.1"], "quiet.test": ["127.0.0.2"]})
    async with (
        a2a_env(
            tmp_path,
            resolver=resolver,
            allow_cidrs="127.0.0.0/8",
            a2a_push_host_rate_per_minute=60,
            a2a_push_host_burst=2,
        ) as env,
        HTTPSReceiver(ca=env.ca, cert_hostnames=("busy.test",)) as busy,
        HTTPSReceiver(ca=env.ca, cert_hostnames=("quiet.test",), host="127.0.0.2") as quiet,
    ):
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)

        for n in range(6):
            await send(client, message(f"burst {n}"), push=push_config(busy.url("/b", hostname="busy.test")))
        await send(client, message("quiet"), push=push_config(quiet.url("/q", hostname="quiet.test")))
        await env.settle()
        assert len(busy.requests) == 2  # the burst allowance, at once
        assert len(quiet.requests) == 1  # the other address is not queued behind the burst
        assert env.metric("switchboard_a2a_push_deferred_total") >= 0

        # 60 a minute with a burst of 2: at most 2 in any closed 2 s window, so the next pair goes at
        # the first poll more than 2 s after the first (at 3 s), none dropped
        for second, expected in ((1, 2), (2, 2), (3, 4), (4, 4), (5, 4), (6, 6)):
            await env.advance(1.0)
            assert (second, len(busy.requests)) == (second, expected)
        assert await env.advance(10) == 0
        assert len(busy.requests) == 6
        assert {status for _, status in await env.outbox_statuses()} == {"delivered"}


async def test_many_names_for_one_address_share_its_limit(tmp_path: Path) -> None:
    """Limits are keyed by the pinned IP: six host names for 127.0.0.1 get the one address's burst."""
    names = [f"n{i}.test" for i in range(6)]
    resolver = StaticResolver({name: ["127.0.0.1"] for name in names})
    async with (
        a2a_env(tmp_path, resolver=resolver, a2a_push_host_rate_per_minute=60, a2a_push_host_burst=2) as env,
        HTTPSReceiver(ca=env.ca, cert_hostnames=tuple(names)) as receiver,
    ):
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        for name in names:
            await send(client, message(name), push=push_config(receiver.url("/h", hostname=name)))
        await env.settle()
        assert len(receiver.requests) == 2  # keyed by host name, all six would have gone at once
        assert env.metric("switchboard_a2a_push_deferred_total") >= 1
        for second, expected in ((1, 2), (2, 2), (3, 4), (4, 4), (5, 4), (6, 6)):
            await env.advance(1.0)  # 2 in any 2 s for the address, whatever the names
            assert (second, len(receiver.requests)) == (second, expected)  # deferred, never dropped
        assert {status for _, status in await env.outbox_statuses()} == {"delivered"}


async def test_no_secret_in_logs_metrics_or_answers(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    url = env.url("/hook?key=QUERYCANARY")
    task = await send(
        client, message(), push=push_config(url, token=TOKEN, scheme="Bearer", credentials=CREDENTIALS)
    )
    lease = (await worker.ok("claim_next"))["todo"]["lease"]
    await env.settle()  # submitted and working are delivered (2xx) before the receiver turns hostile
    env.receiver.behaviour = redirect("https://elsewhere.test/?leak=QUERYCANARY")
    await worker.ok("ack", {"todo_id": task.id, "lease": lease})
    await env.settle()
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert env.pushes()[0].request.header("authorization") == f"Bearer {CREDENTIALS}"
    async with env.inst.client() as http:
        metrics_page = (await http.get("/metrics")).text
    answers = str(listed)
    for secret in (TOKEN, CREDENTIALS, "QUERYCANARY", token):
        assert secret not in metrics_page
        assert secret not in answers
        assert not [line for line in env.logs.lines if secret in line]
    attempts = env.logs.events("a2a push attempt")
    assert len(attempts) == 3 and {a["result"] for a in attempts} == {"2xx", "3xx"}
    assert "switchboard_a2a_push_attempts_total" in metrics_page
