"""The admin CLI: ``serve``, and what a self-hoster scripts (humans, endpoints, sources, routes).

Output contract (docs/cli.md): with ``--json`` stdout carries exactly one JSON object, on success and on
failure alike, so a script can always parse it; the human-readable ``error: ...`` line always goes to
stderr. A token or secret is printed once, by the command that mints it, and by nothing else.

Exit codes: 0 done; 1 refused or failed (unknown name, duplicate, database unavailable); 2 invalid input;
3 ``serve`` could not start (port taken, database unreachable).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from pydantic import ValidationError
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from switchboard.audit import audit
from switchboard.ingest.derive import valid_kind
from switchboard.ingest.verify import mint_path_token, mint_source_secret
from switchboard.obs import configure_logging, get_logger
from switchboard.obs.logs import scrub
from switchboard.services import Services, build_services
from switchboard.settings import Settings
from switchboard.store.accounts import EMAIL, QUEUE, SLUG, Endpoint
from switchboard.store.errors import Conflict, NotFound, StoreError, StoreUnavailable
from switchboard.store.sources import KINDS, TRUSTS
from switchboard.verbs import ALL_VERBS, DEFAULT_GRANT, unknown_verbs

EXIT_FAILED = 1
EXIT_USAGE = 2
REVEAL_NOTE = "This is shown once and cannot be shown again: store it now."

log = get_logger("switchboard.cli")


class CliError(Exception):
    """A failure reported to the operator as ``error: <message>``, with a stable code for ``--json``."""

    def __init__(
        self, message: str, code: str = "invalid", exit_code: int = EXIT_USAGE, *, prog: str | None = None
    ) -> None:
        super().__init__(message)
        self.message, self.code, self.exit_code, self.prog = message, code, exit_code, prog


@dataclass
class Output:
    data: dict[str, Any]
    text: str


Handler = Callable[[Services, argparse.Namespace], Awaitable[Output]]


# -- argument types: reject bad input before anything touches the database ------------------------


def _slug(value: str) -> str:
    if not SLUG.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a slug (1-64 lower-case letters, digits or dashes)"
        )
    return value


def _email(value: str) -> str:
    if not EMAIL.match(value.strip()):
        raise argparse.ArgumentTypeError(f"{value!r} is not an email address")
    return value.strip().lower()


def _queue(value: str) -> str:
    if not QUEUE.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a queue name (lower-case letters, digits, '.', '_' or '-', up to 64)"
        )
    return value


def _event_kind(value: str) -> str:
    # A kind that derivation can never produce would make a route that never matches.
    if valid_kind(value) is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an event kind (up to 100 letters, digits, '_', '.', ':' or '-')"
        )
    return value


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _queues(value: str) -> list[str]:
    names = _csv(value)
    if not names:
        raise argparse.ArgumentTypeError("name at least one queue")
    return [_queue(name) for name in names]


def _verbs(value: str) -> list[str]:
    verbs = _csv(value)
    if not verbs:
        raise argparse.ArgumentTypeError("name at least one verb, or use --default-grant")
    bad = unknown_verbs(verbs)
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown verbs: {', '.join(bad)} (valid verbs: {', '.join(sorted(ALL_VERBS))})"
        )
    return verbs


# -- rendering ----------------------------------------------------------------------------------------


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    if not rows:
        return empty
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _human_json(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "email": row.email,
        "operator": bool(row.is_operator),
        "created_at": _iso(row.created_at),
    }


def _endpoint_json(ep: Endpoint, email: str) -> dict[str, Any]:
    return {
        "id": ep.id,
        "slug": ep.slug,
        "human": email,
        "verbs": list(ep.verbs),
        "queues": list(ep.queues),
        "presence": ep.effective_presence,
        "presence_override": ep.presence_override,
        "created_at": _iso(ep.created_at),
    }


def _inbound(settings: Settings, path: str) -> str | None:
    return settings.public_url.rstrip("/") + path if settings.public_url else None


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _shares_key_warning(settings: Settings) -> str | None:
    """Instances on one PostgreSQL must open each other's sealed secrets; a per-machine key file cannot."""
    if settings.resolved_database_url().startswith("postgresql") and not settings.cred_key:
        return (
            f"SWITCHBOARD_CRED_KEY is not set: secrets are sealed with the key file in {settings.data_dir}, "
            "which is per machine; every instance sharing this database must use the same key"
        )
    return None


# -- commands -----------------------------------------------------------------------------------------


async def _require_human(services: Services, email: str) -> Any:
    row = await services.accounts.human_by_email(email)
    if row is None:
        raise CliError(f"no human with email {email!r}", "not_found", EXIT_FAILED)
    return row


async def _emails(services: Services) -> dict[str, str]:
    return {row.id: row.email for row in await services.accounts.list_humans()}


async def human_create(services: Services, args: argparse.Namespace) -> Output:
    if await services.accounts.human_by_email(args.email):
        raise CliError(f"a human with email {args.email!r} exists", "conflict", EXIT_FAILED)
    await services.accounts.create_human(args.email, args.password, operator=args.operator)
    human = _human_json(await _require_human(services, args.email))
    if not human["operator"] and not any(r.is_operator for r in await services.accounts.list_humans()):
        _warn(
            "no human is an instance operator: grant the role with `switchboard human operator grant EMAIL`"
        )
    role = " as an instance operator" if human["operator"] else ""
    return Output({"human": human}, f"created human {human['email']} ({human['id']}){role}")


# The console's account operations: each one AdminStore call, the same the web console makes.


async def human_operator(services: Services, args: argparse.Namespace) -> Output:
    row = await _require_human(services, args.email)
    grant = args.role == "grant"
    changed = await services.admin.set_operator(row.id, grant)
    if changed:
        audit("human.operator_grant" if grant else "human.operator_revoke", "cli", human_id=row.id)
    human = _human_json(await _require_human(services, args.email))
    verb = ("granted" if grant else "revoked") if changed else "unchanged"
    return Output({"human": human, "changed": changed}, f"operator role {verb} for {human['email']}")


async def human_delete(services: Services, args: argparse.Namespace) -> Output:
    row = await _require_human(services, args.email)
    gone = await services.admin.delete_human(row.id)
    audit("human.delete", "cli", human_id=row.id, **gone)
    what = ", ".join(f"{n} {k}" for k, n in gone.items())
    return Output({"deleted": _human_json(row), "with": gone}, f"deleted human {row.email} with {what}")


async def human_password(services: Services, args: argparse.Namespace) -> Output:
    row = await _require_human(services, args.email)
    await services.admin.set_password(row.id, args.password)
    audit("human.password", "cli", human_id=row.id)
    return Output({"human": _human_json(row)}, f"password set for {row.email}; their sessions were ended")


async def human_sign_out(services: Services, args: argparse.Namespace) -> Output:
    row = await _require_human(services, args.email)
    ended = await services.admin.end_sessions(row.id)
    audit("human.sign_out_everywhere", "cli", human_id=row.id, sessions=ended)
    return Output(
        {"human": _human_json(row), "sessions_ended": ended}, f"ended {ended} sessions of {row.email}"
    )


async def endpoint_delete(services: Services, args: argparse.Namespace) -> Output:
    endpoint = await services.accounts.endpoint_by_slug(args.slug)
    if endpoint is None:
        raise CliError(f"no endpoint with slug {args.slug!r}", "not_found", EXIT_FAILED)
    gone = await services.admin.delete_endpoint(endpoint.id)
    audit("endpoint.delete", "cli", endpoint_id=endpoint.id, slug=endpoint.slug, **gone)
    what = ", ".join(f"{n} {k}" for k, n in gone.items())
    return Output({"deleted": endpoint.slug, "with": gone}, f"deleted endpoint {endpoint.slug} with {what}")


async def source_delete(services: Services, args: argparse.Namespace) -> Output:
    source = next((s for s in await services.sources.list_sources() if s.slug == args.slug), None)
    if source is None:
        raise CliError(f"no source with slug {args.slug!r}", "not_found", EXIT_FAILED)
    gone = await services.admin.delete_source(source.id)
    audit("source.delete", "cli", source_id=source.id, slug=source.slug, **gone)
    return Output(
        {"deleted": source.slug, "with": gone},
        f"deleted source {source.slug} with {gone['routes']} routes; its {gone['todos']} todos stay",
    )


async def human_list(services: Services, args: argparse.Namespace) -> Output:
    humans = [_human_json(row) for row in await services.accounts.list_humans()]
    rows = [[h["email"], h["id"], "yes" if h["operator"] else "no", h["created_at"]] for h in humans]
    return Output({"humans": humans}, _table(["EMAIL", "ID", "OPERATOR", "CREATED"], rows, "(no humans)"))


async def endpoint_vend(services: Services, args: argparse.Namespace) -> Output:
    human = await _require_human(services, args.human)
    verbs = list(DEFAULT_GRANT) if args.default_grant else args.verbs
    endpoint, token = await services.accounts.vend_endpoint(human.id, args.slug, args.queues, verbs)
    text = (
        f"vended endpoint {endpoint.slug} ({endpoint.id}) for {human.email}\n"
        f"  verbs:  {', '.join(endpoint.verbs)}\n  queues: {', '.join(endpoint.queues)}\n"
        f"token: {token}\n{REVEAL_NOTE}"
    )
    return Output({"endpoint": _endpoint_json(endpoint, human.email), "token": token}, text)


async def endpoint_list(services: Services, args: argparse.Namespace) -> Output:
    human_id = (await _require_human(services, args.human)).id if args.human else None
    emails = await _emails(services)
    endpoints = [
        _endpoint_json(ep, emails.get(ep.human_id, ""))
        for ep in await services.accounts.list_endpoints(human_id)
    ]
    rows = [
        [e["slug"], e["human"], e["presence"], ",".join(e["queues"]), ",".join(e["verbs"])] for e in endpoints
    ]
    text = _table(["SLUG", "HUMAN", "PRESENCE", "QUEUES", "VERBS"], rows, "(no endpoints)")
    return Output({"endpoints": endpoints}, text)


async def source_create(services: Services, args: argparse.Namespace) -> Output:
    human = await _require_human(services, args.human)
    # A token-trust source is authenticated by its URL path, so its secret is the path token.
    secret = mint_path_token() if args.trust == "token" else mint_source_secret(args.kind)
    if warning := _shares_key_warning(services.settings):
        _warn(warning)
    source = await services.sources.create(human.id, args.slug, args.kind, args.trust, secret)
    path = f"/in/{source.slug}/{secret}" if source.trust == "token" else f"/in/{source.slug}"
    url = _inbound(services.settings, path)
    data = {
        "source": {
            "id": source.id,
            "slug": source.slug,
            "human": human.email,
            "kind": source.kind,
            "trust": source.trust,
            "quarantined": source.quarantined,
            "created_at": _iso(source.created_at),
        },
        "inbound_path": path,
        "inbound_url": url,
        "secret": secret,
    }
    text = (
        f"created source {source.slug} ({source.id}): kind {source.kind}, trust {source.trust}\n"
        f"inbound path: {path}\n"
        + (f"inbound url:  {url}\n" if url else "")
        + f"secret: {secret}\n{REVEAL_NOTE}"
    )
    return Output(data, text)


async def source_list(services: Services, args: argparse.Namespace) -> Output:
    emails = await _emails(services)
    sources: list[dict[str, Any]] = [
        {
            "id": s.id,
            "slug": s.slug,
            "human": emails.get(s.human_id, ""),
            "kind": s.kind,
            "trust": s.trust,
            "quarantined": s.quarantined,
            "created_at": _iso(s.created_at),
        }
        for s in await services.sources.list_sources()
    ]
    rows = [
        [s["slug"], s["human"], s["kind"], s["trust"], "yes" if s["quarantined"] else "no"] for s in sources
    ]
    text = _table(["SLUG", "HUMAN", "KIND", "TRUST", "QUARANTINED"], rows, "(no sources)")
    return Output({"sources": sources}, text)


def _route_json(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "source": row.source,
        "kind": row.kind,
        "queue": row.queue,
        "endpoint": row.endpoint,
        "created_at": _iso(row.created_at),
    }


async def route_create(services: Services, args: argparse.Namespace) -> Output:
    route_id = await services.sources.add_route(args.source, args.queue, args.endpoint, args.kind)
    route = next(_route_json(r) for r in await services.sources.list_routes() if r.id == route_id)
    endpoint = await services.accounts.endpoint_by_slug(args.endpoint)
    if endpoint is not None and args.queue not in endpoint.queues:
        # Not refused: the owning human may widen the scope later. Until then the todos wait unclaimable.
        _warn(f"endpoint {args.endpoint!r} may not drain queue {args.queue!r}: its todos stay unclaimed")
    kind = f" (kind {args.kind})" if args.kind else ""
    text = f"created route {route_id}: {args.source}{kind} -> {args.queue} @ {args.endpoint}"
    return Output({"route": route}, text)


async def route_list(services: Services, args: argparse.Namespace) -> Output:
    routes = [_route_json(r) for r in await services.sources.list_routes()]
    rows = [[r["id"], r["source"], r["kind"] or "*", r["queue"], r["endpoint"]] for r in routes]
    text = _table(["ID", "SOURCE", "KIND", "QUEUE", "ENDPOINT"], rows, "(no routes)")
    return Output({"routes": routes}, text)


# -- parser -------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors share the ``--json`` error contract."""

    def error(self, message: str) -> NoReturn:
        raise CliError(message, "usage", EXIT_USAGE, prog=self.prog)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="switchboard", description="Switchboard: a self-hosted work-queue server for AI agents."
    )
    data = _Parser(add_help=False)
    data.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="data folder (default $SWITCHBOARD_DATA or ./data); "
        "the database is $SWITCHBOARD_DATABASE_URL, else SQLite in this folder",
    )
    common = _Parser(add_help=False, parents=[data])
    common.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)

    serve = groups.add_parser("serve", parents=[data], help="run the server")
    serve.add_argument(
        "--listen", metavar="HOST:PORT", help="address to listen on (default $SWITCHBOARD_LISTEN)"
    )

    def group(name: str, help: str) -> Any:
        return groups.add_parser(name, help=help).add_subparsers(
            dest="action", metavar="ACTION", required=True
        )

    def command(sub: Any, name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        cmd: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help)
        cmd.set_defaults(handler=handler)
        return cmd

    humans = group("human", "create and list humans")
    cmd = command(humans, "create", human_create, "create a human (password read from stdin)")
    cmd.add_argument("email", type=_email, metavar="EMAIL")
    cmd.add_argument(
        "--password-stdin",
        action="store_true",
        required=True,
        help="read the password from the first line of stdin (at least 10 characters)",
    )
    cmd.add_argument("--operator", action="store_true", help="make the human an instance operator")
    command(humans, "list", human_list, "list humans")
    cmd = command(humans, "operator", human_operator, "grant or revoke the instance operator role")
    cmd.add_argument("role", choices=("grant", "revoke"))
    cmd.add_argument("email", type=_email, metavar="EMAIL")
    cmd = command(humans, "delete", human_delete, "delete a human with their endpoints and sources")
    cmd.add_argument("email", type=_email, metavar="EMAIL")
    cmd = command(humans, "password", human_password, "set a human's password (read from stdin)")
    cmd.add_argument("email", type=_email, metavar="EMAIL")
    cmd.add_argument("--password-stdin", action="store_true", required=True, help="read it from stdin")
    cmd = command(humans, "sign-out", human_sign_out, "end every browser session of a human")
    cmd.add_argument("email", type=_email, metavar="EMAIL")

    endpoints = group("endpoint", "vend and list endpoints")
    cmd = command(endpoints, "vend", endpoint_vend, "vend an endpoint and print its token once")
    cmd.add_argument("--human", required=True, metavar="EMAIL", help="the owning human")
    cmd.add_argument("--slug", required=True, type=_slug)
    cmd.add_argument("--queues", required=True, type=_queues, metavar="Q1,Q2", help="queues it may drain")
    grant = cmd.add_mutually_exclusive_group(required=True)
    grant.add_argument("--verbs", type=_verbs, metavar="V1,V2", help="verbs it may call")
    grant.add_argument("--default-grant", action="store_true", help=f"grant {', '.join(DEFAULT_GRANT)}")
    cmd = command(endpoints, "list", endpoint_list, "list endpoints (never their tokens)")
    cmd.add_argument("--human", metavar="EMAIL", help="only this human's endpoints")
    cmd = command(endpoints, "delete", endpoint_delete, "delete an endpoint with its todos, hooks, routes")
    cmd.add_argument("slug", type=_slug, metavar="SLUG")

    sources = group("source", "register and list inbound webhook sources")
    cmd = command(sources, "create", source_create, "register a source and print its secret once")
    cmd.add_argument("--human", required=True, metavar="EMAIL", help="the owning human")
    cmd.add_argument("--slug", required=True, type=_slug)
    cmd.add_argument("--kind", required=True, choices=KINDS)
    cmd.add_argument("--trust", required=True, choices=TRUSTS)
    command(sources, "list", source_list, "list sources (never their secrets)")
    cmd = command(sources, "delete", source_delete, "delete a source and its routes (its todos stay)")
    cmd.add_argument("slug", type=_slug, metavar="SLUG")

    routes = group("route", "map sources to queues and endpoints")
    cmd = command(routes, "create", route_create, "route a source's deliveries to a queue and endpoint")
    cmd.add_argument("--source", required=True, type=_slug, metavar="SLUG")
    cmd.add_argument("--queue", required=True, type=_queue, metavar="Q")
    cmd.add_argument("--endpoint", required=True, type=_slug, metavar="SLUG")
    cmd.add_argument(
        "--kind", type=_event_kind, help="only deliveries of this event kind, e.g. push (default: every kind)"
    )
    command(routes, "list", route_list, "list routes")
    return parser


# -- running ------------------------------------------------------------------------------------------


def _settings(args: argparse.Namespace) -> Settings:
    """Settings from ``SWITCHBOARD_*``, with the command-line flags winning."""
    overrides: dict[str, Any] = {}
    if args.data is not None:
        overrides["data_dir"] = args.data
    if getattr(args, "listen", None) is not None:
        overrides["listen"] = args.listen
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise CliError(f"invalid configuration: {problems}") from None


def _services(settings: Settings) -> Services:
    try:
        return build_services(settings)
    except ArgumentError:  # the URL may hold a password: never echo it
        raise CliError("SWITCHBOARD_DATABASE_URL is not a database URL this server can use") from None


async def _admin(args: argparse.Namespace, settings: Settings) -> Output:
    services = _services(settings)
    try:
        try:
            await services.db.migrate()
        except (SQLAlchemyError, OSError) as exc:
            raise CliError(
                f"database unavailable: {type(exc).__name__}", "unavailable", EXIT_FAILED
            ) from None
        handler: Handler = args.handler
        return await handler(services, args)
    finally:
        await services.close()


def _read_password() -> str:
    # At a terminal, read without echo; from a pipe, the first line (the ``docker login`` convention).
    tty = sys.stdin.isatty()
    password = getpass.getpass("password: ") if tty else sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("the password on stdin is empty (pass it as the first line of stdin)")
    if len(password) < 10:
        raise CliError("the password must be at least 10 characters")
    return password


def _run(args: argparse.Namespace) -> Output:
    if getattr(args, "password_stdin", False):
        args.password = _read_password()
    configure_logging("WARNING")  # library warnings as scrubbed JSON lines on stderr, not plain text
    try:
        return asyncio.run(_admin(args, _settings(args)))
    except ValueError as exc:  # the stores' validation of what the operator typed
        raise CliError(str(exc)) from None
    except Conflict as exc:
        raise CliError(str(exc), "conflict", EXIT_FAILED) from None
    except NotFound as exc:
        raise CliError(str(exc), "not_found", EXIT_FAILED) from None
    except StoreUnavailable as exc:
        raise CliError(str(exc), "unavailable", EXIT_FAILED) from None
    except StoreError as exc:
        raise CliError(str(exc), "failed", EXIT_FAILED) from None
    except SQLAlchemyError as exc:  # its text quotes the statement and its parameters: name it only
        raise CliError(f"database error ({type(exc).__name__})", "failed", EXIT_FAILED) from None


def _fail(error: CliError, as_json: bool) -> int:
    message = scrub(error.message)
    print(f"error: {message}", file=sys.stderr)
    if error.prog:
        print(f"see '{error.prog} --help'", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": error.code, "message": message}))
    return error.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv  # known even when parsing fails
    try:
        args = build_parser().parse_args(argv)
        if args.group == "serve":
            return serve(_settings(args))
        output = _run(args)
    except CliError as exc:
        return _fail(exc, as_json)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: still one JSON object, and no traceback full of locals
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        return _fail(
            CliError(f"internal error ({type(exc).__name__}): {first}", "internal", EXIT_FAILED), as_json
        )
    print(json.dumps(output.data) if args.json else output.text)
    return 0


# -- serve --------------------------------------------------------------------------------------------


def serve(settings: Settings) -> int:
    """Run the server until SIGTERM or SIGINT; uvicorn drains connections and runs the lifespan's shutdown."""
    import uvicorn  # only serve needs the web stack; admin commands stay quick to start

    from switchboard.app import create_app

    configure_logging()
    # Our one startup line (below) replaces uvicorn's own chatter; its warnings and errors still show.
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    if warning := _shares_key_warning(settings):
        log.warning(warning)
    try:
        services = _services(settings)
        app = create_app(services)
    except CliError as exc:
        log.error("switchboard cannot start", reason=exc.message)
        return EXIT_USAGE
    except Exception:
        log.error("switchboard cannot start", exc_info=True)
        return EXIT_FAILED

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if not self.should_exit:
                log.info(
                    "switchboard listening", url=_listen_url(settings, self), instance=services.instance_id
                )

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # Before uvicorn waits for requests in flight: let long-waiting ones (an A2A SendMessage
            # waiting for its task) answer now instead of holding the stop.
            for hook in services.extras.get("on_draining", []):
                hook()
            await super().shutdown(sockets=sockets)

    config = uvicorn.Config(
        app,
        host=settings.listen_host,
        port=settings.listen_port,
        log_config=None,
        access_log=False,
        lifespan="on",
    )
    server = Server(config)

    # uvicorn re-raises the signal it caught once it has shut down, which kills the process with the
    # default handler. This handler makes that re-raise harmless (exit 0 after a graceful stop), and asks
    # for a stop if a signal lands before uvicorn has installed its own handlers.
    def stop(_sig: int, _frame: FrameType | None) -> None:
        server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    server.run()
    log.info("switchboard stopped")
    return 0


def _listen_url(settings: Settings, server: Any) -> str:
    """The address actually bound (so ``--listen HOST:0`` reports its port)."""
    host, port = settings.listen_host, settings.listen_port
    for listener in getattr(server, "servers", []):
        for sock in listener.sockets or ():
            port = int(sock.getsockname()[1])
            break
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


if __name__ == "__main__":
    raise SystemExit(main())
