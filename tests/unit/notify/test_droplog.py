"""notify/droplog.py: every drop reaches a ``notification dropped`` line, by a timer, not by a later drop.

REQ-7 allows one line per reason per short window if it says how many drops it stands for; the sum of
``drops`` over the lines must equal the drops, each line names what was dropped by id, and nothing is
left gathered after ``close``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from switchboard.notify.droplog import MAX_IDS, DropLog
from tests.support.logcapture import LogCapture


@pytest.fixture
def logs() -> Iterator[LogCapture]:
    capture = LogCapture()
    logger = logging.getLogger("switchboard.notify")
    logger.addHandler(capture)
    try:
        yield capture
    finally:
        logger.removeHandler(capture)


def lines(logs: LogCapture) -> list[dict[str, Any]]:
    return logs.events("notification dropped")


async def until(logs: LogCapture, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The lines once there are ``count`` (a timer writes them; there is nothing else to await)."""
    deadline = time.monotonic() + timeout
    while len(lines(logs)) < count:
        assert time.monotonic() < deadline, f"only {len(lines(logs))} of {count} lines after {timeout} s"
        await asyncio.sleep(0.01)
    return lines(logs)


async def test_the_first_drop_is_written_at_once_and_the_rest_by_the_timer(logs: LogCapture) -> None:
    drops = DropLog(window=0.2)
    drops.drop("queue_full", hook_id="nh_a", notification_id="msg_1", todo_id="td_1")
    (first,) = lines(logs)
    assert first["drops"] == 1 and first["hook_id"] == "nh_a" and first["hook_ids"] == ["nh_a"]
    for i, hook in enumerate(["nh_a", "nh_b", "nh_c", "nh_b"]):
        drops.drop("queue_full", hook_id=hook, notification_id=f"msg_{i + 2}", todo_id=f"td_{i + 2}")
    assert len(lines(logs)) == 1  # gathered, not written per drop
    # no later drop arrives: the window's timer writes the line
    _, second = await until(logs, 2)
    assert second["reason"] == "queue_full" and second["drops"] == 4
    assert second["hook_ids"] == ["nh_a", "nh_b", "nh_c"]
    assert second["todo_ids"] == ["td_2", "td_3", "td_4", "td_5"]
    assert drops.logged == 5 == sum(line["drops"] for line in lines(logs))


async def test_reasons_are_coalesced_apart_and_unmatched_drops_name_endpoint_and_todo(
    logs: LogCapture,
) -> None:
    drops = DropLog(window=0.2)
    for i in range(3):
        drops.drop("queue_full_unmatched", endpoint_id=f"ep_{i % 2}", todo_id=f"td_{i}")
        drops.drop("rate_limited", hook_id="nh_x", notification_id=f"msg_{i}", todo_id=f"td_{i}")
    found = await until(logs, 4)
    by_reason: dict[str, int] = {}
    for line in found:
        by_reason[line["reason"]] = by_reason.get(line["reason"], 0) + line["drops"]
        assert line.get("hook_ids") or (line.get("endpoint_ids") and line.get("todo_ids"))
    assert by_reason == {"queue_full_unmatched": 3, "rate_limited": 3}
    unmatched = [line for line in found if line["reason"] == "queue_full_unmatched"]
    assert unmatched[-1]["endpoint_ids"] == ["ep_1", "ep_0"] and unmatched[-1]["todo_ids"] == ["td_1", "td_2"]


async def test_close_writes_what_is_gathered_and_the_timer_then_writes_nothing(logs: LogCapture) -> None:
    drops = DropLog(window=60.0)
    for i in range(10):
        drops.drop("worker_unavailable", endpoint_id="ep_1", todo_id=f"td_{i}", kind="todo.ready")
    assert [line["drops"] for line in lines(logs)] == [1]
    drops.close()
    assert [line["drops"] for line in lines(logs)] == [1, 9]
    assert lines(logs)[-1]["kind"] == "todo.ready"
    drops.close()
    assert len(lines(logs)) == 2 and drops.logged == 10


async def test_a_flood_gives_bounded_lines_that_still_count_every_drop(logs: LogCapture) -> None:
    drops = DropLog(window=60.0)
    for i in range(5000):
        drops.drop("queue_full_unmatched", endpoint_id=f"ep_{i % 7}", todo_id=f"td_{i}")
    drops.close()
    first, second = lines(logs)
    assert first["drops"] + second["drops"] == 5000
    assert len(second["todo_ids"]) == MAX_IDS and second["todo_ids_omitted"] == 4999 - MAX_IDS
    assert len(second["endpoint_ids"]) == 7 and "endpoint_ids_omitted" not in second


def test_without_an_event_loop_a_gathered_drop_is_written_at_once(logs: LogCapture) -> None:
    drops = DropLog(window=60.0)
    drops.drop("queue_full", hook_id="nh_a")
    drops.drop("queue_full", hook_id="nh_b")
    assert [(line["drops"], line["hook_ids"]) for line in lines(logs)] == [(1, ["nh_a"]), (1, ["nh_b"])]
