"""The dispatch path's two reads as SQLite text, for :meth:`Database.sqlite_fetch` (one trip to the driver's
thread each, issue 18): matching's hooks with their endpoints, and the hooks read before attempts. The
same columns, filters and order as ``MATCH`` and ``SENDABLE_MANY`` in :mod:`switchboard.store.notify_hooks`
(PostgreSQL runs those); the ids go in as one JSON array (``json_each``), so one text serves any number of them. Rows come back as
named tuples with the labels the SQLAlchemy rows have, so the code that reads them is the same."""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Sequence
from typing import NamedTuple

from switchboard.store.schema import endpoints, notify_hooks

_SECRET_COLUMNS = ("secret_enc", "prev_secret_enc")
# (expression, label) of each column matching reads: the hook's (not its secrets), then its endpoint's.
_MATCHED = (
    *((f"h.{c.name}", c.name) for c in notify_hooks.c if c.name not in _SECRET_COLUMNS),
    *((f"e.{c.name}", f"ep_{c.name}") for c in endpoints.c),
)
MATCH_COLUMNS = tuple(label for _, label in _MATCHED)
MATCH_SQL = (
    "SELECT "
    + ", ".join(f"{expr} AS {label}" for expr, label in _MATCHED)
    + f" FROM {notify_hooks.name} AS h JOIN {endpoints.name} AS e ON e.id = h.endpoint_id"
    " WHERE h.endpoint_id IN (SELECT value FROM json_each(:ids)) AND h.enabled = 1"
    " ORDER BY h.endpoint_id, h.id"
)


class SendableRow(NamedTuple):
    id: str
    url_enc: bytes
    secret_enc: bytes
    prev_secret_enc: bytes | None
    prev_secret_expires_at: int | None
    consecutive_failures: int
    rate_per_minute: int | None


SENDABLE_SQL = (
    f"SELECT {', '.join(SendableRow._fields)} FROM {notify_hooks.name}"
    " WHERE id IN (SELECT value FROM json_each(:ids)) AND enabled = 1"
)

# The columns are the schema's, so the tuple type is made from them (mypy wants them literal).
MatchRow = namedtuple("MatchRow", MATCH_COLUMNS)  # type: ignore[misc]


def ids_param(ids: Sequence[str]) -> dict[str, str]:
    return {"ids": json.dumps(list(ids))}
