"""The argument parser: every command, its arguments and the name of its handler.

A handler is named, not imported: ``switchboard.cli.run`` imports the one command module that runs, so
building the parser (and ``--help``) loads no store, no settings and no SQLAlchemy."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from switchboard.cli.base import (
    EXIT_USAGE,
    CliError,
    arg_email,
    arg_event_kind,
    arg_limit,
    arg_queue,
    arg_queues,
    arg_slug,
    arg_todo_id,
    arg_verbs,
)
from switchboard.core.names import AGES, KINDS, STATES, TRUSTS
from switchboard.core.verbs import DEFAULT_GRANT


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

    wait = groups.add_parser(
        "wait-ready", parents=[data], help="wait until the server answers /readyz with 200 (for scripts)"
    )
    wait.add_argument("--url", help="the server's base URL (default: from --listen or $SWITCHBOARD_LISTEN)")
    wait.add_argument("--listen", metavar="HOST:PORT", help="the address serve was given")
    wait.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="give up after (default 60)"
    )

    call = groups.add_parser(
        "call", parents=[data], help="call an MCP verb as an endpoint (token on stdin) and print the result"
    )
    call.add_argument("tool", metavar="TOOL", help="the verb, e.g. create_notify_hook")
    call.add_argument("arguments", nargs="*", metavar="KEY=VALUE", help="arguments (JSON values parsed)")
    call.add_argument("--token-stdin", action="store_true", required=True, help="read the token from stdin")
    call.add_argument("--url", help="the MCP URL (default: /mcp at --listen or $SWITCHBOARD_LISTEN)")
    call.add_argument("--listen", metavar="HOST:PORT", help="the address serve was given")
    call.add_argument("--json", action="store_true", help="one JSON object on stdout")

    listen = groups.add_parser("listen", help="a local receiver that verifies and prints notifications")
    listen.add_argument("--port", type=int, required=True)
    listen.add_argument("--host", default="127.0.0.1")
    listen.add_argument("--secret", help="whsec_... (default $SWITCHBOARD_HOOK_SECRET)")
    listen.add_argument("--cert", help="PEM certificate: serve HTTPS")
    listen.add_argument("--key", help="PEM private key for --cert")
    verify_cmd = groups.add_parser("verify", help="verify one captured notification request read from stdin")
    verify_cmd.add_argument("--secret", help="whsec_... (default $SWITCHBOARD_HOOK_SECRET)")
    verify_cmd.add_argument("--json", action="store_true", help="errors as one JSON object too")

    def group(name: str, help: str) -> Any:
        return groups.add_parser(name, help=help).add_subparsers(
            dest="action", metavar="ACTION", required=True
        )

    def command(sub: Any, name: str, handler: str, help: str) -> argparse.ArgumentParser:
        cmd: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help)
        cmd.set_defaults(handler=handler)
        return cmd

    humans = group("human", "create and list humans")
    cmd = command(humans, "create", "human_create", "create a human (password read from stdin)")
    cmd.add_argument("email", type=arg_email, metavar="EMAIL")
    cmd.add_argument(
        "--password-stdin",
        action="store_true",
        required=True,
        help="read the password from the first line of stdin (at least 10 characters)",
    )
    cmd.add_argument("--operator", action="store_true", help="make the human an instance operator")
    command(humans, "list", "human_list", "list humans")
    cmd = command(humans, "operator", "human_operator", "grant or revoke the instance operator role")
    cmd.add_argument("role", choices=("grant", "revoke"))
    cmd.add_argument("email", type=arg_email, metavar="EMAIL")
    cmd = command(humans, "delete", "human_delete", "delete a human with their endpoints and sources")
    cmd.add_argument("email", type=arg_email, metavar="EMAIL")
    cmd = command(humans, "password", "human_password", "set a human's password (read from stdin)")
    cmd.add_argument("email", type=arg_email, metavar="EMAIL")
    cmd.add_argument("--password-stdin", action="store_true", required=True, help="read it from stdin")
    cmd = command(humans, "sign-out", "human_sign_out", "end every browser session of a human")
    cmd.add_argument("email", type=arg_email, metavar="EMAIL")

    endpoints = group("endpoint", "vend, list and re-grant endpoints")
    cmd = command(endpoints, "vend", "endpoint_vend", "vend an endpoint and print its token once")
    cmd.add_argument("--human", required=True, metavar="EMAIL", help="the owning human")
    cmd.add_argument("--slug", required=True, type=arg_slug)
    cmd.add_argument("--queues", required=True, type=arg_queues, metavar="Q1,Q2", help="queues it may drain")
    grant = cmd.add_mutually_exclusive_group(required=True)
    grant.add_argument("--verbs", type=arg_verbs, metavar="V1,V2", help="verbs it may call")
    grant.add_argument("--default-grant", action="store_true", help=f"grant {', '.join(DEFAULT_GRANT)}")
    cmd.add_argument(
        "--a2a-queue",
        type=arg_queue,
        metavar="QUEUE",
        help="where its A2A messages without metadata.queue go (default: the first of --queues)",
    )
    cmd = command(endpoints, "grant", "endpoint_grant", "add or remove verbs on an existing endpoint")
    cmd.add_argument("slug", type=arg_slug, metavar="SLUG")
    cmd.add_argument("--add", type=arg_verbs, metavar="V1,V2", help="verbs to grant")
    cmd.add_argument("--remove", type=arg_verbs, metavar="V1,V2", help="verbs to take away")
    cmd = command(endpoints, "list", "endpoint_list", "list endpoints (never their tokens)")
    cmd.add_argument("--human", metavar="EMAIL", help="only this human's endpoints")
    cmd = command(endpoints, "delete", "endpoint_delete", "delete an endpoint with its todos, hooks, routes")
    cmd.add_argument("slug", type=arg_slug, metavar="SLUG")

    sources = group("source", "register and list inbound webhook sources")
    cmd = command(sources, "create", "source_create", "register a source and print its secret once")
    cmd.add_argument("--human", required=True, metavar="EMAIL", help="the owning human")
    cmd.add_argument("--slug", required=True, type=arg_slug)
    cmd.add_argument("--kind", required=True, choices=KINDS)
    cmd.add_argument("--trust", required=True, choices=TRUSTS)
    command(sources, "list", "source_list", "list sources (never their secrets)")
    cmd = command(sources, "delete", "source_delete", "delete a source and its routes (its todos stay)")
    cmd.add_argument("slug", type=arg_slug, metavar="SLUG")

    cmd = command(endpoints, "revoke-token", "endpoint_revoke_token", "revoke an endpoint's bearer token")
    cmd.add_argument("slug", type=arg_slug, metavar="SLUG")
    cmd = command(sources, "rotate-secret", "source_rotate_secret", "mint a new source secret, print it once")
    cmd.add_argument("slug", type=arg_slug, metavar="SLUG")

    hooks = group("hook", "an endpoint's notify hooks, as its owner sees them on the endpoint card")
    cmd = command(hooks, "list", "hook_list", "list an endpoint's hooks (URLs redacted, never a secret)")
    cmd.add_argument("slug", type=arg_slug, metavar="ENDPOINT")
    for name, handler, what in (
        ("disable", "hook_set_enabled", "disable a hook as its owner (only a human re-enables it)"),
        ("enable", "hook_set_enabled", "re-enable a hook (lifts any disable)"),
        ("delete", "hook_delete", "delete a hook"),
    ):
        cmd = command(hooks, name, handler, what)
        cmd.add_argument("slug", type=arg_slug, metavar="ENDPOINT")
        cmd.add_argument("hook_id", metavar="HOOK_ID")
    cmd = command(hooks, "rate", "hook_rate", "set a hook's own per-minute limit (1-120, or default)")
    cmd.add_argument("slug", type=arg_slug, metavar="ENDPOINT")
    cmd.add_argument("hook_id", metavar="HOOK_ID")
    cmd.add_argument("rate", metavar="RATE", help="1 to 120, or default (the server's limit)")

    work = group("todo", "list, show, requeue and cancel todos (the web console's operations)")
    cmd = command(work, "list", "todo_list", "todos, newest first, filtered")
    cmd.add_argument("--human", metavar="EMAIL", help="only this human's endpoints' todos")
    cmd.add_argument("--state", choices=STATES)
    cmd.add_argument("--queue", type=arg_queue, metavar="Q")
    cmd.add_argument("--source", type=arg_slug, metavar="SLUG")
    cmd.add_argument("--endpoint", type=arg_slug, metavar="SLUG")
    cmd.add_argument("--age", choices=tuple(AGES), help="older than")
    cmd.add_argument(
        "--limit", type=arg_limit, default=50, metavar="N", help="at most N (default 50, max 500)"
    )
    cmd.add_argument(
        "--before", type=arg_todo_id, metavar="TODO_ID", help="page on: todos older than this one"
    )
    for name, handler, what in (
        ("show", "todo_show", "a todo with its payload and timeline"),
        ("requeue", "todo_move", "put a failed or dead todo back to pending with a fresh attempt budget"),
        ("cancel", "todo_move", "cancel a pending, claimed or failed todo"),
    ):
        cmd = command(work, name, handler, what)
        cmd.add_argument("todo_id", type=arg_todo_id, metavar="TODO_ID")

    routes = group("route", "map sources to queues and endpoints")
    cmd = command(routes, "create", "route_create", "route a source's deliveries to a queue and endpoint")
    cmd.add_argument("--source", required=True, type=arg_slug, metavar="SLUG")
    cmd.add_argument("--queue", required=True, type=arg_queue, metavar="Q")
    cmd.add_argument("--endpoint", required=True, type=arg_slug, metavar="SLUG")
    cmd.add_argument(
        "--kind",
        type=arg_event_kind,
        help="only deliveries of this event kind, e.g. push (default: every kind)",
    )
    command(routes, "list", "route_list", "list routes")

    db = group("db", "the database schema: status and upgrade")
    command(db, "status", "db_status", "the schema revision against this build's head").set_defaults(
        schema="raw"
    )
    command(db, "upgrade", "db_upgrade", "upgrade the schema to this build's head").set_defaults(schema="raw")
    cmd = groups.add_parser(
        "backup", parents=[common], help="copy the SQLite database (online) and its key file into DIR"
    )
    cmd.add_argument("dest", type=Path, metavar="DIR", help="an empty or new folder")
    cmd.set_defaults(handler="backup")
    return parser
