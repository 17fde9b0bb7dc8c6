"""The transition hub's batch subscriptions (``TransitionHub.subscribe_batch``): what is queued for a
subscriber reaches it in one call, bounded, in order, with the same overflow, drop and error accounting
as a one-at-a-time subscriber."""

from __future__ import annotations

import asyncio
import logging

import pytest

from switchboard.obs.metrics import Metrics
from switchboard.store.transitions import MAX_BATCH, Transition, TransitionHub, is_ready


def tr(i: int, transition: str = "created") -> Transition:
    return Transition(
        todo_id=f"td_{i:04d}",
        endpoint_id="ep_x",
        queue="inbox",
        kind=None,
        source=None,
        title=f"t{i}",
        attempt=0,
        transition=transition,
        reason=None,
        push_eligible=True,
        push_excluded=False,
        at=0.0,
    )


def sample(metrics: Metrics, subscriber: str, error: str) -> float:
    value = metrics.registry.get_sample_value(
        "switchboard_transition_subscriber_errors_total", {"subscriber": subscriber, "error": error}
    )
    return float(value or 0.0)


async def test_everything_queued_arrives_in_one_call_up_to_the_bound(hub: TransitionHub) -> None:
    batches: list[list[str]] = []

    async def handler(batch: list[Transition]) -> None:
        batches.append([t.todo_id for t in batch])

    hub.subscribe_batch("batch", handler)
    hub.publish([tr(i) for i in range(2 * MAX_BATCH + 10)])  # all queued before the task runs
    await hub.idle()
    assert [len(b) for b in batches] == [MAX_BATCH, MAX_BATCH, 10]
    assert [i for b in batches for i in b] == [f"td_{i:04d}" for i in range(2 * MAX_BATCH + 10)]


async def test_at_low_load_a_batch_is_one_transition(hub: TransitionHub) -> None:
    batches: list[int] = []

    async def handler(batch: list[Transition]) -> None:
        batches.append(len(batch))

    hub.subscribe_batch("batch", handler)
    for i in range(3):
        hub.publish([tr(i)])
        await hub.idle()
    assert batches == [1, 1, 1]


async def test_max_batch_is_respected(hub: TransitionHub) -> None:
    batches: list[int] = []

    async def handler(batch: list[Transition]) -> None:
        batches.append(len(batch))

    hub.subscribe_batch("batch", handler, max_batch=4)
    hub.publish([tr(i) for i in range(10)])
    await hub.idle()
    assert batches == [4, 4, 2]
    with pytest.raises(ValueError):
        hub.subscribe_batch("bad", handler, max_batch=0)


async def test_a_one_at_a_time_subscriber_still_gets_single_transitions(hub: TransitionHub) -> None:
    seen: list[str] = []

    async def handler(t: Transition) -> None:
        seen.append(t.todo_id)

    hub.subscribe("single", handler)
    hub.publish([tr(i) for i in range(5)])
    await hub.idle()
    assert seen == [f"td_{i:04d}" for i in range(5)]


async def test_overflow_and_on_drop_are_per_transition(metrics: Metrics) -> None:
    hub = TransitionHub(metrics, instance_id="test")
    await hub.start()
    try:
        got: list[str] = []
        dropped: list[str] = []

        async def handler(batch: list[Transition]) -> None:
            got.extend(t.todo_id for t in batch)

        hub.subscribe_batch("small", handler, queue_size=3, on_drop=lambda t: dropped.append(t.todo_id))
        hub.publish([tr(i) for i in range(5)])
        await hub.idle()
        assert got == ["td_0000", "td_0001", "td_0002"]
        assert dropped == ["td_0003", "td_0004"]
        assert sample(metrics, "small", "overflow") == 2
    finally:
        await hub.stop()


async def test_a_raising_batch_handler_is_counted_and_logged_once_and_the_hub_goes_on(
    metrics: Metrics, caplog: pytest.LogCaptureFixture
) -> None:
    hub = TransitionHub(metrics, instance_id="test")
    await hub.start()
    try:
        calls: list[list[str]] = []
        others: list[str] = []

        async def handler(batch: list[Transition]) -> None:
            calls.append([t.todo_id for t in batch])
            if len(calls) == 1:
                raise RuntimeError("boom")

        async def other(t: Transition) -> None:
            others.append(t.todo_id)

        hub.subscribe_batch("flaky", handler)
        hub.subscribe("other", other)
        caplog.set_level(logging.ERROR, logger="switchboard.transitions")
        hub.publish([tr(i) for i in range(3)])
        await hub.idle()
        hub.publish([tr(3)])
        await hub.idle()
        assert calls == [["td_0000", "td_0001", "td_0002"], ["td_0003"]]
        assert others == ["td_0000", "td_0001", "td_0002", "td_0003"]
        assert sample(metrics, "flaky", "raised") == 1
        raised = [r for r in caplog.records if r.getMessage() == "transition subscriber raised"]
        assert len(raised) == 1
        fields = raised[0].__dict__["fields"]
        assert fields["subscriber"] == "flaky" and fields["transitions"] == 3
        assert fields["todo_ids"] == ["td_0000", "td_0001", "td_0002"]
    finally:
        await hub.stop()


async def test_idle_waits_for_the_batch_in_progress(hub: TransitionHub) -> None:
    release = asyncio.Event()
    done: list[int] = []

    async def handler(batch: list[Transition]) -> None:
        await release.wait()
        done.append(len(batch))

    hub.subscribe_batch("slow", handler)
    hub.publish([tr(i) for i in range(3)])
    waiter = asyncio.create_task(hub.idle())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    release.set()
    await asyncio.wait_for(waiter, 5)
    assert done == [3]


async def test_stop_lets_a_batch_subscriber_finish_what_is_queued(metrics: Metrics) -> None:
    hub = TransitionHub(metrics, instance_id="test")
    got: list[str] = []

    async def handler(batch: list[Transition]) -> None:
        await asyncio.sleep(0.01)
        got.extend(t.todo_id for t in batch)

    hub.subscribe_batch("late", handler)  # subscribed before start, like the notify component
    await hub.start()
    hub.publish([tr(i) for i in range(4)])
    await hub.stop()
    assert got == [f"td_{i:04d}" for i in range(4)]


async def test_a_filtered_subscriber_never_queues_what_it_does_not_want(metrics: Metrics) -> None:
    hub = TransitionHub(metrics, instance_id="test")
    await hub.start()
    try:
        ready: list[str] = []
        every: list[str] = []

        async def on_ready(t: Transition) -> None:
            ready.append(t.todo_id)

        async def on_every(batch: list[Transition]) -> None:
            every.extend(t.todo_id for t in batch)

        # A queue of 2: the claims and acks between the ready transitions would overflow it if queued.
        hub.subscribe("ready", on_ready, queue_size=2, wants=is_ready)
        hub.subscribe_batch("every", on_every)
        moves = [tr(0), tr(0, "claimed"), tr(0, "done"), tr(1, "claimed"), tr(1, "done"), tr(2)]
        hub.publish(moves)
        await hub.idle()
        assert ready == ["td_0000", "td_0002"]
        assert every == [t.todo_id for t in moves]
        assert sample(metrics, "ready", "overflow") == 0
    finally:
        await hub.stop()
