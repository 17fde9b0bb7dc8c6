"""The MCP verbs ``resend_a2a_push`` and ``recover_a2a_push``: thin wrappers over :class:`PushReplay`.

Grouped with the notify-hook verbs (core/verbs.py, issue 29): they make Switchboard send HTTP requests,
so they are never in the default grant.

No ``from __future__ import annotations``: the SDK reads the argument types from the signature.
"""

from typing import Annotated, Any

from mcp.server import MCPServer
from pydantic import Field

from switchboard.a2a.replay import PushReplay, PushReplayError
from switchboard.mcp.tools import ToolContext, ToolRegistrar, VerbError, current_endpoint

OUTBOUND = " Grants outbound HTTP: Switchboard will POST to the push config's URL again."

Since = Annotated[str, Field(min_length=1, description="ISO 8601 UTC, e.g. 2026-12-07T05:00:00Z.")]


def replay_registrar(replay: PushReplay) -> ToolRegistrar:
    def register(_server: MCPServer[Any], tc: ToolContext) -> None:
        async def resend_a2a_push(
            notification_id: Annotated[
                str,
                Field(
                    min_length=1, max_length=64, description="An A2A push's webhook-id from the delivery log."
                ),
            ],
        ) -> dict[str, Any]:
            """Send one of your tasks' finished A2A pushes again: the same webhook-id and event (the
            same x-switchboard-sequence), a new signature and timestamp, a new cycle of attempts under
            the usual per-host limits; its outcome is a delivery-log row with reason "replay". Returns
            {notification_id, task_id, seq, queued} or {notification_id, error} (task_gone,
            config_gone, push_paused, in_flight). Errors: not_found, invalid_argument (logged before
            replay existed)."""
            try:
                return await replay.resend(current_endpoint(), notification_id)
            except PushReplayError as err:
                raise VerbError(err.code, err.message) from None  # type: ignore[arg-type]

        async def recover_a2a_push(
            task_id: Annotated[str, Field(min_length=1, max_length=64, description="The task's id.")],
            config_id: Annotated[
                str, Field(min_length=1, max_length=255, description="The push config's id on that task.")
            ],
            since: Since,
        ) -> dict[str, Any]:
            """Send again every failed A2A push of one push config since `since`, oldest first, each as
            resend_a2a_push does (at most 1000). Returns {task_id, config_id, since, found, queued?,
            <error>?, notifications}. Errors: not_found, invalid_argument."""
            try:
                return await replay.recover(current_endpoint(), task_id, config_id, since)
            except PushReplayError as err:
                raise VerbError(err.code, err.message) from None  # type: ignore[arg-type]

        for fn in (resend_a2a_push, recover_a2a_push):
            tc.add_tool(fn, name=fn.__name__, description=(fn.__doc__ or "").strip() + OUTBOUND)

    return register
