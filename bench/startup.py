"""Start-up as whole-process runs (issue 30: ``serve`` answering /healthz under 1 s, ``--help`` and
commands that touch no server under 0.25 s), beside ``python -c pass`` as the interpreter's floor.

Each figure is a fresh process, run ``RUNS`` times after one warm-up (bytecode cached), as min / median
/ max of wall seconds: ``serve`` on a fresh data folder until ``/healthz`` answers 200 and until
``/readyz`` does; ``switchboard --help``; ``switchboard db status`` on a migrated SQLite folder.
``python -m bench --only startup`` or ``python -m bench.startup``; no figure is judged here.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ESTIMATE = 60.0
RUNS = 5
SWITCHBOARD = str(Path(sys.executable).with_name("switchboard"))
KEY = "00" * 32


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_CRED_KEY"] = KEY
    return env


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_once() -> tuple[float, float]:
    """Seconds from the start of ``serve`` on a fresh folder to /healthz 200, and to /readyz 200."""
    with tempfile.TemporaryDirectory() as data:
        port = _port()
        base = f"http://127.0.0.1:{port}"
        argv = [SWITCHBOARD, "serve", "--listen", f"127.0.0.1:{port}", "--data", data]
        started = time.monotonic()
        proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            live = ready = None
            while ready is None and time.monotonic() - started < 60:
                if proc.poll() is not None:
                    raise RuntimeError(f"serve exited {proc.returncode}")
                if live is None and _status(base + "/healthz") == 200:
                    live = time.monotonic() - started
                if live is not None and _status(base + "/readyz") == 200:
                    ready = time.monotonic() - started
                time.sleep(0.01)  # another process: nothing to await
            if live is None or ready is None:
                raise RuntimeError("serve not ready within 60 s")
            return live, ready
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def command_once(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.monotonic() - started


def _spread(samples: list[float]) -> dict[str, float]:
    return {
        "min": round(min(samples), 3),
        "median": round(statistics.median(samples), 3),
        "max": round(max(samples), 3),
    }


def _repeat(once: Callable[[], Any], runs: int) -> list[Any]:
    once()  # warm-up: bytecode and the page cache
    return [once() for _ in range(runs)]


def measure(runs: int = RUNS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        subprocess.run(
            [SWITCHBOARD, "db", "upgrade", "--data", data], env=_env(), check=True, capture_output=True
        )
        status = _repeat(lambda: command_once([SWITCHBOARD, "db", "status", "--data", data]), runs)
    serve = _repeat(serve_once, runs)
    return {
        "runs": runs,
        "python_pass": _spread(_repeat(lambda: command_once([sys.executable, "-c", "pass"]), runs)),
        "help": _spread(_repeat(lambda: command_once([SWITCHBOARD, "--help"]), runs)),
        "db_status": _spread(status),
        "serve_healthz": _spread([live for live, _ in serve]),
        "serve_readyz": _spread([ready for _, ready in serve]),
    }


def line(result: dict[str, Any]) -> str:
    parts = [
        f"{name} {result[name]['median']:.3f} s"
        for name in ("serve_healthz", "serve_readyz", "help", "db_status", "python_pass")
    ]
    return f"startup (median of {result['runs']} whole-process runs): " + ", ".join(parts)


async def run(b: Any) -> dict[str, Any]:
    """The scenario for ``python -m bench --only startup``."""
    import asyncio

    b.progress.phase("startup: serve ready, --help, db status as whole processes", ESTIMATE)
    result = await asyncio.to_thread(measure, 3 if b.quick else RUNS)
    b.note(line(result))
    return result


if __name__ == "__main__":
    outcome = measure()
    print(line(outcome))
    for name, figures in outcome.items():
        if isinstance(figures, dict):
            print(
                f"  {name:14} min {figures['min']:.3f}  median {figures['median']:.3f}  max {figures['max']:.3f}"
            )
