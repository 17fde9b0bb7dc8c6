"""The admin CLI as a self-hoster scripts it: the installed console script in a subprocess, with
``--data`` and ``--json``, against SQLite, PostgreSQL and a running server."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchboard.core.verbs import DEFAULT_GRANT
from switchboard.services import build_services
from switchboard.settings import Settings
from tests.support.server import free_port

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
PASSWORD = "correct horse battery staple"
LISTS = ("human", "endpoint", "source", "route")


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment minus every SWITCHBOARD_* setting, so only the test configures the CLI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(extra)
    return env


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def everything(self) -> str:
        return self.stdout + self.stderr


@dataclass
class Cli:
    data: Path
    env: dict[str, str]

    def __call__(self, command: str, *, stdin: str = "", as_json: bool = True) -> Result:
        """Run ``switchboard <command> --data <dir> [--json]``, the command written as a shell would."""
        argv = [str(SWITCHBOARD), *shlex.split(command), "--data", str(self.data)]
        argv += ["--json"] if as_json else []
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=self.env, timeout=60)
        return Result(done.returncode, done.stdout, done.stderr)

    def ok(self, command: str, *, stdin: str = "") -> Any:
        result = self(command, stdin=stdin)
        assert result.code == 0, result.everything
        lines = result.stdout.splitlines()
        assert len(lines) == 1, "--json prints exactly one JSON object"
        return result.json

    def listing(self, what: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.ok(f"{what} list")[f"{what}s"]
        return items


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "data", clean_env())


def test_console_script_is_installed() -> None:
    assert SWITCHBOARD.exists(), "install the package (pip install -e .) so the console script exists"


def test_scripted_setup_reveals_each_credential_once(cli: Cli) -> None:
    human = cli.ok("human create Alice@Example.com --password-stdin", stdin=PASSWORD + "\n")["human"]
    assert human["email"] == "alice@example.com"
    assert human["id"].startswith("hu_")

    vended = cli.ok(
        "endpoint vend --human alice@example.com --slug ci-bot --queues builds,deploys --default-grant"
    )
    token = vended["token"]
    assert token.startswith("sbt_")
    assert vended["endpoint"]["verbs"] == sorted(DEFAULT_GRANT)
    assert vended["endpoint"]["queues"] == ["builds", "deploys"]
    narrow = cli.ok(
        "endpoint vend --human alice@example.com --slug reviewer --queues reviews --verbs claim_next,ack"
    )
    assert narrow["endpoint"]["verbs"] == ["ack", "claim_next"]

    signed = cli.ok("source create --human alice@example.com --slug forge --kind gitea --trust signature")
    assert signed["inbound_path"] == "/in/forge"
    assert len(signed["secret"]) == 64  # hex, pasteable into Gitea's form
    standard = cli.ok("source create --human alice@example.com --slug sw --kind standard --trust signature")
    assert standard["secret"].startswith("whsec_")
    tokened = cli.ok("source create --human alice@example.com --slug cron --kind generic --trust token")
    assert tokened["inbound_path"] == f"/in/cron/{tokened['secret']}"
    assert tokened["source"]["trust"] == "token"

    route = cli.ok("route create --source forge --queue builds --endpoint ci-bot")["route"]
    assert route["id"].startswith("rt_")
    cli.ok("route create --source cron --queue reviews --endpoint reviewer --kind tick")

    listed = {what: cli(f"{what} list") for what in LISTS}
    assert [h["email"] for h in listed["human"].json["humans"]] == ["alice@example.com"]
    endpoints = {e["slug"]: e for e in listed["endpoint"].json["endpoints"]}
    assert endpoints["ci-bot"] == vended["endpoint"]
    assert endpoints["reviewer"]["human"] == "alice@example.com"
    assert endpoints["reviewer"]["presence"] == "in"
    mine = cli.ok("endpoint list --human alice@example.com")["endpoints"]
    assert [e["slug"] for e in mine] == ["ci-bot", "reviewer"]
    sources = {s["slug"]: s for s in listed["source"].json["sources"]}
    assert sources["cron"] == tokened["source"]
    assert listed["route"].json["routes"][0] == route
    assert {(r["source"], r["kind"], r["queue"], r["endpoint"]) for r in listed["route"].json["routes"]} == {
        ("forge", None, "builds", "ci-bot"),
        ("cron", "tick", "reviews", "reviewer"),
    }

    # The reveal-once values appear in no list, JSON or text (not even a prefix).
    for what in LISTS:
        listed[f"{what} text"] = cli(f"{what} list", as_json=False)
    revealed = [token, narrow["token"], signed["secret"], standard["secret"], tokened["secret"]]
    for result in listed.values():
        assert result.code == 0, result.everything
        for secret in revealed:
            assert secret[:12] not in result.everything

    asyncio.run(_shown_is_accepted(cli.data, token, "forge", signed["secret"]))


async def _shown_is_accepted(data: Path, token: str, source_slug: str, secret: str) -> None:
    """What the reveal printed is what the server will check deliveries and MCP calls against."""
    # Only the data folder, as the CLI saw it: nothing from this process's environment.
    only: dict[str, Any] = {"data_dir": data, "database_url": None, "cred_key": None}
    services = build_services(Settings(**only))
    try:
        found = await services.accounts.endpoint_by_token(token)
        assert found is not None
        assert found.slug == "ci-bot"
        by_slug = await services.sources.by_slug(source_slug)
        assert by_slug is not None
        assert by_slug[1] == secret
    finally:
        await services.close()


def test_text_output_is_readable_and_marks_the_reveal(cli: Cli) -> None:
    created = cli("human create bob@example.com --password-stdin", stdin=PASSWORD, as_json=False)
    assert created.code == 0, created.everything
    assert "bob@example.com" in created.stdout
    vended = cli("endpoint vend --human bob@example.com --slug bot --queues q --default-grant", as_json=False)
    assert vended.code == 0, vended.everything
    token = next(line.split(": ", 1)[1] for line in vended.stdout.splitlines() if line.startswith("token: "))
    assert token.startswith("sbt_")
    assert "shown once" in vended.stdout
    listed = cli("endpoint list", as_json=False)
    assert listed.stdout.splitlines()[0].split() == ["SLUG", "HUMAN", "PRESENCE", "QUEUES", "VERBS"]
    assert listed.stdout.splitlines()[1].split()[:3] == ["bot", "bob@example.com", "in"]
    assert token[:12] not in listed.stdout
    assert cli("route list", as_json=False).stdout.strip() == "(no routes)"


# -- refusals ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    cli: Cli
    rows: dict[str, int]
    lists: dict[str, list[dict[str, Any]]]


def row_counts(cli: Cli) -> dict[str, int]:
    """Every table's row count, straight from the SQLite file: "nothing stored" means nowhere."""
    with sqlite3.connect(cli.data / "switchboard.db") as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    """One human, endpoint, source and route that the bad commands collide with or point at."""
    cli = Cli(tmp_path_factory.mktemp("cli") / "data", clean_env())
    cli.ok("human create alice@example.com --password-stdin", stdin=PASSWORD)
    cli.ok("endpoint vend --human alice@example.com --slug ep --queues q --default-grant")
    cli.ok("source create --human alice@example.com --slug src --kind github --trust signature")
    cli.ok("route create --source src --queue q --endpoint ep")
    return Seeded(cli, row_counts(cli), {what: cli.listing(what) for what in LISTS})


@dataclass(frozen=True)
class Bad:
    """A command that must be refused: its exit status, JSON error code, and words of its message."""

    command: str
    exit_code: int
    code: str
    words: tuple[str, ...]
    stdin: str = PASSWORD

    @property
    def listing(self) -> str:
        return self.command.split()[0] if self.command.split()[0] in LISTS else "human"


VEND = "endpoint vend --human alice@example.com"
SOURCE = "source create --human alice@example.com"
BAD: dict[str, Bad] = {
    "empty-password": Bad("human create b@example.com --password-stdin", 2, "invalid", ("empty",), "\n"),
    "no-stdin": Bad("human create b@example.com --password-stdin", 2, "invalid", ("empty",), ""),
    "short-password": Bad(
        "human create b@example.com --password-stdin", 2, "invalid", ("10 char",), "short\n"
    ),
    "no-password-flag": Bad("human create b@example.com", 2, "usage", ("--password-stdin",)),
    "bad-email": Bad("human create not-an-email --password-stdin", 2, "usage", ("email",)),
    "duplicate-human": Bad("human create Alice@example.com --password-stdin", 1, "conflict", ("exists",)),
    "vend-unknown-human": Bad(
        "endpoint vend --human nobody@example.com --slug e1 --queues q --default-grant",
        1,
        "not_found",
        ("nobody@example.com",),
    ),
    "vend-duplicate-slug": Bad(f"{VEND} --slug ep --queues q --default-grant", 1, "conflict", ("slug",)),
    "vend-bad-slug": Bad(f"{VEND} --slug Bad_Slug --queues q --default-grant", 2, "usage", ("slug",)),
    "vend-bad-queue": Bad(f"{VEND} --slug e2 --queues 'q,Bad Queue' --default-grant", 2, "usage", ("queue",)),
    "vend-no-queue": Bad(f"{VEND} --slug e3 --queues , --default-grant", 2, "usage", ("queue",)),
    "vend-unknown-verb": Bad(
        f"{VEND} --slug e4 --queues q --verbs ack,launch_missiles",
        2,
        "usage",
        ("launch_missiles", "valid verbs", "claim_next", "create_notify_hook"),
    ),
    "vend-both-grants": Bad(
        f"{VEND} --slug e5 --queues q --verbs ack --default-grant", 2, "usage", ("not allowed",)
    ),
    "vend-no-grant": Bad(f"{VEND} --slug e6 --queues q", 2, "usage", ("--verbs", "--default-grant")),
    "list-unknown-human": Bad(
        "endpoint list --human nobody@example.com", 1, "not_found", ("nobody@example.com",)
    ),
    "source-unknown-human": Bad(
        "source create --human nobody@example.com --slug s1 --kind gitea --trust signature",
        1,
        "not_found",
        ("nobody@example.com",),
    ),
    "source-duplicate-slug": Bad(
        f"{SOURCE} --slug src --kind gitea --trust signature", 1, "conflict", ("slug",)
    ),
    "source-bad-slug": Bad(f"{SOURCE} --slug=-bad- --kind gitea --trust signature", 2, "usage", ("slug",)),
    "source-bad-kind": Bad(
        f"{SOURCE} --slug s2 --kind gitlab --trust signature", 2, "usage", ("--kind", "gitlab", "gitea")
    ),
    "source-bad-trust": Bad(
        f"{SOURCE} --slug s3 --kind gitea --trust maybe", 2, "usage", ("--trust", "maybe")
    ),
    "source-generic-signed": Bad(
        f"{SOURCE} --slug s4 --kind generic --trust signature", 2, "invalid", ("generic",)
    ),
    "route-no-source": Bad("route create --source nope --queue q --endpoint ep", 1, "not_found", ("nope",)),
    "route-no-endpoint": Bad(
        "route create --source src --queue q --endpoint nope", 1, "not_found", ("nope",)
    ),
    "route-bad-queue": Bad("route create --source src --queue Q! --endpoint ep", 2, "usage", ("queue",)),
    "route-bad-kind": Bad(
        "route create --source src --queue q --endpoint ep --kind 'a b'", 2, "usage", ("kind",)
    ),
    "route-duplicate": Bad("route create --source src --queue q --endpoint ep", 1, "conflict", ("exists",)),
    "unknown-command": Bad("widget list", 2, "usage", ("invalid choice",)),
    "todo-bad-id": Bad("todo show 42", 2, "usage", ("todo id",)),
    "todo-unknown": Bad("todo requeue td_00000000000000000000000000", 1, "not_found", ("no todo",)),
    "todo-bad-limit": Bad("todo list --limit 0", 2, "usage", ("1 to 500",)),
    "todo-bad-state": Bad("todo list --state lost", 2, "usage", ("--state", "lost")),
    "hook-unknown-endpoint": Bad("hook list nope", 1, "not_found", ("nope",)),
    "hook-unknown-hook": Bad("hook disable ep nh_00000000000000000000000000", 1, "not_found", ("no hook",)),
    "hook-rate-too-high": Bad(
        "hook rate ep nh_00000000000000000000000000 121", 1, "invalid_argument", ("rate_per_minute", "120")
    ),
    "hook-rate-not-a-number": Bad(
        "hook rate ep nh_00000000000000000000000000 fast", 1, "invalid_argument", ("rate_per_minute",)
    ),
    "hook-rate-unknown-hook": Bad(
        "hook rate ep nh_00000000000000000000000000 5", 1, "not_found", ("no hook",)
    ),
    "revoke-unknown-endpoint": Bad("endpoint revoke-token nope", 1, "not_found", ("nope",)),
    "rotate-unknown-source": Bad("source rotate-secret nope", 1, "not_found", ("nope",)),
}


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_bad_input_is_refused_and_stores_nothing(seeded: Seeded, bad: Bad) -> None:
    result = seeded.cli(bad.command, stdin=bad.stdin)
    assert result.code == bad.exit_code, result.everything
    message = result.stderr.splitlines()[0]
    assert message.startswith("error: ")
    for word in bad.words:
        assert word in message
    assert result.json == {"error": bad.code, "message": message.removeprefix("error: ")}
    assert "Traceback" not in result.stderr
    assert row_counts(seeded.cli) == seeded.rows
    # Usage errors are refused while parsing, before the database is opened: the row counts above
    # cover them. Refusals that reached the database are checked through the list command too.
    if bad.code != "usage":
        assert seeded.cli.listing(bad.listing) == seeded.lists[bad.listing]


def test_errors_without_json_go_to_stderr_only(seeded: Seeded) -> None:
    result = seeded.cli("route create --source nope --queue q --endpoint ep", as_json=False)
    assert result.code == 1
    assert result.stdout == ""
    assert result.stderr == "error: no source 'nope'\n"


def test_route_outside_the_endpoint_scope_warns(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "data", clean_env())
    cli.ok("human create erin@example.com --password-stdin", stdin=PASSWORD)
    cli.ok("endpoint vend --human erin@example.com --slug ep --queues q --default-grant")
    cli.ok("source create --human erin@example.com --slug src --kind gitea --trust signature")
    result = cli("route create --source src --queue elsewhere --endpoint ep")
    assert result.code == 0, result.everything
    assert result.json["route"]["queue"] == "elsewhere"
    assert "warning:" in result.stderr
    assert "elsewhere" in result.stderr


def test_unreachable_or_unusable_database_is_a_clear_failure(tmp_path: Path) -> None:
    down = f"postgresql://u:hunter2@127.0.0.1:{free_port()}/x"
    result = Cli(tmp_path, clean_env(SWITCHBOARD_DATABASE_URL=down))("human list")
    assert result.code == 1
    assert result.json["error"] == "unavailable"
    assert "hunter2" not in result.everything
    result = Cli(tmp_path, clean_env(SWITCHBOARD_DATABASE_URL="nosuchdb://u:hunter2@h/x"))("human list")
    assert result.code == 2
    assert result.json["error"] == "invalid"
    assert "hunter2" not in result.everything


# -- PostgreSQL ----------------------------------------------------------------------------------


def test_postgresql_through_the_environment(pg_url: str, tmp_path: Path) -> None:
    assert pg_url.startswith("postgresql+asyncpg://")
    cli = Cli(tmp_path / "a", clean_env(SWITCHBOARD_DATABASE_URL=pg_url))
    cli.ok("human create carol@example.com --password-stdin", stdin=PASSWORD)
    token = cli.ok("endpoint vend --human carol@example.com --slug pg-bot --queues jobs --default-grant")[
        "token"
    ]
    made = cli("source create --human carol@example.com --slug hub --kind github --trust signature")
    assert made.code == 0, made.everything
    # No shared key configured: the secret is sealed with this machine's key file, and the operator is told.
    assert "SWITCHBOARD_CRED_KEY" in made.stderr
    cli.ok("route create --source hub --queue jobs --endpoint pg-bot")
    assert not (tmp_path / "a" / "switchboard.db").exists(), "PostgreSQL, not SQLite in the data folder"

    # The plain form operators paste, from another machine (another data folder) with a shared key.
    plain = "postgresql://" + pg_url.removeprefix("postgresql+asyncpg://")
    other = Cli(tmp_path / "b", clean_env(SWITCHBOARD_DATABASE_URL=plain, SWITCHBOARD_CRED_KEY="11" * 32))
    assert [e["slug"] for e in other.listing("endpoint")] == ["pg-bot"]
    routes = [(r["source"], r["queue"], r["endpoint"]) for r in other.listing("route")]
    assert routes == [("hub", "jobs", "pg-bot")]
    made = other("source create --human carol@example.com --slug hub2 --kind standard --trust signature")
    assert made.code == 0, made.everything
    assert "SWITCHBOARD_CRED_KEY" not in made.stderr
    listed = other("source list")
    assert [s["slug"] for s in listed.json["sources"]] == ["hub", "hub2"]
    assert token[:12] not in listed.everything
    assert made.json["secret"][:12] not in listed.everything


# -- serve ---------------------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, Cli]]:
    port = free_port()
    env = clean_env()
    proc = subprocess.Popen(
        [str(SWITCHBOARD), "serve", "--listen", f"127.0.0.1:{port}", "--data", str(tmp_path / "data")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                _, err = proc.communicate()
                pytest.fail(f"serve exited with {proc.returncode} before it was healthy:\n{err}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("serve was not healthy within 20 s")
            time.sleep(0.1)
        yield proc, base, Cli(tmp_path / "data", env)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_serve_runs_beside_the_cli_and_stops_cleanly_on_sigterm(
    server: tuple[subprocess.Popen[str], str, Cli],
) -> None:
    proc, base, cli = server
    # The CLI writes to the SQLite file the running server uses, and the server acts on it at once.
    cli.ok("human create dave@example.com --password-stdin", stdin=PASSWORD)
    token = cli.ok("endpoint vend --human dave@example.com --slug live --queues q --default-grant")["token"]
    source = cli.ok("source create --human dave@example.com --slug hook --kind generic --trust token")
    cli.ok("route create --source hook --queue q --endpoint live")
    delivered = httpx.post(base + source["inbound_path"], json={"title": "hello"}, timeout=10)
    assert delivered.status_code == 202, delivered.text
    assert len(delivered.json()["todos"]) == 1

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"accept": "application/json, text/event-stream"}
    good = httpx.post(f"{base}/mcp", json=initialize, headers={**accept, "authorization": f"Bearer {token}"})
    bad = httpx.post(f"{base}/mcp", json=initialize, headers={**accept, "authorization": "Bearer sbt_wrong"})
    assert bad.status_code == 401
    assert good.status_code == 200, good.text

    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    entries = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is JSON
    listening = [e for e in entries if e["event"] == "switchboard listening"]
    assert len(listening) == 1
    assert listening[0]["url"] == base
    # Listening comes first (switchboard.edge.front), then ready once every part runs: the heap frozen then.
    (ready,) = [e for e in entries if e["event"] == "switchboard ready"]
    assert entries.index(listening[0]) < entries.index(ready)
    assert ready["frozen_objects"] > 10_000  # the startup heap, out of GC's way (heap.py)
    assert entries[-1]["event"] == "switchboard stopped"
    assert token not in err
    assert source["secret"] not in err


def test_serve_exits_3_with_one_line_when_the_port_is_taken(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [str(SWITCHBOARD), "serve", "--listen", f"127.0.0.1:{port}", "--data", str(tmp_path)]
        done = subprocess.run(argv, capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.returncode == 3, done.stderr
    # Refused before the server starts (switchboard.process.preflight): one line, naming the setting.
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line == f"error: SWITCHBOARD_LISTEN 127.0.0.1:{port}: address already in use " + (
        "(accepted: a free HOST:PORT, via SWITCHBOARD_LISTEN or --listen)"
    )


def test_operators_and_deletes_through_the_cli(cli: Cli) -> None:
    """`human create --operator`, the role granted and revoked (never the last operator's), and deletes
    that say what went with them: the same AdminStore calls the web console makes."""
    op = cli.ok("human create ops@example.com --password-stdin --operator", stdin=PASSWORD + "\n")["human"]
    assert op["operator"] is True
    plain = cli("human create dev@example.com --password-stdin", stdin=PASSWORD + "\n")
    assert plain.code == 0 and plain.json["human"]["operator"] is False

    last = cli("human operator revoke ops@example.com")
    assert last.code == 1 and last.json["error"] == "conflict", last.everything
    assert cli.ok("human operator grant dev@example.com")["changed"] is True
    assert cli.ok("human operator grant dev@example.com")["changed"] is False
    assert cli.ok("human operator revoke ops@example.com")["human"]["operator"] is False
    roles = {h["email"]: h["operator"] for h in cli.listing("human")}
    assert roles == {"ops@example.com": False, "dev@example.com": True}

    cli.ok("endpoint vend --human ops@example.com --slug worker --queues inbox --default-grant")
    cli.ok("source create --human ops@example.com --slug forge --kind gitea --trust signature")
    cli.ok("route create --source forge --queue inbox --endpoint worker")
    gone = cli.ok("endpoint delete worker")
    assert gone["deleted"] == "worker" and gone["with"]["routes"] == 1 and gone["with"]["hooks"] == 0
    assert cli.listing("endpoint") == [] and cli.listing("route") == []
    assert cli.ok("source delete forge")["with"]["routes"] == 0
    assert cli.listing("source") == []
    missing = cli("endpoint delete worker")
    assert missing.code == 1 and missing.json["error"] == "not_found"

    cli.ok("human password ops@example.com --password-stdin", stdin="a brand new password\n")
    assert cli.ok("human sign-out ops@example.com")["sessions_ended"] == 0
    deleted = cli.ok("human delete ops@example.com")
    assert deleted["deleted"]["email"] == "ops@example.com"
    assert [h["email"] for h in cli.listing("human")] == ["dev@example.com"]
    assert cli("human delete dev@example.com").json["error"] == "conflict"  # the last operator
