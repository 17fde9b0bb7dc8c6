"""The MCP Tasks status mapping agrees with the A2A one: one todo, one lifecycle."""

from __future__ import annotations

import pytest

from switchboard.a2a import views
from switchboard.mcp.tasks_ext_status import MCP_STATUS_OF_TODO, TERMINAL, mcp_status


@pytest.mark.parametrize(
    ("todo", "asked", "want"),
    [
        ("pending", False, "working"),
        ("failed", False, "working"),
        ("claimed", False, "working"),
        ("claimed", True, "input_required"),
        ("done", False, "completed"),
        ("dead", False, "failed"),
        ("canceled", False, "cancelled"),
    ],
)
def test_each_todo_status_maps(todo: str, asked: bool, want: str) -> None:
    assert mcp_status(todo, asked) == want


def test_every_todo_status_a2a_knows_is_mapped() -> None:
    assert set(MCP_STATUS_OF_TODO) == set(views.STATE_OF_STATUS)


def test_terminal_agrees_with_a2a() -> None:
    terminal = {t for t, s in MCP_STATUS_OF_TODO.items() if s in TERMINAL}
    assert terminal == set(views.TERMINAL_STATUSES)


def test_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown todo status"):
        mcp_status("lost", False)
