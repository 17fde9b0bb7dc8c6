"""The MCP verb ``ask``: the worker holding an A2A task asks its sender for input (input-required).

A consumer verb (in the default grant): it acts only on a todo the caller holds, and the only outbound
calls it causes go to push URLs the task's *sender* registered, exactly as ``ack`` does.

No ``from __future__ import annotations``: the SDK reads the argument types from the signature.
"""

from typing import Annotated, Any, cast

from mcp.server import MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field

from switchboard.a2a.turns import Turns
from switchboard.core.ids import looks_like
from switchboard.core.text import storable
from switchboard.mcp.holding import LeaseHandle, refusal
from switchboard.mcp.schemas import AskResult
from switchboard.mcp.tools import (
    ToolContext,
    ToolRegistrar,
    VerbError,
    current_endpoint,
    not_found,
    todo_view,
)
from switchboard.store.leases import Verdict

TodoId = Annotated[str, Field(min_length=1, max_length=64, description="The A2A task's todo id, td_...")]
Question = Annotated[
    str,
    Field(
        min_length=1,
        max_length=8000,
        description="What you need from the sender; it becomes the task's status message.",
    ),
]


def ask_registrar(turns: Turns) -> ToolRegistrar:
    def register(server: MCPServer[Any], tc: ToolContext) -> None:
        todos = tc.services.todos

        async def ask(todo_id: TodoId, lease: LeaseHandle, question: Question) -> AskResult:
            """Ask the sender of an A2A task you hold for input: the task becomes input-required (the
            sender's SendMessage returns, its streams and push configs hear it) with your question as
            its status message. Keep holding the todo (heartbeat); the sender's answer arrives as a
            follow-up in heartbeat's "followups", and the task is working again. lease: your claim's
            handle. Errors: not_found, lease_lost (your claim ended), canceled, invalid_argument (not
            an A2A task)."""
            endpoint = current_endpoint()
            if not looks_like("td", todo_id):
                raise not_found()
            outcome, message_id = await turns.ask(endpoint.id, todo_id, lease, storable(question))
            if outcome == "missing":
                raise not_found()
            if outcome == "not_a2a":
                raise VerbError("invalid_argument", "the todo is not an A2A task: it has no sender to ask")
            if outcome != "asked":
                raise refusal(cast(Verdict, outcome))
            row = await todos.get(endpoint.id, todo_id)
            if row is None:
                raise not_found()
            return {
                "todo": todo_view(row, payload=False),
                "task_state": "TASK_STATE_INPUT_REQUIRED",
                "message_id": message_id,
            }

        tc.add_tool(
            ask,
            name="ask",
            title="Ask an A2A task's sender for input",
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
            ),
        )

    return register
