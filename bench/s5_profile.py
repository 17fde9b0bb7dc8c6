"""Scenario 5: a profile of scenario 2's Switchboard burst (and of scenario 1's closed-ports variant).

A separate server run with scenario 2's setup: after the same warm-up, the bench sends the server
SIGUSR1 (pyinstrument starts sampling the event-loop thread every 0.5 ms, idle time included), runs one
Switchboard burst, then SIGUSR2 (the session is saved). The profiler slows the server, so this run's
rate is not one of scenario 2's figures.

The session is reduced to: self time by component (which library or Switchboard package the sampled
frame belongs to; ``idle`` is the event loop waiting in epoll), the top functions by self time, and the
on-loop time inside a few Switchboard entry points. The SQLite statements themselves run in aiosqlite's
worker thread, which this profiler does not sample: they show up as idle on the loop thread, and in the
process CPU figure (which counts every thread) as the gap between CPU and on-loop time.

A second, shorter profile covers scenario 1's worst variant (every hook on a closed port), to show what
the server spends its CPU on while ingest slows down.
"""

from __future__ import annotations

import asyncio
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import s1_ingest, s2_dispatch
from bench.common import CpuMeter, closed_port
from bench.context import Bench, running, wait_until

BURST = 1500
ISOLATION_SECONDS = 10.0
TOP = 20

ESTIMATE = 45.0

# First match wins: (path fragment, component).
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("selectors.py", "idle (event loop waiting in epoll)"),
    ("/switchboard/push/", "switchboard.push (SSRF guard, signer, pinned transport)"),
    ("/switchboard/notify/", "switchboard.notify (matching, dispatcher, hook store)"),
    ("/switchboard/obs/", "switchboard.obs (JSON logs, metrics)"),
    ("/switchboard/cred/", "switchboard.cred (envelope)"),
    ("/switchboard/", "switchboard (ingest, store, hub, other)"),
    ("/sqlalchemy/", "SQLAlchemy (core, asyncio adapter)"),
    ("/aiosqlite/", "aiosqlite (thread hand-off)"),
    ("/sqlite3/", "sqlite3"),
    ("/asyncio/sslproto.py", "TLS (asyncio sslproto + ssl)"),
    ("/ssl.py", "TLS (asyncio sslproto + ssl)"),
    ("/httpcore/", "httpcore (HTTP/1.1 client)"),
    ("/h11/", "h11 (HTTP/1.1 parsing, client and server)"),
    ("/anyio/", "anyio"),
    ("/uvicorn/", "uvicorn + starlette (inbound HTTP)"),
    ("/starlette/", "uvicorn + starlette (inbound HTTP)"),
    ("/asyncio/", "asyncio (event loop, tasks, queues, sockets)"),
    ("/logging/", "logging (stdlib)"),
    ("/json/", "json"),
    ("/cryptography/", "cryptography (AES-GCM)"),
    ("/prometheus_client/", "prometheus_client"),
    ("/ulid/", "python-ulid"),
    ("/greenlet/", "SQLAlchemy (core, asyncio adapter)"),
)

ENTRY_POINTS = (
    ("on_transitions", "/switchboard/notify/intake.py", "Intake.on_transitions (match a batch)"),
    ("attempt", "/switchboard/notify/attempts.py", "AttemptRunner.attempt (one attempt, on-loop part)"),
    (
        "sendable_rows",
        "/switchboard/store/notify_hooks.py",
        "HookStore.sendable_rows (one read per batch of attempts)",
    ),
    ("open_sendable", "/switchboard/notify/store.py", "HookStore.open_sendable (decrypt)"),
    (
        "record_many",
        "/switchboard/store/notify_hook_health.py",
        "HookStore.record_many (folded health writes, one statement)",
    ),
    ("standard_headers", "/switchboard/push/_signer.py", "standard_headers (signing)"),
    ("check_attempt", "/switchboard/push/_validator.py", "Validator.check_attempt"),
    ("send", "/switchboard/push/_transport.py", "Sender.send (on-loop part)"),
    ("handle", "/switchboard/ingest/app.py", "Ingest.handle (inbound delivery)"),
    ("create", "/switchboard/store/todos.py", "TodoStore.create (insert + commit)"),
    ("emit", "/logging/__init__.py", "logging emit"),
)


IDLE = COMPONENTS[0][1]
TLS = "TLS (asyncio sslproto + ssl)"
SOCKETS = "sockets (connect, send, recv, close)"


def component(path: str, function: str = "", caller: str = "other") -> str:
    """The component a frame's self time belongs to. A C function (``<built-in>``) is named by what it
    is when that is telling (epoll wait, TLS, sockets), else by its caller's component."""
    if not path or path.startswith("<"):
        if function in ("epoll.poll", "poll.poll", "select.select"):
            return IDLE
        if function.startswith(("_SSLSocket.", "SSLContext.", "SSLObject.", "MemoryBIO.")):
            return TLS
        if function.startswith("socket."):
            return SOCKETS
        return caller
    for fragment, name in COMPONENTS:
        if fragment in path:
            return name
    return "other"


def analyse(path: str) -> dict[str, Any]:
    from pyinstrument.renderers import ConsoleRenderer
    from pyinstrument.session import Session

    session = Session.load(path)
    root = session.root_frame()
    if root is None:
        return {"error": "empty profile"}
    Path(path + ".txt").write_text(
        ConsoleRenderer(unicode=False, color=False, show_all=False, short_mode=False).render(session)
    )
    by_component: dict[str, float] = defaultdict(float)
    by_function: dict[tuple[str, str], float] = defaultdict(float)
    inclusive: dict[str, float] = defaultdict(float)

    def walk(frame: Any, inside: frozenset[str], caller: str) -> None:
        # pyinstrument keeps a frame's own time in synthetic "[self]"-style children: fold them back in.
        file_path = frame.file_path or ""
        real = [c for c in frame.children if not c.is_synthetic]
        self_time = frame.time - sum(c.time for c in real)
        here = component(file_path, frame.function or "", caller)
        mine = inside
        for func, fragment, label in ENTRY_POINTS:
            if frame.function == func and fragment in file_path and label not in inside:
                inclusive[label] += frame.time
                mine = mine | {label}
        if self_time > 0:
            by_component[here] += self_time
            short = file_path.split("site-packages/")[-1].split("/src/")[-1].split("/lib/python3.11/")[-1]
            by_function[(frame.function or "?", f"{short}:{frame.line_no}")] += self_time
        for child in real:
            walk(child, mine, here)

    walk(root, frozenset(), "other")
    total = root.time
    top = sorted(by_function.items(), key=lambda kv: kv[1], reverse=True)
    idle = by_component.get(IDLE, 0.0)
    return {
        "sampled_seconds": total,
        "on_loop_seconds": total - idle,
        "by_component": sorted(
            ({"component": k, "seconds": v, "share": v / total} for k, v in by_component.items()),
            key=lambda x: x["seconds"],
            reverse=True,
        ),
        "top_functions": [
            {"function": f, "where": w, "seconds": s, "share": s / total} for (f, w), s in top[:TOP]
        ],
        "entry_points": [
            {"entry": label, "seconds": inclusive.get(label, 0.0), "share": inclusive.get(label, 0.0) / total}
            for _, _, label in ENTRY_POINTS
        ],
        "text_path": path + ".txt",
    }


async def run(b: Bench) -> dict[str, Any]:
    burst = 1000 if b.quick else BURST
    receiver = await b.ok_receiver().ready()
    try:
        b.progress.phase("s5 profile: setup", 8)
        server, world = await s2_dispatch.setup(b, "s5", receiver)
        server.profile_path = str(server.workdir / "profile.pyisession")
        async with running(server):
            b.progress.phase("s5 profile: warm-up", 5)
            await s2_dispatch.switchboard_burst(b, server, world, receiver, s2_dispatch.WARMUP_TODOS)
            b.progress.phase("s5 profile: profiled Switchboard burst", burst / 250 + 5)
            server.signal(signal.SIGUSR1)
            await asyncio.sleep(0.5)
            meter = CpuMeter({"server": server.pids()})
            meter.start()
            burst_result = await s2_dispatch.switchboard_burst(b, server, world, receiver, burst)
            cpu = meter.stop()
            worker = len(server.pids()) > 1  # the dispatcher runs in the notify worker process
            server.signal(signal.SIGUSR2)
            done = Path(server.profile_path + ".done")
            worker_done = Path(server.profile_path + ".worker.done")

            async def saved() -> bool:
                return done.exists() and (not worker or worker_done.exists())

            await wait_until(saved, timeout=60, interval=0.25)
        burst_result.pop("_records", None)
    finally:
        await receiver.stop()
    b.progress.phase("s5 profile: scenario 1, closed ports", ISOLATION_SECONDS + 10)
    closed = await s1_ingest.one_run(
        b,
        "closed",
        [closed_port() for _ in range(s1_ingest.HOOKS_PER_ENDPOINT)],
        "s5",
        ISOLATION_SECONDS,
        profile=True,
    )
    b.progress.phase("s5 profile: analysis", 5)
    # The burst's delivery runs in the notify worker process when there is one: that profile is the
    # one of scenario 2's dispatch; the server's (ingest, the hub, the pipe) is summarised beside it.
    main_path = server.profile_path + ".worker" if worker else server.profile_path
    analysis = (
        await asyncio.to_thread(analyse, main_path)
        if Path(main_path + ".done").exists()
        else {"error": "no profile"}
    )
    analysis["process"] = "notify worker" if worker else "server"
    if worker and done.exists():
        analysis["server_process"] = await asyncio.to_thread(analyse, server.profile_path)
    closed_path = closed["profile_path"]
    closed_analysis = (
        await asyncio.to_thread(analyse, closed_path)
        if closed_path and Path(f"{closed_path}.done").exists()
        else {"error": "no profile"}
    )
    closed_analysis.update(
        {
            "server_cpu_cores": closed["cpu"]["server"],
            "ingest": closed["summary"],
            "dispatcher": closed["dispatcher"],
        }
    )
    return {
        "isolation_closed": closed_analysis,
        "burst": burst,
        "profiled_rate": burst_result["rate"],
        "server_cpu_cores": cpu.get("server"),
        "profile_path": server.profile_path,
        **analysis,
    }
