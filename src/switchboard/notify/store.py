"""What a notify hook means, on top of its rows (:mod:`switchboard.store.notify_hooks`).

The statements, their compiled-once forms and the row reading live in the table's home under
``store/`` (:class:`~switchboard.store.notify_hooks.HookRows`, the health fold in
:mod:`switchboard.store.notify_hook_health`, SQLite's text of the two dispatch reads in
:mod:`switchboard.store.notify_hooks_sqlite`). Here: minting a hook's secret and redacting its URL
(switchboard.push), sealing and opening them with the envelope (each field bound to its hook by the
AAD), and the errors callers see (:class:`CeilingExceeded`, :class:`HookNotFound`) with their messages.

The values it reads and writes (:class:`Hook`, :class:`HealthFold`, ...) are importable from here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from switchboard.core.clock import Clock, ms
from switchboard.core.ids import looks_like, new_id
from switchboard.cred import Envelope
from switchboard.notify.errors import CeilingExceeded, HookNotFound
from switchboard.push import mint_secret, redact_url
from switchboard.store.db import Database
from switchboard.store.notify_hook_health import FOLD_STATEMENT_SIZES, FOLDS_PER_STATEMENT, HookHealth
from switchboard.store.notify_hook_types import (
    AUTOMATIC_DISABLES,
    DISABLE_AFTER,
    HUMAN_DISABLE,
    NOTIFICATION_IDS_LOGGED,
    EndpointHooks,
    HealthFold,
    HealthOutcome,
    Hook,
    MatchedHook,
    SendableHook,
)
from switchboard.store.notify_hooks import HookRows, update_rate

__all__ = [
    "AUTOMATIC_DISABLES",
    "DISABLE_AFTER",
    "FOLDS_PER_STATEMENT",
    "FOLD_STATEMENT_SIZES",
    "HUMAN_DISABLE",
    "NOTIFICATION_IDS_LOGGED",
    "EndpointHooks",
    "HealthFold",
    "HealthOutcome",
    "Hook",
    "HookHealth",
    "HookStore",
    "MatchedHook",
    "SendableHook",
    "set_rate",
]

_NOT_FOUND = "no such notify hook"


def _aad(hook_id: str, field: str) -> str:
    return f"notify_hooks:{hook_id}:{field}"


class HookStore(HookRows):
    """A hook as the endpoint, its owner and the dispatcher use it: the rows of :class:`HookRows`, with
    the secrets minted and the URL and secrets sealed here, and not-found and the ceiling as errors."""

    def __init__(self, db: Database, envelope: Envelope, clock: Clock, *, grace_seconds: float) -> None:
        super().__init__(db, clock)
        self.envelope = envelope
        self.grace_seconds = grace_seconds

    async def create(
        self,
        endpoint_id: str,
        url: str,
        queues: Sequence[str],
        ignore_presence: bool,
        ceiling: int,
        rate_per_minute: int | None = None,
    ) -> tuple[Hook, str]:
        """Insert a hook and mint its secret; returns the secret (its one reveal)."""
        hook_id = new_id("nh")
        secret = mint_secret()
        hook, used = await self.insert_within(
            hook_id,
            endpoint_id,
            ceiling=ceiling,
            url_enc=self.envelope.seal(url, _aad(hook_id, "url")),
            url_display=redact_url(url),
            queues=queues,
            ignore_presence=ignore_presence,
            secret_enc=self.envelope.seal(secret, _aad(hook_id, "secret")),
            rate_per_minute=rate_per_minute,
        )
        if hook is None:
            raise CeilingExceeded(f"this endpoint has {used} of at most {ceiling} notify hooks")
        return hook, secret

    async def get(self, endpoint_id: str, hook_id: str) -> Hook:
        """The caller's own hook; any other id (another endpoint's included) is not_found alike."""
        hook = await self.find(endpoint_id, hook_id) if looks_like("nh", hook_id) else None
        if hook is None:
            raise HookNotFound(_NOT_FOUND)
        return hook

    async def rotate(self, endpoint_id: str, hook_id: str, *, by_owner: bool = False) -> tuple[Hook, str]:
        """Mint a new secret, keep the current one for the grace period, and re-enable the hook if it was
        disabled automatically (REQ-8); a hook its human disabled stays disabled (``HookRows.rotate_row``)."""
        await self.get(endpoint_id, hook_id)
        secret = mint_secret()

        def reseal(current_enc: bytes) -> tuple[bytes, bytes]:
            current = self.envelope.open(current_enc, _aad(hook_id, "secret"))
            return (
                self.envelope.seal(secret, _aad(hook_id, "secret")),
                self.envelope.seal(current, _aad(hook_id, "prev_secret")),
            )

        grace_until = ms(self.clock.now() + self.grace_seconds)
        hook = await self.rotate_row(endpoint_id, hook_id, reseal, grace_until=grace_until, by_owner=by_owner)
        if hook is None:
            raise HookNotFound(_NOT_FOUND)
        return hook, secret

    async def delete(self, endpoint_id: str, hook_id: str) -> None:
        if not looks_like("nh", hook_id) or not await self.delete_row(endpoint_id, hook_id):
            raise HookNotFound(_NOT_FOUND)

    def open_url(self, hook_id: str, sealed: bytes) -> str:
        """A matched hook's URL (``MatchedHook.url_sealed``); raises ``EnvelopeError`` when it does not open."""
        return self.envelope.open(sealed, _aad(hook_id, "url"))

    def open_sendable(self, hook_id: str, row: Any) -> SendableHook:
        """A row of :meth:`sendable_rows`, opened; raises ``EnvelopeError`` when it does not open."""
        secrets = [self.envelope.open(row.secret_enc, _aad(hook_id, "secret"))]
        if row.prev_secret_enc is not None and (row.prev_secret_expires_at or 0) > ms(self.clock.now()):
            secrets.append(self.envelope.open(row.prev_secret_enc, _aad(hook_id, "prev_secret")))
        return SendableHook(
            hook_id,
            self.envelope.open(row.url_enc, _aad(hook_id, "url")),
            tuple(secrets),
            int(row.consecutive_failures),
            row.rate_per_minute,
        )


async def set_rate(db: Database, clock: Clock, endpoint_id: str, hook_id: str, rate: int | None) -> Hook:
    """Store the hook's own limit (None: back to the server's); another endpoint's hook is not found."""
    hook = await update_rate(db, clock, endpoint_id, hook_id, rate) if looks_like("nh", hook_id) else None
    if hook is None:
        raise HookNotFound(_NOT_FOUND)
    return hook
