"""`switchboard --help` (and every usage error) loads none of the heavy libraries the commands use
(issue 30: a fast start): the parser is built from light modules and each command imports its own
implementation when it runs. Checked in a fresh interpreter, by what it has imported, not by a clock."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "sqlalchemy",
    "pydantic",
    "pydantic_settings",
    "alembic",
    "a2a",
    "mcp",
    "starlette",
    "uvicorn",
    "ulid",
    "switchboard.services",
    "switchboard.store",
)

PROBE = """
import json, sys
from switchboard.entry import main
for argv in {argvs!r}:
    try:
        main(argv)
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(*argvs: list[str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(argvs=list(argvs))], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_help_and_subcommand_help_load_nothing_heavy() -> None:
    loaded = _loaded(["--help"], ["human", "--help"], ["todo", "list", "--help"], ["serve", "--help"])
    assert "switchboard.cli.parser" in loaded  # the probe did build the parser
    assert _heavy(loaded) == []


def test_a_usage_error_loads_nothing_heavy() -> None:
    assert _heavy(_loaded(["human", "create", "not-an-email", "--password-stdin"])) == []
