"""Handles on the bench's child processes: the Switchboard server, receivers, client workers.

Every child is started by this process and stopped by it, by its own pid, with a bounded wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import sys
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import httpx

from bench import client as client_mod
from bench import receiver as receiver_mod
from bench.common import LOOPBACK, children_of, free_port, parse_metrics

REPO = Path(__file__).resolve().parent.parent
_SPAWN = multiprocessing.get_context("spawn")


class ServerProc:
    """``python -m bench.server`` with a settings dict; stdout says ``READY <port>``."""

    def __init__(self, workdir: Path, name: str, settings: dict[str, Any], ca_pem: str) -> None:
        self.workdir = workdir
        self.name = name
        self.port = free_port()
        self.settings = {**settings, "listen": f"{LOOPBACK}:{self.port}"}
        self.ca_pem = ca_pem
        self.profile_path: str | None = None
        self.patches: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self.log_path = workdir / f"{name}.log"

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, timeout: float = 60.0) -> None:
        config = {
            "settings": self.settings,
            "ca_pem": self.ca_pem,
            "profile_path": self.profile_path,
            "patches": self.patches,
        }
        cfg_path = self.workdir / f"{self.name}.json"
        cfg_path.write_text(json.dumps(config, default=str))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.server",
                str(cfg_path),
                cwd=str(REPO),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            await self.stop()
            raise RuntimeError(
                f"{self.name} did not start within {timeout}s (log: {self.log_path})"
            ) from None
        if not line.startswith(b"READY"):
            await self.stop()
            raise RuntimeError(f"{self.name} failed to start (log: {self.log_path}): {line!r}")
        if self.settings.get("notify_process") is not False:
            # the notify worker processes (the default) import and connect on their own: measure from the
            # moment every one of them is ready (with one awaited, a baseline could catch another mid-import)
            deadline = asyncio.get_running_loop().time() + timeout
            while not self._workers_ready():
                if asyncio.get_running_loop().time() > deadline:
                    self.kill()  # not left running (with its workers) once this run has given up on it
                    await self.stop()
                    raise RuntimeError(f"{self.name}: the notify worker did not start (log: {self.log_path})")
                await asyncio.sleep(0.1)

    def _workers_ready(self) -> bool:
        """Every notify worker the server started has logged that it is ready."""
        events = [e.get("event") for e in self.log_lines()]
        started = events.count("notify worker started")
        return started > 0 and events.count("notify worker ready") >= started

    async def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.get(f"{self.base_url}/metrics")
            r.raise_for_status()
            return parse_metrics(r.text)

    def pids(self) -> list[int]:
        """The server and its children (the notify worker process, with ``notify_process``)."""
        return [self.pid, *children_of(self.pid)]

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            for child in children_of(self.proc.pid):  # an orphaned worker would drain for seconds
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            self.proc.kill()

    async def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        return self.proc.returncode

    def log_lines(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with contextlib.suppress(OSError), self.log_path.open() as fh:
            for line in fh:
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        out.append(json.loads(line))
        return out


class _PipeChild:
    def __init__(self, target: Any, args: tuple[Any, ...]) -> None:
        parent, child = _SPAWN.Pipe()
        self.conn: Connection = parent
        self.process: BaseProcess = _SPAWN.Process(target=target, args=(child, *args), daemon=True)
        self.process.start()
        child.close()

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    async def _recv(self, timeout: float) -> Any:
        ready = await asyncio.to_thread(self.conn.poll, timeout)
        if not ready:
            raise TimeoutError("child process did not answer in time")
        return self.conn.recv()

    async def _close(self, timeout: float = 10.0) -> None:
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)


class ReceiverProc(_PipeChild):
    """``mode`` ``ok`` (HTTPS, 204 to everything) or ``hang`` (accepts TCP, never speaks)."""

    def __init__(self, mode: str, *, ports: int = 1, cert_pem: str = "", key_pem: str = "") -> None:
        super().__init__(
            receiver_mod.run, ({"mode": mode, "ports": ports, "cert_pem": cert_pem, "key_pem": key_pem},)
        )
        self.ports: list[int] = []

    async def ready(self) -> ReceiverProc:
        tag, ports = await self._recv(30)
        assert tag == "ready"
        self.ports = list(ports)
        return self

    async def collect(self) -> list[tuple[str, float, float, str, int]]:
        self.conn.send(("collect",))
        return list(await self._recv(60))

    async def stats(self) -> dict[str, int]:
        self.conn.send(("stats",))
        return dict(await self._recv(30))

    async def stop(self) -> None:
        with contextlib.suppress(OSError, TimeoutError, EOFError):
            self.conn.send(("stop",))
            await self._recv(10)
        await self._close()


class ClientProc(_PipeChild):
    def __init__(self) -> None:
        super().__init__(client_mod.run, ())

    async def run(self, kind: str, spec: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        self.conn.send((kind, spec))
        status, result = await self._recv(timeout)
        if status != "ok":
            raise RuntimeError(f"client job {kind} failed:\n{result}")
        return dict(result)

    async def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(("stop",))
        await self._close()
