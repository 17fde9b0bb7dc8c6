"""Replay and recovery of A2A pushes (issue 29): a finished push sent again, from its delivery-log row.

Why it is shaped like this:

* The delivery log holds identifiers only: since migration 0018 an A2A row names the owning endpoint
  and the transition's sequence number (``event_seq``). The body is that transition's event from the
  task's event log (``a2a_task_events``, the bytes the first push sent, kept as long as the task's push
  configs), so a replay repeats the same event exactly; nothing is rebuilt from later state.
* A replay is a push like any other: the config's outbox row of that sequence goes back to
  ``pending`` (a new row once the finished one was purged) with the logged ``webhook-id``, reason
  ``replay`` and a new attempt cycle. The delivery workers claim it, sign it with a fresh timestamp,
  apply the per-host limits and the retry policy (``SWITCHBOARD_A2A_PUSH_MAX_ATTEMPTS``), and log its
  outcome as a delivery-log row of its own with reason ``replay``. Like every A2A push it is durable
  (the outbox), unlike a notify hook's replay.
* Ownership is checked through the task: another endpoint's id answers ``not_found`` exactly like an
  unknown one. One operation each; the MCP verbs, the endpoint card and (through the server) the CLI
  call these.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from switchboard.a2a.configs import PUSH_VERB
from switchboard.a2a.tasks import TaskStore
from switchboard.core.clock import Clock, ms, since_ms
from switchboard.obs.audit import audit
from switchboard.store import push_configs, push_outbox
from switchboard.store.accounts import Endpoint
from switchboard.store.db import Database
from switchboard.store.notify_deliveries import DeliveryLog

RECOVER_MAX = 1000  # pushes one recover queues at most, as notify hooks' recover
PUSH_TYPE = "a2a.push"  # the delivery log's type of every A2A push row


class PushReplayError(Exception):
    code = "invalid_argument"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PushNotFound(PushReplayError):
    code = "not_found"


NOT_FOUND = "no A2A push with that id"  # unknown, or another endpoint's: one answer
NOT_REPLAYABLE = (
    "this push was logged before replay existed (its row has no sequence number) and cannot be "
    "replayed; read the task with GetTask instead"
)


class PushReplay:
    def __init__(
        self, db: Database, tasks: TaskStore, clock: Clock, wake: Callable[[], None] | None = None
    ) -> None:
        self.db, self.tasks, self.clock, self.wake = db, tasks, clock, wake
        self.deliveries = DeliveryLog(db)

    async def resend(
        self, endpoint: Endpoint, delivery_id: object, *, actor: str | None = None
    ) -> dict[str, Any]:
        """Send one finished push again: the same webhook-id and event, a fresh signature and timestamp,
        a new attempt cycle. Another endpoint's id is not found, like an unknown one."""
        if not isinstance(delivery_id, str) or not delivery_id or len(delivery_id) > 64:
            raise PushReplayError("notification_id must be a webhook-id from the delivery log")
        row = await self.deliveries.logged_push(delivery_id)
        if row is None:
            raise PushNotFound(NOT_FOUND)
        if row["endpoint_id"] is None:  # logged before migration 0018: the task says whose it is
            if row["subject_id"] is None or await self.tasks.get(endpoint.id, row["subject_id"]) is None:
                raise PushNotFound(NOT_FOUND)
        elif row["endpoint_id"] != endpoint.id:
            raise PushNotFound(NOT_FOUND)
        if row["event_seq"] is None:
            raise PushReplayError(NOT_REPLAYABLE)
        result = await self._replay(endpoint, row, await push_configs.target(self.db, row["target_id"]))
        audit(
            "a2a_push.resend",
            actor=actor or endpoint.id,
            endpoint_id=endpoint.id,
            task_id=row["subject_id"],
            config=row["target_id"],
            notification_id=delivery_id,
            outcome=said(result),
        )
        return result

    async def recover(
        self,
        endpoint: Endpoint,
        task_id: object,
        config_id: object,
        since: object,
        *,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Send again every push of one push config whose newest delivery-log row since ``since`` is
        failed, oldest first, each as :meth:`resend` does."""
        if not isinstance(task_id, str) or not task_id or not isinstance(config_id, str) or not config_id:
            raise PushReplayError("task_id and config_id must be non-empty strings")
        since_ms = since_epoch_ms(since)
        target = await push_configs.owned_target(self.db, endpoint.id, task_id, config_id)
        if target is None:
            raise PushNotFound("push notification config not found")
        rows = await self.deliveries.failed_since(
            None, target.row_id, since_ms, types=(PUSH_TYPE,), limit=RECOVER_MAX, kind="a2a"
        )
        results = []
        for row in rows:
            if row["event_seq"] is None:
                results.append({"notification_id": row["id"], "error": "not_replayable"})
            else:
                results.append(await self._replay(endpoint, row, target))
        counts: dict[str, int] = {}
        for r in results:
            counts[said(r)] = counts.get(said(r), 0) + 1
        audit(
            "a2a_push.recover",
            actor=actor or endpoint.id,
            endpoint_id=endpoint.id,
            task_id=task_id,
            config=target.row_id,
            since=since_ms,
            found=len(rows),
            **counts,
        )
        return {
            "task_id": task_id,
            "config_id": config_id,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since_ms / 1000)),
            "found": len(rows),
            **counts,
            "notifications": results,
        }

    async def _replay(
        self, endpoint: Endpoint, row: dict[str, Any], target: push_configs.Target | None
    ) -> dict[str, Any]:
        answer: dict[str, Any] = {"notification_id": row["id"]}
        task_id, seq = row["subject_id"], int(row["event_seq"])
        if task_id is None or await self.tasks.get(endpoint.id, task_id) is None:
            return {**answer, "error": "task_gone"}  # pruned by retention, or its endpoint's delete
        if target is None or target.owner_endpoint_id != endpoint.id:
            return {**answer, "error": "config_gone"}  # the push config was deleted since
        if PUSH_VERB not in endpoint.verbs:
            return {**answer, "error": "push_paused"}  # no push goes out without the grant (scope cut)
        events = await self.tasks.events_after(task_id, seq - 1, limit=1)
        if not events or events[0][0] != seq:
            return {**answer, "error": "task_gone"}  # the event log goes with the task's retention
        queued = await push_outbox.replay(
            self.db,
            config_row_id=target.row_id,
            task_id=task_id,
            seq=seq,
            msg_id=row["id"],
            body=events[0][1],
            host=target.host,
            now_ms=ms(self.clock.now()),
        )
        if not queued:
            return {**answer, "error": "in_flight"}  # still pending: its own cycle is running
        if self.wake is not None:
            self.wake()
        return {**answer, "task_id": task_id, "seq": seq, "queued": True}


def said(result: dict[str, Any]) -> str:
    """One replay's answer as one word: queued, or its error code."""
    return str(result["error"]) if result.get("error") else "queued"


def since_epoch_ms(value: object) -> int:
    """``since`` as notify's recover reads it (core.clock.since_ms), and epoch seconds as a digit
    string too (the MCP verb's argument is a string)."""
    try:
        if isinstance(value, str) and value.isdigit():
            return int(value) * 1000
        return since_ms(value)
    except ValueError:
        raise PushReplayError("since must be an ISO 8601 time or epoch seconds") from None
