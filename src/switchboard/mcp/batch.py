"""Batch verbs (issue 18): ``claim_many`` and ``ack_many``, and the claim loop they share with
``claim_next`` (answer inside the claim's transaction, bury what no answer can carry, long-poll).

Neither verb has a grant of its own: ``claim_many`` needs ``claim_next``'s, ``ack_many`` needs
``ack``'s (``switchboard.core.verbs.required_grant``). A batch is one statement and one transaction
(``TodoStore.claim_many`` / ``ack_many``); ``ack_many`` answers each item on its own, so a wrong id
or an oversized result fails that item, never the call.

No ``from __future__ import annotations`` here: argument types are built from settings at registration
time (the lease ceiling) and the SDK reads them from the function signatures.
"""

import json
from collections.abc import Sequence
from typing import Annotated, Any, NotRequired

from mcp.server import MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict

from switchboard.core.clock import ms
from switchboard.core.ids import looks_like
from switchboard.core.text import MAX_JSON_DEPTH, Unstorable, admit
from switchboard.mcp.errors import TODO_NOT_FOUND, ErrorCode
from switchboard.mcp.hangups import client_gone
from switchboard.mcp.holding import LeaseHandle, RequestKey, refusal
from switchboard.mcp.schemas import AckManyResult, AckOutcome, AnyJson, Todo, TodoBatch
from switchboard.mcp.tools import ToolContext, VerbError, current_endpoint, require_queues, todo_view
from switchboard.queue.waiters import MAX_WAIT_SECONDS, ClaimWaiters
from switchboard.services import Services
from switchboard.store.accounts import Endpoint
from switchboard.store.leases import verdict
from switchboard.store.todo_claims import MAX_BATCH
from switchboard.store.todos import MAX_RESULT_DEPTH, TodoStore
from switchboard.store.transitions import is_ready

MAX_RESULT_BYTES = 64 * 1024
MAX_BURIED_PER_CLAIM = 8
UNANSWERABLE = "its stored payload cannot be sent as JSON (stored before the text boundary)"

QueueName = Annotated[str, Field(min_length=1, max_length=64)]
Queues = Annotated[
    list[QueueName] | None,
    Field(min_length=1, max_length=64, description="Queues to claim from; default: every scope queue."),
]
WaitSeconds = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_WAIT_SECONDS,
        description=(
            f"When nothing is pending, wait up to this many seconds (at most {MAX_WAIT_SECONDS}) for a todo "
            "to become ready on these queues, then claim it; 0 (default) answers at once."
        ),
    ),
]


class Answer:
    """Builds a claim's answer inside the claim's transaction (``TodoStore.claim_many(answer=...)``):
    if a view cannot be sent as JSON, :class:`Unstorable` rolls the claim back; ``todo_id`` names the
    todo that could not be answered."""

    def __init__(self) -> None:
        self.views: list[Todo] = []
        self.todo_id = ""

    @property
    def view(self) -> Todo | None:
        return self.views[0] if self.views else None

    def __call__(self, row: Any) -> None:
        self.todo_id = row.id
        try:
            view = todo_view(row, lease=True)
        except ValueError as exc:  # a stored payload that does not parse back
            raise Unstorable("the stored payload does not parse") from exc
        admit(view, max_depth=MAX_JSON_DEPTH + 2)  # raises Unstorable: the claim rolls back
        self.views.append(view)


def result_problem(result: Any) -> str | None:
    """Why an ack result cannot be stored (``invalid_argument``), or None."""
    try:
        admit(result, max_depth=MAX_RESULT_DEPTH)
    except Unstorable as exc:
        return f"result: {exc}"
    if len(json.dumps(result, separators=(",", ":")).encode()) > MAX_RESULT_BYTES:
        return "result is larger than 64 KiB serialized"
    return None


class Claimer:
    """claim_next and claim_many: claim up to ``limit`` (oldest first), bury a todo no answer can carry
    and go on, and with ``wait_seconds`` wait for a ready todo (:class:`ClaimWaiters`)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.waiters = ClaimWaiters(services.metrics.claim_waiters)
        self._claimed = services.metrics.claims.labels("claimed")
        self._empty = services.metrics.claims.labels("empty")
        # Reads only Transition.ready, endpoint_id and queue, and its effect is per instance (it wakes
        # this instance's waiting calls): remote, so a todo made ready on another instance sharing
        # PostgreSQL wakes them too (store/relay.py); after a relay gap every waiter re-checks.
        services.hub.subscribe("claim_waiters", self.waiters.on_transition, remote=True, wants=is_ready)
        services.hub.on_remote_gap(self.waiters.wake_all)

    def wanted(self, endpoint: Endpoint, queues: Sequence[str] | None) -> list[str]:
        return require_queues(endpoint, queues) if queues is not None else list(endpoint.queues)

    async def claim(
        self,
        endpoint: Endpoint,
        wanted: list[str],
        lease: float,
        limit: int,
        wait_seconds: float,
        request_key: str | None = None,
    ) -> list[Todo]:
        async def once() -> list[Todo]:
            return await self._claim_once(endpoint.id, wanted, lease, limit, request_key)

        views = await self.waiters.claim_or_wait(endpoint.id, wanted, wait_seconds, once, client_gone)
        (self._claimed if views else self._empty).inc()
        return views

    async def _claim_once(
        self, endpoint_id: str, wanted: list[str], lease: float, limit: int, request_key: str | None
    ) -> list[Todo]:
        todos = self.services.todos
        for _ in range(MAX_BURIED_PER_CLAIM):
            answer = Answer()
            try:
                await todos.claim_many(
                    endpoint_id, wanted, lease, limit, answer=answer, request_key=request_key
                )
            except Unstorable:
                # The claim rolled back; the todo would head the queue for ever: bury it and go on.
                await todos.bury(endpoint_id, answer.todo_id, UNANSWERABLE)
                continue
            return answer.views
        raise VerbError("conflict", "several todos at the head of the queue could not be answered; retry")


class AckItem(TypedDict):
    todo_id: Annotated[str, Field(min_length=1, max_length=64, description="A todo id, td_...")]
    lease: LeaseHandle
    result: NotRequired[Annotated[AnyJson, Field(description="Any JSON value, at most 64 KiB serialized.")]]


async def acknowledge(todos: TodoStore, endpoint_id: str, acks: Sequence[AckItem]) -> list[AckOutcome]:
    """Ack each item (one statement for all of them) and say, per item in order, whether it moved and
    why not: ``ack_many``'s answer, and ``claim_next``'s ``acked`` when it acks before claiming. An item
    this very claim already acked (a retry whose answer was lost) answers ok again."""
    refused: dict[int, AckOutcome] = {}
    valid: list[tuple[str, str, Any]] = []
    for n, item in enumerate(acks):
        todo_id, result = item["todo_id"], item.get("result")
        problem = None if looks_like("td", todo_id) else TODO_NOT_FOUND
        code: ErrorCode = "not_found"
        if problem is None and (problem := result_problem(result)) is not None:
            code = "invalid_argument"
        if problem is not None:
            refused[n] = _refused(todo_id, VerbError(code, problem))
        else:
            valid.append((todo_id, item["lease"], result))
    moved = {row.id for row in await todos.ack_many(endpoint_id, valid)} if valid else set()
    ids = [item["todo_id"] for item in acks]
    reported: set[str] = set()
    unexplained = [t for t, _, _ in valid if t not in moved or ids.count(t) > 1]
    holdings = await todos.holdings(endpoint_id, unexplained) if unexplained else {}
    now_ms = ms(todos.clock.now())
    outcomes: list[AckOutcome] = []
    for n, item in enumerate(acks):
        todo_id = item["todo_id"]
        if n in refused:
            outcomes.append(refused[n])
        elif todo_id in moved and todo_id not in reported:
            reported.add(todo_id)
            outcomes.append({"todo_id": todo_id, "ok": True})
        else:
            found = holdings.get(todo_id)
            why = verdict(found, item["lease"], now_ms)
            if why == "done":
                outcomes.append({"todo_id": todo_id, "ok": True})
            else:
                outcomes.append(_refused(todo_id, refusal(why, found.status if found else None)))
    return outcomes


def _refused(todo_id: str, error: VerbError) -> AckOutcome:
    return {"todo_id": todo_id, "ok": False, "error": {"code": error.code, "message": error.message}}


def register_batch_verbs(server: MCPServer[Any], tc: ToolContext, claimer: Claimer) -> None:
    settings = tc.services.settings
    todos = tc.services.todos
    lease_doc = (
        f"Lease length in seconds (default {settings.lease_seconds}, at most {settings.max_lease_seconds}). "
        "Heartbeat before it ends or the todo goes back to pending."
    )
    Lease = Annotated[int | None, Field(ge=1, le=settings.max_lease_seconds, description=lease_doc)]

    async def claim_many(
        max_todos: Annotated[
            int, Field(ge=1, le=MAX_BATCH, description=f"How many to claim at most (1 to {MAX_BATCH}).")
        ] = 10,
        queues: Queues = None,
        lease_seconds: Lease = None,
        wait_seconds: WaitSeconds = 0,
        request_key: RequestKey = None,
    ) -> TodoBatch:
        """Claim up to max_todos of the oldest pending todos on your queues in one call, oldest first,
        each with its payload and its own lease handle (todo.lease). {"todos": []} when none is pending.
        With request_key: the same key again while the leases live answers the same todos. Needs the
        claim_next grant. Errors: invalid_argument (queue outside your scope)."""
        endpoint = current_endpoint()
        wanted = claimer.wanted(endpoint, queues)
        lease = lease_seconds or settings.lease_seconds
        views = await claimer.claim(endpoint, wanted, lease, max_todos, wait_seconds, request_key)
        return {"todos": views}

    async def ack_many(
        acks: Annotated[
            list[AckItem],
            Field(min_length=1, max_length=MAX_BATCH, description=f"1 to {MAX_BATCH} todos you hold."),
        ],
    ) -> AckManyResult:
        """Mark several todos you hold as done in one call, each {"todo_id", "lease", "result"?}. Each
        item is answered on its own, in order: {"todo_id", "ok": true} or {"todo_id", "ok": false,
        "error": {"code", "message"}} (not_found, lease_lost, canceled, invalid_argument); one item's
        error never fails the others. Needs the ack grant."""
        endpoint = current_endpoint()
        return {"results": await acknowledge(todos, endpoint.id, acks)}

    hints = ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    )
    tc.add_tool(claim_many, name="claim_many", title="Claim several todos", annotations=hints)
    tc.add_tool(ack_many, name="ack_many", title="Finish several todos", annotations=hints)
