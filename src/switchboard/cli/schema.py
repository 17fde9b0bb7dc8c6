"""``db status``, ``db upgrade`` and ``backup``."""

from __future__ import annotations

import argparse

from switchboard.cli.base import EXIT_FAILED, CliError, Output
from switchboard.process import ops
from switchboard.services import Services
from switchboard.store.db import SchemaMismatch


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
