"""The operator events' coalescing (switchboard.operator.coalesce) and the worker processes' gathering
(switchboard.operator.sink): bursts become one event per key per window, counts add up, memory stays
bounded, and only the delivery queue's drops are an operator's concern."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from switchboard.notify.droplog import DropLog
from switchboard.operator.coalesce import Coalescer
from switchboard.operator.sink import MAX_PENDING, PendingEvents, replay
from switchboard.process.preflight import ConfigError, load_settings
from switchboard.push import mint_secret
from switchboard.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A sink and an emit target at once: what reached it, in order."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []
        self.calls: list[tuple[str, Any]] = []

    def __call__(self, type_: str, data: dict[str, Any]) -> None:
        self.emitted.append((type_, data))

    def hook_disabled(self, hook_id: str, *, reason: str, consecutive_failures: int) -> None:
        self.calls.append(("disabled", (hook_id, reason, consecutive_failures)))

    def push_gave_up(self, **kwargs: Any) -> None:
        self.calls.append(("gave_up", kwargs))

    def dropped(self, reason: str, count: int = 1) -> None:
        self.calls.append(("dropped", (reason, count)))

    def describe(self, type_: str, describer: Any) -> None:
        self.calls.append(("describe", type_))


async def test_a_burst_is_one_event_at_once_and_one_at_the_window_end_with_the_count() -> None:
    out, clock = Recorder(), Clock()
    c = Coalescer(out, 0.05, clock=clock)
    for _ in range(5):
        assert c.add("operator.delivery_dropped", "", {}, reason="queue_full")
    c.add("operator.delivery_dropped", "", {}, count=3, reason="worker_unavailable")
    assert out.emitted == [("operator.delivery_dropped", {"count": 1, "reasons": {"queue_full": 1}})]
    clock.now += 0.05
    await asyncio.sleep(0.1)  # the window's timer is real loop time: let it fire
    assert out.emitted[1] == (
        "operator.delivery_dropped",
        {"count": 7, "reasons": {"queue_full": 4, "worker_unavailable": 3}},
    )
    assert sum(data["count"] for _, data in out.emitted) == 8


async def test_keys_are_coalesced_apart_and_close_emits_what_is_gathered() -> None:
    out, clock = Recorder(), Clock()
    c = Coalescer(out, 60.0, clock=clock)
    c.add("operator.hook_disabled", "h1", {"hook_id": "h1"})
    c.add("operator.hook_disabled", "h2", {"hook_id": "h2"})
    c.add("operator.hook_disabled", "h1", {"hook_id": "h1"})  # within the window: gathered
    assert [d["hook_id"] for _, d in out.emitted] == ["h1", "h2"]
    c.close()
    assert out.emitted[-1] == ("operator.hook_disabled", {"hook_id": "h1", "count": 1})
    clock.now += 60.0
    c.add("operator.hook_disabled", "h1", {"hook_id": "h1"})  # a quiet window later: at once
    assert len(out.emitted) == 4


async def test_gathered_keys_are_bounded() -> None:
    out, clock = Recorder(), Clock()
    c = Coalescer(out, 60.0, clock=clock, max_keys=2)
    for key in ("a", "b", "c"):
        assert c.add("operator.push_config_gave_up", key, {})  # the first of each goes at once
    assert c.add("operator.push_config_gave_up", "a", {})
    assert c.add("operator.push_config_gave_up", "b", {})
    assert not c.add("operator.push_config_gave_up", "c", {})  # a third gathered key is refused
    c.close()
    assert len(out.emitted) == 5


def test_a_worker_process_gathers_events_for_the_server_and_keeps_only_queue_drops() -> None:
    pending, server = PendingEvents(), Recorder()
    assert pending.take() is None
    pending.hook_disabled("h1", reason="consecutive_failures", consecutive_failures=10)
    for reason in ("queue_full", "queue_full", "rate_limited", "shutdown", "owner_backlog_full"):
        pending.dropped(reason)
    taken = pending.take()
    assert taken is not None and pending.take() is None
    replay(server, taken)
    assert server.calls == [
        ("disabled", ("h1", "consecutive_failures", 10)),
        ("dropped", ("queue_full", 2)),
        ("dropped", ("owner_backlog_full", 1)),
    ]
    for i in range(MAX_PENDING + 5):
        pending.hook_disabled(f"h{i}", reason="consecutive_failures", consecutive_failures=10)
    assert len((pending.take() or {})["disabled"]) == MAX_PENDING


def test_every_drop_reaches_the_sink_as_well_as_the_log() -> None:
    sink = Recorder()
    log = DropLog(operator=sink)
    log.drop("queue_full", hook_id="h", notification_id="n", todo_id="t")
    log.drop("rate_limited", hook_id="h", notification_id="n2", todo_id="t2")
    log.close()
    assert sink.calls == [("dropped", ("queue_full", 1)), ("dropped", ("rate_limited", 1))]


def test_the_settings_require_a_minted_secret_with_the_url_and_never_echo_it() -> None:
    url = "https://ops.example/hook"
    assert load_settings({"operator_webhook_url": url, "operator_webhook_secret": mint_secret()})
    bad = "whsec_" + "ab" * 32  # a hex secret: valid base64 of 48 bytes, not the signer's 32
    for overrides, setting in (
        ({"operator_webhook_url": url}, "SWITCHBOARD_OPERATOR_WEBHOOK_SECRET"),
        (
            {"operator_webhook_url": url, "operator_webhook_secret": bad},
            "SWITCHBOARD_OPERATOR_WEBHOOK_SECRET",
        ),
        ({"operator_webhook_url": "ftp://x/", "operator_webhook_secret": mint_secret()}, "_URL"),
    ):
        with pytest.raises(ConfigError) as raised:
            load_settings(overrides)
        assert setting in raised.value.message and bad[6:] not in raised.value.message
    assert Settings().operator_webhook_url is None
