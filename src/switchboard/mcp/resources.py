"""The doorbell through the standard resource mechanism: an endpoint's queues as MCP resources.

A host that follows the spec lists resources, subscribes to one and waits for
``notifications/resources/updated``. Each caller sees its own resources only:

* ``switchboard://endpoints/<slug>/todos``: every queue in its scope (the URI the legacy channel and
  ``subscriptions/listen`` have always used);
* ``switchboard://endpoints/<slug>/queues/<queue>``: one per scope queue, and the template
  ``switchboard://endpoints/<slug>/queues/{queue}``.

``resources/read`` answers the counts by status and the ids ``claim_next`` would take next.
``resources/subscribe`` / ``unsubscribe`` act on the calling session (handshake era; the 2026-07-28 era
uses ``subscriptions/listen``, which the gate admits for the same URIs). Any other URI, including
another endpoint's, is ``-32602`` with the same message, so a caller cannot probe for slugs.

The handlers go on the SDK's low-level server with its public ``add_request_handler``: ``MCPServer``
serves only static resources and has no subscribe handler, and registering one is also what makes the
handshake-era capabilities say ``resources.subscribe: true``.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    EmptyResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    SubscribeRequestParams,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from starlette.requests import Request

from switchboard.mcp.auth import caller_endpoint_id
from switchboard.mcp.doorbell import doorbell_uri, queue_template, queue_uri, resolve
from switchboard.mcp.errors import UNAVAILABLE_MESSAGE
from switchboard.mcp.sessions import SESSION_HEADER, LegacySessions
from switchboard.services import Services
from switchboard.store.accounts import Endpoint
from switchboard.store.errors import StoreUnavailable

MIME = "application/json"
NEXT_IDS = 10
STATUSES = ("pending", "claimed", "failed", "done", "dead", "canceled")


def not_found(uri: str) -> MCPError:
    """The spec's answer for a resource that does not exist (and for one that is not the caller's)."""
    return MCPError(INVALID_PARAMS, "Resource not found", {"uri": uri[:256]})


class QueueResources:
    def __init__(self, services: Services, sessions: LegacySessions) -> None:
        self.services = services
        self.sessions = sessions

    def install(self, server: Server[Any]) -> None:
        server.add_request_handler("resources/list", PaginatedRequestParams, self.list)
        server.add_request_handler("resources/templates/list", PaginatedRequestParams, self.templates)
        server.add_request_handler("resources/read", ReadResourceRequestParams, self.read)
        server.add_request_handler("resources/subscribe", SubscribeRequestParams, self.subscribe)
        server.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, self.unsubscribe)

    async def _caller(self) -> Endpoint:
        endpoint_id = caller_endpoint_id()
        if endpoint_id is None:
            raise MCPError(INVALID_REQUEST, "this request is not authenticated as an endpoint")
        try:
            endpoint = await self.services.accounts.endpoint(endpoint_id)
        except StoreUnavailable:
            raise MCPError(INTERNAL_ERROR, UNAVAILABLE_MESSAGE) from None
        if endpoint is None:
            raise MCPError(INVALID_REQUEST, "this endpoint no longer exists")
        return endpoint

    # -- list -------------------------------------------------------------------------------------

    async def list(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> ListResourcesResult:
        endpoint = await self._caller()
        slug = endpoint.slug
        resources = [
            Resource(
                uri=doorbell_uri(slug),
                name="todos",
                title=f"{slug}: all queues",
                description="Your todos on every queue in your scope: counts and the next claimable ids. "
                "Subscribe to hear when work is ready, then call claim_next.",
                mime_type=MIME,
            )
        ]
        resources += [
            Resource(
                uri=queue_uri(slug, queue),
                name=f"queue {queue}",
                title=f"{slug}: queue {queue}",
                description=f"Your todos on the queue {queue}. Subscribe to hear when work is ready there.",
                mime_type=MIME,
            )
            for queue in sorted(endpoint.queues)
        ]
        return ListResourcesResult(resources=resources)

    async def templates(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> ListResourceTemplatesResult:
        endpoint = await self._caller()
        template = ResourceTemplate(
            uri_template=queue_template(endpoint.slug),
            name="queue",
            title=f"{endpoint.slug}: a queue by name",
            description="One of your scope queues by name (see whoami.queues).",
            mime_type=MIME,
        )
        return ListResourceTemplatesResult(resource_templates=[template])

    # -- read -------------------------------------------------------------------------------------

    async def read(
        self, ctx: ServerRequestContext[Any, Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        endpoint = await self._caller()
        uri = str(params.uri)
        queues = resolve(endpoint, uri)
        if queues is None:
            raise not_found(uri)
        try:
            counts, next_ids = await self.services.todos.queue_overview(endpoint.id, queues, NEXT_IDS)
        except StoreUnavailable:
            raise MCPError(INTERNAL_ERROR, UNAVAILABLE_MESSAGE) from None
        by_queue = {q: {s: counts.get(q, {}).get(s, 0) for s in STATUSES} for q in sorted(queues)}
        body = {
            "uri": uri,
            "endpoint": endpoint.slug,
            "queues": sorted(queues),
            "counts": {s: sum(c[s] for c in by_queue.values()) for s in STATUSES},
            "by_queue": by_queue,
            "next_todo_ids": next_ids,
            "presence": endpoint.effective_presence,
        }
        text = json.dumps(body, separators=(",", ":"))
        return ReadResourceResult(contents=[TextResourceContents(uri=uri, mime_type=MIME, text=text)])

    # -- subscribe --------------------------------------------------------------------------------

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        endpoint, sid = await self._session(ctx, str(params.uri))
        self.sessions.register(endpoint.id, sid, ctx.session)
        self.sessions.subscribe(sid, str(params.uri))
        return EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        _, sid = await self._session(ctx, str(params.uri))
        self.sessions.unsubscribe(sid, str(params.uri))
        return EmptyResult()

    async def _session(self, ctx: ServerRequestContext[Any, Any], uri: str) -> tuple[Endpoint, str]:
        endpoint = await self._caller()
        if resolve(endpoint, uri) is None:
            raise not_found(uri)
        sid = ctx.request.headers.get(SESSION_HEADER) if isinstance(ctx.request, Request) else None
        if not sid:
            raise MCPError(INVALID_REQUEST, "resources/subscribe needs a session (Mcp-Session-Id)")
        return endpoint, sid
