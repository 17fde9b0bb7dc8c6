"""The claim path's SQL text (store/todo_claims.py runs it), one statement per verb and dialect, written
once (no SQLAlchemy construction or compilation per call). Each returns :data:`COLUMNS`, the fields of
:class:`switchboard.store.todo_claims.Moved`, in that order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from switchboard.core.ids import new_id
from switchboard.store.leases import LEASE_SQL_PG, LEASE_SQL_SQLITE

COLUMNS = (
    "id",
    "endpoint_id",
    "queue",
    "kind",
    "source",
    "title",
    "payload",
    "status",
    "attempt",
    "lease_expires_at",
    "retry_at",
    "verified",
    "via_token",
    "self_test",
    "quarantined",
    "result",
    "last_error",
    "created_at",
    "lease_id",
)
_COLUMNS = COLUMNS


def _select_list(table: str, *, payload: bool = True) -> str:
    return ", ".join(f"{table}.{c}" if c != "payload" or payload else f"NULL AS {c}" for c in _COLUMNS)


_EVENT_COLUMNS = "id, todo_id, transition, reason, attempt, lease_expires_at, actor, instance_id, at"

# -- PostgreSQL ------------------------------------------------------------------------------------


# asyncpg's positional parameters: $1 endpoint_id, $2 queues, $3 limit, $4 lease, $5 now, $6 instance_id,
# $7 event_ids, $8 the request key (or NULL); alone, $9 the held sources. The UPDATE joins ``picked`` on the primary key and tests nothing else: ``picked`` locked
# the rows and re-checked ``status = 'pending'`` on their newest version, so nothing can move them
# before it, and a status test there let the planner drive the join from a scan of every pending row
# (a queue table's statistics usually say nothing is pending; migration todo_state_indexes, and
# tests/unit/store/test_claim_plan_pg.py, which makes that happen). The ack reads by primary key too.
# An alone statement's answer: how many of its todos a handler declared (``held``), then the moved row's
# columns (NULL when nothing moved): always one row at least (TodoClaims._pg_alone reads it).
_ALONE_SELECT = (
    f"SELECT held.n, {', '.join(f'moved.{c}' for c in _COLUMNS)} FROM held LEFT JOIN moved ON true"
)


def _claim_pg(*, alone: bool) -> str:
    """The claim. ``alone`` (one todo, as the ack's): its own transaction; it moves nothing if the
    picked todo comes from a source in ``$9``, and its first column counts those."""
    held = "), held AS (SELECT count(*) AS n FROM picked WHERE picked.source = ANY(CAST($9 AS varchar[]))"
    return f"""
WITH picked AS (
    SELECT id, source FROM todos
    WHERE endpoint_id = $1 AND status = 'pending' AND queue = ANY(CAST($2 AS varchar[]))
    ORDER BY created_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
{held if alone else ""}), moved AS (
    UPDATE todos SET status = 'claimed', attempt = todos.attempt + 1, lease_expires_at = $4,
        retry_at = NULL, updated_at = $5, lease_id = {LEASE_SQL_PG}, claim_key = CAST($8 AS varchar)
    FROM picked
    WHERE todos.id = picked.id{" AND (SELECT n FROM held) = 0" if alone else ""}
    RETURNING {_select_list("todos")}
), numbered AS (
    SELECT moved.id, moved.attempt, row_number() OVER (ORDER BY moved.id) AS n FROM moved
), events AS (
    INSERT INTO todo_events ({_EVENT_COLUMNS})
    SELECT e.event_id, numbered.id, 'claimed', NULL, numbered.attempt, CAST($4 AS bigint), NULL,
        CAST($6 AS varchar), CAST($5 AS bigint)
    FROM numbered
    JOIN unnest(CAST($7 AS varchar[])) WITH ORDINALITY AS e(event_id, n) ON e.n = numbered.n
)
{_ALONE_SELECT if alone else "SELECT * FROM moved"}
"""


_CLAIM_PG = _claim_pg(alone=False)
_CLAIM_ALONE_PG = _claim_pg(alone=True)
# A claim made alone whose answer failed: back to exactly what it was, timeline row included, so the
# claimer buries it as it does after a rollback. $1 id, $2 the claim's attempt.
_UNCLAIM_PG = """
WITH undone AS (
    UPDATE todos SET status = 'pending', attempt = attempt - 1, lease_expires_at = NULL
    WHERE id = $1 AND status = 'claimed' AND attempt = $2
    RETURNING id
)
DELETE FROM todo_events USING undone
WHERE todo_events.todo_id = undone.id AND todo_events.transition = 'claimed' AND todo_events.attempt = $2
"""


# $1 endpoint_id, $2 ids, $3 results, $4 event_ids, $5 now, $6 instance_id, $7 leases; alone, $8 held
# sources. A todo moves only under the lease its caller names (store/leases.py).
def _ack_pg(*, alone: bool) -> str:
    """The ack. ``alone``: a statement that is its own transaction, for todos no in-transaction handler
    acts on: it moves nothing if one of them comes from a source in ``$8``
    (``TransitionHub.transaction_sources``) and its first column counts those (the ack is then made
    again in a transaction); its other columns are NULL when nothing moved."""
    held = """
), held AS (
    SELECT count(*) AS n FROM todos
    WHERE todos.endpoint_id = $1 AND todos.status = 'claimed' AND todos.id = ANY(CAST($2 AS varchar[]))
        AND todos.source = ANY(CAST($8 AS varchar[]))"""
    return f"""
WITH given AS (
    SELECT * FROM unnest(CAST($2 AS varchar[]), CAST($3 AS text[]), CAST($4 AS varchar[]),
        CAST($7 AS varchar[])) AS g(id, result, event_id, lease){held if alone else ""}
), moved AS (
    UPDATE todos SET status = 'done', lease_expires_at = NULL, result = given.result, updated_at = $5
    FROM given
    WHERE todos.id = ANY(CAST($2 AS varchar[])) AND todos.id = given.id AND todos.endpoint_id = $1
        AND todos.status = 'claimed' AND todos.lease_expires_at >= $5 AND todos.lease_id = given.lease{" AND (SELECT n FROM held) = 0" if alone else ""}
    RETURNING {_select_list("todos", payload=False)}, given.event_id
), events AS (
    INSERT INTO todo_events ({_EVENT_COLUMNS})
    SELECT moved.event_id, moved.id, 'done', NULL, moved.attempt, NULL, NULL,
        CAST($6 AS varchar), CAST($5 AS bigint)
    FROM moved
)
{_ALONE_SELECT if alone else f"SELECT {', '.join(_COLUMNS)} FROM moved"}
"""


_ACK_PG = _ack_pg(alone=False)
_ACK_ALONE_PG = _ack_pg(alone=True)

# A retried claim (the same request key): the todos the first one claimed, while their lease lives.
# $1 endpoint_id, $2 the key, $3 now. Over ix_todos_claim_key (claimed rows with a key only).
_REPLAY_PG = f"""
SELECT {", ".join(_COLUMNS)} FROM todos
WHERE endpoint_id = $1 AND claim_key = $2 AND claim_key IS NOT NULL AND status = 'claimed'
    AND lease_expires_at >= $3
ORDER BY created_at, id
"""
# Claims with one request key take turns across instances (the replay read, then the claim, in one
# transaction under this lock): a retry never claims beside the first attempt.
_KEY_LOCK_PG = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"

# -- SQLite (driver SQL, named parameters) ---------------------------------------------------------

_CLAIM_SQLITE = f"""
UPDATE todos SET status = 'claimed', attempt = attempt + 1, lease_expires_at = :lease, retry_at = NULL,
    updated_at = :now, lease_id = {LEASE_SQL_SQLITE}, claim_key = :claim_key
WHERE status = 'pending' AND id IN (
    SELECT id FROM todos
    WHERE endpoint_id = :endpoint_id AND status = 'pending' AND queue IN (SELECT value FROM json_each(:queues))
    ORDER BY created_at, id
    LIMIT :limit
)
RETURNING {", ".join(_COLUMNS)}
"""

_ACK_SQLITE = f"""
UPDATE todos SET status = 'done', lease_expires_at = NULL, result = given.result, updated_at = :now
FROM (
    SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS result,
        json_extract(value, '$[2]') AS lease
    FROM json_each(:given)
) AS given
WHERE todos.id = given.id AND todos.endpoint_id = :endpoint_id AND todos.status = 'claimed'
    AND todos.lease_expires_at >= :now AND todos.lease_id = given.lease
RETURNING {_select_list("todos", payload=False)}
"""

_REPLAY_SQLITE = f"""
SELECT {", ".join(_COLUMNS)} FROM todos
WHERE endpoint_id = :endpoint_id AND claim_key = :claim_key AND claim_key IS NOT NULL
    AND status = 'claimed' AND lease_expires_at >= :now
ORDER BY created_at, id
"""

# The timeline rows of a batch of moves (or of a delivery's creates), as one SQLite statement.
EVENTS_SQLITE = f"""
INSERT INTO todo_events ({_EVENT_COLUMNS})
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), :transition, NULL,
    json_extract(value, '$[2]'), :lease, NULL, :instance_id, :now
FROM json_each(:events)
"""


def events_params(
    moved: Iterable[tuple[str, int]], transition: str, lease: int | None, instance: str | None, now_ms: int
) -> dict[str, Any]:
    """:data:`EVENTS_SQLITE`'s parameters for ``moved`` (each todo's id and attempt): one statement for
    the whole batch."""
    events = [[new_id("te"), todo, attempt] for todo, attempt in moved]
    return {
        "events": json.dumps(events),
        "transition": transition,
        "lease": lease,
        "instance_id": instance,
        "now": now_ms,
    }
