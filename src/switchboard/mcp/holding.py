"""The holder verbs' shared half (heartbeat, ack, ack_many, fail, ask): the lease argument, and why a
call that moved nothing was refused (store/leases.py).

A claim answers ``todo.lease``, a handle unique to that claim; every holder verb names it. A call from
a claim that has ended answers ``lease_lost`` and changes nothing, whatever the todo's state now; a
call from the current claim of a todo canceled under it answers ``canceled`` (stop working on it).
Another endpoint's todo is ``not_found``, as an id that does not exist.

No ``from __future__ import annotations``: the SDK reads the argument types from the signatures.
"""

from typing import Annotated

from pydantic import Field

from switchboard.core.clock import ms
from switchboard.mcp.tools import VerbError, not_found
from switchboard.store.leases import Verdict, verdict
from switchboard.store.todos import TodoStore

LeaseHandle = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        description=(
            "The lease handle your claim answered (todo.lease, ls_...): only the current claim may act; "
            "a call from one that ended answers lease_lost."
        ),
    ),
]
RequestKey = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=100,
        description=(
            "Your own key for this request (e.g. a UUID): the same key again, while the lease lives, "
            "answers the same todos instead of claiming more (a safe retry)."
        ),
    ),
]

LEASE_LOST = (
    "this claim has ended (its lease ran out, or the todo was requeued, claimed again or finished "
    "since): stop working on it; nothing was changed"
)
CANCELED = "the todo was canceled (by an operator or by its A2A task's sender): stop working on it"


def refusal(why: Verdict, status: str | None = None) -> VerbError:
    """The error for a holder call that moved nothing, from :func:`verdict`."""
    if why == "not_found":
        return not_found()
    if why == "canceled":
        return VerbError("canceled", CANCELED)
    if why == "lease_lost":
        return VerbError("lease_lost", LEASE_LOST)
    return VerbError("conflict", f"the todo is {status or why}, not claimed")


async def why_not_held(todos: TodoStore, endpoint_id: str, todo_id: str, lease: str) -> Verdict:
    """Read the todo back and say why a call naming ``lease`` did not move it."""
    found = (await todos.holdings(endpoint_id, [todo_id])).get(todo_id)
    return verdict(found, lease, ms(todos.clock.now()))
