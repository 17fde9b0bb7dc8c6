"""The claim's partial index (migration ``claim_index``, issue 18) serves ``claim_next``'s pick."""

from __future__ import annotations

from sqlalchemy import text

from switchboard.store.db import Database
from switchboard.store.todos import claim_pick


async def test_the_claim_pick_walks_the_partial_index(database: Database) -> None:
    """``claim_next``'s pick reads ``ix_todos_claim_pending`` in claim order instead of sorting the
    endpoint's pending rows (migration ``claim_index``)."""
    pick = claim_pick("ep_1", ["q1", "q2"])
    async with database.read() as conn:
        sql = str(pick.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if database.is_sqlite:
            rows = (await conn.execute(text(f"EXPLAIN QUERY PLAN {sql}"))).all()
            plan = " ".join(str(r[-1]) for r in rows)
            assert "ix_todos_claim_pending" in plan and "TEMP B-TREE" not in plan, plan
            return
        # An empty table would be read sequentially; forbid that so the planner shows what it can use.
        await conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(r[0] for r in (await conn.execute(text(f"EXPLAIN {sql}"))).all())
    assert "ix_todos_claim_pending" in plan and "Sort" not in plan, plan
