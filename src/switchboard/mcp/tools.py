"""What a module needs to add MCP verbs: the registration seam and the shared helpers.

Other features (notify hooks, A2A) add their verbs with a registrar::

    def register(server: MCPServer[Any], tc: ToolContext) -> None:
        async def list_notify_hooks() -> dict[str, Any]:
            endpoint = current_endpoint()          # fresh from the DB, grant already checked
            ...
            raise VerbError("not_found", "hook not found")
        tc.add_tool(list_notify_hooks, name="list_notify_hooks", description="...")

and return it from a component's ``mcp_tools()`` (``switchboard.app.Component``; ``create_app`` passes
them on) or pass it as ``build_mcp(services, extra_tools=[register])``. The gate (``switchboard.mcp.gate``)
checks the grant for every tool by name, whichever way it was registered: a verb is callable only when it
is in the endpoint's scope, unless it was added with ``grant_required=False``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from mcp.server import MCPServer
from mcp_types import ToolAnnotations

from switchboard.core.text import neutralize
from switchboard.mcp.errors import TODO_NOT_FOUND, ErrorCode, VerbError, error_result
from switchboard.mcp.schemas import Todo
from switchboard.store.accounts import Endpoint

if TYPE_CHECKING:
    from switchboard.mcp.doorbell import Doorbell
    from switchboard.services import Services

__all__ = [
    "TODO_NOT_FOUND",
    "ErrorCode",
    "ToolContext",
    "ToolRegistrar",
    "VerbError",
    "acting_as",
    "current_endpoint",
    "error_result",
    "iso",
    "not_found",
    "require_queues",
    "todo_view",
]

_current: ContextVar[Endpoint | None] = ContextVar("switchboard_mcp_endpoint", default=None)


def current_endpoint() -> Endpoint:
    """The calling endpoint, as the gate read it from the database for this very call."""
    endpoint = _current.get()
    if endpoint is None:
        raise VerbError("forbidden", "this call is not authenticated as an endpoint")
    return endpoint


@contextmanager
def acting_as(endpoint: Endpoint) -> Iterator[None]:
    """Bind the caller for the duration of one tool call (the gate does this)."""
    token = _current.set(endpoint)
    try:
        yield
    finally:
        _current.reset(token)


@dataclass
class ToolContext:
    """Handed to every registrar: the services, the doorbell, and :meth:`add_tool`."""

    services: Services
    server: MCPServer[Any]
    doorbell: Doorbell
    ungated: set[str] = field(default_factory=set)

    def add_tool(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        grant_required: bool = True,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
    ) -> None:
        """Register a verb. ``grant_required=False`` only for verbs every endpoint may call (whoami).

        Give ``annotations`` and a typed return (a TypedDict: it becomes the ``outputSchema``). A verb
        registered without annotations gets the spec's defaults written out (may write, may destroy,
        not idempotent, reaches outside), so every verb in ``tools/list`` carries them."""
        if not grant_required:
            self.ungated.add(name)
        if annotations is None:
            annotations = ToolAnnotations(
                read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
            )
        self.server.add_tool(fn, name=name, title=title, description=description, annotations=annotations)


ToolRegistrar = Callable[[MCPServer[Any], ToolContext], None]


def require_queues(endpoint: Endpoint, requested: Iterable[str]) -> list[str]:
    """The requested queues, or ``invalid_argument`` naming those outside the endpoint's scope."""
    wanted = list(dict.fromkeys(requested))
    outside = [q for q in wanted if q not in endpoint.queues]
    if outside:
        raise VerbError("invalid_argument", f"queues not in this endpoint's scope: {', '.join(outside)}")
    return wanted


def iso(epoch_ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC with a ``Z``."""
    if epoch_ms is None:
        return None
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _shown(text: str | None) -> str | None:
    return None if text is None else neutralize(text)


def todo_view(row: Any, *, payload: bool = True, lease: bool = False) -> Todo:
    """A todo as verbs return it. ``payload=False`` for listings, which stay small; ``lease`` for the
    answers that hand the claim's handle to its holder (claims, heartbeat), never for listings.

    Title, kind and source are shown to an agent, so they go through the doorbell's
    :func:`~switchboard.core.text.neutralize` (no bidi override or control character reorders or hides text);
    payload and result are data and come back exactly as stored."""
    view: dict[str, Any] = {
        "id": row.id,
        "queue": row.queue,
        "kind": _shown(row.kind),
        "source": _shown(row.source),
        "title": _shown(row.title),
        "status": row.status,
        "attempt": row.attempt,
        "lease_expires_at": iso(row.lease_expires_at),
        "retry_at": iso(row.retry_at),
        "created_at": iso(row.created_at),
    }
    if lease and row.lease_id is not None:
        view["lease"] = row.lease_id
    if payload:
        view["payload"] = _json(row.payload)
    if row.result is not None:
        view["result"] = _json(row.result)
    if row.last_error is not None:
        view["last_error"] = row.last_error
    return cast(Todo, view)


def not_found() -> VerbError:
    """The one answer for an unknown todo id and for another endpoint's."""
    return VerbError("not_found", TODO_NOT_FOUND)
