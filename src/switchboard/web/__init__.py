"""The web UI for humans (sign-in, endpoints, vend wizard, sources and routes, hook controls) and
Switchboard's MCP OAuth authorization server with its consent screen. See docs/web.md."""

from switchboard.web.component import WebComponent

__all__ = ["WebComponent"]
