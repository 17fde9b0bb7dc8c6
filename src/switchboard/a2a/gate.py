"""The HTTP front of the A2A endpoint: everything decided before the SDK's JSON-RPC dispatcher runs.

In order: body size (413), bearer credential (401), per-endpoint rate (429), the verb grant of the
method (403), the protocol version (JSON-RPC -32009), then the SDK's own route.

The version is the ``A2A-Version`` header or, without one, the ``A2A-Version`` query parameter (A2A
§3.6; the SDK reads only the header, so the parameter is copied into the request's headers); empty
means 0.3. Served: 1.x with the v1.0 method names, 0.3 with the v0.3 names. Anything else is
VersionNotSupportedError (-32009), for either set of names. Refusals use HTTP statuses with RFC 6750 bodies, like the MCP
surface, because they are about the caller, not about a task. The caller's endpoint, read fresh from
the database, travels to the request handler in the ASGI scope (:class:`EndpointContextBuilder`).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, Final

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.types.a2a_pb2 import TaskState
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message

from switchboard.a2a.auth import (
    METHOD_VERBS,
    STREAM_METHODS,
    authenticate_bearer,
    bearer_token,
    verbs_needed,
)
from switchboard.a2a.stream import SCOPE_KEY as SSE_IDS_KEY
from switchboard.a2a.stream import EventIds
from switchboard.a2a.stream_cap import HeldStream, StreamSlots
from switchboard.core.ratelimit import WindowLimiter
from switchboard.ingest.app import BodyTooLarge, read_capped
from switchboard.obs.logs import get_logger
from switchboard.services import Services
from switchboard.store.accounts import Endpoint
from switchboard.store.errors import StoreUnavailable

log = get_logger("switchboard.a2a")

SCOPE_KEY = "switchboard.endpoint"
REALM = 'Bearer realm="switchboard"'
VERSION_HEADER: Final = "a2a-version"
VERSION_PARAM: Final = "A2A-Version"
VERSION_NOT_SUPPORTED: Final = -32009
INVALID_PARAMS: Final = -32602
RECONNECT_MS: Final = 1000  # SSE ``retry``: a dropped stream reconnects after a second
_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})(?:\.\d{1,4})?")


def served_version(version: str, method: str) -> bool:
    """Is this (version, method) pair served? Empty is 0.3 (A2A §3.6)."""
    match = _VERSION.fullmatch(version.strip() or "0.3")
    if match is None:
        return False
    major, minor = int(match.group(1)), int(match.group(2))
    if "/" in method:  # a v0.3 method name
        return (major, minor) == (0, 3)
    return major == 1 or (major, minor) == (0, 3)  # v1 names with 0.3: the SDK answers -32009


class EndpointUser(User):
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.endpoint.slug


class EndpointContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context builder, plus the endpoint the gate authenticated (``state["endpoint"]``).
    The Authorization header is dropped from the copy of the headers the SDK keeps."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        headers = context.state.get("headers")
        if isinstance(headers, dict):
            headers.pop("authorization", None)
        ids = request.scope.get(SSE_IDS_KEY)
        if isinstance(ids, EventIds):
            context.state[SSE_IDS_KEY] = ids
        endpoint = request.scope.get(SCOPE_KEY)
        if isinstance(endpoint, Endpoint):
            context.state["endpoint"] = endpoint
            context.user = EndpointUser(endpoint)
        return context


def caller(context: ServerCallContext) -> Endpoint:
    endpoint = context.state.get("endpoint")
    if not isinstance(endpoint, Endpoint):  # pragma: no cover - the gate always sets it
        raise RuntimeError("A2A call reached the handler without an authenticated endpoint")
    return endpoint


def _refuse(status: int, error: str, description: str, *, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": error, "error_description": description}, status, headers)


def _sanitize(response: Response) -> Response:
    """Two repairs of the SDK's v0.3 adapter answers:

    * a params validation failure carries pydantic's text as ``error.data``, which quotes the rejected
      value (it can be a token): keep the code and message, drop the data;
    * a ``null`` result (``tasks/pushNotificationConfig/delete``) is dropped by its ``exclude_none``,
      leaving a response with neither ``result`` nor ``error``: JSON-RPC 2.0 (and the v0.3 spec) want
      ``"result": null``."""
    if not isinstance(response, JSONResponse):
        return response
    try:
        body = json.loads(bytes(response.body))
    except ValueError:
        return response
    if not isinstance(body, dict):
        return response
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("data"), str):
        error["data"] = "the request parameters failed validation"
        return JSONResponse(body, response.status_code)
    if body.get("jsonrpc") == "2.0" and "result" not in body and "error" not in body:
        body["result"] = None
        return JSONResponse(body, response.status_code)
    return response


def _rpc_error(request_id: Any, code: int, message: str) -> Response:
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


class Gate:
    def __init__(
        self, services: Services, dispatch: Callable[[Request], Awaitable[Response]], rate_per_minute: float
    ) -> None:
        self.services = services
        self.dispatch = dispatch
        self.limiter = WindowLimiter.per_minute(services.clock, rate_per_minute)
        self.streams = StreamSlots(services.settings.a2a_streams_per_endpoint)

    def _count(self, method: str, code: str) -> None:
        label = method if method in METHOD_VERBS else "unknown"
        self.services.metrics.a2a_calls.labels(label, code).inc()

    async def handle(self, request: Request) -> Response:
        cap = self.services.settings.max_body_bytes
        try:
            body = await read_capped(request, cap)
        except BodyTooLarge:
            self._count("unknown", "too_large")
            return _refuse(413, "too_large", f"the request body is larger than {cap} bytes")
        method, params = _peek(body)
        token = bearer_token(request.headers.get("authorization"))
        try:
            endpoint = await authenticate_bearer(self.services, token) if token else None
        except StoreUnavailable:
            self._count(method, "unavailable")
            return _refuse(
                503, "unavailable", "the database is unavailable; retry later", headers={"Retry-After": "5"}
            )
        if endpoint is None:
            self._count(method, "unauthorized")
            return _refuse(
                401,
                "invalid_token",
                "send an endpoint credential or OAuth access token as 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": REALM},
            )
        if not self.limiter.allow(endpoint.id):
            self._count(method, "rate_limited")
            per_minute = self.services.settings.a2a_rate_per_minute
            return _refuse(
                429, "rate_limited", f"over {per_minute} calls per minute", headers={"Retry-After": "5"}
            )
        missing = [verb for verb in verbs_needed(method, params) if verb not in endpoint.verbs]
        if missing:
            self._count(method, "forbidden")
            return _refuse(
                403,
                "insufficient_scope",
                f"the verb {missing[0]!r} is not granted to this endpoint",
                headers={"WWW-Authenticate": f'{REALM}, error="insufficient_scope", scope="{missing[0]}"'},
            )
        version = request.headers.get(VERSION_HEADER)
        if version is None:
            version = request.query_params.get(VERSION_PARAM) or request.query_params.get(VERSION_HEADER)
            if version is not None:  # the SDK reads only the header
                request.scope["headers"] = [
                    *request.scope["headers"],
                    (VERSION_HEADER.encode(), version.encode("latin-1", "replace")),
                ]
        if method not in METHOD_VERBS:
            method = ""  # not an A2A method: the SDK answers -32601 whatever the version
        if version is None and method and "/" not in method:
            # No version at all, and a v1.0 name that no v0.3 method has: it can only mean 1.0.
            version = "1.0"
            request.scope["headers"] = [*request.scope["headers"], (VERSION_HEADER.encode(), b"1.0")]
        if method and not served_version(version or "", method):
            self._count(method, "version_not_supported")
            return _rpc_error(
                _request_id(body),
                VERSION_NOT_SUPPORTED,
                "this A2A version is not supported for this method: send A2A-Version 1.0 with the v1.0 "
                "method names, or 0.3 (or none) with the v0.3 names",
            )
        refused = _unparseable(method, params)
        if refused is not None:
            self._count(method, "invalid_params")
            return _rpc_error(_request_id(body), INVALID_PARAMS, refused)
        request.scope[SCOPE_KEY] = endpoint
        ids = EventIds()
        request.scope[SSE_IDS_KEY] = ids
        replay = _replay(body, request.receive)
        response = await self.dispatch(Request(request.scope, replay))
        if isinstance(response, EventSourceResponse):
            response.body_iterator = _with_ids(response.body_iterator, ids)
            return HeldStream(response, self.streams, endpoint.id)  # SWITCHBOARD_A2A_STREAMS_PER_ENDPOINT
        response = _sanitize(response)
        if method in STREAM_METHODS and isinstance(response, JSONResponse):
            return _as_stream(response)
        return response


def _unparseable(method: str, params: Any) -> str | None:
    """What the SDK's parser would silently drop: an unknown task state in ListTasks' ``status`` filter
    (it reads as "no filter"). A2A says InvalidParams."""
    if method != "ListTasks" or not isinstance(params, dict) or "status" not in params:
        return None
    status = params["status"]
    if isinstance(status, str) and status in TaskState.DESCRIPTOR.values_by_name:
        return None
    if (
        isinstance(status, int)
        and not isinstance(status, bool)
        and status in TaskState.DESCRIPTOR.values_by_number
    ):
        return None
    return "status must be a task state (TASK_STATE_...)"


def _peek(body: bytes) -> tuple[str, Any]:
    """The JSON-RPC method and params, or ("", None); malformed bodies are the SDK's to answer."""
    try:
        data = json.loads(body)
    except ValueError:
        return "", None
    if not isinstance(data, dict) or not isinstance(data.get("method"), str):
        return "", None
    return data["method"], data.get("params")


def _request_id(body: bytes) -> Any:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    request_id = data.get("id") if isinstance(data, dict) else None
    return request_id if isinstance(request_id, (str, int)) else None


def _as_stream(response: JSONResponse) -> Response:
    """A streaming method's refusal (task not found, bad params, ...) as the stream it asked for: one
    SSE ``error`` event holding the JSON-RPC error response. A2A §9.4.2: a streaming method answers
    ``text/event-stream``; the SDK's dispatcher answers errors raised before the first event as plain
    JSON, which clients that expect a stream cannot read."""
    body = bytes(response.body).decode()

    async def one() -> AsyncIterator[dict[str, str]]:
        yield {"event": "error", "data": body}

    return EventSourceResponse(one())


async def _with_ids(events: AsyncIterable[Any], ids: EventIds) -> AsyncIterator[Any]:
    """Give each SSE event the stream's id for it (the transition's sequence number, stream.py), and
    tell the client how soon to reconnect."""
    first = True
    async for event in events:
        if isinstance(event, dict) and event.get("event") != "error":
            seq = ids.take()
            event = dict(event)
            if seq is not None:
                event["id"] = str(seq)
            if first:
                event["retry"] = RECONNECT_MS
                first = False
        yield event


def _replay(body: bytes, then: Callable[[], Awaitable[Message]]) -> Callable[[], Awaitable[Message]]:
    """An ASGI receive that hands the SDK the body already read, then the real channel's messages."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await then()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive
