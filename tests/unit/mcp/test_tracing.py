"""The SDK's span middleware is dropped when no tracer provider is installed (issue 30). The drop takes
the first entry of the SDK's default list, so this checks that entry is the span layer and the request
state boundary after it stays."""

from __future__ import annotations

from mcp.server import MCPServer

from switchboard.mcp.server import tracing_installed


def test_the_sdk_default_list_starts_with_its_span_layer() -> None:
    names = [type(m).__name__ for m in MCPServer("probe").middleware]
    assert names == ["OpenTelemetryMiddleware", "RequestStateBoundary"]


def test_no_tracer_provider_is_installed_in_the_suite() -> None:
    assert tracing_installed() is False
