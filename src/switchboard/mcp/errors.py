"""The MCP surface's error vocabulary: one exception, one result shape, stable codes.

A verb fails with a tool result the agent can read (``is_error=True``), never with a protocol error,
because an agent can act on ``rate_limited`` or ``conflict`` while a JSON-RPC error usually aborts its
turn. The ``code`` is the stable part (metrics label it, docs list it); ``message`` is for humans.

The error object is the text of the one content block and ``_meta["switchboard/error"]``, not
``structuredContent``: the spec ties ``structuredContent`` to the tool's ``outputSchema``, and the
TypeScript SDK client (1.x) validates it against that schema even on an error, so an error object there
would turn every refusal into a client-side exception (typescript-sdk issue #1943).
"""

from __future__ import annotations

import json
from typing import Final, Literal, get_args

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

ErrorCode = Literal[
    "forbidden",
    "not_found",
    "invalid_argument",
    "rate_limited",
    "unavailable",
    "conflict",
    "lease_lost",  # a holder verb from a claim that has ended (store/leases.py)
    "canceled",  # a holder verb on a todo canceled under its claim: stop working on it
    "ceiling_exceeded",  # SPEC-0024 REQ-1: an endpoint's notify-hook ceiling
    "internal",
]

CODES: Final[frozenset[str]] = frozenset(get_args(ErrorCode))

# One message for "unknown id" and "another endpoint's id", so a caller cannot probe for ids it does
# not own (SPEC-0024 REQ-2).
TODO_NOT_FOUND: Final = "todo not found"
INTERNAL_MESSAGE: Final = "internal error; the server logged it"
UNAVAILABLE_MESSAGE: Final = "the database is unavailable; retry later"


class VerbError(ToolError):
    """Raise from a tool to answer with a structured error. A ``ToolError`` subclass so the SDK treats
    it as anticipated (no crash log); the surface turns it into :func:`error_result`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message


ERROR_META: Final = "switchboard/error"


def error_result(code: ErrorCode, message: str) -> CallToolResult:
    """The one shape every failed verb returns: ``{"code", "message"}`` as the text and in ``_meta``."""
    body = {"code": code, "message": message}
    return CallToolResult(
        is_error=True,
        content=[TextContent(type="text", text=json.dumps(body))],
        _meta={ERROR_META: body},
    )


def result_code(result: object) -> str:
    """The code of a ``tools/call`` result, wire form or model: ``ok``, or the structured error code."""
    if isinstance(result, CallToolResult):
        result = result.model_dump(by_alias=True)
    if not isinstance(result, dict) or not result.get("isError"):
        return "ok"
    meta = result.get("_meta")
    body = meta.get(ERROR_META) if isinstance(meta, dict) else None
    code = body.get("code") if isinstance(body, dict) else None
    # Metrics labels stay bounded: a code outside the vocabulary is counted as "other".
    return code if isinstance(code, str) and code in CODES else "other"
