"""The MCP surface (streamable HTTP at ``/mcp``): verbs, grants, queue resources and the doorbell.

Modules that add verbs import from :mod:`switchboard.mcp.tools`; ``app.py`` uses :func:`build_mcp`.
"""

from switchboard.mcp.errors import VerbError, error_result
from switchboard.mcp.server import McpSurface, build_mcp
from switchboard.mcp.tools import ToolContext, ToolRegistrar, current_endpoint

__all__ = [
    "McpSurface",
    "ToolContext",
    "ToolRegistrar",
    "VerbError",
    "build_mcp",
    "current_endpoint",
    "error_result",
]
