"""Running a command: parse, open the database, call the handler, and print one result or one error."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from switchboard.cli.base import EXIT_FAILED, CliError, Handler, Output, load_settings, open_services
from switchboard.cli.parser import build_parser

if TYPE_CHECKING:
    from switchboard.settings import Settings

# Only what parsing needs is imported above: a command imports its own module (and through it the
# settings, the stores and SQLAlchemy) when it runs, so `--help` and usage errors stay quick (docs/cli.md).


def _commands(group: str) -> ModuleType:
    """The module holding the handlers of a command group (the parser names them, run imports them)."""
    if group in ("human", "endpoint"):
        from switchboard.cli import accounts

        return accounts
    if group in ("source", "route"):
        from switchboard.cli import inbound

        return inbound
    if group == "hook":
        from switchboard.cli import hooks

        return hooks
    if group == "todo":
        from switchboard.cli import todos

        return todos
    from switchboard.cli import schema  # db, backup

    return schema


async def _admin(args: argparse.Namespace, settings: Settings) -> Output:
    from sqlalchemy.exc import SQLAlchemyError

    from switchboard.process import ops
    from switchboard.store.db import SchemaMismatch

    handler: Handler = getattr(_commands(args.group), args.handler)
    services = open_services(settings)
    try:
        try:
            if getattr(args, "schema", "ensure") == "ensure":  # `db status|upgrade` look for themselves
                await ops.ensure_schema(services.db, settings)
        except SchemaMismatch as exc:
            raise CliError(str(exc), "schema", EXIT_FAILED) from None
        except (SQLAlchemyError, OSError) as exc:
            raise CliError(
                f"database unavailable: {type(exc).__name__}", "unavailable", EXIT_FAILED
            ) from None
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
    import asyncio

    from sqlalchemy.exc import SQLAlchemyError

    from switchboard.obs.logs import configure_logging
    from switchboard.store.errors import Conflict, NotFound, StoreError, StoreUnavailable

    if getattr(args, "password_stdin", False):
        args.password = _read_password()
    configure_logging("WARNING")  # library warnings as scrubbed JSON lines on stderr, not plain text
    try:
        return asyncio.run(_admin(args, load_settings(args)))
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
    from switchboard.obs.logs import scrub

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
            from switchboard.cli.serve import serve

            return serve(load_settings(args))
        if args.group in ("wait-ready", "call", "listen", "verify"):
            from switchboard.cli import tools

            return tools.run(args)
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
