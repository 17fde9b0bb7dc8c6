"""The consumer verbs (claim_next, claim, heartbeat, ack, fail, list_todos): work the caller's own queue.

Every statement is scoped by the caller's endpoint id, so another endpoint's todo id behaves exactly like
an id that does not exist (``not_found``, same message). A refused move is then explained by reading the
row back: ``conflict`` when it exists but is in the wrong state.

No ``from __future__ import annotations`` here: argument types are built from settings at registration
time (the lease ceiling) and the SDK reads them from the function signatures.
"""

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field

from switchboard.core.clock import ms
from switchboard.core.ids import looks_like
from switchboard.core.text import Unstorable
from switchboard.mcp.auth import may_call
from switchboard.mcp.batch import (
    UNANSWERABLE,
    AckItem,
    Answer,
    Claimer,
    QueueName,
    Queues,
    WaitSeconds,
    acknowledge,
    register_batch_verbs,
    result_problem,
)
from switchboard.mcp.holding import LeaseHandle, RequestKey, refusal, why_not_held
from switchboard.mcp.schemas import AnyJson, HeartbeatResult, MaybeTodoResult, TodoPage, TodoResult
from switchboard.mcp.tools import ToolContext, VerbError, current_endpoint, not_found, todo_view

TodoId = Annotated[str, Field(min_length=1, max_length=64, description="A todo id, td_...")]


def _same_claim(row: Any, request_key: str, now: float) -> bool:
    """Whether ``row`` is held by a claim made with ``request_key`` whose lease still lives."""
    live = row.lease_expires_at is not None and row.lease_expires_at >= ms(now)
    return bool(row.status == "claimed" and row.claim_key == request_key and live)


Status = Literal["pending", "claimed", "done", "failed", "dead", "canceled"]


def register_consumer_verbs(server: MCPServer[Any], tc: ToolContext) -> None:
    services = tc.services
    settings = services.settings
    todos = services.todos
    claims = services.metrics.claims
    claimer = Claimer(services)
    lease_doc = (
        f"Lease length in seconds (default {settings.lease_seconds}, at most {settings.max_lease_seconds}). "
        "Heartbeat before it ends or the todo goes back to pending."
    )
    Lease = Annotated[int | None, Field(ge=1, le=settings.max_lease_seconds, description=lease_doc)]

    async def explain(endpoint_id: str, todo_id: str, lease: str) -> VerbError:
        return refusal(await why_not_held(todos, endpoint_id, todo_id, lease))

    async def claim_next(
        queues: Queues = None,
        lease_seconds: Lease = None,
        wait_seconds: WaitSeconds = 0,
        ack: Annotated[
            AckItem | None,
            Field(
                description=(
                    "A todo you hold to mark done first, with its lease and optional result (as ack): one "
                    "call per todo in a claim loop. Needs the ack grant too."
                )
            ),
        ] = None,
        request_key: RequestKey = None,
    ) -> MaybeTodoResult:
        """Claim the oldest pending todo on your queues. Returns {"todo": {...}} with its payload and
        its lease handle (todo.lease: pass it to heartbeat, ack, fail and ask), or {"todo": null} when
        nothing is pending (with wait_seconds: when nothing became ready in that time). With
        ack={"todo_id", "lease", "result"?}, first finishes that todo as ack would and says how in
        "acked" ({"todo_id", "ok"} or with "error": lease_lost, canceled...); the claim happens whatever
        the ack's outcome. With request_key, a retry with the same key answers the same todo while its
        lease lives. Errors: invalid_argument (queue outside your scope), forbidden (ack given without
        the ack grant)."""
        endpoint = current_endpoint()
        wanted = claimer.wanted(endpoint, queues)
        lease = lease_seconds or settings.lease_seconds
        answer: MaybeTodoResult = {"todo": None}
        if ack is not None:
            if not may_call(endpoint, "ack"):
                raise VerbError("forbidden", "the verb 'ack' is not granted to this endpoint")
            answer["acked"] = (await acknowledge(todos, endpoint.id, [ack]))[0]
        views = await claimer.claim(endpoint, wanted, lease, 1, wait_seconds, request_key)
        answer["todo"] = views[0] if views else None
        return answer

    async def claim(
        todo_id: TodoId, lease_seconds: Lease = None, request_key: RequestKey = None
    ) -> TodoResult:
        """Claim one specific pending todo; the answer carries its lease handle (todo.lease). With
        request_key, a retry with the same key answers the same claim while its lease lives. Errors:
        not_found, conflict (not pending), forbidden (its queue left your scope)."""
        endpoint = current_endpoint()
        if not looks_like("td", todo_id):
            raise not_found()
        answer = Answer()
        try:
            row = await todos.claim(
                endpoint.id,
                todo_id,
                endpoint.queues,
                lease_seconds or settings.lease_seconds,
                answer=answer,
                request_key=request_key,
            )
        except Unstorable:
            await todos.bury(endpoint.id, todo_id, UNANSWERABLE)
            raise VerbError("conflict", f"the todo is dead: {UNANSWERABLE}") from None
        if row is None:
            claims.labels("refused").inc()
            current = await todos.get(endpoint.id, todo_id)
            if current is None:
                raise not_found()
            if current.queue not in endpoint.queues:
                raise VerbError("forbidden", f"the queue {current.queue} is not in this endpoint's scope")
            if request_key is not None and _same_claim(current, request_key, todos.clock.now()):
                return {"todo": todo_view(current, lease=True)}  # a retry of this very claim
            raise VerbError("conflict", f"the todo is {current.status}, not pending")
        claims.labels("claimed").inc()
        assert answer.view is not None  # the claim committed, so its answer was built
        return {"todo": answer.view}

    async def heartbeat(todo_id: TodoId, lease: LeaseHandle, lease_seconds: Lease = None) -> HeartbeatResult:
        """Extend the lease on a todo you hold (lease: your claim's handle). For an A2A task, also
        "followups": the sender's messages that arrived since you claimed it. Errors: not_found,
        lease_lost (your claim ended: stop), canceled (the todo was canceled: stop)."""
        endpoint = current_endpoint()
        if not looks_like("td", todo_id):
            raise not_found()
        row = await todos.heartbeat(endpoint.id, todo_id, lease, lease_seconds or settings.lease_seconds)
        if row is None:
            raise await explain(endpoint.id, todo_id, lease)
        answer: HeartbeatResult = {"todo": todo_view(row, payload=False, lease=True)}
        # A module (A2A) may say what reached a held todo since its claim.
        since_claim = services.followups_since_claim
        if since_claim is not None:
            later = await since_claim(endpoint.id, todo_id)
            if later is not None:
                answer["followups"] = later
        return answer

    async def ack(
        todo_id: TodoId,
        lease: LeaseHandle,
        result: Annotated[AnyJson, Field(description="Any JSON value, at most 64 KiB serialized.")] = None,
    ) -> TodoResult:
        """Mark a todo you hold as done (lease: your claim's handle), with an optional JSON result. A
        retry of an ack that committed answers the todo again. Errors: not_found, lease_lost (your
        claim ended; nothing changed), canceled, invalid_argument (result over 64 KiB)."""
        endpoint = current_endpoint()
        if not looks_like("td", todo_id):
            raise not_found()
        problem = result_problem(result)
        if problem is not None:
            raise VerbError("invalid_argument", problem)
        row = await todos.ack(endpoint.id, todo_id, lease, result)
        if row is None:
            why = await why_not_held(todos, endpoint.id, todo_id, lease)
            if why == "done" and (done := await todos.get(endpoint.id, todo_id)) is not None:
                return {"todo": todo_view(done, payload=False)}  # this claim's own ack, retried
            raise refusal(why)
        return {"todo": todo_view(row, payload=False)}

    async def fail(
        todo_id: TodoId,
        lease: LeaseHandle,
        error: Annotated[str, Field(min_length=1, max_length=2000, description="What went wrong.")],
        retry: Annotated[bool, Field(description="False: give up now (dead).")] = True,
    ) -> TodoResult:
        """Give a todo you hold back (lease: your claim's handle). With retry it becomes failed with a
        retry_at (backoff) and returns to pending then; after the last attempt, or with retry=false, it
        is dead. Errors: not_found, lease_lost (your claim ended; nothing changed), canceled."""
        endpoint = current_endpoint()
        if not looks_like("td", todo_id):
            raise not_found()
        row = await todos.fail(endpoint.id, todo_id, lease, error, retry=retry)
        if row is None:
            raise await explain(endpoint.id, todo_id, lease)
        return {"todo": todo_view(row, payload=False)}

    async def list_todos(
        status: Status | None = None,
        queue: QueueName | None = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 50,
        before: Annotated[
            str | None, Field(max_length=64, description="Page: todos older than this id.")
        ] = None,
    ) -> TodoPage:
        """Your todos, newest first, without payloads (claim one to get it). Page with
        before=<next_before>. Errors: invalid_argument."""
        endpoint = current_endpoint()
        if before is not None and not looks_like("td", before):
            raise VerbError("invalid_argument", "before must be a todo id")
        rows = await todos.list_for_endpoint(
            endpoint.id,
            statuses=[status] if status else None,
            queues=[queue] if queue else None,
            limit=limit,
            before=before,
        )
        return {
            "todos": [todo_view(row, payload=False) for row in rows],
            "next_before": rows[-1].id if len(rows) == limit else None,
        }

    # Hints for hosts (spec defaults are the pessimistic ones, so every hint is explicit). Nothing here
    # reaches outside Switchboard; fail may kill a todo for good (retry=false, or the last attempt).
    def hints(*, destructive: bool = False, idempotent: bool = False) -> ToolAnnotations:
        return ToolAnnotations(
            read_only_hint=False,
            destructive_hint=destructive,
            idempotent_hint=idempotent,
            open_world_hint=False,
        )

    tc.add_tool(claim_next, name="claim_next", title="Claim the next todo", annotations=hints())
    tc.add_tool(claim, name="claim", title="Claim a todo", annotations=hints())
    register_batch_verbs(server, tc, claimer)
    tc.add_tool(heartbeat, name="heartbeat", title="Extend a lease", annotations=hints(idempotent=True))
    tc.add_tool(ack, name="ack", title="Finish a todo", annotations=hints())
    tc.add_tool(fail, name="fail", title="Give a todo back", annotations=hints(destructive=True))
    tc.add_tool(
        list_todos,
        name="list_todos",
        title="List your todos",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
