"""The four REQ-2 verbs as plain async functions; the MCP binding (notify/mcp.py) stays thin."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from switchboard.core.clock import since_ms
from switchboard.notify import replay as replays
from switchboard.notify.errors import CeilingExceeded, HookNotFound, InvalidHook
from switchboard.notify.hook_rate import checked_rate
from switchboard.notify.store import Hook, HookStore, set_rate
from switchboard.obs.audit import audit
from switchboard.push import TargetRejected, Validator
from switchboard.store.accounts import QUEUE, Endpoint
from switchboard.store.notify_deliveries import Delivery, DeliveryLog

if TYPE_CHECKING:
    from switchboard.obs.metrics import Metrics
    from switchboard.services import Services


def _iso_ms(value: int | None) -> str | None:
    if value is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(value / 1000))


# What create answers beside the secret (REQ-2's set): the first fields of hook_view.
CREATED_FIELDS = ("hook_id", "url", "queues", "ignore_presence", "enabled", "rate_per_minute")


def hook_view(hook: Hook) -> dict[str, Any]:
    """A hook as every API shows it: the URL redacted, health included, never a secret."""
    return {
        "hook_id": hook.id,
        "url": hook.url_display,
        "queues": list(hook.queues),
        "ignore_presence": hook.ignore_presence,
        "enabled": hook.enabled,
        "last_attempt_at": _iso_ms(hook.last_attempt_at),
        "last_status": hook.last_status,
        "last_error": hook.last_error,
        "consecutive_failures": hook.consecutive_failures,
        "disabled_reason": hook.disabled_reason,
        "disabled_at": _iso_ms(hook.disabled_at),
        "created_at": _iso_ms(hook.created_at),
        "previous_secret_valid_until": _iso_ms(hook.rotating_until),
        "rate_per_minute": hook.rate_per_minute,  # null: the server's limit (SPEC-0024's 120)
    }


class Tester(Protocol):
    """Where a test send runs: the dispatcher that owns the hook's limiter (in this process or a child)."""

    async def send_test(self, hook_id: str, endpoint_id: str, endpoint_slug: str) -> dict[str, Any]: ...

    async def replay(self, request: dict[str, Any]) -> dict[str, Any]: ...


class NotifyHooks:
    """Every operation on a hook, once: the MCP verbs (notify/mcp.py), the endpoint card
    (web/views/endpoints.py) and the CLI's ``hook`` commands all call these. ``actor`` names who acted in
    the audit line: the endpoint itself by default, its human's email from the card, ``cli``."""

    def __init__(
        self,
        store: HookStore,
        validator: Validator,
        ceiling: int,
        *,
        deliveries: DeliveryLog | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store, self.validator, self.ceiling = store, validator, ceiling
        self.deliveries, self.metrics = deliveries, metrics
        self.tester: Tester | None = None

    async def create(
        self,
        endpoint: Endpoint,
        url: object,
        queues: object = None,
        ignore_presence: object = False,
        rate_per_minute: object = None,
    ) -> dict[str, Any]:
        if not isinstance(url, str) or not url:
            raise InvalidHook("url must be a non-empty string")
        wanted = _queues(queues, endpoint)
        if not isinstance(ignore_presence, bool):
            raise InvalidHook("ignore_presence must be true or false")
        rate = checked_rate(rate_per_minute)
        if self.ceiling <= 0:
            raise CeilingExceeded("notify hooks are disabled on this server (ceiling 0)")
        if await self.store.count(endpoint.id) >= self.ceiling:
            # Fast path; the authoritative check runs again inside the insert's transaction.
            raise CeilingExceeded(f"this endpoint already has the maximum of {self.ceiling} notify hooks")
        try:
            await self.validator.check(url)
        except TargetRejected as err:
            raise InvalidHook(f"url refused ({err.reason}): {err}") from None
        hook, secret = await self.store.create(endpoint.id, url, wanted, ignore_presence, self.ceiling, rate)
        audit("hook.create", actor=endpoint.id, endpoint_id=endpoint.id, hook_id=hook.id)
        view = hook_view(hook)
        return {**{k: view[k] for k in CREATED_FIELDS}, "signing_secret": secret}

    async def set_rate(
        self, endpoint: Endpoint, hook_id: object, rate_per_minute: object, *, actor: str | None = None
    ) -> dict[str, Any]:
        """The hook's own per-minute limit, 1..120, or None for the server's (issue 29); a value out of
        range is refused and nothing changes. Holds from the next notification on."""
        hid = _hook_id(hook_id)
        rate = checked_rate(rate_per_minute)
        hook = await set_rate(self.store.db, self.store.clock, endpoint.id, hid, rate)
        audit(
            "hook.rate",
            actor=actor or endpoint.id,
            endpoint_id=endpoint.id,
            hook_id=hid,
            rate_per_minute=rate,
        )
        return hook_view(hook)

    async def list(self, endpoint: Endpoint) -> dict[str, Any]:
        hooks = await self.store.list_for_endpoint(endpoint.id)
        return {"hooks": [hook_view(h) for h in hooks], "ceiling": {"max": self.ceiling, "used": len(hooks)}}

    async def rotate(
        self, endpoint: Endpoint, hook_id: object, *, by_owner: bool = False, actor: str | None = None
    ) -> dict[str, Any]:
        """Mint a new secret (shown once). The endpoint's rotate (MCP) re-enables only an automatic
        disable; the owning human's, from the card (``by_owner``), lifts any disable, as their re-enable."""
        hook, secret = await self.store.rotate(endpoint.id, _hook_id(hook_id), by_owner=by_owner)
        who = actor or (endpoint.human_id if by_owner else endpoint.id)
        audit("hook.rotate", actor=who, endpoint_id=endpoint.id, hook_id=hook.id)
        return {
            "hook_id": hook.id,
            "enabled": hook.enabled,
            # "operator": its human disabled it, and only they re-enable it (the secret still rotated)
            "disabled_reason": hook.disabled_reason,
            "signing_secret": secret,
            "previous_secret_valid_until": _iso_ms(hook.rotating_until),
        }

    async def view(self, endpoint: Endpoint, hook_id: object) -> dict[str, Any]:
        """One of the endpoint's hooks as :func:`hook_view` shows it; another endpoint's is not found."""
        return hook_view(await self.store.get(endpoint.id, _hook_id(hook_id)))

    async def set_enabled(self, endpoint: Endpoint, hook_id: object, enabled: bool, *, actor: str) -> bool:
        """The owning human's disable / re-enable (REQ-10): a disable records ``operator`` as who did it;
        True when the row changed. Another endpoint's hook is not found alike."""
        hid = _hook_id(hook_id)
        await self.store.get(endpoint.id, hid)
        changed = await self.store.set_enabled_by_owner(endpoint.id, hid, enabled)
        if changed:
            audit(
                "hook.enable" if enabled else "hook.disable",
                actor=actor,
                endpoint_id=endpoint.id,
                hook_id=hid,
            )
            if not enabled and self.metrics is not None:
                self.metrics.notify_disabled.labels("operator").inc()
        return changed

    async def send_test(self, endpoint: Endpoint, hook_id: object) -> dict[str, Any]:
        """A signed ``todo.ready`` test notification (``"test": true``), one attempt, result returned."""
        hid = _hook_id(hook_id)
        await self.store.get(endpoint.id, hid)
        if self.tester is None:
            raise InvalidHook("notify hooks are disabled on this server")
        return await self.tester.send_test(hid, endpoint.id, endpoint.slug)

    async def history(self, endpoint: Endpoint, hook_id: object) -> Sequence[Delivery]:
        """The hook's recent deliveries, newest first (the delivery log; only this endpoint's)."""
        hid = _hook_id(hook_id)
        if self.deliveries is None:
            return []
        return await self.deliveries.recent(endpoint.id, hid)

    async def resend(
        self, endpoint: Endpoint, delivery_id: object, *, actor: str | None = None
    ) -> dict[str, Any]:
        """Send one finished notification again (issue 29): same id, fresh signature and timestamp, a new
        attempt cycle through the per-hook window. Another endpoint's id is not found, like an unknown one."""
        if not isinstance(delivery_id, str) or not delivery_id:
            raise InvalidHook("delivery_id must be a non-empty string")
        row = None if self.deliveries is None else await self.deliveries.logged(endpoint.id, delivery_id)
        if row is None or row["kind"] != "notify":
            raise HookNotFound(f"no notification {delivery_id!r}")
        if row["test"] or row["type"] not in replays.REPLAYABLE:
            raise InvalidHook("a test send is not replayed; send a new test")
        await self.store.get(endpoint.id, row["target_id"])
        result = await self._replay(endpoint, row["target_id"], row)
        audit(
            "hook.resend",
            actor=actor or endpoint.id,
            endpoint_id=endpoint.id,
            hook_id=row["target_id"],
            notification_id=delivery_id,
            outcome=_said(result),
        )
        return result

    async def recover(
        self, endpoint: Endpoint, hook_id: object, since: object, *, actor: str | None = None
    ) -> dict[str, Any]:
        """Send again every failed or dropped notification of one hook since ``since``, oldest first,
        each as :meth:`resend` does (the per-hook window drops what it does not admit, logged)."""
        hid = _hook_id(hook_id)
        since_ms = _since_ms(since)
        await self.store.get(endpoint.id, hid)
        rows = (
            []
            if self.deliveries is None
            else await self.deliveries.failed_since(
                endpoint.id, hid, since_ms, types=replays.REPLAYABLE, limit=replays.RECOVER_MAX
            )
        )
        results = [await self._replay(endpoint, hid, row) for row in rows]
        counts: dict[str, int] = {}
        for r in results:
            counts[_said(r)] = counts.get(_said(r), 0) + 1
        audit(
            "hook.recover",
            actor=actor or endpoint.id,
            endpoint_id=endpoint.id,
            hook_id=hid,
            since=since_ms,
            found=len(rows),
            **counts,
        )
        return {
            "hook_id": hid,
            "since": _iso_ms(since_ms),
            "found": len(rows),
            **counts,
            "notifications": results,
        }

    async def _replay(self, endpoint: Endpoint, hook_id: str, row: dict[str, Any]) -> dict[str, Any]:
        if self.tester is None:
            raise InvalidHook("notify hooks are disabled on this server")
        return await self.tester.replay(
            {
                "delivery_id": row["id"],
                "hook_id": hook_id,
                "endpoint_id": endpoint.id,
                "todo_id": row["subject_id"],
                "type": row["type"],
            }
        )

    async def delete(
        self, endpoint: Endpoint, hook_id: object, *, actor: str | None = None
    ) -> dict[str, Any]:
        hid = _hook_id(hook_id)
        await self.store.delete(endpoint.id, hid)
        audit("hook.delete", actor=actor or endpoint.id, endpoint_id=endpoint.id, hook_id=hid)
        return {"hook_id": hid, "deleted": True}


def _hook_id(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidHook("hook_id must be a non-empty string")
    return value


def _said(result: dict[str, Any]) -> str:
    """One replay's answer as one word: queued, dropped, or its error code."""
    if result.get("error"):
        return str(result["error"])
    return "queued" if result.get("queued") else "dropped"


def _since_ms(value: object) -> int:
    try:
        return since_ms(value)
    except ValueError:
        raise InvalidHook("since must be an ISO 8601 time or epoch seconds") from None


def _queues(value: object, endpoint: Endpoint) -> Sequence[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(q, str) for q in value):
        raise InvalidHook("queues must be a list of queue names")
    bad = [q for q in value if not QUEUE.match(q)]
    if bad:
        raise InvalidHook(f"invalid queue names: {', '.join(bad)}")
    outside = sorted(set(value) - set(endpoint.queues))
    if outside:
        raise InvalidHook(f"queues not in this endpoint's scope: {', '.join(outside)}")
    return value


def hook_service(services: Services) -> NotifyHooks:
    """The hook operations as every face builds them: the server's notify component and the CLI."""
    from switchboard.notify.build import hook_store
    from switchboard.push.from_settings import notify_outbound

    validator, _ = notify_outbound(services)
    return NotifyHooks(
        hook_store(services),
        validator,
        services.settings.notify_hook_ceiling,
        deliveries=DeliveryLog(services.db),
        metrics=services.metrics,
    )
