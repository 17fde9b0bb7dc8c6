"""Real ``switchboard`` processes for the fault tests: the admin CLI to set up a tenant, and
``switchboard serve`` children that a test can SIGKILL and start again on the same data.

Everything binds 127.0.0.1. Every wait is bounded: the health poll, the CLI calls, the shutdown.
A child's stdout and stderr go to a log file in the test's tmp_path, whose tail is quoted when a
child fails to start, so a failure explains itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from switchboard.edge.front import STARTING
from tests.support.server import TEST_CRED_KEY, free_port

READY_TIMEOUT = 90.0  # a bound: ~6 s on a quiet 2-core box; the suite runs three test processes at once
CLI_TIMEOUT = 60.0


def switchboard_command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m switchboard.cli``."""
    script = Path(sys.executable).with_name("switchboard")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "switchboard.cli"]


def server_env(*, database_url: str | None = None, **settings: str | float | int) -> dict[str, str]:
    """The child environment: this one, minus any SWITCHBOARD_* the developer had set, plus one shared
    envelope key (several instances on one database must open each other's sealed secrets) and
    ``settings`` as ``SWITCHBOARD_<NAME>``. ``SSL_CERT_FILE`` and other non-prefixed names pass as given
    when written in upper case."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_CRED_KEY"] = TEST_CRED_KEY
    if database_url is not None:
        env["SWITCHBOARD_DATABASE_URL"] = database_url
    for name, value in settings.items():
        key = name if name.isupper() else f"SWITCHBOARD_{name.upper()}"
        env[key] = str(value)
    return env


class CliFailed(AssertionError):
    pass


async def cli(env: Mapping[str, str], data_dir: Path, *args: str, stdin: str | None = None) -> dict[str, Any]:
    """Run one admin command with ``--json`` and return its one JSON object (docs/cli.md contract)."""
    proc = await asyncio.create_subprocess_exec(
        *switchboard_command(),
        *args,
        "--json",
        "--data",
        str(data_dir),
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(CLI_TIMEOUT):
            out, err = await proc.communicate(None if stdin is None else stdin.encode())
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise CliFailed(f"switchboard {' '.join(args[:2])} did not finish in {CLI_TIMEOUT} s") from None
    if proc.returncode != 0:
        raise CliFailed(f"switchboard {' '.join(args[:2])} exited {proc.returncode}: {err.decode()[-2000:]}")
    data: dict[str, Any] = json.loads(out)
    return data


@dataclass
class Tenant:
    email: str
    endpoint_slug: str
    endpoint_id: str
    token: str
    source_slug: str
    source_kind: str
    secret: str
    inbound_path: str


async def provision(
    env: Mapping[str, str],
    data_dir: Path,
    *,
    slug: str,
    verbs: Sequence[str],
    kind: str = "generic",
    trust: str = "token",
    queue: str = "inbox",
) -> Tenant:
    """human create -> (endpoint vend || source create) -> route create, through the real CLI."""
    email = f"{slug}@example.com"
    await cli(env, data_dir, "human", "create", email, "--password-stdin", stdin="correct horse battery\n")
    vended, source = await asyncio.gather(
        cli(
            env,
            data_dir,
            "endpoint",
            "vend",
            "--human",
            email,
            "--slug",
            slug,
            "--queues",
            queue,
            "--verbs",
            ",".join(verbs),
        ),
        cli(
            env,
            data_dir,
            "source",
            "create",
            "--human",
            email,
            "--slug",
            f"{slug}-src",
            "--kind",
            kind,
            "--trust",
            trust,
        ),
    )
    await cli(
        env, data_dir, "route", "create", "--source", f"{slug}-src", "--queue", queue, "--endpoint", slug
    )
    return Tenant(
        email=email,
        endpoint_slug=slug,
        endpoint_id=vended["endpoint"]["id"],
        token=vended["token"],
        source_slug=source["source"]["slug"],
        source_kind=kind,
        secret=source["secret"],
        inbound_path=source["inbound_path"],
    )


@dataclass
class ServerProcess:
    """One ``switchboard serve`` child. ``start()`` may be called again after ``kill()``: same data
    folder and database, a fresh port unless ``port`` is pinned."""

    data_dir: Path
    env: Mapping[str, str]
    name: str = "sb"
    port: int = 0
    wrapper: Sequence[str] = ()  # a command that execs the server (``prlimit ...``): same pid
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    starts: int = field(default=0, init=False)
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / f"{self.name}.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, *, port: int | None = None) -> None:
        assert not self.alive, "already running"
        self.port = port or free_port()
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts} on port {self.port}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [
                    *self.wrapper,
                    *switchboard_command(),
                    "serve",
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    "--data",
                    str(self.data_dir),
                ],
                env=dict(self.env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

    async def ready(self, timeout: float = READY_TIMEOUT) -> float:
        """Poll (bounded) until the full app runs: /readyz answers 200, or 503 for a reason other than
        ``starting`` (serve binds before its app starts, switchboard.edge.front); how long it took."""
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=self.base_url, timeout=2) as http:
            while time.monotonic() - started < timeout:
                if not self.alive:
                    raise AssertionError(
                        f"{self.name} exited with {self.proc and self.proc.returncode}:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.TransportError):
                    answer = await http.get("/readyz")
                    if answer.status_code == 200 or (
                        answer.status_code == 503 and STARTING not in answer.json().get("reasons", [])
                    ):
                        return time.monotonic() - started
                await asyncio.sleep(0.05)  # a child process offers nothing to await
        raise AssertionError(f"{self.name} not ready after {timeout} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no drain, no flush."""
        assert self.proc is not None and self.alive
        os.kill(self.proc.pid, signal.SIGKILL)

    def reap(self, timeout: float = 10.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop (SIGTERM), then SIGKILL if it does not exit in time."""
        if self.proc is None:
            return
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        else:
            self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def servers(*procs: ServerProcess) -> Iterator[None]:
    """Stop every child on the way out, whatever the test did to it."""
    try:
        yield
    finally:
        for proc in procs:
            proc.stop()


class Phases:
    """Wall-clock time per named phase of a test, printed with its numbers (docs/reliability.md)."""

    def __init__(self) -> None:
        self.took: dict[str, float] = {}
        self._mark = time.monotonic()
        self._name: str | None = None

    def __call__(self, name: str) -> None:
        """Close the current phase and start ``name``."""
        now = time.monotonic()
        if self._name is not None:
            self.took[self._name] = self.took.get(self._name, 0.0) + now - self._mark
        self._name, self._mark = name, now

    def __str__(self) -> str:
        self("")
        return ", ".join(f"{k} {v:.1f}s" for k, v in self.took.items() if k)
