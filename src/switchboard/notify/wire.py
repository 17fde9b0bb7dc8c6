"""What the server and its notify worker process say to each other (docs/notify-hooks.md, "Delivery
process").

One JSON object per line. Server to worker, on the worker's stdin: the first line ``{"hello": ...}``
carries the settings and the dispatcher's parameters (its queue bound is
the child's share of the instance's); then ``{"t": [...]}`` is a batch of committed
transitions, ``{"p": {...}}`` a presence return, ``{"idle": n}`` asks for an answer once everything
before it is matched and finished, ``{"test": {"seq": n, "hook_id", "endpoint_id", "slug"}}`` asks for
the endpoint card's test send. Worker to server, on its stdout: ``{"m": [...]}`` metric changes,
``{"idle": n}`` the answer, ``{"tested": n, "result": {...}}`` the test's outcome, and ``{"o": {...}}`` the
operator events since the last line (:class:`switchboard.operator.sink.PendingEvents`). Closing stdin asks the worker to drain and exit.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any

from switchboard.obs.metrics import Metrics
from switchboard.store.presence import PresenceReturn
from switchboard.store.transitions import Transition

# The series the worker's dispatcher moves, relayed into the server's registry (SPEC-0023, REQ-11).
RELAYED = (
    "notify_notifications",
    "notify_attempts",
    "notify_disabled",
    "notify_worker_errors",
    "notify_queue_depth",
    "notify_delivery_seconds",
)

_TRANSITION_FIELDS = tuple(f.name for f in dataclasses.fields(Transition))


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


# A batch is written as lines of about this many bytes at most (one transition may exceed it alone), so
# the worker's read buffer stays small: it reads a line at a time, and stops reading the pipe once it
# holds twice its limit (switchboard.notify.worker.READ_LIMIT). Transitions it has not read wait in the
# server, where the pipe allowance (switchboard.notify.process.MAX_BUFFER) bounds them.
LINE_BYTES = 64 * 1024


def transitions_lines(
    batch: Sequence[Transition], max_bytes: int = LINE_BYTES
) -> list[tuple[bytes, list[Transition]]]:
    """``batch`` as ``{"t": [...]}`` lines, in order, each with the transitions it carries."""
    out: list[tuple[bytes, list[Transition]]] = []
    rows: list[bytes] = []
    carried: list[Transition] = []
    size = 0
    for t in batch:
        row = json.dumps([getattr(t, name) for name in _TRANSITION_FIELDS], separators=(",", ":")).encode()
        if rows and size + len(row) > max_bytes:
            out.append((b'{"t":[' + b",".join(rows) + b"]}\n", carried))
            rows, carried, size = [], [], 0
        rows.append(row)
        carried.append(t)
        size += len(row) + 1
    if rows:
        out.append((b'{"t":[' + b",".join(rows) + b"]}\n", carried))
    return out


def transitions_of(rows: Iterable[Sequence[Any]]) -> list[Transition]:
    return [Transition(**dict(zip(_TRANSITION_FIELDS, row, strict=True))) for row in rows]


def presence_line(event: PresenceReturn) -> bytes:
    return line({"p": dataclasses.asdict(event)})


def presence_of(data: dict[str, Any]) -> PresenceReturn:
    return PresenceReturn(
        endpoint_id=str(data["endpoint_id"]), reason=str(data["reason"]), at=float(data["at"])
    )


class MetricDeltas:
    """Worker side: what changed in the relayed series since the last call (counters as increments,
    gauges as values), so the server's own counters can be moved by exactly that much."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._seen: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}

    def take(self) -> list[list[Any]]:
        changes: list[list[Any]] = []
        for attr in RELAYED:
            for family in getattr(self.metrics, attr).collect():
                for sample in family.samples:
                    if family.type == "counter" and not sample.name.endswith("_total"):
                        continue  # _created
                    if family.type == "histogram" and not sample.name.endswith(("_bucket", "_sum")):
                        continue  # _count (the +Inf bucket) and _created
                    key = (attr, sample.name, tuple(sorted(sample.labels.items())))
                    before = self._seen.get(key, 0.0)
                    if sample.value == before:
                        continue
                    self._seen[key] = sample.value
                    if family.type == "counter":
                        changes.append([attr, "inc", sample.labels, sample.value - before])
                    elif family.type == "histogram":
                        changes.append(
                            [attr, "merge", {**sample.labels, "__sample": sample.name}, sample.value - before]
                        )
                    else:
                        changes.append([attr, "set", sample.labels, sample.value])
        return changes
