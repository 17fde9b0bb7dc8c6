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
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from switchboard import ops, preflight
from switchboard.audit import audit
from switchboard.ids import looks_like
from switchboard.ingest.derive import valid_kind
from switchboard.ingest.verify import new_source_secret
from switchboard.obs import configure_logging, get_logger
from switchboard.obs.logs import scrub
from switchboard.services import Services, build_services
from switchboard.settings import Settings
from switchboard.store.accounts import EMAIL, QUEUE, SLUG, Endpoint
from switchboard.store.console import AGES, STATES
from switchboard.store.db import SchemaMismatch
from switchboard.store.errors import Conflict, NotFound, StoreError, StoreUnavailable
from switchboard.store.sources import KINDS, TRUSTS
from switchboard.verbs import ALL_VERBS, DEFAULT_GRANT, unknown_verbs

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SERVE = 3  # serve could not start
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


def _limit(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= 500:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count from 1 to 500")
    return n


def _todo_id(value: str) -> str:
    if not looks_like("td", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a todo id (td_...)")
    return value


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
    await services.accounts.create_human(args.email, args.password, operator=args.operator, actor="cli")
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


# -- hooks, todos, tokens and secrets: the web card's and console's operations, for scripts ------------


async def _require_endpoint(services: Services, slug: str) -> Endpoint:
    endpoint = await services.accounts.endpoint_by_slug(slug)
    if endpoint is None:
        raise CliError(f"no endpoint with slug {slug!r}", "not_found", EXIT_FAILED)
    return endpoint


def _hooks(services: Services) -> Any:
    from switchboard.notify.build import hook_store

    return hook_store(services)


async def hook_list(services: Services, args: argparse.Namespace) -> Output:
    """The endpoint card's hook list: URLs redacted, health shown, never a secret."""
    from switchboard.notify.service import hook_view

    endpoint = await _require_endpoint(services, args.slug)
    hooks = [hook_view(h) for h in await _hooks(services).list_for_endpoint(endpoint.id)]
    rows = [
        [
            h["hook_id"],
            "yes" if h["enabled"] else f"no ({h['disabled_reason'] or '-'})",
            str(h["last_status"] or "-"),
            str(h["consecutive_failures"]),
            h["url"],
        ]
        for h in hooks
    ]
    text = _table(["HOOK", "ENABLED", "LAST", "FAILURES", "URL"], rows, "(no hooks)")
    return Output({"endpoint": endpoint.slug, "hooks": hooks}, text)


async def hook_set_enabled(services: Services, args: argparse.Namespace) -> Output:
    """The owner's disable / re-enable from the endpoint card (SPEC-0024 REQ-10): the same store call,
    so a disable is recorded as the human's (``disabled_reason: operator``), which only a human lifts."""
    from switchboard.notify.errors import HookNotFound
    from switchboard.notify.service import hook_view

    endpoint = await _require_endpoint(services, args.slug)
    enable = args.action == "enable"
    store = _hooks(services)
    try:
        await store.get(endpoint.id, args.hook_id)  # another endpoint's hook is not found alike
        changed = await store.set_enabled_by_owner(endpoint.id, args.hook_id, enable)
        hook = await store.get(endpoint.id, args.hook_id)
    except HookNotFound:
        raise CliError(
            f"no hook {args.hook_id!r} on endpoint {endpoint.slug!r}", "not_found", EXIT_FAILED
        ) from None
    if changed:
        audit("hook.enable" if enable else "hook.disable", "cli", endpoint_id=endpoint.id, hook_id=hook.id)
    verb = ("enabled" if enable else "disabled") if changed else "unchanged"
    return Output({"hook": hook_view(hook), "changed": changed}, f"hook {hook.id} {verb}")


async def hook_delete(services: Services, args: argparse.Namespace) -> Output:
    from switchboard.notify.errors import HookNotFound

    endpoint = await _require_endpoint(services, args.slug)
    store = _hooks(services)
    try:
        await store.get(endpoint.id, args.hook_id)
        await store.delete(endpoint.id, args.hook_id)
    except HookNotFound:
        raise CliError(
            f"no hook {args.hook_id!r} on endpoint {endpoint.slug!r}", "not_found", EXIT_FAILED
        ) from None
    audit("hook.delete", "cli", endpoint_id=endpoint.id, hook_id=args.hook_id)
    return Output({"deleted": args.hook_id, "endpoint": endpoint.slug}, f"deleted hook {args.hook_id}")


def _todo_json(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "endpoint": row.endpoint_slug,
        "queue": row.queue,
        "status": row.status,
        "title": row.title,
        "kind": row.kind,
        "source": row.source,
        "attempt": row.attempt,
        "last_error": row.last_error,
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at),
    }


async def todo_list(services: Services, args: argparse.Namespace) -> Output:
    """The console's filtered list (newest first), over every tenant or one human's."""
    from switchboard.store.console import TodoFilter

    human_id = (await _require_human(services, args.human)).id if args.human else None
    f = TodoFilter(args.state or "", args.queue or "", args.source or "", args.endpoint or "", args.age or "")
    rows = await services.console.list_todos(human_id, f, limit=args.limit, before=args.before)
    found = [_todo_json(r) for r in rows]
    table = [
        [t["id"], t["status"], t["endpoint"], t["queue"], t["created_at"], t["title"][:60]] for t in found
    ]
    text = _table(["ID", "STATUS", "ENDPOINT", "QUEUE", "CREATED", "TITLE"], table, "(no todos)")
    return Output({"todos": found}, text)


async def _require_todo(services: Services, todo_id: str) -> Any:
    row = await services.console.todo(None, todo_id)
    if row is None:
        raise CliError(f"no todo {todo_id!r}", "not_found", EXIT_FAILED)
    return row


async def todo_show(services: Services, args: argparse.Namespace) -> Output:
    row = await _require_todo(services, args.todo_id)
    events = [
        {
            "at": _iso(e.at),
            "transition": e.transition,
            "reason": e.reason,
            "attempt": e.attempt,
            "actor": e.actor,
        }
        for e in await services.console.timeline(row.id)
    ]
    todo = {**_todo_json(row), "payload": json.loads(row.payload), "result": row.result}
    lines = [f"{k}: {v}" for k, v in _todo_json(row).items()]
    lines += [
        f"  {e['at']}  {e['transition']:<10} {e['reason'] or ''} {e['actor'] or ''}".rstrip() for e in events
    ]
    return Output({"todo": todo, "timeline": events}, "\n".join(lines))


async def todo_move(services: Services, args: argparse.Namespace) -> Output:
    """The console's requeue (a failed or dead todo back to pending) and cancel, through the todo
    store's transition path: subscribers hear of it and the timeline names the actor ``cli``."""
    from switchboard.a2a.configs import ConfigStore
    from switchboard.a2a.fanout import Fanout

    row = await _require_todo(services, args.todo_id)
    # The in-transaction fan-out every server instance registers: an A2A task's todo gets its sequence
    # number and push-outbox rows in this transaction, which the servers' push workers then deliver.
    services.hub.add_in_transaction(Fanout(ConfigStore(services.db, services.envelope, services.clock)))
    todos = services.todos
    move = todos.requeue if args.action == "requeue" else todos.cancel
    moved = await move(row.endpoint_id, row.id, actor="cli")
    if moved is None:
        only = (
            "a failed or dead todo can be requeued"
            if args.action == "requeue"
            else "a pending, claimed or failed todo can be canceled"
        )
        raise CliError(
            f"todo {row.id} is {row.status}: only {only}; nothing changed",
            "conflict",
            EXIT_FAILED,
        )
    audit(f"todo.{args.action}", "cli", todo_id=row.id, endpoint_id=row.endpoint_id, was=row.status)
    now = _todo_json(await _require_todo(services, row.id))
    return Output({"todo": now, "was": row.status}, f"todo {row.id}: {row.status} -> {now['status']}")


async def endpoint_revoke_token(services: Services, args: argparse.Namespace) -> Output:
    """The card's "revoke credential": the bearer token stops at once; OAuth connections are apart."""
    endpoint = await _require_endpoint(services, args.slug)
    await services.accounts.revoke_token(endpoint.id, actor="cli")
    return Output(
        {"endpoint": endpoint.slug, "token_revoked": True},
        f"revoked the token of {endpoint.slug}; the owner re-vends one in the web UI",
    )


async def source_rotate_secret(services: Services, args: argparse.Namespace) -> Output:
    """A new secret (printed once), minted by the same function as ``source create`` and the web's."""
    source = next((s for s in await services.sources.list_sources() if s.slug == args.slug), None)
    if source is None:
        raise CliError(f"no source with slug {args.slug!r}", "not_found", EXIT_FAILED)
    if warning := _shares_key_warning(services.settings):
        _warn(warning)
    secret = new_source_secret(source.kind, source.trust)
    await services.sources.rotate_secret(source.id, secret)
    audit("source.rotate_secret", "cli", source_id=source.id, slug=source.slug)
    path = f"/in/{source.slug}/{secret}" if source.trust == "token" else f"/in/{source.slug}"
    url = _inbound(services.settings, path)
    text = (
        f"rotated the secret of source {source.slug}: the old one no longer verifies\n"
        f"inbound path: {path}\n"
        + (f"inbound url:  {url}\n" if url else "")
        + f"secret: {secret}\n{REVEAL_NOTE}"
    )
    return Output({"source": source.slug, "inbound_path": path, "inbound_url": url, "secret": secret}, text)


async def human_list(services: Services, args: argparse.Namespace) -> Output:
    humans = [_human_json(row) for row in await services.accounts.list_humans()]
    rows = [[h["email"], h["id"], "yes" if h["operator"] else "no", h["created_at"]] for h in humans]
    return Output({"humans": humans}, _table(["EMAIL", "ID", "OPERATOR", "CREATED"], rows, "(no humans)"))


async def endpoint_vend(services: Services, args: argparse.Namespace) -> Output:
    human = await _require_human(services, args.human)
    verbs = list(DEFAULT_GRANT) if args.default_grant else args.verbs
    endpoint, token = await services.accounts.vend_endpoint(
        human.id, args.slug, args.queues, verbs, actor="cli"
    )
    from switchboard.a2a.settings import default_queue, set_default_queue

    if args.a2a_queue:
        await set_default_queue(services, endpoint.id, args.a2a_queue)
    a2a_queue = await default_queue(services, endpoint)
    text = (
        f"vended endpoint {endpoint.slug} ({endpoint.id}) for {human.email}\n"
        f"  verbs:  {', '.join(endpoint.verbs)}\n  queues: {', '.join(endpoint.queues)}\n"
        f"  A2A default queue: {a2a_queue}\n"
        f"token: {token}\n{REVEAL_NOTE}"
    )
    data = {"endpoint": _endpoint_json(endpoint, human.email), "token": token, "a2a_default_queue": a2a_queue}
    return Output(data, text)


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


async def endpoint_grant(services: Services, args: argparse.Namespace) -> Output:
    """Add or remove verbs on an existing endpoint, through the scope update the web UI's editor makes."""
    endpoint = await services.accounts.endpoint_by_slug(args.slug)
    if endpoint is None:
        raise CliError(f"no endpoint {args.slug!r}", "not_found", EXIT_FAILED)
    both = sorted(set(args.add or ()) & set(args.remove or ()))
    if both:
        raise CliError(f"both added and removed: {', '.join(both)}")
    verbs = sorted((set(endpoint.verbs) | set(args.add or ())) - set(args.remove or ()))
    if not verbs:
        raise CliError("that would leave the endpoint no verbs (revoke its token instead)")
    await services.accounts.set_scope(endpoint.id, verbs=verbs, actor="cli")
    updated = await services.accounts.endpoint(endpoint.id)
    assert updated is not None
    emails = await _emails(services)
    added = sorted(set(updated.verbs) - set(endpoint.verbs))
    removed = sorted(set(endpoint.verbs) - set(updated.verbs))
    text = (
        f"endpoint {updated.slug}: verbs {', '.join(updated.verbs)}"
        + (f"\n  added:   {', '.join(added)}" if added else "")
        + (f"\n  removed: {', '.join(removed)}" if removed else "")
        + ("" if added or removed else "\n  (unchanged)")
    )
    data = {
        "endpoint": _endpoint_json(updated, emails.get(updated.human_id, "")),
        "added": added,
        "removed": removed,
    }
    return Output(data, text)


async def source_create(services: Services, args: argparse.Namespace) -> Output:
    human = await _require_human(services, args.human)
    secret = new_source_secret(args.kind, args.trust)
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


async def db_status(services: Services, args: argparse.Namespace) -> Output:
    status = await services.db.schema_status()
    return Output({"schema": ops.status_json(status)}, ops.status_text(status))


async def db_upgrade(services: Services, args: argparse.Namespace) -> Output:
    before = await services.db.schema_status()
    try:
        await services.db.migrate()
    except SchemaMismatch as exc:
        raise CliError(str(exc), "schema", EXIT_FAILED) from None
    after = await services.db.schema_status()
    text = (
        f"schema already at head ({after.head})"
        if before.state == "head"
        else f"schema upgraded from {before.current or 'empty'} to {after.current}"
    )
    return Output({"before": ops.status_json(before), "schema": ops.status_json(after)}, text)


async def backup(services: Services, args: argparse.Namespace) -> Output:
    source = ops.sqlite_path(services.db.url)
    if source is None:
        raise CliError(
            "backup copies the SQLite database; for PostgreSQL use pg_dump (docs/self-hosting.md, "
            '"Backup and restore")',
            "unsupported",
            EXIT_FAILED,
        )
    key = None if services.settings.cred_key else services.settings.data_dir / "cred.key"
    try:
        done = ops.backup_sqlite(source, args.dest, key)
    except ops.OpsError as exc:
        raise CliError(exc.message, exc.code, EXIT_FAILED) from None
    text = f"backed up {source} to {done['database']}"
    if done["key_file"]:
        text += f"\nand the envelope key to {done['key_file']} (keep it as secret as the database)"
    else:
        text += "\nSWITCHBOARD_CRED_KEY is set: keep it with the backup, the sealed secrets need it"
    return Output({"backup": done}, text)


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

    endpoints = group("endpoint", "vend, list and re-grant endpoints")
    cmd = command(endpoints, "vend", endpoint_vend, "vend an endpoint and print its token once")
    cmd.add_argument("--human", required=True, metavar="EMAIL", help="the owning human")
    cmd.add_argument("--slug", required=True, type=_slug)
    cmd.add_argument("--queues", required=True, type=_queues, metavar="Q1,Q2", help="queues it may drain")
    grant = cmd.add_mutually_exclusive_group(required=True)
    grant.add_argument("--verbs", type=_verbs, metavar="V1,V2", help="verbs it may call")
    grant.add_argument("--default-grant", action="store_true", help=f"grant {', '.join(DEFAULT_GRANT)}")
    cmd.add_argument(
        "--a2a-queue",
        type=_queue,
        metavar="QUEUE",
        help="where its A2A messages without metadata.queue go (default: the first of --queues)",
    )
    cmd = command(endpoints, "grant", endpoint_grant, "add or remove verbs on an existing endpoint")
    cmd.add_argument("slug", type=_slug, metavar="SLUG")
    cmd.add_argument("--add", type=_verbs, metavar="V1,V2", help="verbs to grant")
    cmd.add_argument("--remove", type=_verbs, metavar="V1,V2", help="verbs to take away")
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

    cmd = command(endpoints, "revoke-token", endpoint_revoke_token, "revoke an endpoint's bearer token")
    cmd.add_argument("slug", type=_slug, metavar="SLUG")
    cmd = command(sources, "rotate-secret", source_rotate_secret, "mint a new source secret, print it once")
    cmd.add_argument("slug", type=_slug, metavar="SLUG")

    hooks = group("hook", "an endpoint's notify hooks, as its owner sees them on the endpoint card")
    cmd = command(hooks, "list", hook_list, "list an endpoint's hooks (URLs redacted, never a secret)")
    cmd.add_argument("slug", type=_slug, metavar="ENDPOINT")
    for name, handler, what in (
        ("disable", hook_set_enabled, "disable a hook as its owner (only a human re-enables it)"),
        ("enable", hook_set_enabled, "re-enable a hook (lifts any disable)"),
        ("delete", hook_delete, "delete a hook"),
    ):
        cmd = command(hooks, name, handler, what)
        cmd.add_argument("slug", type=_slug, metavar="ENDPOINT")
        cmd.add_argument("hook_id", metavar="HOOK_ID")

    work = group("todo", "list, show, requeue and cancel todos (the web console's operations)")
    cmd = command(work, "list", todo_list, "todos, newest first, filtered")
    cmd.add_argument("--human", metavar="EMAIL", help="only this human's endpoints' todos")
    cmd.add_argument("--state", choices=STATES)
    cmd.add_argument("--queue", type=_queue, metavar="Q")
    cmd.add_argument("--source", type=_slug, metavar="SLUG")
    cmd.add_argument("--endpoint", type=_slug, metavar="SLUG")
    cmd.add_argument("--age", choices=tuple(AGES), help="older than")
    cmd.add_argument("--limit", type=_limit, default=50, metavar="N", help="at most N (default 50, max 500)")
    cmd.add_argument("--before", type=_todo_id, metavar="TODO_ID", help="page on: todos older than this one")
    for name, handler, what in (
        ("show", todo_show, "a todo with its payload and timeline"),
        ("requeue", todo_move, "put a failed or dead todo back to pending with a fresh attempt budget"),
        ("cancel", todo_move, "cancel a pending, claimed or failed todo"),
    ):
        cmd = command(work, name, handler, what)
        cmd.add_argument("todo_id", type=_todo_id, metavar="TODO_ID")

    routes = group("route", "map sources to queues and endpoints")
    cmd = command(routes, "create", route_create, "route a source's deliveries to a queue and endpoint")
    cmd.add_argument("--source", required=True, type=_slug, metavar="SLUG")
    cmd.add_argument("--queue", required=True, type=_queue, metavar="Q")
    cmd.add_argument("--endpoint", required=True, type=_slug, metavar="SLUG")
    cmd.add_argument(
        "--kind", type=_event_kind, help="only deliveries of this event kind, e.g. push (default: every kind)"
    )
    command(routes, "list", route_list, "list routes")

    db = group("db", "the database schema: status and upgrade")
    command(db, "status", db_status, "the schema revision against this build's head").set_defaults(
        schema="raw"
    )
    command(db, "upgrade", db_upgrade, "upgrade the schema to this build's head").set_defaults(schema="raw")
    cmd = groups.add_parser(
        "backup", parents=[common], help="copy the SQLite database (online) and its key file into DIR"
    )
    cmd.add_argument("dest", type=Path, metavar="DIR", help="an empty or new folder")
    cmd.set_defaults(handler=backup)
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
        return preflight.load_settings(overrides)
    except preflight.ConfigError as exc:
        raise CliError(exc.message) from None


def _services(settings: Settings) -> Services:
    try:
        return build_services(settings)
    except ArgumentError:  # the URL may hold a password: never echo it
        raise CliError("SWITCHBOARD_DATABASE_URL is not a database URL this server can use") from None


async def _admin(args: argparse.Namespace, settings: Settings) -> Output:
    services = _services(settings)
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
        if args.group == "wait-ready":
            return _wait_ready(args)
        if args.group == "call":
            return _call(args)
        if args.group in ("listen", "verify"):
            return _listen(args) if args.group == "listen" else _verify(args)
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
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from switchboard.app import create_app
    from switchboard.conn import guarded_protocol, install_accept_error_filter

    try:
        _preflight(settings)
    except (ops.OpsError, preflight.ConfigError) as exc:
        print(f"error: {scrub(exc.message)}", file=sys.stderr)
        return EXIT_SERVE
    configure_logging(settings.log_level, settings.log_format)
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
            for hook in services.on_draining:
                hook()
            await super().shutdown(sockets=sockets)

    install_accept_error_filter()
    forwarded = settings.forwarded_allow_ips.strip()
    config = uvicorn.Config(
        app,
        host=settings.listen_host,
        port=settings.listen_port,
        log_config=None,
        access_log=False,
        lifespan="on",
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


def _call(args: argparse.Namespace) -> int:
    from switchboard.call import CallError, call_tool, parse_arguments

    try:
        arguments = parse_arguments(args.arguments)
    except CallError as exc:
        raise CliError(str(exc)) from None
    token = sys.stdin.readline().strip()
    if not token:
        raise CliError("no token on stdin (pass the endpoint's token as the first line of stdin)")
    url = args.url or preflight.local_url(_settings(args)) + "/mcp"
    try:
        ok, data = asyncio.run(call_tool(url, token, args.tool, arguments))
    except Exception as exc:  # the SDK's transport errors: name them, never the token
        raise CliError(f"{url}: call failed ({type(exc).__name__})", "unavailable", EXIT_FAILED) from None
    if not ok:
        code = str(data.get("code") or "tool_error")
        if args.json:
            print(json.dumps({"error": code, "result": data}))
        print(f"error: {args.tool}: {scrub(json.dumps(data))}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(data) if args.json else json.dumps(data, indent=2))
    return 0


def _hook_secret(args: argparse.Namespace) -> str:
    secret = args.secret or os.environ.get("SWITCHBOARD_HOOK_SECRET", "")
    if not secret.startswith("whsec_"):
        raise CliError("give the hook's signing secret (whsec_...) in SWITCHBOARD_HOOK_SECRET or --secret")
    return str(secret)


def _verify(args: argparse.Namespace) -> int:
    from switchboard.receiver import NotVerified, parse_request, verify

    secret = _hook_secret(args)
    try:
        headers, body = parse_request(sys.stdin.buffer.read())
        payload = verify(secret, body, headers)
    except NotVerified as exc:
        raise CliError(f"signature does not verify ({exc})", "not_verified", EXIT_FAILED) from None
    print(json.dumps({"verified": True, "webhook-id": headers.get("webhook-id"), "payload": payload}))
    return 0


def _listen(args: argparse.Namespace) -> int:
    import uvicorn

    from switchboard.receiver import listen_app

    secret = _hook_secret(args)
    if bool(args.cert) != bool(args.key):
        raise CliError("--cert and --key go together")
    scheme = "https" if args.cert else "http"
    print(f"listening on {scheme}://{args.host}:{args.port}/ (Ctrl-C to stop)", file=sys.stderr, flush=True)
    uvicorn.run(
        listen_app(secret),
        host=args.host,
        port=args.port,
        ssl_certfile=args.cert,
        ssl_keyfile=args.key,
        log_level="warning",
        access_log=False,
    )
    return 0


def _wait_ready(args: argparse.Namespace) -> int:
    url = args.url or preflight.local_url(_settings(args))
    ready, answer = preflight.wait_ready(url, args.timeout)
    if not ready:
        raise CliError(f"{url} not ready after {args.timeout:g} s: {answer}", "not_ready", EXIT_FAILED)
    print(f"switchboard is ready at {url}")
    return 0


def _preflight(settings: Settings) -> None:
    """The checks that make a misconfigured start fail at once with one line (docs/self-hosting.md)."""
    preflight.check(settings)
    asyncio.run(ops.check_schema(settings, settings.resolved_database_url()))


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
