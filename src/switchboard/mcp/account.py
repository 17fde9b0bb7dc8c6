"""Verbs about the endpoint itself: self_test (SPEC-0025), clock_in/clock_out (SPEC-0022), whoami and
subscribe_doorbell (no grant needed: they reveal only what the caller's own credential already implies).

No ``from __future__ import annotations``: the SDK reads the argument types from the signatures.
"""

from typing import Annotated, Any, cast

from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from switchboard.mcp.auth import effective_verbs, is_oauth
from switchboard.mcp.doorbell import META_KEY, doorbell_uri, queue_uri
from switchboard.mcp.schemas import DoorbellHow, PresenceResult, TodoResult, WhoAmI
from switchboard.mcp.tools import ToolContext, VerbError, current_endpoint, require_queues, todo_view
from switchboard.store.accounts import Endpoint
from switchboard.store.todos import NewTodo


def register_account_verbs(server: MCPServer[Any], tc: ToolContext) -> None:
    services = tc.services

    async def self_test(
        queue: Annotated[
            str | None, Field(min_length=1, max_length=64, description="Default: your first queue.")
        ] = None,
    ) -> TodoResult:
        """Create a synthetic todo for yourself to check the claim path (it never rings the doorbell
        or fires hooks). Returns {"todo": {...}}. Errors: invalid_argument (queue outside your scope)."""
        endpoint = current_endpoint()
        if queue is not None:
            target = require_queues(endpoint, [queue])[0]
        elif endpoint.queues:
            target = endpoint.queues[0]
        else:
            raise VerbError("invalid_argument", "this endpoint has no queues in its scope")
        created = await services.todos.create(
            [
                NewTodo(
                    endpoint_id=endpoint.id,
                    queue=target,
                    title="self-test",
                    payload={"self_test": True},
                    kind="self_test",
                    source="switchboard",
                    verified=True,
                    self_test=True,
                )
            ]
        )
        row = await services.todos.get(endpoint.id, created.created[0])
        if row is None:  # deleted between the insert and the read: vanishingly rare
            raise VerbError("conflict", "the self-test todo disappeared; try again")
        return {"todo": todo_view(row)}

    async def presence_view(endpoint: Endpoint, effective: str, clocked: str) -> PresenceResult:
        fresh = await services.accounts.endpoint(endpoint.id)
        return cast(
            PresenceResult,
            {
                "presence": effective,
                "clocked": clocked,
                "override": fresh.presence_override if fresh is not None else None,
            },
        )

    async def clock_in() -> PresenceResult:
        """Clock in: doorbells ring again, and one digest rings if work waited while you were out."""
        endpoint = current_endpoint()
        effective = await services.presence.set_clocked(endpoint.id, "in")
        return await presence_view(endpoint, effective, "in")

    async def clock_out() -> PresenceResult:
        """Clock out: todos keep arriving and stay pending, but nothing rings until you are in again."""
        endpoint = current_endpoint()
        effective = await services.presence.set_clocked(endpoint.id, "out")
        return await presence_view(endpoint, effective, "out")

    async def whoami() -> WhoAmI:
        """Who this token acts as and what it may do: verbs is what the presented token may call (for
        an OAuth token, the verbs its human granted, within the endpoint's scope); queues, presence,
        the doorbell URI and the queue resources you can subscribe to."""
        endpoint = current_endpoint()
        access = get_access_token()
        oauth = access is not None and is_oauth(access)
        verbs = effective_verbs(access, endpoint) if access is not None else endpoint.verbs
        return cast(
            WhoAmI,
            {
                "endpoint": endpoint.slug,
                "endpoint_id": endpoint.id,
                "via": "oauth" if oauth else "endpoint_credential",
                "verbs": sorted(verbs),
                "endpoint_verbs": sorted(endpoint.verbs),
                "queues": sorted(endpoint.queues),
                "presence": endpoint.effective_presence,
                "clocked": endpoint.presence,
                "override": endpoint.presence_override,
                "doorbell_uri": doorbell_uri(endpoint.slug),
                "resources": [doorbell_uri(endpoint.slug)]
                + [queue_uri(endpoint.slug, q) for q in sorted(endpoint.queues)],
            },
        )

    async def subscribe_doorbell(ctx: Context) -> DoorbellHow:
        """How this session hears the doorbell. Handshake-era sessions are already registered by this
        (or any) call; 2026-07-28 sessions must open subscriptions/listen on the returned URI."""
        endpoint = current_endpoint()
        modern = ctx.request_context.protocol_version in MODERN_PROTOCOL_VERSIONS
        return {
            "uri": doorbell_uri(endpoint.slug),
            "era": "modern" if modern else "legacy",
            "how": (
                "call subscriptions/listen with resource_subscriptions=[uri] (or a queue URI from "
                "resources/list)"
                if modern
                else "keep the GET stream open: notifications/resources/updated arrives for this URI with "
                f"_meta[{META_KEY!r}]; or resources/subscribe to URIs from resources/list (then only those)"
            ),
            "then": "call claim_next until it returns no todo",
        }

    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    )
    idempotent = writes.model_copy(update={"idempotent_hint": True})
    tc.add_tool(self_test, name="self_test", title="Create a self-test todo", annotations=writes)
    tc.add_tool(clock_in, name="clock_in", title="Clock in", annotations=idempotent)
    tc.add_tool(clock_out, name="clock_out", title="Clock out", annotations=idempotent)
    tc.add_tool(whoami, name="whoami", title="Who am I", grant_required=False, annotations=read_only)
    tc.add_tool(
        subscribe_doorbell,
        name="subscribe_doorbell",
        title="How to hear the doorbell",
        grant_required=False,
        annotations=read_only,
    )
