"""Drop and outcome accounting: every notification ends with exactly one outcome (delivered, failed or
dropped), counted once (REQ-11) and kept as a delivery-log record for the next health flush; every drop
also reaches a ``notification dropped`` warning (:mod:`switchboard.notify.droplog`)."""

from __future__ import annotations

from switchboard.core.clock import Clock, ms
from switchboard.notify.droplog import DropLog
from switchboard.notify.flow import Flow
from switchboard.notify.health import HealthRecorder
from switchboard.notify.notification import Notification
from switchboard.obs.metrics import Metrics
from switchboard.store.notify_deliveries import Attempt, DeliveryRecord


class Outcomes:
    def __init__(
        self, *, metrics: Metrics, clock: Clock, health: HealthRecorder, drops: DropLog, flow: Flow
    ) -> None:
        self.metrics, self.clock, self.health, self.drops, self.flow = metrics, clock, health, drops, flow

    def end(self, n: Notification, outcome: str, detail: str | None = None) -> bool:
        """Count ``n``'s one outcome (REQ-11) and keep its delivery-log record for the next flush; False
        if it already had one (then nothing is counted)."""
        if n.outcome is not None:
            return False
        n.outcome = outcome
        if not n.test:
            self.metrics.notify_notifications.labels(n.type, outcome).inc()
        if detail is None and outcome == "failed" and n.tried:
            detail = n.tried[-1].error
        n.detail = detail
        self.health.add_record(
            DeliveryRecord(
                id=n.id,
                kind="notify",
                target_id=n.hook_id,
                endpoint_id=n.endpoint_id,
                subject_id=n.todo_id,
                type=n.type,
                reason=n.reason,
                outcome=outcome,
                detail=detail,
                finished_at=ms(self.clock.now()),
                attempts=list(n.tried),
                test=n.test,
            )
        )
        self.flow.busy()
        return True

    def dropped(self, n: Notification, reason: str) -> None:
        if self.end(n, "dropped", reason):
            self.drops.drop(reason, hook_id=n.hook_id, notification_id=n.id, todo_id=n.todo_id)
        self.flow.settle()

    def tried(self, n: Notification, status: int | None, error: str | None, duration: float) -> None:
        """Keep one attempt of ``n`` for its delivery-log record."""
        n.tried = (
            *n.tried,
            Attempt(n.attempts, ms(self.clock.now()), status, error, round(duration * 1000, 1)),
        )
