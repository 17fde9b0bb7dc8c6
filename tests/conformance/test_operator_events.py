"""Operator events (issue 29, docs/self-hosting.md "Operator events") against ``switchboard serve`` with
its notify worker processes: a hook the worker processes auto-disable, and notifications their queue
drops, reach the operator's webhook as Standard Webhooks events sent by the server, checked with the
stock ``standardwebhooks`` verifier.

The operator's receiver is an HTTPS receiver on 127.0.0.1 under the name ``operator.test`` (the hosts
file answers it), reachable because the notify hooks' allowlist names 127.0.0.1/32: the operator webhook
goes through the same SSRF guard and allowlist as every hook. Its port is chosen when the module is
imported, since the server is configured before the receiver starts. The URL carries a query canary:
it must reach the receiver and appear in no log line (the module's log check)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from standardwebhooks import Webhook

from switchboard.operator.sink import QUEUE_DROP_REASONS
from switchboard.push import mint_secret
from tests.conformance.harness import FLEET, Conf, ServerSpec, ip_url, receiver, tenant, wait_until
from tests.support.receivers import HangBeforeHeaders, HTTPSReceiver, RecordedRequest, Respond
from tests.support.secrets import reveal
from tests.support.server import reserved_port

SECRET = mint_secret()
reveal(SECRET)
PORTS = {"operator": reserved_port(), "operator-overflow": reserved_port()}
HOSTS = {"operator.test": ["127.0.0.1"]}


def operator_settings(name: str) -> dict[str, str | int]:
    return {
        "notify_hook_allow_cidrs": "127.0.0.1/32",
        "operator_webhook_url": f"https://operator.test:{PORTS[name]}/ops?k=QUERYCANARY",
        "operator_webhook_secret": SECRET,
    }


OPERATOR = ServerSpec("operator", operator_settings("operator"), humans=("alice",), hosts=HOSTS)
OVERFLOW = ServerSpec(
    "operator-overflow",
    {**operator_settings("operator-overflow"), "notify_queue_size": 2, "notify_workers": 1},
    humans=("alice",),
    hosts=HOSTS,
)
SERVERS = [OPERATOR, OVERFLOW]


@asynccontextmanager
async def operator_receiver(name: str, behaviour: Any = None) -> AsyncIterator[HTTPSReceiver]:
    async with HTTPSReceiver(
        ca=FLEET.ca,
        cert_hostnames=("operator.test",),
        bind_port=PORTS[name],
        behaviour=behaviour or Respond(204),
    ) as rcv:
        yield rcv


def verified(request: RecordedRequest) -> dict[str, Any]:
    """The event, once the stock verifier accepts its signature and timestamp."""
    event: dict[str, Any] = Webhook(SECRET).verify(request.body, request.header_map)
    assert request.path == "/ops?k=QUERYCANARY"
    assert b"QUERYCANARY" not in request.body and b"://" not in request.body and b"whsec_" not in request.body
    return event


async def test_an_auto_disabled_hook_sends_one_signed_operator_event(confs: dict[str, Conf]) -> None:
    conf = confs[OPERATOR.name]
    async with (
        operator_receiver(OPERATOR.name, Respond(503)) as ops,
        receiver(Respond(401)) as dead,
        receiver(Respond(401)) as dead_too,
        tenant(conf) as a,
    ):
        hook = await a.hook(ip_url(dead))
        await a.todos(10, "down")
        first = await ops.next_request(timeout=30)
        ops.behaviour = Respond(204)
        retried = await ops.next_request(timeout=15)  # a 503 is retried: the same event, signed afresh
        assert retried.header("webhook-id") == first.header("webhook-id") and retried.body == first.body
        assert verified(first) == verified(retried)
        event = verified(retried)
        assert event["type"] == "operator.hook_disabled" and event["timestamp"].endswith("Z")
        data = event["data"]
        assert data["hook_id"] == hook["hook_id"] and data["endpoint_slug"] == a.slug
        assert data["reason"] == "consecutive_failures" and data["consecutive_failures"] == 10
        assert data["count"] == 1 and data["instance_id"] and data["endpoint_id"]
        assert set(data) == {
            "instance_id", "hook_id", "endpoint_id", "endpoint_slug", "reason", "consecutive_failures", "count"
        }  # fmt: skip

        # A second hook's disable is a second event; the first hook's was sent once.
        other = await a.hook(ip_url(dead_too))
        await a.todos(10, "down again")
        last = await ops.next_request(timeout=30)
        assert verified(last)["data"]["hook_id"] == other["hook_id"]
        assert Counter(r.header("webhook-id") for r in ops.requests) == {
            first.header("webhook-id"): 2,
            last.header("webhook-id"): 1,
        }
        sent = await conf.wait_lines("operator event sent", 2, type="operator.hook_disabled")
        assert {line["event_id"] for line in sent} == {first.header("webhook-id"), last.header("webhook-id")}
        (failed,) = conf.lines("operator event attempt failed", event_id=first.header("webhook-id"))
        assert failed["status"] == 503 and failed["retry_in_s"] > 0


async def test_queue_drops_send_one_coalesced_operator_event(confs: dict[str, Conf]) -> None:
    """A queue of 2 and one attempt at a time, receivers that hang: dozens of notifications are dropped
    at once, and the operator hears of them in one event with a count (the rest of the window's drops
    are gathered for the window's end, 60 s later)."""
    conf = confs[OVERFLOW.name]
    async with operator_receiver(OVERFLOW.name) as ops, AsyncExitStack() as stack:
        rcvs = [await stack.enter_async_context(receiver(HangBeforeHeaders())) for _ in range(3)]
        a = await stack.enter_async_context(tenant(conf))
        for rcv in rcvs:
            await a.hook(ip_url(rcv))
        await a.todos(20, "overflowing")
        event = verified(await ops.next_request(timeout=30))
        assert event["type"] == "operator.delivery_dropped"
        data = event["data"]
        assert data["count"] >= 1 and sum(data["reasons"].values()) == data["count"]
        assert set(data["reasons"]) <= QUEUE_DROP_REASONS and data["instance_id"]

        async def many_dropped() -> bool:
            lines = conf.lines("notification dropped")
            return sum(int(line["drops"]) for line in lines) >= 20

        await wait_until(many_dropped, timeout=30, what="the drops logged")
        await conf.wait_lines("operator event sent", 1, type="operator.delivery_dropped")
        assert len(ops.requests) == 1, [json.loads(r.body)["data"] for r in ops.requests]
        for rcv in rcvs:
            rcv.behaviour = Respond(204)
