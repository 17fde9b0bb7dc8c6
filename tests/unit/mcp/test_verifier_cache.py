"""The verified-credential cache (``EndpointTokenVerifier``) on a real SQLite file: what lets it answer
without a read, and what makes the next request read again (docs/mcp.md, "Grants").

"Another process" is a second ``Database`` and ``AccountStore`` on the same file, with its own
``EndpointChanges``: exactly what the CLI or a second instance is to the server. On SQLite what the
verifier checks is the endpoint epoch (``store.changes.EndpointEpoch``, migration 0013): writes to
``endpoints`` move it, writes to other tables do not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from switchboard.core.clock import ManualClock
from switchboard.mcp.auth import VERIFIED_TTL, EndpointTokenVerifier
from switchboard.obs.metrics import Metrics
from switchboard.store.accounts import AccountStore
from switchboard.store.admin import AdminStore
from switchboard.store.db import Database
from switchboard.store.presence import PresenceStore
from switchboard.store.todos import NewTodo, TodoStore
from switchboard.store.transitions import TransitionHub


class Counted(AccountStore):
    """The store, counting reads by token."""

    reads = 0

    async def endpoint_by_token(self, token: str) -> Any:
        self.reads += 1
        return await super().endpoint_by_token(token)


class Now:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
async def two(tmp_path: Path, clock: ManualClock) -> AsyncIterator[tuple[Counted, AccountStore, Path]]:
    path = tmp_path / "switchboard.db"
    here, elsewhere = Database(f"sqlite+aiosqlite:///{path}"), Database(f"sqlite+aiosqlite:///{path}")
    await here.migrate()
    yield Counted(here, clock), AccountStore(elsewhere, clock), path
    await here.dispose()
    await elsewhere.dispose()


async def _vend(accounts: AccountStore) -> tuple[str, str]:
    human = await accounts.create_human("owner@example.com", "correct-horse-battery")
    endpoint, token = await accounts.vend_endpoint(human, "agent-a", ["inbox"], ["claim_next", "ack"])
    return endpoint.id, token


async def test_this_process_changes_apply_to_the_next_request(
    two: tuple[Counted, AccountStore, Path], clock: ManualClock
) -> None:
    """Without the SQLite check (as on PostgreSQL): no read while nothing changed here; a scope change,
    a presence change and a revoke made through this process each make the next request read."""
    accounts, _, _ = two
    endpoint_id, token = await _vend(accounts)
    verifier = EndpointTokenVerifier(accounts)
    first = await verifier.verify_token(token)
    assert first is not None and set(first.scopes) == {"claim_next", "ack"}
    for _ in range(3):
        assert await verifier.verify_token(token) is first
    assert accounts.reads == 1

    await accounts.set_scope(endpoint_id, verbs=["ack"])
    narrowed = await verifier.verify_token(token)
    assert narrowed is not None and narrowed.scopes == ["ack"] and accounts.reads == 2
    assert verifier.verified(narrowed) is not None and verifier.verified(narrowed).verbs == ("ack",)  # type: ignore[union-attr]

    await PresenceStore(accounts.db, clock, accounts.changes).set_clocked(endpoint_id, "out")
    out = await verifier.verify_token(token)
    assert out is not None and accounts.reads == 3
    assert verifier.verified(out).presence == "out"  # type: ignore[union-attr]
    assert verifier.verified(narrowed).presence == "in"  # type: ignore[union-attr]  # each request its own row

    await accounts.revoke_token(endpoint_id)
    assert await verifier.verify_token(token) is None


async def test_without_the_sqlite_check_another_process_change_waits_for_the_ttl(
    two: tuple[Counted, AccountStore, Path],
) -> None:
    """The bound documented for PostgreSQL: a revoke made elsewhere is seen once the entry is
    :data:`VERIFIED_TTL` old, and not a moment later."""
    accounts, elsewhere, _ = two
    endpoint_id, token = await _vend(accounts)
    now = Now()
    verifier = EndpointTokenVerifier(accounts, now=now)
    assert await verifier.verify_token(token) is not None
    await elsewhere.revoke_token(endpoint_id)
    now.t += VERIFIED_TTL - 0.01
    assert await verifier.verify_token(token) is not None  # still inside the bound
    now.t += 0.02
    assert await verifier.verify_token(token) is None


async def test_on_sqlite_another_process_change_applies_to_the_next_request(
    two: tuple[Counted, AccountStore, Path],
) -> None:
    accounts, elsewhere, path = two
    endpoint_id, token = await _vend(accounts)
    verifier = EndpointTokenVerifier(accounts, sqlite_path=path, now=Now())  # the clock never moves
    assert await verifier.verify_token(token) is not None
    assert await verifier.verify_token(token) is not None
    assert accounts.reads == 1
    await elsewhere.set_scope(endpoint_id, verbs=["claim_next"])
    changed = await verifier.verify_token(token)
    assert changed is not None and changed.scopes == ["claim_next"] and accounts.reads == 2
    new_token = await elsewhere.revend_token(endpoint_id)
    assert await verifier.verify_token(token) is None
    assert (await verifier.verify_token(new_token)) is not None


async def test_on_sqlite_writes_to_other_tables_keep_the_entry(
    two: tuple[Counted, AccountStore, Path], clock: ManualClock
) -> None:
    """Claim traffic commits to the file on every call: creates, claims and acks (and a new human),
    committed by another connection on the same file, leave the entry trusted. The endpoint's own row
    changed there (its presence) makes the next request read again."""
    accounts, elsewhere, path = two
    endpoint_id, token = await _vend(accounts)
    metrics = Metrics()
    verifier = EndpointTokenVerifier(accounts, sqlite_path=path, now=Now(), metrics=metrics)
    assert await verifier.verify_token(token) is not None
    work = TodoStore(elsewhere.db, TransitionHub(metrics), clock)
    for n in range(5):
        await work.create([NewTodo(endpoint_id=endpoint_id, queue="inbox", title=f"t{n}", payload={})])
        claimed = await work.claim_next(endpoint_id, ["inbox"], 60)
        assert claimed is not None
        assert await verifier.verify_token(token) is not None
        assert await work.ack(endpoint_id, claimed.id, claimed.lease_id, {"ok": True}) is not None
        assert await verifier.verify_token(token) is not None
    await elsewhere.create_human("other@example.com", "correct-horse-battery")
    assert await verifier.verify_token(token) is not None
    assert accounts.reads == 1
    assert _cache_counts(metrics) == {"hit": 11, "miss": 1}

    await PresenceStore(elsewhere.db, clock, elsewhere.changes).set_clocked(endpoint_id, "out")
    out = await verifier.verify_token(token)
    assert out is not None and accounts.reads == 2
    assert verifier.verified(out).presence == "out"  # type: ignore[union-attr]
    assert _cache_counts(metrics) == {"hit": 11, "miss": 2}


async def test_on_sqlite_a_human_deleted_elsewhere_is_refused_at_once(
    two: tuple[Counted, AccountStore, Path], clock: ManualClock
) -> None:
    """The endpoint goes by the cascade from its human's row: the trigger fires for it too."""
    accounts, elsewhere, path = two
    _, token = await _vend(accounts)
    verifier = EndpointTokenVerifier(accounts, sqlite_path=path, now=Now())
    access = await verifier.verify_token(token)
    assert access is not None and await verifier.verify_token(token) is access
    (human,) = await elsewhere.list_humans()
    await AdminStore(elsewhere.db, clock).delete_human(human.id)
    assert await verifier.verify_token(token) is None


async def test_on_sqlite_an_unreadable_epoch_trusts_nothing(two: tuple[Counted, AccountStore, Path]) -> None:
    """Without the epoch row there is nothing to vouch for a cached row: every request reads."""
    accounts, elsewhere, path = two
    _, token = await _vend(accounts)
    async with elsewhere.db.begin() as conn:
        await conn.execute(text("DELETE FROM endpoint_epoch"))
    verifier = EndpointTokenVerifier(accounts, sqlite_path=path, now=Now())
    for n in range(1, 4):
        assert await verifier.verify_token(token) is not None
        assert accounts.reads == n


def _cache_counts(metrics: Metrics) -> dict[str, float]:
    counts: dict[str, float] = {}
    for family in metrics.registry.collect():
        if family.name == "switchboard_mcp_credential_cache":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["result"]] = sample.value
    return counts
