"""Scenario 1: ingest isolation (SPEC-0024 REQ-7: hook delivery never slows ingest).

Signed Gitea deliveries at a fixed offered rate, one todo each, spread over ``ENDPOINTS`` endpoints (one
source each). Three variants, each on its own server and database:

* ``none``: no hooks;
* ``hang``: every endpoint holds 5 hooks (the ceiling) whose receivers accept TCP and never answer;
* ``closed``: every endpoint holds 5 hooks on closed loopback ports (connection refused).

The three servers run side by side and take turns: the load goes to one for a slice of a few seconds
while the other two are paused (SIGSTOP, server and worker processes), then to the next, in a rotating
order. On a machine shared with other engineers' test suites, the background load then falls on the
three variants alike, a few seconds apart, instead of on whichever ran in a noisy minute; a paused server
does no work, so nothing one variant does runs in another's slice. (Timers of a paused server come due
while it is paused and fire when it resumes, inside its own slice: that counts against the hooks.)

Reported per variant: inbound latency (from the scheduled send time to the full response, so a slow
server cannot hide behind a stalled client) p50/p99/max pooled over the slices and repeats, the achieved
rate, the CPU of the server and its workers while active, and what the dispatcher did (from /metrics).
Ratios are against ``none``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from bench.common import CpuMeter, closed_port, metric, ratio, summarize_ms
from bench.context import Bench, running, wait_until
from bench.procs import ReceiverProc, ServerProc
from bench.world import build_world

ENDPOINTS = 30
HOOKS_PER_ENDPOINT = 5
RATE = 60.0  # deliveries per second offered: well under one core of ingest on this machine
WARMUP_SECONDS = 2.0
MEASURE_SECONDS = 15.0  # one_run's window (scenario 5's profile, bench.experiments.whatif)
VARIANTS = ("none", "hang", "closed")
SLICE_SECONDS = 3.0
SLICES = 8  # per variant and repeat: 24 s measured per variant per repeat
REPEATS = 2  # each on three fresh servers
ALTERNATE_SLICES = 4  # the in-process comparison: one repeat

# The shipped default first (the targets are computed on it), then the other mode, for comparison only.
MODES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("notify worker process", {}),
    ("dispatcher in the server process", {"notify_process": False}),
)

ESTIMATE = 420.0


def _hook_urls(variant: str, ports: list[int]) -> list[list[str]]:
    if variant == "none":
        return []
    return [
        [f"https://dead{j}.bench.test:{ports[j]}/h/{i}" for j in range(HOOKS_PER_ENDPOINT)]
        for i in range(ENDPOINTS)
    ]


async def one_run(
    b: Bench,
    variant: str,
    ports: list[int],
    tag: str,
    measure: float,
    patches: tuple[str, ...] = (),
    profile: bool = False,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One variant on a fresh server; ``patches`` only for ``python -m bench.experiments.whatif``; ``profile``
    samples the measured window (scenario 5)."""
    name = f"s1-{variant}-{tag}"
    server = b.server(name, b.settings(name, **(overrides or {})))
    server.patches = list(patches)
    if profile:
        server.profile_path = str(server.workdir / "profile.pyisession")
    world = await build_world(server.settings, endpoints=ENDPOINTS, hook_urls=_hook_urls(variant, ports))
    targets = [s.target() for s in world.own_sources]
    async with running(server, kill=True):
        await b.client.run(
            "ingest",
            {"port": server.port, "targets": targets, "rate": RATE, "count": int(RATE * WARMUP_SECONDS)},
        )
        if profile:
            server.signal(signal.SIGUSR1)
        pids = server.pids()
        meter = CpuMeter({"server": pids, "worker": pids[1:], "client": b.client.pid})
        meter.start()
        result = await b.client.run(
            "ingest",
            {
                "port": server.port,
                "targets": targets,
                "rate": RATE,
                "count": int(RATE * measure),
                "concurrency": 64,
                "max_seconds": measure + 30,
            },
        )
        cpu = meter.stop()
        m = await server.metrics()
        if profile:
            server.signal(signal.SIGUSR2)
            done = Path(f"{server.profile_path}.done")

            async def saved() -> bool:
                return done.exists()

            await wait_until(saved, timeout=60)
    ok = sum(n for status, n in result["statuses"].items() if 200 <= int(status) < 300)
    return {
        "variant": variant,
        "profile_path": server.profile_path,
        "hooks": world.hooks,
        "latency": result["latency_from_schedule"],
        "summary": summarize_ms(result["latency_from_schedule"]),
        "throughput": ok / result["elapsed"] if result["elapsed"] else 0.0,
        "offered": result["offered"],
        "ok": ok,
        "errors": result["errors"],
        "statuses": result["statuses"],
        "late_sends": result["late_sends"],
        "cpu": cpu,
        "dispatcher": _dispatcher(m),
    }


def _pause(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)


def _resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


async def sliced_repeat(
    b: Bench,
    tag: str,
    ports: dict[str, list[int]],
    slices: int,
    slice_seconds: float,
    overrides: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One repeat: the three variants on three fresh servers, taking turns slice by slice."""
    count = int(RATE * slice_seconds)
    async with contextlib.AsyncExitStack() as stack:
        servers: dict[str, tuple[ServerProc, list[dict[str, str]], int]] = {}
        for variant in VARIANTS:
            name = f"s1-{variant}-{tag}"
            server = b.server(name, b.settings(name, **(overrides or {})))
            world = await build_world(
                server.settings, endpoints=ENDPOINTS, hook_urls=_hook_urls(variant, ports[variant])
            )
            await stack.enter_async_context(running(server, kill=True))
            servers[variant] = (server, [s.target() for s in world.own_sources], world.hooks)
        paused: dict[str, list[int]] = {}
        stack.callback(lambda: [_resume(p) for p in paused.values()])  # never leave one stopped
        for variant, (server, targets, _) in servers.items():
            await b.client.run(
                "ingest",
                {"port": server.port, "targets": targets, "rate": RATE, "count": int(RATE * WARMUP_SECONDS)},
            )
            paused[variant] = server.pids()
            _pause(paused[variant])
        acc: dict[str, dict[str, Any]] = {
            v: {"latency": [], "ok": 0, "offered": 0, "elapsed": 0.0, "late": 0, "cpu": {}, "statuses": {}}
            for v in VARIANTS
        }
        errors: dict[str, list[Any]] = {v: [] for v in VARIANTS}
        for i in range(slices):
            for variant in VARIANTS[i % 3 :] + VARIANTS[: i % 3]:
                server, targets, _ = servers[variant]
                _resume(paused.pop(variant))
                pids = server.pids()
                meter = CpuMeter({"server": pids, "worker": pids[1:], "client": b.client.pid})
                meter.start()
                started = time.monotonic()
                result = await b.client.run(
                    "ingest",
                    {
                        "port": server.port,
                        "targets": targets,
                        "rate": RATE,
                        "count": count,
                        "concurrency": 64,
                        "max_seconds": slice_seconds + 30,
                    },
                )
                active = time.monotonic() - started
                cpu = meter.stop()
                paused[variant] = server.pids()
                _pause(paused[variant])
                a = acc[variant]
                a["latency"] += result["latency_from_schedule"]
                a["ok"] += sum(n for st, n in result["statuses"].items() if 200 <= int(st) < 300)
                a["offered"] += result["offered"]
                a["elapsed"] += result["elapsed"]
                a["late"] += result["late_sends"]
                for st, n in result["statuses"].items():
                    a["statuses"][st] = a["statuses"].get(st, 0) + n
                for name, cores in cpu.items():
                    a["cpu"][name] = a["cpu"].get(name, 0.0) + cores * active
                a["active"] = a.get("active", 0.0) + active
                if result["errors"]:
                    errors[variant].append(result["errors"])
        out: list[dict[str, Any]] = []
        for variant in VARIANTS:
            server, _, hooks = servers[variant]
            _resume(paused.pop(variant))
            m = await server.metrics()
            a = acc[variant]
            out.append(
                {
                    "variant": variant,
                    "profile_path": None,
                    "hooks": hooks,
                    "latency": a["latency"],
                    "summary": summarize_ms(a["latency"]),
                    "throughput": a["ok"] / a["elapsed"] if a["elapsed"] else 0.0,
                    "offered": a["offered"],
                    "ok": a["ok"],
                    "errors": errors[variant],
                    "statuses": a["statuses"],
                    "late_sends": a["late"],
                    "cpu": {k: round(v / a["active"], 2) for k, v in a["cpu"].items()},
                    "dispatcher": _dispatcher(m),
                }
            )
        return out


def _dispatcher(m: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, Any]:
    return {
        "attempts": {
            r: metric(m, "switchboard_notify_hook_attempts_total", result=r)
            for r in ("2xx", "timeout", "network", "tls", "rejected_ssrf")
        },
        "dropped": metric(m, "switchboard_notify_hook_notifications_total", outcome="dropped"),
        "failed": metric(m, "switchboard_notify_hook_notifications_total", outcome="failed"),
        "disabled": metric(m, "switchboard_notify_hooks_disabled_total"),
        "hub_overflow": metric(m, "switchboard_transition_subscriber_errors_total", error="overflow"),
        "queue_depth": metric(m, "switchboard_notify_hook_queue_depth"),
    }


async def run(b: Bench) -> dict[str, Any]:
    slices = 2 if b.quick else SLICES
    repeats = 1 if b.quick else REPEATS
    alt_slices = 2 if b.quick else ALTERNATE_SLICES
    hang = await ReceiverProc("hang", ports=HOOKS_PER_ENDPOINT).ready()
    closed = [closed_port() for _ in range(HOOKS_PER_ENDPOINT)]
    ports = {"none": [], "hang": hang.ports, "closed": closed}
    runs: list[dict[str, Any]] = []
    alternate_runs: list[dict[str, Any]] = []
    per_repeat = len(VARIANTS) * (WARMUP_SECONDS + 6)
    try:
        for r in range(repeats):
            b.progress.phase(
                f"s1 ingest isolation: {MODES[0][0]}, repeat {r + 1}/{repeats} "
                f"(3 servers, {slices} slices of {SLICE_SECONDS:.0f} s each)",
                per_repeat + slices * len(VARIANTS) * (SLICE_SECONDS + 0.6),
            )
            runs += await sliced_repeat(b, f"r{r}", ports, slices, SLICE_SECONDS, MODES[0][1])
        b.progress.phase(
            f"s1 ingest isolation: {MODES[1][0]} (3 servers, {alt_slices} slices)",
            per_repeat + alt_slices * len(VARIANTS) * (SLICE_SECONDS + 0.6),
        )
        alternate_runs = await sliced_repeat(b, "r0-inline", ports, alt_slices, SLICE_SECONDS, MODES[1][1])
        hang_stats = await hang.stats()
    finally:
        await hang.stop()

    return {
        "endpoints": ENDPOINTS,
        "hooks_per_endpoint": HOOKS_PER_ENDPOINT,
        "rate": RATE,
        "warmup_seconds": WARMUP_SECONDS,
        "measure_seconds": slices * SLICE_SECONDS,
        "slices": slices,
        "slice_seconds": SLICE_SECONDS,
        "repeats": repeats,
        "mode": MODES[0][0],
        "variants": _variants(runs),
        "alternate": {
            "mode": MODES[1][0],
            "variants": _variants(alternate_runs),
            "repeats": 1,
            "slices": alt_slices,
        },
        "hang_receiver": hang_stats,
    }


def _variants(runs: list[dict[str, Any]]) -> dict[str, Any]:
    variants: dict[str, Any] = {}
    for variant in ("none", "hang", "closed"):
        mine = [x for x in runs if x["variant"] == variant]
        pooled = [v for x in mine for v in x["latency"]]
        variants[variant] = {
            "summary": summarize_ms(pooled),
            "per_run_p99": [x["summary"]["p99"] for x in mine],
            "per_run_p50": [x["summary"]["p50"] for x in mine],
            "throughput": sum(x["throughput"] for x in mine) / len(mine),
            "offered": sum(x["offered"] for x in mine),
            "ok": sum(x["ok"] for x in mine),
            "errors": [x["errors"] for x in mine],
            "late_sends": sum(x["late_sends"] for x in mine),
            "cpu_server": [x["cpu"]["server"] for x in mine],
            "cpu_worker": [x["cpu"]["worker"] for x in mine],  # the notify worker process's part
            "cpu_client": [x["cpu"]["client"] for x in mine],
            "hooks": mine[0]["hooks"],
            "dispatcher": [x["dispatcher"] for x in mine],
        }
    base = variants["none"]["summary"]
    for variant in ("hang", "closed"):
        s = variants[variant]["summary"]
        variants[variant]["ratio_p99"] = ratio(s["p99"], base["p99"])
        variants[variant]["ratio_p50"] = ratio(s["p50"], base["p50"])
        variants[variant]["ratio_throughput"] = ratio(
            variants[variant]["throughput"], variants["none"]["throughput"]
        )
    return variants
