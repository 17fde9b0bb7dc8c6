"""``Mcp-Param-*`` header validation (MCP 2026-07-28, "Custom Headers") only for tools that declare one.

On every ``tools/call`` with arguments the SDK looks the tool's input schema up through the low-level
server's public ``get_tool_input_schema`` hook, then walks the whole schema twice (is an ``x-mcp-header``
annotation invalid anywhere, which ones are there) before it compares headers with arguments. No
Switchboard verb declares a header, so the walks find nothing, and for ``claim_next`` (its ``ack``
item, its long descriptions) they were about 40 schema positions per call (issue 30's claim path).

The hook's documented answer ``None`` means "nothing to validate"; this lookup gives it for a schema
that holds no ``x-mcp-header`` key anywhere, judged once per schema object. A schema that mentions the
word at all, even in a description, keeps the SDK's full check, so nothing a declaring tool needs is
skipped: a tool without declarations has no header the SDK could reject (it compares only declared
ones).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

ANNOTATION = "x-mcp-header"  # the spec's schema keyword

Lookup = Callable[[str], Mapping[str, Any] | None]


class DeclaredHeadersOnly:
    """Wraps the SDK's schema lookup: the schema when it may declare a header, else ``None``."""

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup
        self._judged: dict[str, tuple[Mapping[str, Any], bool]] = {}  # tool name -> (schema, declares)

    def __call__(self, name: str) -> Mapping[str, Any] | None:
        schema = self.lookup(name)
        if schema is None:
            return None
        judged = self._judged.get(name)
        if judged is None or judged[0] is not schema:  # a tool added or replaced since
            judged = (schema, ANNOTATION in json.dumps(schema, default=str))
            self._judged[name] = judged
        return schema if judged[1] else None


def install(server: Any) -> None:
    """Wrap ``server.get_tool_input_schema`` (an ``mcp.server.lowlevel.Server``) when it is set."""
    lookup = server.get_tool_input_schema
    if lookup is not None and not isinstance(lookup, DeclaredHeadersOnly):
        server.get_tool_input_schema = DeclaredHeadersOnly(lookup)
