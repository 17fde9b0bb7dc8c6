"""The server's operator events: what the notify dispatcher (in this process or relayed from its worker
processes) and the A2A push worker report, coalesced, turned into a Standard Webhooks body and queued
for :class:`~switchboard.operator.webhook.OperatorWebhook`.

Types (docs/self-hosting.md, "Operator events"): ``operator.hook_disabled`` (one per hook per window),
``operator.push_config_gave_up`` (one per push config per window, ``count`` deliveries) and
``operator.delivery_dropped`` (one per instance per window, ``count`` notifications, ``reasons``).
Each event is emitted by the instance where it happened, once: the disable is the one health write that
disabled the hook, the give-up the claim that finished the outbox row, the drop the instance's own
queue. The body: ``{"type", "timestamp", "data": {"instance_id", ids..., "count"}}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from switchboard.core.clock import Clock
from switchboard.obs.logs import get_logger
from switchboard.obs.metrics import Metrics
from switchboard.operator.coalesce import Coalescer
from switchboard.operator.sink import (
    DELIVERY_DROPPED,
    HOOK_DISABLED,
    PUSH_GAVE_UP,
    QUEUE_DROP_REASONS,
    Describer,
    NullSink,
    OperatorSink,
)
from switchboard.operator.webhook import OperatorWebhook, Queued
from switchboard.push import Sender, TargetRejected, Validator, new_message_id
from switchboard.settings import Settings

log = get_logger("switchboard.operator")

WINDOW = 60.0  # seconds: at most one event per key (hook, push config, the instance's drops) per window


class OperatorEvents:
    def __init__(
        self,
        *,
        url: str,
        secret: str,
        instance_id: str,
        metrics: Metrics,
        clock: Clock,
        window: float = WINDOW,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url, self._secret, self.instance_id = url, secret, instance_id
        self.metrics, self.clock = metrics, clock
        self.coalescer = Coalescer(self._emit, window, clock=monotonic)
        self.webhook: OperatorWebhook | None = None
        self._early: list[Queued] = []  # emitted before the webhook started
        self._describers: dict[str, Describer] = {}

    # -- the sink ------------------------------------------------------------------------------------

    def hook_disabled(self, hook_id: str, *, reason: str, consecutive_failures: int) -> None:
        data = {"hook_id": hook_id, "reason": reason, "consecutive_failures": consecutive_failures}
        self._add(HOOK_DISABLED, hook_id, data)

    def push_gave_up(
        self, *, config_row_id: str, task_id: str, outcome: str, error: str | None, attempts: int
    ) -> None:
        data = {"push_config": config_row_id, "task_id": task_id, "reason": outcome, "error": error}
        self._add(PUSH_GAVE_UP, config_row_id, {**data, "attempts": attempts})

    def dropped(self, reason: str, count: int = 1) -> None:
        if reason in QUEUE_DROP_REASONS:
            self._add(DELIVERY_DROPPED, "", {}, count=count, reason=reason)

    def describe(self, type_: str, describer: Describer) -> None:
        self._describers[type_] = describer

    def _add(self, type_: str, key: str, data: dict[str, Any], *, count: int = 1, reason: str = "") -> None:
        if not self.coalescer.add(type_, key, data, count=count, reason=reason):
            self.metrics.operator_events.labels(type_, "dropped").inc()
            log.warning("operator event dropped: too many gathered", type=type_)

    # -- events out ----------------------------------------------------------------------------------

    def _emit(self, type_: str, data: dict[str, Any]) -> None:
        item = Queued(new_message_id(), type_, data)
        if self.webhook is None:
            if len(self._early) < 100:
                self._early.append(item)
            return
        self.webhook.put(item)

    async def body(self, item: Queued) -> bytes:
        """The event's JSON, with the owner's ids read now (identifiers only)."""
        data: dict[str, Any] = {"instance_id": self.instance_id, **item.data}
        describer = self._describers.get(item.type)
        if describer is not None:
            try:
                data.update(await describer(item.data))
            except Exception:  # the database is away: the event still goes out, with the ids it has
                log.warning("operator event: owner lookup failed", type=item.type, exc_info=True)
        at = datetime.fromtimestamp(self.clock.now(), UTC).isoformat().replace("+00:00", "Z")
        return json.dumps({"type": item.type, "timestamp": at, "data": data}, separators=(",", ":")).encode()

    @asynccontextmanager
    async def running(self, validator: Validator, sender: Sender) -> AsyncIterator[None]:
        """Deliver while the server runs (the app lifespan); at the end, what is gathered is emitted and
        given a moment to go out. A URL the SSRF guard refuses stops the start (nothing is dialled); one
        whose name does not resolve yet is only warned about: every attempt checks it again."""
        await self.check(validator)
        self.webhook = OperatorWebhook(
            self.url, self._secret, sender=sender, metrics=self.metrics, build=self.body
        )
        for item in self._early:
            self.webhook.put(item)
        self._early.clear()
        self.webhook.start()
        log.info("operator webhook on", instance=self.instance_id)
        try:
            yield
        finally:
            self.coalescer.close()
            await self.webhook.stop()

    async def check(self, validator: Validator) -> None:
        try:
            await validator.check(self.url)
        except TargetRejected as err:
            if err.reason != "unresolvable":
                log.error(
                    "operator webhook refused", setting="SWITCHBOARD_OPERATOR_WEBHOOK_URL", reason=err.reason
                )
                raise RuntimeError(
                    f"SWITCHBOARD_OPERATOR_WEBHOOK_URL is refused by the SSRF guard ({err.reason}); see "
                    "SWITCHBOARD_NOTIFY_HOOK_ALLOW_CIDRS"
                ) from None
            log.warning("operator webhook host does not resolve yet", reason=err.reason)


def operator_events(settings: Settings, *, instance_id: str, metrics: Metrics, clock: Clock) -> OperatorSink:
    """The instance's sink: :class:`OperatorEvents` when an operator webhook is configured."""
    if not settings.operator_webhook_url or not settings.operator_webhook_secret:
        return NullSink()
    return OperatorEvents(
        url=settings.operator_webhook_url,
        secret=settings.operator_webhook_secret,
        instance_id=instance_id,
        metrics=metrics,
        clock=clock,
    )
