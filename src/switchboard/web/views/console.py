"""Queues and todos: counts by state with the 24-hour backlog, the filtered todo list, a todo's
detail and timeline, requeue and cancel, and the dead-letter view.

Every todo lookup is scoped to the signed-in human's endpoints (:meth:`ConsoleStore.todo`): another
tenant's todo is not found, for the instance operator too. Requeue and cancel go through the todo
store's transition path, so subscribers (notify hooks, A2A pushes, the doorbell) hear of them as of
any other transition, and each leaves an audit line and a timeline entry naming the human.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.responses import Response

from switchboard.core.clock import ms
from switchboard.core.ids import looks_like
from switchboard.obs.audit import audit
from switchboard.store.console import AGES, STATES, TodoFilter
from switchboard.store.todos import REQUEUEABLE
from switchboard.web.errors import BadRequest, NotFound
from switchboard.web.page import Visit
from switchboard.web.sparkline import sparkline

PAGE = 50
AGE_LABELS = {"": "any age", "5m": "older than 5 minutes", "1h": "older than 1 hour",
              "24h": "older than 24 hours", "7d": "older than 7 days"}  # fmt: skip


async def queues(v: Visit) -> Response:
    stats = await v.web.services.console.queue_stats(v.me.id)
    now = ms(v.web.services.clock.now())
    return v.render(
        "queues.html",
        title="Queues",
        nav="queues",
        stats=stats,
        sparks={(s.endpoint_id, s.queue): sparkline(s.backlog, now_ms=now) for s in stats},
        states=STATES,
    )


def _filter(v: Visit) -> TodoFilter:
    q = v.request.query_params
    state = q.get("state", "")
    age = q.get("age", "")
    return TodoFilter(
        state=state if state in STATES else "",
        queue=q.get("queue", "")[:64],
        source=q.get("source", "")[:64],
        endpoint=q.get("endpoint", "")[:64],
        age=age if age in AGES else "",
    )


async def todo_list(v: Visit) -> Response:
    return await _list(v, _filter(v), dead=False)


async def dead_letters(v: Visit) -> Response:
    f = _filter(v)
    return await _list(v, TodoFilter("dead", f.queue, f.source, f.endpoint, f.age), dead=True)


async def _list(v: Visit, f: TodoFilter, *, dead: bool) -> Response:
    console = v.web.services.console
    before = v.request.query_params.get("before") or None
    if before is not None and not looks_like("td", before):
        before = None
    rows = await console.list_todos(v.me.id, f, limit=PAGE + 1, before=before)
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    params = {k: val for k, val in vars_of(f).items() if val and not (dead and k == "state")}
    next_url = ""
    if more:
        next_url = "?" + urlencode({**params, "before": rows[-1].id})
    return v.render(
        "todos.html",
        title="Dead letters" if dead else "Todos",
        nav="dead" if dead else "todos",
        todos=rows,
        f=f,
        dead=dead,
        choices=await console.filter_choices(v.me.id),
        states=STATES,
        ages=list(AGE_LABELS.items()),
        next_url=next_url,
        requeueable=REQUEUEABLE,
        back=v.request.url.path + (f"?{v.request.url.query}" if v.request.url.query else ""),
        max_attempts=v.web.services.todos.retry.max_attempts,
    )


def vars_of(f: TodoFilter) -> dict[str, str]:
    return {"state": f.state, "queue": f.queue, "source": f.source, "endpoint": f.endpoint, "age": f.age}


async def _own_todo(v: Visit) -> Any:
    todo_id = str(v.request.path_params.get("todo_id", ""))
    if not looks_like("td", todo_id):
        raise NotFound()
    row = await v.web.services.console.todo(v.me.id, todo_id)
    if row is None:
        raise NotFound()
    return row


async def todo_detail(v: Visit) -> Response:
    row = await _own_todo(v)
    events = await v.web.services.console.timeline(row.id)
    return v.render(
        "todo.html",
        title=f"Todo {row.id}",
        nav="todos",
        t=row,
        events=events,
        requeueable=REQUEUEABLE,
        live=("pending", "claimed", "failed"),
        max_attempts=v.web.services.todos.retry.max_attempts,
    )


async def requeue(v: Visit) -> Response:
    row = await _own_todo(v)
    moved = await v.web.services.todos.requeue(row.endpoint_id, row.id, actor=v.me.email)
    if moved is None:
        raise BadRequest(
            f"Only a failed or dead todo can be requeued; this one is {row.status}. Nothing changed."
        )
    audit("todo.requeue", v.me.email, todo_id=row.id, endpoint_id=row.endpoint_id, was=row.status)
    return v.redirect(_back(v, row.id), "todo_requeued")


async def cancel(v: Visit) -> Response:
    row = await _own_todo(v)
    moved = await v.web.services.todos.cancel(row.endpoint_id, row.id, actor=v.me.email)
    if moved is None:
        raise BadRequest(f"Only a pending, claimed or failed todo can be canceled; this one is {row.status}.")
    audit("todo.cancel", v.me.email, todo_id=row.id, endpoint_id=row.endpoint_id, was=row.status)
    return v.redirect(_back(v, row.id), "todo_canceled")


def _back(v: Visit, todo_id: str) -> str:
    back = v.form.get("back")
    return back if back.startswith(("/todos", "/dead-letters")) else f"/todos/{todo_id}"
