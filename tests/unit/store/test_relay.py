"""The cluster relay's parts (store/relay.py): what crosses, the payload bound, and who hears it."""

from __future__ import annotations

import asyncio

from switchboard.obs.metrics import Metrics
from switchboard.store.relay import MAX_PAYLOAD, ClusterRelay, decode, encode
from switchboard.store.transitions import Transition, TransitionHub


def tr(i: int, transition: str = "created", title: str = "t", **kw: object) -> Transition:
    values: dict[str, object] = {
        "todo_id": f"td_{i:038d}",
        "endpoint_id": "ep_" + "e" * 37,
        "queue": "q" * 64,
        "kind": "k" * 100,
        "source": "s" * 64,
        "title": title,
        "attempt": 2,
        "transition": transition,
        "reason": "lease_expired",
        "push_eligible": True,
        "push_excluded": False,
        "at": 1234.5,
        "instance_id": "host-1-abc",
    }
    values.update(kw)
    return Transition(**values)  # type: ignore[arg-type]


def test_only_ready_transitions_cross_and_they_come_back_as_they_went() -> None:
    sent = [tr(1), tr(2, "claimed"), tr(3, "requeued", push_eligible=False), tr(4, "done")]
    (payload,) = encode("host-1-abc", sent)
    instance, got = decode(payload)
    assert instance == "host-1-abc"
    assert [t.todo_id for t in got] == [sent[0].todo_id, sent[2].todo_id]
    assert got[0] == sent[0]
    assert got[1].push_eligible is False and got[1].transition == "requeued" and got[1].attempt == 2


def test_every_payload_stays_under_the_bound_whatever_the_titles() -> None:
    wide = "\U0001f600" * 5000  # 4 bytes a character; the relay carries the 200-character summary
    sent = [tr(i, title=wide) for i in range(300)]
    payloads = encode("i" * 500, sent)
    assert len(payloads) > 1
    assert all(len(p.encode()) <= MAX_PAYLOAD for p in payloads)
    received = [t for p in payloads for t in decode(p)[1]]
    assert [t.todo_id for t in received] == [t.todo_id for t in sent]
    assert all(t.title == "\U0001f600" * 200 for t in received)


async def test_remote_transitions_reach_only_the_subscribers_that_opted_in(metrics: Metrics) -> None:
    hub = TransitionHub(metrics, instance_id="me")
    seen: dict[str, list[str]] = {"doorbell": [], "hooks": []}

    async def doorbell(t: Transition) -> None:
        seen["doorbell"].append(t.todo_id)

    async def hooks(batch: list[Transition]) -> None:
        seen["hooks"] += [t.todo_id for t in batch]

    hub.subscribe("doorbell", doorbell, remote=True)
    hub.subscribe_batch("hooks", hooks)
    assert hub.wants_remote
    await hub.start()
    try:
        relay = ClusterRelay("postgresql+asyncpg://unused/none", hub, metrics)
        (theirs,) = encode("other", [tr(1, instance_id="other")])
        (ours,) = encode("me", [tr(2, instance_id="me")])
        relay._on_notify(None, 0, "switchboard_ready", theirs)
        relay._on_notify(None, 0, "switchboard_ready", ours)  # published locally after our own commit
        relay._on_notify(None, 0, "switchboard_ready", "{not json")
        hub.publish([tr(3, instance_id="me")])
        await hub.idle()
    finally:
        await hub.stop()
    assert seen == {"doorbell": [tr(1).todo_id, tr(3).todo_id], "hooks": [tr(3).todo_id]}
    events = metrics.registry.get_sample_value
    assert events("switchboard_cluster_relay_events_total", {"result": "received"}) == 1.0
    assert events("switchboard_cluster_relay_events_total", {"result": "malformed"}) == 1.0
    # the transitions metric counts what this instance made, not what it heard
    assert events("switchboard_todo_transitions_total", {"transition": "created"}) == 1.0


async def test_a_hub_without_remote_subscribers_does_not_want_the_relay(metrics: Metrics) -> None:
    hub = TransitionHub(metrics)

    async def local(t: Transition) -> None:
        await asyncio.sleep(0)

    hub.subscribe("a2a_push", local)
    assert not hub.wants_remote
