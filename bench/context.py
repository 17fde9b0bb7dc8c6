"""What every scenario gets: the run folder, the CA, the progress line, the shared client process."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import BenchCA, Progress, memory_kib
from bench.procs import ClientProc, ReceiverProc, ServerProc
from bench.world import new_cred_key

#: The one setting every bench server needs: loopback receivers are refused without it (REQ-3).
ALLOW_LOOPBACK = "127.0.0.1/32"


@dataclass
class Bench:
    root: Path
    ca: BenchCA
    progress: Progress
    client: ClientProc
    quick: bool = False
    notes: list[str] = field(default_factory=list)

    def settings(self, name: str, **overrides: Any) -> dict[str, Any]:
        """SQLite in a fresh folder, a fresh cred key, the loopback allowlist, everything else default."""
        data = self.root / name / "data"
        data.mkdir(parents=True, exist_ok=True)
        values: dict[str, Any] = {
            "data_dir": str(data),
            "cred_key": new_cred_key(),
            "notify_hook_allow_cidrs": ALLOW_LOOPBACK,
        }
        values.update(overrides)
        return values

    def server(self, name: str, settings: dict[str, Any]) -> ServerProc:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        return ServerProc(folder, name, settings, self.ca.ca_pem)

    def ok_receiver(self) -> ReceiverProc:
        return ReceiverProc("ok", cert_pem=self.ca.cert_pem, key_pem=self.ca.key_pem)

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.progress.note(text)


@contextlib.asynccontextmanager
async def running(server: ServerProc, *, kill: bool = False) -> AsyncIterator[ServerProc]:
    """Start ``server``; stop it on exit. ``kill`` skips the graceful drain (used once the figures are
    taken, when dead hooks would make the drain wait out its timeouts)."""
    await server.start()
    try:
        yield server
    finally:
        if kill:
            server.kill()
        await server.stop()


async def wait_until(check: Callable[[], Awaitable[bool]], *, timeout: float, interval: float = 0.25) -> bool:
    """Poll ``check`` until it is true or ``timeout`` passes (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(interval)
    return False


class RssSampler:
    """Samples a process's RSS every ``interval`` seconds in a task; bounded by ``max_seconds``."""

    def __init__(self, pid: int | list[int], interval: float = 0.25, max_seconds: float = 900.0) -> None:
        self.pid, self.interval, self.max_seconds = pid, interval, max_seconds
        self.samples: list[tuple[float, int]] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        while time.monotonic() < deadline:
            self.samples.append((time.monotonic(), memory_kib(self.pid).get("VmRSS", 0)))
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def sqlite_rows(data_dir: str, sql: str) -> list[tuple[Any, ...]]:
    """Read the server's SQLite database directly (read-only)."""
    path = Path(data_dir) / "switchboard.db"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as conn:
        return list(conn.execute(sql).fetchall())
