"""Pure parts of notify hooks: the REQ-5 body bounds and the REQ-7 backoff schedule."""

from __future__ import annotations

import inspect
import json

from hypothesis import given
from hypothesis import strategies as st

from switchboard.notify import body as bodies
from switchboard.notify.attempts import MAX_ATTEMPTS, retry_policy
from switchboard.notify.component import NotifyComponent
from switchboard.notify.dispatcher import Dispatcher
from switchboard.store.transitions import Transition


def transition(title: str, **kw: object) -> Transition:
    base: dict[str, object] = {
        "todo_id": "td_01JZZZZZZZZZZZZZZZZZZZZZZZ",
        "endpoint_id": "ep_x",
        "queue": "q" * 64,
        "kind": "k" * 100,
        "source": "s" * 64,
        "title": title,
        "attempt": 3,
        "transition": "requeued",
        "reason": "lease_expired",
        "push_eligible": True,
        "push_excluded": False,
        "at": 0.0,
    }
    base.update(kw)
    return Transition(**base)  # type: ignore[arg-type]


@given(st.text(max_size=5000))
def test_todo_ready_is_bounded_and_exact(title: str) -> None:
    raw = bodies.todo_ready(transition(title), "e" * 64, 1_800_000_000)
    assert len(raw) <= bodies.MAX_BODY
    sent = json.loads(raw)
    assert list(sent) == [
        "type",
        "reason",
        "todo_id",
        "queue",
        "kind",
        "source",
        "summary",
        "endpoint",
        "attempt",
        "created_at",
    ]
    assert len(sent["summary"]) <= 200
    assert sent["reason"] == "requeued" and sent["attempt"] == 3


def test_kind_and_source_omitted_when_absent() -> None:
    sent = json.loads(bodies.todo_ready(transition("t", kind=None, source=None), "e", 0))
    assert "kind" not in sent and "source" not in sent
    assert sent["created_at"] == "1970-01-01T00:00:00Z"


def test_backlog_body_carries_counts_only() -> None:
    sent = json.loads(bodies.todos_backlog("ep", "clock_in", 7, ["lane-m", "reviews"], 5400, 0))
    assert sent == {
        "type": "todos.backlog",
        "reason": "clock_in",
        "endpoint": "ep",
        "pending": 7,
        "queues": ["lane-m", "reviews"],
        "oldest_pending_seconds": 5400,
        "created_at": "1970-01-01T00:00:00Z",
    }


def test_backoff_is_about_one_then_five_seconds_jittered() -> None:
    assert MAX_ATTEMPTS == 3
    default = inspect.signature(Dispatcher.__init__).parameters["retry_delays"].default
    assert tuple(default) == (1.0, 5.0)
    assert tuple(inspect.signature(NotifyComponent.__init__).parameters["retry_delays"].default) == (1.0, 5.0)
    policy = retry_policy(default)
    assert policy.max_attempts == MAX_ATTEMPTS
    first = [policy.backoff.delay(1) for _ in range(2000)]
    assert min(first) >= 0.8 and max(first) <= 1.2
    samples = [policy.backoff.delay(2) for _ in range(2000)]
    assert min(samples) >= 4.0 and max(samples) <= 6.0
    assert len({round(s, 3) for s in samples}) > 100  # really jittered, not a constant
