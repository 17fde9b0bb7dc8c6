"""Landed migrations are append-only: a database migrated by a released build must meet exactly the
files that built it. 0003 and 0004 were once edited in place (0010_repair mends what that did, issue 17);
this list makes the next such edit fail the suite.

The list only grows. A new migration is added here in the commit that creates it; a landed one is never
edited, renamed or removed: write a new revision instead.
"""

from __future__ import annotations

import hashlib

from alembic.script import ScriptDirectory

from switchboard.store.db import HEAD, MIGRATIONS, alembic_config

VERSIONS = MIGRATIONS / "versions"

LANDED = {
    "0001_core_tables.py": "390de96012596f821a5041e9522726c876cf0683ec3e23f22137548c9c6c5cb1",
    "0002_notify_hooks.py": "8fa59ee788527ff52ab709a12764c8706a38f2a71f96341b7198a3ec058e9716",
    "0003_a2a.py": "928be96695d480d3a45a556028804edf367137563cf7f9909e857a116626dde8",
    "0004_web.py": "9e231dc11b2e077781de9e3f69510c13dbd4ef827b4bcb01248d53a2a75074a3",
    "0005_console.py": "7d81f1339b9477c7adf32a635f8c243b15fe23b022b5643241c28ddfa75a05fc",
    "0006_a2a_dedup.py": "fcb59ef9b8cc9fa39ad77d6b7feabb940434de15b6aa1d69a93e0cf41394847c",
    "0007_delivery_log.py": "0de6fee5817285f7786ae554c1067242749046010b665fd787166253f120be24",
    "0008_claim_index.py": "124a04ef70c44b0b76bf7c306d758416ef585030a1928c977fb282ee93877cf0",
    "0009_a2a_input.py": "1f48c6fc956652212e254b470e5da694f83dfa0f41f056beea656deaeb25f570",
    "0010_repair.py": "6a1d92c95a99ba467b99ec3ca617e602a9482a9e22c8bc708cfef6622099356f",
    "0011_rate_windows.py": "7b017a23c49a366c91b0430bd81be8f824fd80e31b7e247b6ff7d911be250f28",
    "0012_rate_buckets.py": "110e7516f0ee004f8cf3ca668a50b748cb058d03e064bd2b23718c4c91613cae",
    "0013_endpoint_epoch.py": "4d275decc3b4f4fec6b635c5789d8f8474ef351b3c6318cb2c8e992dc3eea436",
    "0014_todo_state_indexes.py": "bb3fedfc6f3591489174892e1509779de6170e209932d2ec0438e9b12ed69661",
    "0015_todo_leases.py": "329cdca334f1c47550a4ce688a9c2b24a9dd15566a5b7973c7fd268633e0efb6",
    "0016_retention.py": "c2a14da778244089f6ab889ff53875817b4749b6ff47eca369f9e7343ba82efc",
    "0017_hook_rate_limit.py": "5c3b9eae7e8a72bd22940edcb0ee5370edbff2ad09d015a65efd1fe78a6b1c79",
    "0018_a2a_push_replay.py": "822c550eced918d59a17fa0f47c87fba7ed4a7d7abe69939482eaea3d77b8f16",
}


def _sha256(name: str) -> str:
    return hashlib.sha256((VERSIONS / name).read_bytes()).hexdigest()


def test_landed_migrations_are_unchanged() -> None:
    changed = [
        name for name, digest in LANDED.items() if not (VERSIONS / name).exists() or _sha256(name) != digest
    ]
    assert changed == [], (
        f"landed migrations changed or removed: {changed}. Never edit a landed migration: "
        "restore it and write a new revision"
    )


def test_every_migration_is_recorded() -> None:
    unrecorded = sorted(p.name for p in VERSIONS.glob("*.py") if p.name not in LANDED)
    assert unrecorded == [], f"record new migrations in LANDED (with their sha256): {unrecorded}"


def test_history_is_one_line() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert len(script.get_heads()) == 1
    revisions = list(script.walk_revisions())
    assert len(revisions) == len(LANDED)
    assert sum(1 for rev in revisions if rev.down_revision is None) == 1


def test_head_names_the_newest_migration() -> None:
    """``db.HEAD`` lets a database at head be told so without loading alembic: it must be the head."""
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == HEAD
