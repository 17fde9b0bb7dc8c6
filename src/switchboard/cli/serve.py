"""``switchboard serve``: preflight, then uvicorn until SIGTERM or SIGINT.

The port is bound before the full app is imported and started (switchboard.edge.front): /healthz answers
within a moment of the start, /readyz once everything runs, and requests that come earlier wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

from switchboard.cli.base import (
    EXIT_FAILED,
    EXIT_SERVE,
    EXIT_USAGE,
    CliError,
    open_services,
    shares_key_warning,
)
from switchboard.core.ids import instance_id
from switchboard.edge import fdlimit
from switchboard.obs.logs import configure_logging, get_logger, scrub
from switchboard.process import preflight
from switchboard.process.heap import freeze_startup_heap
from switchboard.settings import Settings

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp

    from switchboard.services import Services

log = get_logger("switchboard.cli")


def serve(settings: Settings) -> int:
    """Run the server until SIGTERM or SIGINT; uvicorn drains connections and runs the lifespan's shutdown."""
    import uvicorn  # only serve needs the web stack; admin commands stay quick to start

    from switchboard import __version__
    from switchboard.edge.front import Front

    try:
        _preflight(settings)
    except preflight.ConfigError as exc:
        print(f"error: {scrub(exc.message)}", file=sys.stderr)
        return EXIT_SERVE
    configure_logging(settings.log_level, settings.log_format)
    _raise_fd_limit(settings)
    # Our one startup line (below) replaces uvicorn's own chatter; its warnings and errors still show.
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    if warning := shares_key_warning(settings):
        log.warning(warning)
    # Named now, so /healthz can say which instance answers before the services exist.
    settings = settings.model_copy(update={"instance_id": settings.instance_id or instance_id()})
    instance = str(settings.instance_id)
    built: list[Services] = []
    exit_code = 0

    def build() -> ASGIApp:
        """In the warm-up thread: the heavy imports, the services and the app (app.create_app)."""
        from switchboard.app import create_app

        services = open_services(settings)
        built.append(services)
        return create_app(services)

    def ready(seconds: float) -> None:
        frozen = freeze_startup_heap()  # GC pauses off the claim path (switchboard/process/heap.py)
        log.info("switchboard ready", instance=instance, frozen_objects=frozen, seconds=round(seconds, 3))

    def failed(exc: BaseException) -> None:
        nonlocal exit_code
        if isinstance(exc, CliError):
            log.error("switchboard cannot start", reason=exc.message)
            exit_code = EXIT_USAGE
        else:
            log.error("switchboard cannot start", exc_info=True)  # called while it is handled
            exit_code = EXIT_FAILED
        server.should_exit = True

    health = {"status": "ok", "version": __version__, "instance": instance}  # as app.create_app's /healthz
    front = Front(build, health=health, instance=instance, on_ready=ready, on_failed=failed)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if not self.should_exit:
                log.info("switchboard listening", url=_listen_url(settings, self), instance=instance)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # Before uvicorn waits for requests in flight: let long-waiting ones (an A2A SendMessage
            # waiting for its task) answer now instead of holding the stop.
            for services in built:
                for hook in services.on_draining:
                    hook()
            await super().shutdown(sockets=sockets)

    server = Server(uvicorn_config(front, settings))

    # uvicorn re-raises the signal it caught once it has shut down, which kills the process with the
    # default handler. This handler makes that re-raise harmless (exit 0 after a graceful stop), and asks
    # for a stop if a signal lands before uvicorn has installed its own handlers.
    def stop(_sig: int, _frame: FrameType | None) -> None:
        server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    server.run()
    log.info("switchboard stopped")
    return exit_code


def uvicorn_config(app: Any, settings: Settings) -> uvicorn.Config:
    """The uvicorn options ``switchboard serve`` runs ``app`` with (the bench's server takes the same,
    so what it measures is the shipped HTTP stack: the loop, the guarded protocol, the timeouts)."""
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from switchboard.edge.conn import guarded_protocol, install_accept_error_filter

    install_accept_error_filter()
    forwarded = settings.forwarded_allow_ips.strip()
    return uvicorn.Config(
        app,
        host=settings.listen_host,
        port=settings.listen_port,
        log_config=None,
        access_log=False,
        lifespan="on",
        # asyncio's own loop, whatever else is installed: uvicorn's default ("auto") switches to uvloop
        # as soon as it is importable (a dependency of pgqueuer, the benchmark's peer, brings it in), and
        # the server is built and tested on asyncio's.
        loop="asyncio",
        # Connection limits (conn.py): uvicorn's protocol, wrapped with a header deadline and a cap.
        http=guarded_protocol(
            AutoHTTPProtocol,
            max_connections=settings.max_connections,
            header_timeout=settings.header_timeout_seconds,
        ),
        timeout_keep_alive=max(1, round(settings.keep_alive_timeout_seconds)),
        # Passed explicitly: uvicorn would otherwise trust X-Forwarded-For from 127.0.0.1 (or its own
        # FORWARDED_ALLOW_IPS variable). Forwarded headers count only from SWITCHBOARD_FORWARDED_ALLOW_IPS.
        proxy_headers=bool(forwarded),
        forwarded_allow_ips=forwarded or None,
    )


def _raise_fd_limit(settings: Settings) -> None:
    """Make room for the connection cap before anything opens a socket (switchboard/edge/fdlimit.py)."""
    limit = fdlimit.raise_soft_limit(fdlimit.needed_for(settings.max_connections))
    if limit.short:
        log.warning(
            "the open-file limit is below what SWITCHBOARD_MAX_CONNECTIONS needs: raise the hard limit "
            "(LimitNOFILE= in a systemd unit, ulimit -Hn) or lower the cap",
            limit=limit.after,
            needed=limit.needed,
            max_connections=settings.max_connections,
        )


def _preflight(settings: Settings) -> None:
    """The checks that make a misconfigured start fail at once with one line (docs/self-hosting.md)."""
    preflight.check(settings)
    if not preflight.first_start(settings):  # a first start has no schema to check (nor SQLAlchemy to load)
        from switchboard.process import ops

        try:
            asyncio.run(ops.check_schema(settings, settings.resolved_database_url()))
        except ops.OpsError as exc:
            raise preflight.ConfigError(exc.message) from None


def _listen_url(settings: Settings, server: Any) -> str:
    """The address actually bound (so ``--listen HOST:0`` reports its port)."""
    host, port = settings.listen_host, settings.listen_port
    for listener in getattr(server, "servers", []):
        for sock in listener.sockets or ():
            port = int(sock.getsockname()[1])
            break
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
