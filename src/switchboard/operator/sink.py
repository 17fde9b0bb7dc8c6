"""Where operator events enter: the one interface the notify dispatcher and the A2A push worker call.

Three implementations: :class:`NullSink` (no operator webhook configured), :class:`PendingEvents` (a
notify worker process: gathers what happened for the server, which it reaches on the metrics relay's
line, :mod:`switchboard.notify.wire`) and :class:`switchboard.operator.events.OperatorEvents` (the
server: coalesces, signs and sends). The calls only record facts in memory and never wait, so emitting
an event cannot slow a delivery.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

HOOK_DISABLED = "operator.hook_disabled"
PUSH_GAVE_UP = "operator.push_config_gave_up"
DELIVERY_DROPPED = "operator.delivery_dropped"
#: The drop reasons that are the delivery queue's (an overflow of the instance's bound, a worker process
#: that cannot take work). ``rate_limited`` is a hook's own per-minute limit doing its job, ``shutdown``
#: and ``hook_gone`` are not failures: those are counted and logged, never sent to the operator.
QUEUE_DROP_REASONS = frozenset(
    {"queue_full", "queue_full_unmatched", "worker_unavailable", "owner_backlog_full"}
)
MAX_PENDING = 1000
#: An event's data to the owner's ids (read from the owning feature's SQL home), by the feature that
#: owns the table: the operator package imports neither notify nor a2a.
Describer = Callable[
    [dict[str, Any]], Awaitable[dict[str, Any]]
]  # hook disables a worker process keeps for the server between two relay lines


class OperatorSink(Protocol):
    def hook_disabled(self, hook_id: str, *, reason: str, consecutive_failures: int) -> None: ...

    def push_gave_up(
        self, *, config_row_id: str, task_id: str, outcome: str, error: str | None, attempts: int
    ) -> None: ...

    def dropped(self, reason: str, count: int = 1) -> None: ...

    def describe(self, type_: str, describer: Describer) -> None:
        """Events of ``type_`` also name what ``describer`` reads (a component registers it)."""
        ...


class NullSink:
    """No operator webhook: the structured log line and the metrics are all there is."""

    def hook_disabled(self, hook_id: str, *, reason: str, consecutive_failures: int) -> None:
        return None

    def push_gave_up(
        self, *, config_row_id: str, task_id: str, outcome: str, error: str | None, attempts: int
    ) -> None:
        return None

    def dropped(self, reason: str, count: int = 1) -> None:
        return None

    def describe(self, type_: str, describer: Describer) -> None:
        return None


class PendingEvents:
    """A notify worker process's events, until the next relay line carries them to the server."""

    def __init__(self) -> None:
        self._disabled: list[dict[str, Any]] = []
        self._drops: dict[str, int] = {}

    def hook_disabled(self, hook_id: str, *, reason: str, consecutive_failures: int) -> None:
        if len(self._disabled) < MAX_PENDING:
            self._disabled.append(
                {"hook_id": hook_id, "reason": reason, "consecutive_failures": consecutive_failures}
            )

    def push_gave_up(
        self, *, config_row_id: str, task_id: str, outcome: str, error: str | None, attempts: int
    ) -> None:
        return None  # A2A push runs in the server process only

    def dropped(self, reason: str, count: int = 1) -> None:
        if reason in QUEUE_DROP_REASONS:
            self._drops[reason] = self._drops.get(reason, 0) + count

    def describe(self, type_: str, describer: Describer) -> None:
        return None  # the server describes the events it sends

    def take(self) -> dict[str, Any] | None:
        """What happened since the last call, as the relay line's ``o`` member; None: nothing."""
        if not self._disabled and not self._drops:
            return None
        taken = {"disabled": self._disabled, "drops": self._drops}
        self._disabled, self._drops = [], {}
        return taken


def replay(sink: OperatorSink, taken: dict[str, Any]) -> None:
    """The server side of :meth:`PendingEvents.take`: a worker process's events, into ``sink``."""
    for item in taken.get("disabled", ()):
        sink.hook_disabled(
            str(item["hook_id"]),
            reason=str(item["reason"]),
            consecutive_failures=int(item["consecutive_failures"]),
        )
    for reason, count in dict(taken.get("drops", {})).items():
        sink.dropped(str(reason), int(count))
