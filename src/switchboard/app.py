"""The one ASGI app: inbound webhooks, MCP, metrics, health; and the lifespan that starts and stops
every background worker with the server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from switchboard import __version__
from switchboard.a2a.card import A2A_PATH
from switchboard.edge.authorization import OneAuthorization
from switchboard.edge.boundary import BaselineHeaders, JsonBoundary, jsonrpc_error, oauth_error
from switchboard.ingest.app import Ingest
from switchboard.obs.asgi import McpTiming
from switchboard.obs.health import readiness
from switchboard.obs.logs import get_logger
from switchboard.obs.queues import refresh_queue_gauges
from switchboard.operator.events import OperatorEvents
from switchboard.process.ops import ensure_schema
from switchboard.push.from_settings import notify_outbound
from switchboard.queue.retention import PG_BATCH, SQLITE_BATCH, RetentionPolicy, RetentionSweeper
from switchboard.queue.sweeper import Sweeper
from switchboard.services import Services
from switchboard.store.relay import ClusterRelay
from switchboard.store.todo_retention import TodoRetention

# SQLite pages each of the server's pooled connections keeps (SQLite's default: 2,000 KiB each). A
# connection's cache is dropped whenever another connection has written since its last transaction,
# so under ingest it buys little beyond the pages of the statement at hand (a claim or an insert
# touches a few dozen), while each pooled connection filled its own 2 MiB: about 12 MiB of scenario 3's
# RSS growth (docs/benchmarks.md, issue 18). The OS page cache still holds the file.
SERVER_PAGE_CACHE_KIB = 256  # as the notify worker processes (PAGE_CACHE_KIB)

if TYPE_CHECKING:
    from mcp.server.extension import Extension

    from switchboard.mcp.tools import ToolRegistrar

log = get_logger("switchboard.app")


class Component(Protocol):
    """A feature that owns routes and background work (notify hooks, A2A push, the web UI...)."""

    def routes(self) -> Sequence[BaseRoute]: ...

    def mcp_tools(self) -> Sequence[ToolRegistrar]:
        """The registrars of the MCP verbs this feature adds (``switchboard.mcp.tools``)."""
        ...

    def lifespan(self) -> Any:  # an async context manager
        ...


@runtime_checkable
class ExtendsMcp(Protocol):
    """A component that also brings MCP SDK extensions (the A2A component: the Tasks extension)."""

    def mcp_extensions(self) -> Sequence[Extension]: ...


def default_components(services: Services) -> list[Component]:
    from switchboard.a2a.component import A2AComponent
    from switchboard.notify.component import NotifyComponent
    from switchboard.web.component import WebComponent

    return [NotifyComponent(services), A2AComponent(services), WebComponent(services)]


def create_app(services: Services, *, components: Sequence[Component] | None = None) -> Starlette:
    """``components`` defaults to every feature; tests pass their own to tune them."""
    from switchboard.mcp.server import build_mcp

    if components is None:
        components = default_components(services)

    settings = services.settings
    services.db.cap_page_cache(SERVER_PAGE_CACHE_KIB)
    ingest = Ingest(services)
    sweeper = Sweeper(services.todos, settings.reaper_interval)
    services.parts.add(sweeper)
    retention = RetentionSweeper(
        TodoRetention(services.db),
        services.metrics,
        services.clock,
        RetentionPolicy(
            settings.retention_hours * 3600,
            settings.retention_interval_seconds,
            settings.retention_batch or (SQLITE_BATCH if services.db.is_sqlite else PG_BATCH),
        ),
    )
    services.parts.add(retention)
    mcp = build_mcp(
        services,
        extra_tools=[tool for c in components for tool in c.mcp_tools()],
        extensions=[e for c in components if isinstance(c, ExtendsMcp) for e in c.mcp_extensions()],
    )
    services.parts.add(mcp)

    async def healthz(_: Request) -> Response:
        """Liveness: the process serves HTTP. Readiness is /readyz (switchboard.obs.health)."""
        return JSONResponse({"status": "ok", "version": __version__, "instance": services.instance_id})

    async def readyz(_: Request) -> Response:
        reasons = await readiness(services)
        body = {
            "status": "not ready" if reasons else "ready",
            "reasons": reasons,
            "instance": services.instance_id,
        }
        return JSONResponse(body, status_code=503 if reasons else 200, headers={"cache-control": "no-store"})

    async def metrics(_: Request) -> Response:
        await refresh_queue_gauges(services)
        return Response(services.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await ensure_schema(services.db, settings)
        async with AsyncExitStack() as stack:
            await services.hub.start()
            stack.push_async_callback(services.hub.stop)
            if not services.db.is_sqlite and services.hub.wants_remote:
                relay = ClusterRelay(
                    services.db.url, services.hub, services.metrics, changes=services.accounts.changes
                )
                services.parts.add(relay)
                await stack.enter_async_context(relay.run())
            if isinstance(services.operator, OperatorEvents):  # before the components that report to it
                await stack.enter_async_context(services.operator.running(*notify_outbound(services)))
            for component in components:
                await stack.enter_async_context(component.lifespan())
            await stack.enter_async_context(mcp.run())
            sweeper.start()
            stack.push_async_callback(sweeper.stop)
            retention.start()
            stack.push_async_callback(retention.stop)
            log.info("switchboard started", version=__version__, instance=services.instance_id)
            yield
        await services.close()

    # The per-endpoint caps on MCP sessions and streams sit behind the SDK's authentication, inside
    # mcp.app (sessioncap.py, mcp/server.py).
    routes: list[BaseRoute] = [
        # First: every MCP call matches here at once instead of after every other route's pattern (the
        # web UI's included: about 50 regex matches per call, issue 18). The catch-all Mount below still
        # serves the SDK's other paths (OAuth metadata, /authorize, /token...).
        Route("/mcp", mcp.app),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        *ingest.routes(),
    ]
    for component in components:
        routes.extend(component.routes())
    routes.append(Mount("/", app=mcp.app))
    middleware: list[Middleware] = []
    # Malformed JSON is refused before authentication or any SDK parser sees it (boundary.py).
    json_paths = [("/mcp", jsonrpc_error), (A2A_PATH, jsonrpc_error), ("/register", oauth_error)]
    middleware.insert(0, Middleware(BaselineHeaders))  # outermost: every answer, the SDKs' 404s too
    # One Authorization header, in one spelling, before any face reads it (authorization.py).
    middleware.append(Middleware(OneAuthorization))
    middleware.append(Middleware(JsonBoundary, max_body_bytes=settings.max_body_bytes, paths=json_paths))
    middleware.append(Middleware(McpTiming, metrics=services.metrics))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.services = services
    return app
