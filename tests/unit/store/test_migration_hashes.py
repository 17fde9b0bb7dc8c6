"""Landed migrations are append-only: a database migrated by a released build must meet exactly the
files that built it. 0003 and 0004 were once edited in place (0007_repair mends what that did, issue 17);
this list makes the next such edit fail the suite.

The list only grows. A new migration is added here in the commit that creates it; a landed one is never
edited, renamed or removed: write a new revision instead.
"""

from __future__ import annotations

import hashlib

from alembic.script import ScriptDirectory

from switchboard.store.db import MIGRATIONS, alembic_config

VERSIONS = MIGRATIONS / "versions"

LANDED = {
    "0001_core_tables.py": "390de96012596f821a5041e9522726c876cf0683ec3e23f22137548c9c6c5cb1",
    "0002_notify_hooks.py": "8fa59ee788527ff52ab709a12764c8706a38f2a71f96341b7198a3ec058e9716",
    "0003_a2a.py": "928be96695d480d3a45a556028804edf367137563cf7f9909e857a116626dde8",
    "0004_web.py": "9e231dc11b2e077781de9e3f69510c13dbd4ef827b4bcb01248d53a2a75074a3",
    "0005_console.py": "7d81f1339b9477c7adf32a635f8c243b15fe23b022b5643241c28ddfa75a05fc",
    "0006_a2a_dedup.py": "2ae0f0ceebb917b6a583b534680bf169818eeda0cd7575dedbcefaf1d1b6282a",
    "0007_repair.py": "f3b3c4d4d1446e1519f6194f0fb6f2edb9a43873b66c6a90a8f038ceb9908d88",
    "0008_a2a_input.py": "4546588986c70d10ca5f3be3ed068aab0477933c5076e4f2a88cd2bb9ea9c82e",
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
