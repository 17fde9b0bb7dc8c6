"""Every tool result the MCP suite sees is checked against what ``tools/list`` published for that tool.

:class:`CheckedClient` is the SDK ``Client`` with one addition: after each ``call_tool`` it validates
the result with ``jsonschema`` (the validator the JSON Schema spec's draft names, an ``mcp`` dependency),
outside the server, so nothing here costs the server anything:

* a success: ``structuredContent`` against the tool's ``outputSchema`` (which every tool must have);
* a failure (``isError``): no ``structuredContent``; the text and ``_meta["switchboard/error"]`` are the
  same documented error object;
* a success: the text fallback is the same JSON as ``structuredContent``.

``helpers.connect`` builds every client of tests/integration/mcp with it.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for
from mcp import Client
from mcp_types import CallToolResult, TextContent

from switchboard.mcp.errors import ERROR_META
from switchboard.mcp.schemas import ERROR_SCHEMA


def check_result(name: str, output_schema: dict[str, Any] | None, result: CallToolResult) -> None:
    """Raise AssertionError when ``result`` does not match its tool's published contract."""
    texts = [c.text for c in result.content if isinstance(c, TextContent)]
    assert len(texts) == 1, f"{name}: expected one text block"
    if result.is_error:
        assert result.structured_content is None, f"{name}: an error carries no structuredContent"
        structured = json.loads(texts[0])
        assert (result.meta or {}).get(ERROR_META) == structured, f"{name}: _meta and text differ"
        schema: dict[str, Any] = dict(ERROR_SCHEMA)
    else:
        structured = result.structured_content
        assert structured is not None, f"{name}: no structuredContent"
        assert output_schema is not None, f"{name}: tools/list published no outputSchema"
        assert json.loads(texts[0]) == structured, f"{name}: text fallback differs"
        schema = output_schema
    cls = validator_for(schema, default=Draft202012Validator)
    cls.check_schema(schema)
    errors = sorted(cls(schema).iter_errors(structured), key=lambda e: list(e.path))
    assert not errors, f"{name}: result does not match its schema: {[e.message for e in errors[:3]]}"


class CheckedClient(Client):
    """``Client`` that validates every tool result against the server's published schemas."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.output_schemas: dict[str, dict[str, Any] | None] = {}
        self.checked = 0

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> CallToolResult:  # type: ignore[override]
        result = await super().call_tool(name, arguments, *args, **kwargs)
        if name not in self.output_schemas:
            # A tool just granted, or the first call: refresh what this caller is offered.
            listing = await self.list_tools(cache_mode="refresh")
            self.output_schemas.update({t.name: t.output_schema for t in listing.tools})
            self.output_schemas.setdefault(name, None)  # not offered to this caller: errors only
        check_result(name, self.output_schemas.get(name), result)
        self.checked += 1
        return result
