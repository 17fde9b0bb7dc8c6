"""PostgreSQL: the claim and the ack stay cheap whatever the planner believes (issue 18).

A queue table's statistics usually say "nothing is pending": the history is ``done`` and the last
ANALYZE ran while the queues were drained. And a prepared statement's generic plan is made once and
kept until the next ANALYZE, however much the table grows. Both were seen in the benchmark: the claim's
UPDATE walking every pending row (through ``ix_todos_retry``, then through the pending index), and a
plan made on a 50-page table reading the whole table per claim. Here both conditions are made on
purpose: the history analyzed while nothing is pending, the statements planned generically on the small
table, then a backlog that the statistics do not know of. Each statement must then touch a few pages,
through the claim's index and the primary key.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from switchboard.core.clock import ManualClock
from switchboard.store.accounts import AccountStore
from switchboard.store.db import Database
from switchboard.store.todo_claim_sql import _ACK_ALONE_PG, _ACK_PG, _CLAIM_ALONE_PG, _CLAIM_PG

HISTORY = 400  # done rows, analyzed: a small table whose statistics say nothing is pending
BACKLOG = 3000  # pending rows the statistics never saw
PAGES = 25  # per todo moved (its row, its index entries, its timeline row); the table is ~70 pages

_INSERT = """
INSERT INTO todos (id, endpoint_id, queue, kind, source, title, payload, status, attempt, verified,
    via_token, self_test, quarantined, created_at, updated_at, lease_expires_at, lease_id)
SELECT 'td_' || $2 || '_' || g, $1, 'inbox', 'task', 'test', 't', '{}', $2, 0, true, false, false,
    false, g, g, CASE WHEN $2 = 'claimed' THEN 10000000 END, CASE WHEN $2 = 'claimed' THEN 'ls_' || g END
FROM generate_series($3::int, $4::int) AS g
"""

_TYPES = {
    "claim": "varchar, varchar[], int, bigint, bigint, varchar, varchar[], varchar",
    "ack": "varchar, varchar[], text[], varchar[], bigint, varchar, varchar[]",
}
# (claim, ack, the held-sources argument the alone statements take)
_STATEMENTS = {
    "in a transaction": (_CLAIM_PG, _ACK_PG, ""),
    "alone": (_CLAIM_ALONE_PG, _ACK_ALONE_PG, ", '{a2a}'"),
}


def _buffers(plan: str) -> int:
    """The statement's own buffer count: the first ``Buffers:`` line is the top node's total."""
    found = re.search(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?", plan)
    assert found is not None, plan
    return sum(int(n) for n in found.groups() if n)


async def _explain(driver: Any, name: str, args: str) -> str:
    rows = await driver.fetch(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE {name}({args})")
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize(("limit", "form"), [(1, "in a transaction"), (10, "in a transaction"), (1, "alone")])
async def test_claim_and_ack_touch_a_few_pages_with_stale_statistics_and_a_plan_from_a_small_table(
    database: Database, clock: ManualClock, limit: int, form: str
) -> None:
    if database.is_sqlite:
        pytest.skip("PostgreSQL's planner and plan cache")
    accounts = AccountStore(database, clock)
    hid = await accounts.create_human("owner@example.com", "correct horse battery")
    ep, _ = await accounts.vend_endpoint(hid, "ep-a", ["inbox"], ["claim_next", "ack"])
    claim, ack, held = _STATEMENTS[form]
    types = {k: v + (", varchar[]" if held else "") for k, v in _TYPES.items()}
    async with database.pg_transaction() as (_conn, driver):
        await driver.execute(_INSERT, ep.id, "done", 1, HISTORY)
        await driver.execute("ANALYZE todos")
        await driver.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await driver.execute(f"PREPARE claim({types['claim']}) AS {claim}")
        await driver.execute(f"PREPARE ack({types['ack']}) AS {ack}")
        # Plan both on the small table (the generic plan is cached by the first EXECUTE).
        await driver.execute(_INSERT, ep.id, "claimed", HISTORY + 1, HISTORY + 1)
        await driver.execute(
            f"EXECUTE claim('{ep.id}', '{{inbox}}', 1, 20000000, 1, 'i', '{{te_a}}', NULL{held})"
        )
        first = f"td_claimed_{HISTORY + 1}"
        await driver.execute(
            f"EXECUTE ack('{ep.id}', '{{{first}}}', '{{null}}', '{{te_b}}', 1, 'i', '{{ls_{HISTORY + 1}}}'{held})"
        )
        assert await driver.fetchval("SELECT status FROM todos WHERE id = $1", first) == "done"
        # The backlog arrives; the statistics and the cached plans do not hear of it.
        await driver.execute(_INSERT, ep.id, "pending", HISTORY + 2, HISTORY + 1 + BACKLOG)
        claimed = await _explain(
            driver,
            "claim",
            f"'{ep.id}', '{{inbox}}', {limit}, 20000000, 2, 'i', '{{te_c,te_d,te_e}}', NULL{held}",
        )
        oldest = f"td_pending_{HISTORY + 2}"  # the claim above took it: ack it under its lease
        lease = await driver.fetchval("SELECT lease_id FROM todos WHERE id = $1", oldest)
        acked = await _explain(
            driver, "ack", f"'{ep.id}', '{{{oldest}}}', '{{null}}', '{{te_f}}', 2, 'i', '{{{lease}}}'{held}"
        )
        assert await driver.fetchval("SELECT status FROM todos WHERE id = $1", oldest) == "done"
    pick, update = claimed.split("CTE moved")[0], claimed.split("CTE moved")[1].split("CTE events")[0]
    assert "ix_todos_claim_pending" in pick and "Sort" not in pick, claimed
    assert "pk_todos" in update and "Seq Scan" not in update and "ix_todos" not in update, claimed
    assert "Seq Scan on todos" not in acked, acked
    assert f"rows={limit} loops=1" in update, claimed  # it did claim, from the backlog
    assert _buffers(claimed) < PAGES * limit, claimed
    assert _buffers(acked) < PAGES, acked
