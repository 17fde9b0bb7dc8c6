"""Todo status -> MCP Tasks extension status (``io.modelcontextprotocol/tasks``, SEP-2663).

The MCP task face shows the same todo the A2A face shows (a2a/views.py), so the mapping is
derived from the one TaskRecord: one identity, one lifecycle. The extension has no
``submitted`` state, so a queued todo (``pending``, or ``failed`` awaiting its retry) is
``working`` from the submitter's side: the work is accepted and in hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

WORKING: Final = "working"
INPUT_REQUIRED: Final = "input_required"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"  # the extension spells it with two l's; A2A and todos use one

MCP_STATUS_OF_TODO: Final[Mapping[str, str]] = {
    "pending": WORKING,
    "claimed": WORKING,
    "failed": WORKING,  # waiting for its retry: not terminal
    "done": COMPLETED,
    "dead": FAILED,
    "canceled": CANCELLED,
}
TERMINAL: Final = frozenset({COMPLETED, FAILED, CANCELLED})


def mcp_status(todo_status: str, input_required: bool) -> str:
    """The extension status of a todo; a claimed todo whose worker asked is ``input_required``."""
    if todo_status == "claimed" and input_required:
        return INPUT_REQUIRED
    try:
        return MCP_STATUS_OF_TODO[todo_status]
    except KeyError:
        raise ValueError(f"unknown todo status: {todo_status!r}") from None
