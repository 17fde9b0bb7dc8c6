"""stream.py: turning logged transitions into stream events, and reading Last-Event-ID."""

from __future__ import annotations

import json

from a2a.types.a2a_pb2 import TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent

from switchboard.a2a.stream import EventIds, events_of, is_terminal, last_event_id
from switchboard.a2a.views import PushEvent, push_body


def body(transition: str, seq: int, result: str | None = None) -> str:
    event = PushEvent("td_1", "ctx_1", "inbox", transition, None, seq, 1_700_000_000.0, result, None)
    return push_body(event).decode()


def test_a_claim_is_one_status_update_without_push_metadata() -> None:
    (event,) = events_of(body("claimed", 2))
    assert isinstance(event, TaskStatusUpdateEvent)
    assert event.status.state == TaskState.TASK_STATE_WORKING
    assert not event.metadata.fields  # the push body's sequence travels as the SSE id instead
    assert not is_terminal(event)


def test_a_completion_is_the_result_artifact_then_the_terminal_status() -> None:
    artifact, status = events_of(body("done", 3, json.dumps({"n": 1})))
    assert isinstance(artifact, TaskArtifactUpdateEvent) and artifact.last_chunk
    assert artifact.artifact.artifact_id == "result"
    assert isinstance(status, TaskStatusUpdateEvent) and is_terminal(status)
    assert status.status.state == TaskState.TASK_STATE_COMPLETED


def test_a_cancel_has_no_artifact() -> None:
    (status,) = events_of(body("canceled", 4))
    assert is_terminal(status)


def test_last_event_id_reads_only_sequence_numbers() -> None:
    assert last_event_id({"last-event-id": "7"}) == 7
    assert last_event_id({"last-event-id": " 12 "}) == 12
    for bad in ("", "abc", "-1", "1e3", "9" * 19):
        assert last_event_id({"last-event-id": bad}) is None
    assert last_event_id({}) is None
    assert last_event_id(None) is None


def test_event_ids_come_out_in_yield_order() -> None:
    ids = EventIds()
    ids.add(1)
    ids.add(None)
    ids.add(3)
    assert [ids.take(), ids.take(), ids.take(), ids.take()] == [1, None, 3, None]
