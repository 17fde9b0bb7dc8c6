"""The input-schema lookup for ``Mcp-Param-*`` validation (switchboard/mcp/param_headers.py): a schema
without a header declaration answers None (nothing to validate), one with a declaration is handed to the
SDK whole, and a replaced tool is judged again."""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.shared.inbound import validate_mcp_param_headers

from switchboard.mcp.param_headers import DeclaredHeadersOnly, install

PLAIN: dict[str, Any] = {"type": "object", "properties": {"todo_id": {"type": "string"}}}
DECLARING: dict[str, Any] = {
    "type": "object",
    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
}


def test_a_schema_without_a_declaration_has_nothing_to_validate() -> None:
    schemas = {"plain": PLAIN, "declaring": DECLARING}
    lookup = DeclaredHeadersOnly(schemas.get)

    assert lookup("plain") is None
    assert lookup("declaring") is DECLARING
    assert lookup("unknown") is None
    # What None skips: the SDK rejects nothing for the plain schema, whatever the headers say.
    assert validate_mcp_param_headers(PLAIN, {"todo_id": "td_1"}, {"mcp-param-todo": "other"}) is None
    # And the declaring one still gets its mismatch.
    assert validate_mcp_param_headers(DECLARING, {"region": "eu"}, {"mcp-param-region": "us"}) is not None


def test_a_replaced_tool_is_judged_again() -> None:
    schemas: dict[str, Any] = {"t": PLAIN}
    lookup = DeclaredHeadersOnly(schemas.get)
    assert lookup("t") is None
    schemas["t"] = DECLARING
    assert lookup("t") is DECLARING


def test_install_wraps_the_low_level_servers_lookup_once() -> None:
    server = MCPServer("t")

    @server.tool()
    def plain(todo_id: str) -> str:
        return todo_id

    server.streamable_http_app()  # the session manager (and its low-level server's handle) comes with it
    low_level = server.session_manager.app
    install(low_level)
    install(low_level)
    assert isinstance(low_level.get_tool_input_schema, DeclaredHeadersOnly)
    assert not isinstance(low_level.get_tool_input_schema.lookup, DeclaredHeadersOnly)
    assert low_level.get_tool_input_schema("plain") is None
