"""Bench-only launcher: one Switchboard server in its own process, as ``switchboard serve`` runs it.

``python -m bench.server CONFIG.json`` builds ``Settings`` from the config, then
``build_services(settings, resolver=..., ssl_context=...)`` + ``create_app`` + uvicorn, exactly like the
CLI's ``serve`` (same uvicorn options, same JSON logging on stderr), with two bench seams:

* the resolver maps every ``*.bench.test`` name to 127.0.0.1 (a dict lookup: production runs
  ``getaddrinfo`` in a worker thread per attempt, which this skips);
* the TLS context trusts the bench's trustme CA (certificate and host-name checks stay on).

It prints ``READY <port>`` on stdout once uvicorn listens. SIGTERM/SIGINT stop it gracefully.
SIGUSR1 starts the pyinstrument profiler and SIGUSR2 stops it and saves the session to
``profile_path`` from the config (sampling the event-loop thread, idle time included).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import ssl
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from bench.common import HOST_SUFFIX, LOOPBACK
from switchboard.app import create_app
from switchboard.cli.serve import uvicorn_config
from switchboard.obs import configure_logging
from switchboard.process.heap import freeze_startup_heap
from switchboard.services import build_services
from switchboard.settings import Settings


async def bench_resolver(host: str, port: int) -> list[str]:
    if host.endswith(HOST_SUFFIX):
        return [LOOPBACK]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def _forward(sig: int) -> None:
    from bench.common import children_of

    for child in children_of(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, sig)


class _Profiling:
    def __init__(self, path: str | None) -> None:
        self.path = path
        self.profiler: Any = None

    def start(self, _sig: int, _frame: FrameType | None) -> None:
        _forward(signal.SIGUSR1)  # the notify worker process profiles itself too (bench/worker.py)
        if self.path is None or self.profiler is not None:
            return
        from pyinstrument import Profiler

        self.profiler = Profiler(interval=0.0005, async_mode="disabled")
        self.profiler.start()

    def stop(self, _sig: int, _frame: FrameType | None) -> None:
        _forward(signal.SIGUSR2)
        if self.profiler is None or self.path is None:
            return
        session = self.profiler.stop()
        self.profiler = None
        session.save(self.path)
        Path(self.path + ".done").write_text("ok")


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[0]).read_text())
    if config.get("patches"):
        import bench.experiments.patches_s4  # noqa: F401  (registers scenario 4's patches)
        from bench.experiments.patches import apply

        apply(config["patches"])  # what-if experiments only (python -m bench.experiments.whatif)
    settings = Settings(**config["settings"])
    configure_logging(config.get("log_level", "INFO"))
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    ctx = ssl.create_default_context(cafile=config["ca_pem"])
    services = build_services(settings, resolver=bench_resolver, ssl_context=ctx)
    if settings.notify_in_worker_process():  # the dispatcher's process gets the same seams (bench/worker.py)
        services.notify_worker_command = [
            sys.executable,
            "-m",
            "bench.worker",
            config["ca_pem"],
            json.dumps(config.get("patches") or []),
            f"{config['profile_path']}.worker" if config.get("profile_path") else "",
        ]
    app = create_app(services)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if not self.should_exit:
                freeze_startup_heap()  # as switchboard serve
                print(f"READY {settings.listen_port}", flush=True)

    server = Server(uvicorn_config(app, settings))  # switchboard serve's own options and HTTP protocol

    def stop(_sig: int, _frame: FrameType | None) -> None:
        server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    profiling = _Profiling(config.get("profile_path"))
    signal.signal(signal.SIGUSR1, profiling.start)
    signal.signal(signal.SIGUSR2, profiling.stop)
    _gc_probe(os.environ.get("BENCH_GC_PROBE"))
    server.run()
    return 0


def _gc_probe(path: str | None) -> None:
    """``BENCH_GC_PROBE=FILE``: one JSON line per garbage collection of generation 2, or of any that
    took over 2 ms (its duration and the objects the collector tracks), to tell the collector's
    pauses from the product's own work."""
    if not path:
        return
    import gc
    import time

    out = Path(path).open("a", buffering=1)  # noqa: SIM115  (open for the process's whole life)
    began = [0.0]

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        ms = (time.perf_counter() - began[0]) * 1000.0
        if info["generation"] == 2 or ms > 2.0:
            line = {"t": time.monotonic(), "gen": info["generation"], "ms": round(ms, 2)}
            if info["generation"] == 2:
                line["objects"] = len(gc.get_objects())
            out.write(json.dumps(line) + "\n")

    gc.callbacks.append(watch)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
