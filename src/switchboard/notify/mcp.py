"""The four REQ-2 verbs on the MCP surface: thin wrappers over :class:`NotifyHooks`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from mcp.server import MCPServer
from pydantic import Field

from switchboard.mcp.tools import ToolContext, VerbError, current_endpoint
from switchboard.notify.errors import HookError
from switchboard.notify.hook_rate import MAX_RATE, MIN_RATE

if TYPE_CHECKING:
    from switchboard.notify.service import NotifyHooks

OUTBOUND = " Grants outbound HTTP: Switchboard will POST to the URL you register."

HookId = Annotated[str, Field(min_length=1, max_length=64, description="A hook id from create or list.")]
Rate = Annotated[
    int | None,
    Field(
        ge=MIN_RATE,
        le=MAX_RATE,
        description=f"Most notifications of this hook per minute, {MIN_RATE} to {MAX_RATE}; null: the "
        f"server's limit ({MAX_RATE} by default).",
    ),
]


def registrar(verbs: NotifyHooks) -> Any:
    def register(_server: MCPServer[Any], tc: ToolContext) -> None:
        async def create_notify_hook(
            url: Annotated[
                str, Field(min_length=1, description="An https URL you control (at most 2048 bytes).")
            ],
            queues: Annotated[
                list[str] | None, Field(description="Queues to watch, within your scope; omit or [] for all.")
            ] = None,
            ignore_presence: Annotated[
                bool, Field(description="Fire even while you are clocked out (on-demand dispatchers).")
            ] = False,
            rate_per_minute: Rate = None,
        ) -> dict[str, Any]:
            """Register an HTTPS URL that Switchboard calls, signed (Standard Webhooks), when one of your
            todos becomes ready. Returns {hook_id, url, queues, ignore_presence, enabled,
            rate_per_minute, signing_secret}; the secret is shown only here. rate_per_minute (1 to 120)
            lowers this hook's limit; beyond it, notifications are dropped (the todos stay claimable).
            Errors: invalid_argument (URL refused; the message names the reason), ceiling_exceeded,
            forbidden."""
            try:
                return await verbs.create(current_endpoint(), url, queues, ignore_presence, rate_per_minute)
            except HookError as err:
                raise VerbError(err.code, err.message) from None  # type: ignore[arg-type]

        async def update_notify_hook(hook_id: HookId, rate_per_minute: Rate) -> dict[str, Any]:
            """Set this hook's own per-minute limit, 1 to 120, or null for the server's (120 by
            default); it holds from the next notification on. Returns the hook as list_notify_hooks
            shows it. Needs the create_notify_hook grant. Errors: invalid_argument, not_found."""
            try:
                return await verbs.set_rate(current_endpoint(), hook_id, rate_per_minute)
            except HookError as err:
                raise VerbError(err.code, err.message) from None  # type: ignore[arg-type]

        async def list_notify_hooks() -> dict[str, Any]:
            """Your hooks with their health (last status, last error, consecutive failures, disabled
            reason) and the ceiling {max, used}. Never returns a secret."""
            return await verbs.list(current_endpoint())

        async def rotate_notify_hook(hook_id: HookId) -> dict[str, Any]:
            """Mint a new signing secret (shown once) and re-enable the hook if it was disabled after
            10 failed deliveries. A hook your human disabled stays disabled (disabled_reason
            "operator") until they re-enable it. For 24 h every request carries two signatures, one per
            secret. Errors: not_found."""
            try:
                return await verbs.rotate(current_endpoint(), hook_id)
            except HookError as err:
                raise VerbError(err.code, err.message) from None  # type: ignore[arg-type]

        async def delete_notify_hook(hook_id: HookId) -> dict[str, Any]:
            """Remove the hook and its secrets; no attempt starts after this returns. Errors: not_found."""
            try:
                return await verbs.delete(current_endpoint(), hook_id)
            except HookError as err:
                raise VerbError(err.code, err.message) from None  # type: ignore[arg-type]

        async def resend_notification(
            notification_id: Annotated[
                str, Field(min_length=1, max_length=64, description="A webhook-id from your delivery log.")
            ],
        ) -> dict[str, Any]:
            """Send one of your finished notifications again: the same webhook-id, a new signature and
            timestamp, a new cycle of at most 3 attempts, counted in the hook's per-minute limit; its
            outcome is a delivery-log row with reason "replay". The body is rebuilt from the todo as it is
            now. Returns {notification_id, queued, dropped} or {notification_id, error} (todo_gone,
            hook_unavailable). Errors: not_found, invalid_argument."""
            try:
                return await verbs.resend(current_endpoint(), notification_id)
            except HookError as err:
                raise VerbError(err.code, err.message) from None  # type: ignore[arg-type]

        async def recover_notify_hook(
            hook_id: HookId,
            since: Annotated[
                str, Field(min_length=1, description="ISO 8601 UTC, e.g. 2026-12-07T05:00:00Z.")
            ],
        ) -> dict[str, Any]:
            """Send again every failed or dropped notification of this hook since `since`, oldest first,
            each as resend_notification does. Returns {hook_id, since, found, queued, dropped, ...,
            notifications}. Errors: not_found, invalid_argument."""
            try:
                return await verbs.recover(current_endpoint(), hook_id, since)
            except HookError as err:
                raise VerbError(err.code, err.message) from None  # type: ignore[arg-type]

        for fn in (
            create_notify_hook,
            list_notify_hooks,
            rotate_notify_hook,
            delete_notify_hook,
            resend_notification,
            recover_notify_hook,
            update_notify_hook,
        ):
            tc.add_tool(fn, name=fn.__name__, description=(fn.__doc__ or "").strip() + OUTBOUND)

    return register
