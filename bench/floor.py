"""The floor: what one MCP call costs. A no-op tool call (``whoami``) per second through one instance,
beside ``/healthz`` in the same run (issue 30: at least 2,000 whoami/s with 16 concurrent clients).

:func:`measure` drives any running server (scenario 4 calls it on its own instance); :func:`run` is the
scenario on its own (``python -m bench --only floor``, or ``python -m bench.floor``): it starts the real
``switchboard serve`` (default settings and process layout, the notify worker process included, SQLite)
with one setting changed, ``SWITCHBOARD_MCP_RATE_PER_MINUTE``, as scenario 4 does, because the default
600 calls a minute per endpoint would cap the run at 40 calls/s.

The load comes from a process of its own (:mod:`bench.floor_load`): 16 clients over 4 endpoints (as
scenario 4's consumers), each with its own keep-alive connection and its own initialized MCP session,
``/healthz`` first, then ``whoami``, each for a warm-up and a measured window. It reports calls/s,
p50/p99 at the client, and the CPU of the server (with its notify worker) and of the generator, and
fails if any answer was not a success. ``--profile`` records the server with py-spy during the whoami
window (py-spy is not a dependency: ``pip install py-spy`` in the bench's environment;
``FLOOR_PROFILE_PHASE=whoami_modern`` records the 2026-07-28 window instead).

``whoami`` runs twice: in the handshake era (``initialize``, then calls on the session, as 2025-11-25
clients do) and in the 2026-07-28 era (``whoami_modern``: no session, each request carries its envelope
in ``params._meta`` and the ``mcp-method``/``mcp-name`` headers), which the official SDK's client
adopts by default (``mode="auto"`` probes ``server/discover``) and the SDK serves in the request's own task.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from bench import floor_load
from bench.common import LOOPBACK, children_of, free_port, load_average, summarize_ms
from bench.procs import _PipeChild
from bench.world import build_world, new_cred_key

ENDPOINTS = 4
CLIENTS_PER_ENDPOINT = 4  # 16 concurrent clients
SECONDS = 10.0
WARMUP = 2.0
MCP_RATE_PER_MINUTE = 1_000_000
TARGET = 2000.0  # whoami calls/s (issue 30)
READY_TIMEOUT = 120.0

ESTIMATE = 45.0

WindowHook = Callable[[str, float], Awaitable[None]]


class FloorLoad(_PipeChild):
    """The generator's process."""

    def __init__(self) -> None:
        super().__init__(floor_load.run, ())

    async def run(self, spec: dict[str, Any], timeout: float, on_window: WindowHook | None) -> dict[str, Any]:
        """The job's result; ``on_window(phase, seconds)`` runs as each measured window opens."""
        self.conn.send(("floor", spec))
        deadline = time.monotonic() + timeout
        while True:
            status, result = await self._recv(max(deadline - time.monotonic(), 0.1))
            if status == "window":
                if on_window is not None:
                    await on_window(*result)
                continue
            if status != "ok":
                raise RuntimeError(f"floor load failed:\n{result}")
            return dict(result)

    async def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(("stop",))
        await self._close()


def _summary(phase: dict[str, Any]) -> dict[str, Any]:
    seconds = phase["seconds"]
    return {
        "calls": phase["calls"],
        "calls_per_second": phase["calls"] / seconds if seconds else 0.0,
        "latency": summarize_ms(phase["latencies"]),
        "server_cpu": round(phase["server_cpu"], 2),
        # The robust figure on a shared box: throughput follows the CPU share the server gets.
        "server_cpu_ms_per_call": 1000 * phase["server_cpu"] * seconds / max(phase["calls"], 1),
        "client_cpu": round(phase["client_cpu"], 2),
        "errors": phase["errors"],
    }


async def measure(
    port: int,
    server_pids: list[int],
    agents: list[dict[str, str]],
    *,
    seconds: float = SECONDS,
    warmup: float = WARMUP,
    on_window: WindowHook | None = None,
) -> dict[str, Any]:
    """``/healthz`` then ``whoami`` through the server on ``port``, one client per entry of ``agents``
    (``{"token", "slug"}``: the endpoint's credential and slug, which every answer must name).
    ``on_window(phase, seconds)`` runs as each measured window opens (the profiler's hook).
    Raises if any answer was not a success."""
    load = FloorLoad()
    try:
        spec = {
            "port": port,
            "agents": agents,
            "phases": ["healthz", "whoami", "whoami_modern"],
            "seconds": seconds,
            "warmup": warmup,
            "server_pids": server_pids,
        }
        raw = await load.run(spec, 4 * (seconds + warmup) + 120, on_window)
    finally:
        await load.stop()
    out = {"clients": raw["clients"], "healthz": _summary(raw["healthz"]), "whoami": _summary(raw["whoami"])}
    out["whoami_modern"] = _summary(raw["whoami_modern"])
    failed = {
        phase: out[phase]["errors"]
        for phase in ("healthz", "whoami", "whoami_modern")
        if out[phase]["errors"]
    }
    if failed:
        raise RuntimeError(f"the floor counted only successes, and some answers were not: {failed}")
    out["ratio"] = out["whoami"]["calls_per_second"] / max(out["healthz"]["calls_per_second"], 1e-9)
    return out


def line(result: dict[str, Any]) -> str:
    """The floor's one-line summary (scenario 4 prints it too)."""
    w, h = result["whoami"], result["healthz"]
    return (
        f"MCP floor ({result['clients']} clients): whoami {w['calls_per_second']:,.0f} calls/s "
        f"(p50 {w['latency']['p50']:.1f} ms, p99 {w['latency']['p99']:.1f} ms, server {w['server_cpu']:.2f} "
        f"cores, {w['server_cpu_ms_per_call']:.2f} ms CPU per call) beside /healthz "
        f"{h['calls_per_second']:,.0f}/s (p50 {h['latency']['p50']:.1f} ms, p99 {h['latency']['p99']:.1f} ms, "
        f"server {h['server_cpu']:.2f} cores, {h['server_cpu_ms_per_call']:.2f} ms per answer); "
        f"2026-07-28 era (the SDK client's default, the one the target of {TARGET:,.0f} whoami/s judges) "
        f"{result['whoami_modern']['calls_per_second']:,.0f}/s, "
        f"{result['whoami_modern']['server_cpu_ms_per_call']:.2f} ms CPU per call"
    )


# -- the scenario on its own: the real `switchboard serve` ---------------------------------------------


def _serve_command() -> list[str]:
    script = Path(sys.executable).with_name("switchboard")
    return [str(script)] if script.exists() else [sys.executable, "-m", "switchboard.cli"]


class Serve:
    """``switchboard serve`` with ``SWITCHBOARD_*`` from ``settings``; stderr to ``log``."""

    def __init__(self, settings: dict[str, Any], log: Path) -> None:
        self.port = free_port()
        self.settings = {**settings, "listen": f"{LOOPBACK}:{self.port}"}
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    async def __aenter__(self) -> Serve:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env |= {f"SWITCHBOARD_{k.upper()}": str(v) for k, v in self.settings.items()}
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                [*_serve_command(), "serve"], env=env, stdout=fh, stderr=fh, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + READY_TIMEOUT
        async with httpx.AsyncClient(timeout=5) as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"switchboard serve exited {self.proc.returncode} (log: {self.log})")
                with contextlib.suppress(httpx.HTTPError):
                    ready = (await http.get(f"http://{LOOPBACK}:{self.port}/readyz")).status_code == 200
                    if ready and b"notify worker ready" in self.log.read_bytes():
                        return self
                if time.monotonic() > deadline:
                    await self.__aexit__()
                    raise RuntimeError(
                        f"switchboard serve not ready in {READY_TIMEOUT:g} s (log: {self.log})"
                    )
                await asyncio.sleep(0.25)

    async def __aexit__(self, *_: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            await asyncio.to_thread(self.proc.wait, 30)
        except subprocess.TimeoutExpired:
            for child in children_of(self.proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, 9)
            self.proc.kill()
            self.proc.wait()

    @property
    def pids(self) -> list[int]:
        assert self.proc is not None
        return [self.proc.pid, *children_of(self.proc.pid)]


def _profiler(pid: int, out: Path) -> WindowHook:
    """Records ``pid`` with py-spy (in the background) over the whoami window."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))

    async def hook(phase: str, seconds: float) -> None:
        if phase != os.environ.get("FLOOR_PROFILE_PHASE", "whoami"):
            return
        cmd = [spy, "record", "-p", str(pid), "-d", str(max(1, int(seconds))), "-r", "250", "-o", str(out)]
        formats = {".json": "speedscope", ".txt": "raw"}  # raw: collapsed stacks, one per line
        cmd += ["-f", formats.get(out.suffix, "flamegraph")]
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # ends by itself

    return hook


async def run_floor(root: Path, *, seconds: float = SECONDS, profile: Path | None = None) -> dict[str, Any]:
    folder = root / "floor"
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {
        "data_dir": str(data),
        "cred_key": new_cred_key(),
        "mcp_rate_per_minute": MCP_RATE_PER_MINUTE,
    }
    world = await build_world(settings, endpoints=ENDPOINTS, own_sources=False)
    agents = [
        {"token": ep.token, "slug": ep.slug} for ep in world.endpoints for _ in range(CLIENTS_PER_ENDPOINT)
    ]
    load_before = load_average()
    async with Serve(settings, folder / "serve.log") as serve:
        hook = _profiler(serve.pids[0], profile) if profile is not None else None
        result = await measure(serve.port, serve.pids, agents, seconds=seconds, on_window=hook)
    result["load_before"] = load_before
    result["load_after"] = load_average()
    result["settings_changed"] = {"SWITCHBOARD_MCP_RATE_PER_MINUTE": MCP_RATE_PER_MINUTE}
    return result


async def run(b: Any) -> dict[str, Any]:
    """The scenario for ``python -m bench --only floor``."""
    b.progress.phase("floor: whoami and /healthz through switchboard serve", ESTIMATE)
    result = await run_floor(b.root, seconds=5.0 if b.quick else SECONDS)
    b.note(line(result))
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--out", default="", help="results folder (default bench/results/floor-<timestamp>)")
    parser.add_argument(
        "--profile", default="", help="py-spy output for the whoami window (.svg, .json or .txt)"
    )
    args = parser.parse_args(argv)
    root = Path(
        args.out or Path(__file__).resolve().parent / "results" / time.strftime("floor-%Y%m%d-%H%M%S")
    )
    root.mkdir(parents=True, exist_ok=True)
    profile = Path(args.profile).resolve() if args.profile else None
    result = asyncio.run(run_floor(root, seconds=args.seconds, profile=profile))
    print(line(result))
    print(f"load average before {result['load_before']}, after {result['load_after']}; folder {root}")
    return 0 if result["whoami"]["calls_per_second"] >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
