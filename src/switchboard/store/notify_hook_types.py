"""A notify hook as the rest of the server sees it, and the health fold the dispatcher keeps per hook.

Plain values, no SQL: the ``notify_hooks`` home (:mod:`switchboard.store.notify_hooks` and
:mod:`switchboard.store.notify_hook_health`) reads and writes them; they live here, below the notify
package, because that home builds them from its rows. :mod:`switchboard.notify.store` re-exports them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row

from switchboard.store.accounts import Endpoint

DISABLE_AFTER = 10
#: Who disabled a hook, as ``disabled_reason`` records it, and so who may undo it (REQ-8, REQ-10):
#: the endpoint's rotate_notify_hook re-enables only an automatic disable; the owning human's
#: re-enable from the endpoint card lifts either.
HUMAN_DISABLE = "operator"
AUTOMATIC_DISABLES = frozenset({"consecutive_failures"})
NOTIFICATION_IDS_LOGGED = 32  # a fold's health-write failure names at most this many notification ids


def effective_limit(own: int | None, server: int) -> int:
    """A hook's per-minute limit: its endpoint's choice when set (1..120), capped by the server's
    ``SWITCHBOARD_NOTIFY_RATE_PER_MINUTE`` (SPEC-0024's 120); NULL is the server's."""
    return server if own is None else max(1, min(own, server))


@dataclass(frozen=True, slots=True)
class Hook:
    id: str
    endpoint_id: str
    url_display: str
    queues: tuple[str, ...]
    ignore_presence: bool
    enabled: bool
    last_attempt_at: int | None
    last_status: int | None
    last_error: str | None
    consecutive_failures: int
    disabled_reason: str | None
    disabled_at: int | None
    created_at: int
    rotating_until: int | None
    rate_per_minute: int | None = None  # the endpoint's own limit (1..120); None: the server's (issue 29)

    @classmethod
    def from_row(cls, row: Row[Any]) -> Hook:
        return cls(
            id=row.id,
            endpoint_id=row.endpoint_id,
            url_display=row.url_display,
            queues=tuple(json.loads(row.queues)),
            ignore_presence=bool(row.ignore_presence),
            enabled=bool(row.enabled),
            last_attempt_at=row.last_attempt_at,
            last_status=row.last_status,
            last_error=row.last_error,
            consecutive_failures=int(row.consecutive_failures),
            disabled_reason=row.disabled_reason,
            disabled_at=row.disabled_at,
            created_at=row.created_at,
            rotating_until=row.prev_secret_expires_at,
            rate_per_minute=row.rate_per_minute,
        )

    def limit(self, server: int) -> int:
        """This hook's per-minute limit: its own when set, never above the server's."""
        return effective_limit(self.rate_per_minute, server)

    def effective_queues(self, scope_queues: Sequence[str]) -> list[str]:
        """REQ-1: the hook's queues intersected with what the scope grants now; [] means all of them."""
        if not self.queues:
            return sorted(scope_queues)
        return sorted(set(self.queues) & set(scope_queues))


@dataclass(frozen=True, slots=True)
class MatchedHook:
    """One enabled hook as matching reads it: its row, and its URL still sealed (opened only on a match)."""

    hook: Hook
    url_sealed: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class EndpointHooks:
    """Matching's view of one endpoint, read in the same statement as its enabled hooks."""

    endpoint: Endpoint  # scope (queues), presence, owner, slug: as they are at fire time
    hooks: tuple[MatchedHook, ...]  # ordered by hook id


@dataclass(frozen=True, slots=True)
class SendableHook:
    """What one attempt needs, read fresh right before it starts."""

    id: str
    url: str = field(repr=False)
    secrets: tuple[str, ...] = field(repr=False)  # newest first; two during a rotation grace
    consecutive_failures: int = 0  # as stored: outcomes not yet written are the dispatcher's to add
    rate_per_minute: int | None = None  # the hook's own limit, as stored (a test send is counted by it)


@dataclass(frozen=True, slots=True)
class HealthOutcome:
    consecutive_failures: int
    disabled_now: bool
    disabled_at: int | None = None


@dataclass(slots=True)
class HealthFold:
    """The ordered outcomes of one hook's deliveries since its health was last written, folded so that
    one statement applies them as if each had been written in turn (REQ-8): a delivered notification
    resets the streak to 0, a failed one adds 1, the streak reaching 10 on an enabled hook disables it,
    and the last outcome sets ``last_status``, ``last_error`` and ``last_attempt_at``."""

    lead: int = 0  # failed deliveries before the first delivered one (all of them when none was)
    reset: bool = False  # some delivery succeeded: the stored streak no longer counts
    run: int = 0  # failed deliveries after the last delivered one: the streak after this fold
    peak: int = 0  # the longest run of failed deliveries after a delivered one
    failures: int = 0
    outcomes: int = 0
    status: int | None = None
    error: str | None = None
    at: int = 0
    notification_ids: list[str] = field(default_factory=list)

    def delivered(self, status: int, at: int, notification_id: str) -> None:
        self.reset, self.run = True, 0
        self._last(status, None, at, notification_id)

    def failed(self, status: int | None, error: str, at: int, notification_id: str) -> None:
        self.failures += 1
        if self.reset:
            self.run += 1
            self.peak = max(self.peak, self.run)
        else:
            self.lead += 1
        self._last(status, error, at, notification_id)

    def _last(self, status: int | None, error: str | None, at: int, notification_id: str) -> None:
        self.outcomes += 1
        self.status, self.error, self.at = status, error, at
        self.notification_ids.append(notification_id)
        if len(self.notification_ids) > NOTIFICATION_IDS_LOGGED:
            del self.notification_ids[0]

    def trips(self, streak: int) -> bool:
        """Would this fold, applied to an enabled hook whose stored streak is ``streak``, disable it?"""
        return self.failures > 0 and (streak + self.lead >= DISABLE_AFTER or self.peak >= DISABLE_AFTER)

    def after(self, streak: int) -> int:
        """The streak once this fold is applied to ``streak``."""
        return self.run if self.reset else streak + self.lead
