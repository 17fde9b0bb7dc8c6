"""The operator webhook's delivery (switchboard.operator.webhook) with the real Sender and a real HTTPS
receiver: a retryable failure is retried with the same ``webhook-id`` and a fresh signature, a final
one is given up and logged without the URL or secret, and a full queue refuses the newest event."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import trustme
from standardwebhooks import Webhook

from switchboard.delivery.backoff import Backoff
from switchboard.delivery.retry import RetryPolicy
from switchboard.obs.metrics import Metrics
from switchboard.operator.webhook import OperatorWebhook, Queued
from switchboard.push import Sender, Validator, mint_secret
from tests.support.logcapture import LogCapture
from tests.support.receivers import HTTPSReceiver, Respond, StaticResolver, client_ssl_context
from tests.support.secrets import reveal

FAST = RetryPolicy(Backoff(steps=(0.01,), max_attempts=3), retry_tls=True)


@pytest.fixture
def logs() -> Iterator[LogCapture]:
    capture = LogCapture()
    root = logging.getLogger()
    root.addHandler(capture)
    yield capture
    root.removeHandler(capture)


async def body(item: Queued) -> bytes:
    return b'{"type":"%s"}' % item.type.encode()


def webhook(
    rcv: HTTPSReceiver, ca: trustme.CA, secret: str, metrics: Metrics, **kw: object
) -> OperatorWebhook:
    validator = Validator(allow_cidrs=("127.0.0.1/32",), resolver=StaticResolver({"ops.test": ["127.0.0.1"]}))
    sender = Sender(validator, ssl_context=client_ssl_context(ca))
    url = rcv.url("/ops?k=QUERYCANARY", hostname="ops.test")
    return OperatorWebhook(url, secret, sender=sender, metrics=metrics, build=body, retry=FAST, **kw)  # type: ignore[arg-type]


async def test_retried_with_the_same_id_then_given_up_and_logged_without_url_or_secret(
    logs: LogCapture,
) -> None:
    ca, secret, metrics = trustme.CA(), mint_secret(), Metrics()
    reveal(secret)
    async with HTTPSReceiver(ca=ca, cert_hostnames=("ops.test",), behaviour=Respond(503)) as rcv:
        hook = webhook(rcv, ca, secret, metrics)
        hook.start()
        hook.put(Queued("msg_one", "operator.hook_disabled", {}))
        hook.put(Queued("msg_two", "operator.delivery_dropped", {}))
        await hook.idle()
        await hook.stop()
    ids = [r.header("webhook-id") for r in rcv.requests]
    assert ids == ["msg_one"] * 3 + ["msg_two"] * 3  # oldest first, each to its attempt cap
    for r in rcv.requests:
        Webhook(secret).verify(r.body, r.header_map)  # every attempt signed afresh, and valid
    given_up = logs.events("operator event given up")
    assert [(e["event_id"], e["attempts"]) for e in given_up] == [("msg_one", 3), ("msg_two", 3)]
    text = "\n".join(logs.lines)
    assert "QUERYCANARY" not in text and secret[6:] not in text and "ops.test" not in text
    get = metrics.registry.get_sample_value
    assert (
        get("switchboard_operator_events_total", {"type": "operator.hook_disabled", "outcome": "failed"}) == 1
    )


async def test_a_final_status_is_not_retried_and_a_full_queue_refuses_the_newest() -> None:
    ca, secret, metrics = trustme.CA(), mint_secret(), Metrics()
    async with HTTPSReceiver(ca=ca, cert_hostnames=("ops.test",), behaviour=Respond(400)) as rcv:
        hook = webhook(rcv, ca, secret, metrics, max_queue=2)
        for i in range(3):  # not started yet: the third finds the queue full
            hook.put(Queued(f"msg_{i}", "operator.hook_disabled", {}))
        hook.start()
        await hook.idle()
        await hook.stop()
    assert [r.header("webhook-id") for r in rcv.requests] == ["msg_0", "msg_1"]
    get = metrics.registry.get_sample_value
    labels = {"type": "operator.hook_disabled"}
    assert get("switchboard_operator_events_total", {**labels, "outcome": "dropped"}) == 1
    assert get("switchboard_operator_events_total", {**labels, "outcome": "failed"}) == 2
