"""The one place MCP grants are enforced: server middleware in front of every inbound message.

* ``tools/call``: rate limit, the endpoint as read from the database for this call (a scope shrink takes
  effect on the next call; a credential's row comes from its verification, see ``auth.py``), refuse verbs outside the scope with ``forbidden``, bind the endpoint for the tool, and
  count the outcome. Refusals are tool results (``is_error``) so an agent can read them.
* ``tools/list``: only the verbs the endpoint may call.
* ``subscriptions/listen`` (modern era): an endpoint may listen to its own resource URIs only (the
  endpoint-wide doorbell URI and its scope queues' URIs).
* ``initialize`` / ``server/discover``: declare only what this server has. ``MCPServer`` always
  registers prompt handlers; Switchboard has no prompts, so the capability is dropped and
  ``prompts/*`` answer method-not-found (-32601) like any method the server does not serve.
* ``tasks/get``, ``tasks/update``, ``tasks/cancel`` (the Tasks extension) and any other method in
  ``core.verbs.METHOD_GRANTS``: authenticated, rate-limited like a tool call, the method's grant
  checked, the endpoint bound for the handler; refusals are JSON-RPC errors (-32600), as these are not
  tool calls.
* every authenticated legacy message: remember its session for the doorbell.

The SDK runs server middleware before it validates params, so this code reads ``ctx.params`` raw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    CallToolResult,
    SubscriptionsListenRequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request

from switchboard.core.ratelimit import WindowLimiter
from switchboard.core.verbs import ALL_VERBS, METHOD_GRANTS, required_grant
from switchboard.mcp.auth import EndpointTokenVerifier, caller_endpoint_id, effective_verbs
from switchboard.mcp.doorbell import Doorbell, doorbell_uri, resolve
from switchboard.mcp.errors import UNAVAILABLE_MESSAGE, error_result, result_code
from switchboard.mcp.hangups import watching
from switchboard.mcp.sessions import SESSION_HEADER
from switchboard.mcp.tools import ToolContext, acting_as
from switchboard.obs.metrics import Children
from switchboard.store.accounts import Endpoint
from switchboard.store.errors import StoreUnavailable

UNSERVED = frozenset({"prompts/list", "prompts/get"})


def _grant(name: object) -> object:
    return required_grant(name) if isinstance(name, str) else name


def _honest(result: HandlerResult) -> HandlerResult:
    """Drop the ``prompts`` capability the SDK derives from handlers ``MCPServer`` always installs, and
    say ``listChanged: false``: Switchboard never sends list-changed notifications (a scope change shows
    on the next ``tools/list`` or ``resources/list``), though on 2026-07-28 the SDK derives ``true``."""
    if isinstance(result, dict):
        capabilities = result.get("capabilities")
        if isinstance(capabilities, dict):
            capabilities.pop("prompts", None)
            for name in ("tools", "resources"):
                section = capabilities.get(name)
                if isinstance(section, dict) and "listChanged" in section:
                    section["listChanged"] = False
    return result


class Gate:
    def __init__(
        self,
        tools: ToolContext,
        doorbell: Doorbell,
        limiter: WindowLimiter,
        offered: Callable[[str], bool],
        verifier: EndpointTokenVerifier,
    ) -> None:
        self.tools = tools
        self.verifier = verifier
        self.offered = offered
        self.services = tools.services
        self.doorbell = doorbell
        self.limiter = limiter
        # Bounded: verbs are this server's or "unknown", codes are the fixed error codes.
        self._calls = Children(tools.services.metrics.mcp_calls)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call":
            return await self._call(ctx, call_next)
        if ctx.method == "tools/list":
            return await self._list(ctx, call_next)
        if ctx.method == "subscriptions/listen":
            return await self._listen(ctx, call_next)
        if ctx.method in UNSERVED:
            raise MCPError(METHOD_NOT_FOUND, "Method not found", ctx.method)
        if ctx.method in METHOD_GRANTS:
            return await self._method(ctx, call_next, METHOD_GRANTS[ctx.method])
        if ctx.method in ("initialize", "server/discover"):
            return _honest(await call_next(ctx))
        endpoint_id = caller_endpoint_id()
        if endpoint_id is not None:
            self._capture(ctx, endpoint_id)
        return await call_next(ctx)

    # -- tools/call -------------------------------------------------------------------------------

    async def _call(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        name = params.get("name")
        if not isinstance(name, str):
            return await call_next(ctx)  # malformed request: the SDK answers invalid params
        label = name if required_grant(name) in ALL_VERBS or name in self.tools.ungated else "unknown"
        verdict = await self._admit(name)
        if verdict is None:
            self._count("unknown", "protocol_error")
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {name[:64]}")
        if isinstance(verdict, CallToolResult):
            self._count(label, result_code(verdict))
            return verdict
        self._capture(ctx, verdict.id)
        try:
            with acting_as(verdict), watching(ctx.request):
                result = await call_next(ctx)
        except MCPError:
            self._count(label, "protocol_error")
            raise
        self._count(label, result_code(result))
        return result

    async def _admit(self, name: str) -> Endpoint | CallToolResult | None:
        """The caller, or the refusal as a result; None for a tool this server does not offer (the
        spec's -32602, decided after the rate limit and before any database read)."""
        endpoint_id = caller_endpoint_id()
        if endpoint_id is None:
            return error_result("forbidden", "this call is not authenticated as an endpoint")
        if not await self.limiter.admit(endpoint_id):  # PostgreSQL: the cluster's window (leased)
            per_minute = self.services.settings.mcp_rate_per_minute
            return error_result("rate_limited", f"over {per_minute} calls per minute; slow down and retry")
        if not self.offered(name):
            return None
        try:
            endpoint = await self._read(endpoint_id)
        except StoreUnavailable:
            return error_result("unavailable", UNAVAILABLE_MESSAGE)
        if endpoint is None:
            return error_result("forbidden", "this endpoint no longer exists")
        if name not in self.tools.ungated and required_grant(name) not in endpoint.verbs:
            return error_result("forbidden", f"the verb {name[:64]!r} is not granted to this endpoint")
        return endpoint

    def _count(self, verb: str, code: str) -> None:
        self._calls(verb, code).inc()

    # -- granted methods (the Tasks extension's) ----------------------------------------------------

    async def _method(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, grant: str
    ) -> HandlerResult:
        """Counted as ``verb=<method>`` (a fixed set: ``METHOD_GRANTS``); a handler's JSON-RPC error
        (an unknown task id, say) is ``code="protocol_error"``."""
        method = ctx.method
        endpoint_id = caller_endpoint_id()
        if endpoint_id is None:
            raise self._refused(method, "forbidden", "this call is not authenticated as an endpoint")
        if not await self.limiter.admit(endpoint_id):
            per_minute = self.services.settings.mcp_rate_per_minute
            raise self._refused(method, "rate_limited", f"over {per_minute} calls per minute; slow down")
        endpoint = await self._endpoint()
        if endpoint is None:
            raise self._refused(method, "forbidden", "this endpoint no longer exists")
        access = get_access_token()
        if grant not in (effective_verbs(access, endpoint) if access is not None else endpoint.verbs):
            raise self._refused(method, "forbidden", f"the verb {grant!r} is not granted to this endpoint")
        self._capture(ctx, endpoint.id)
        try:
            with acting_as(endpoint):
                result = await call_next(ctx)
        except MCPError:
            self._count(method, "protocol_error")
            raise
        self._count(method, "ok")
        return result

    def _refused(self, method: str, code: str, message: str) -> MCPError:
        self._count(method, code)
        return MCPError(INVALID_REQUEST, message)

    # -- tools/list -------------------------------------------------------------------------------

    async def _list(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        endpoint = await self._endpoint()
        if endpoint is not None:
            self._capture(ctx, endpoint.id)
        allowed = set(self.tools.ungated) | set(endpoint.verbs if endpoint else ())
        result = await call_next(ctx)
        if isinstance(result, dict) and isinstance(result.get("tools"), list):
            result["tools"] = [
                t for t in result["tools"] if isinstance(t, dict) and _grant(t.get("name")) in allowed
            ]
        return result

    # -- subscriptions/listen ---------------------------------------------------------------------

    async def _listen(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        endpoint = await self._endpoint()
        if endpoint is None:
            raise MCPError(INVALID_REQUEST, "this stream is not authenticated as an endpoint")
        try:
            params = SubscriptionsListenRequestParams.model_validate(ctx.params or {}, by_name=False)
        except ValidationError:
            return await call_next(ctx)  # the SDK answers invalid params
        own = doorbell_uri(endpoint.slug)
        if any(resolve(endpoint, uri) is None for uri in params.notifications.resource_subscriptions or ()):
            raise MCPError(
                INVALID_REQUEST, f"an endpoint may listen only to its own resources ({own} and its queues)"
            )
        with self.doorbell.listening(endpoint.id):
            return await call_next(ctx)

    # -- shared -----------------------------------------------------------------------------------

    async def _endpoint(self) -> Endpoint | None:
        endpoint_id = caller_endpoint_id()
        if endpoint_id is None:
            return None
        try:
            return await self._read(endpoint_id)
        except StoreUnavailable:
            raise MCPError(INTERNAL_ERROR, UNAVAILABLE_MESSAGE) from None

    async def _read(self, endpoint_id: str) -> Endpoint | None:
        """The caller's endpoint as of this call: the verifier's read for a credential (it read the row
        moments ago for this request), a fresh read otherwise."""
        access = get_access_token()
        if access is not None:
            endpoint = self.verifier.verified(access)
            if endpoint is not None:
                return endpoint
        return await self.services.accounts.endpoint(endpoint_id)

    def _capture(self, ctx: ServerRequestContext[Any, Any], endpoint_id: str) -> None:
        """Remember a legacy session so the doorbell can reach its GET stream later."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or not isinstance(ctx.request, Request):
            return
        sid = ctx.request.headers.get(SESSION_HEADER)
        if sid:
            self.doorbell.sessions.register(endpoint_id, sid, ctx.session)
