"""``todo`` commands: the web console's list, show, requeue and cancel."""

from __future__ import annotations

import argparse
import json
from typing import Any

from switchboard.cli.base import EXIT_FAILED, CliError, Output, iso, render_table, require_human
from switchboard.obs.audit import audit
from switchboard.services import Services


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
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


async def todo_list(services: Services, args: argparse.Namespace) -> Output:
    """The console's filtered list (newest first), over every tenant or one human's."""
    from switchboard.store.console import TodoFilter

    human_id = (await require_human(services, args.human)).id if args.human else None
    f = TodoFilter(args.state or "", args.queue or "", args.source or "", args.endpoint or "", args.age or "")
    rows = await services.console.list_todos(human_id, f, limit=args.limit, before=args.before)
    found = [_todo_json(r) for r in rows]
    table = [
        [t["id"], t["status"], t["endpoint"], t["queue"], t["created_at"], t["title"][:60]] for t in found
    ]
    text = render_table(["ID", "STATUS", "ENDPOINT", "QUEUE", "CREATED", "TITLE"], table, "(no todos)")
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
            "at": iso(e.at),
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
