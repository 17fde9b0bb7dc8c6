"""Scenario 3: overflow and memory (SPEC-0024 REQ-7: a bounded queue, drops counted, todos unaffected).

``TODOS`` ready todos for ``ENDPOINTS`` endpoints, each with one hook whose receiver accepts TCP and
never answers, every other setting the default (queue 10,000, 16 workers, 120 notifications/min/hook,
5 s attempt timeout). Every endpoint belongs to its own human (a multi-tenant instance: the dispatcher's
per-owner fairness then parks the most). The todos come from signed deliveries to each endpoint's own
source, routed to each of its ``QUEUES`` (a source routes only to its own human's endpoints, so one
delivery makes ``len(QUEUES)`` todos), in chunks; after each chunk the server's RSS (each process's too)
and metrics are read.

Checks: the RSS stays bounded (peak and growth reported, and the RSS after each chunk shows whether it
keeps growing with the backlog); the drop counters add up (every todo's transition is accounted for as
hub overflow, dropped, queued or attempted; the coalesced drop warnings in the log are summed and
compared with the counters); every todo is still pending and claimable (checked in the database, and a
sample claimed and acked over MCP).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from bench.common import RECEIVER_HOST, memory_kib, metric
from bench.context import Bench, RssSampler, running, sqlite_rows, wait_until
from bench.procs import ReceiverProc
from bench.world import build_world
from switchboard.notify.droplog import WINDOW

ENDPOINTS = 100
TODOS = 100_000
QUEUES = tuple(f"q{i:02d}" for i in range(20))  # one delivery: 20 todos for one endpoint (its own human)
CHECKPOINTS = (1_000, 25_000, 50_000, 75_000, 100_000)
CLAIM_AGENTS, CLAIMS_PER_AGENT = 20, 5

ESTIMATE = 110.0


def _snapshot(m: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {
        "created": metric(m, "switchboard_todo_transitions_total", transition="created"),
        "hub_overflow": metric(
            m, "switchboard_transition_subscriber_errors_total", subscriber="notify_hooks", error="overflow"
        ),
        "dropped": metric(m, "switchboard_notify_hook_notifications_total", outcome="dropped"),
        "failed": metric(m, "switchboard_notify_hook_notifications_total", outcome="failed"),
        "delivered": metric(m, "switchboard_notify_hook_notifications_total", outcome="delivered"),
        "queue_depth": metric(m, "switchboard_notify_hook_queue_depth"),
        "attempts_timeout": metric(m, "switchboard_notify_hook_attempts_total", result="timeout"),
        "attempts_total": metric(m, "switchboard_notify_hook_attempts_total"),
        "disabled": metric(m, "switchboard_notify_hooks_disabled_total"),
    }


def _by_process(pids: list[int]) -> list[dict[str, int]]:
    """Each process's RSS and its parts (the server first, then its notify worker processes)."""
    return [{"pid": pid, **memory_kib(pid)} for pid in pids]


async def run(b: Bench) -> dict[str, Any]:
    total = 10_000 if b.quick else TODOS
    checkpoints = [c * total // TODOS for c in CHECKPOINTS]
    hang = await ReceiverProc("hang").ready()
    try:
        b.progress.phase("s3 overflow: setup", 6)
        server = b.server("s3", b.settings("s3"))
        url = f"https://{RECEIVER_HOST}:{hang.ports[0]}/h"
        world = await build_world(
            server.settings,
            endpoints=ENDPOINTS,
            queues=QUEUES,
            own_source_every_queue=True,
            hook_urls=[[f"{url}/{i}"] for i in range(ENDPOINTS)],
        )
        targets = [s.target() for s in world.own_sources]
        async with running(server, kill=True):
            rss_start = memory_kib(server.pids())
            start_by_process = _by_process(server.pids())
            sampler = RssSampler(server.pids())
            sampler.start()
            points: list[dict[str, Any]] = []
            made = 0
            started = time.monotonic()
            for cp in checkpoints:
                deliveries = (cp - made) // len(QUEUES)
                b.progress.phase(f"s3 overflow: {cp:,} todos", deliveries * 0.06 + 1)
                result = await b.client.run(
                    "ingest",
                    {
                        "port": server.port,
                        "targets": targets,
                        "rate": 0,
                        "count": deliveries,
                        "concurrency": 4,
                        "max_seconds": 300,
                    },
                )
                made += deliveries * len(QUEUES)
                points.append(
                    {
                        "todos": made,
                        "elapsed": round(time.monotonic() - started, 1),
                        "rss_kib": memory_kib(server.pids()).get("VmRSS", 0),
                        "rss_by_process": _by_process(server.pids()),
                        "statuses": result["statuses"],
                        **_snapshot(await server.metrics()),
                    }
                )
            ingest_seconds = time.monotonic() - started

            # Let the hub subscriber work through what it queued, then read settled counters.
            b.progress.phase("s3 overflow: settle and check", 20)
            last: dict[str, float] = {}

            async def settled() -> bool:
                nonlocal last
                snap = _snapshot(await server.metrics())
                stable = (
                    bool(last)
                    and all(snap[k] == last[k] for k in ("hub_overflow", "dropped", "created"))
                    and snap["created"] >= made
                )
                last = snap
                return stable

            await wait_until(settled, timeout=60, interval=1.0)
            final = last
            hang_stats = await hang.stats()
            rss_settled = memory_kib(server.pids())
            settled_by_process = _by_process(server.pids())
            await sampler.stop()

            statuses = dict(
                sqlite_rows(server.settings["data_dir"], "SELECT status, count(*) FROM todos GROUP BY status")
            )
            claimable = sqlite_rows(
                server.settings["data_dir"],
                "SELECT count(*) FROM todos t JOIN endpoints e ON e.id = t.endpoint_id "
                "WHERE t.status = 'pending' AND instr(e.queues, '\"' || t.queue || '\"') > 0",
            )[0][0]
            claim = await b.client.run(
                "mcp_claim",
                {
                    "agents": [
                        {"base_url": server.base_url, "token": ep.token}
                        for ep in world.endpoints[:CLAIM_AGENTS]
                    ],
                    "max_per_agent": CLAIMS_PER_AGENT,
                    "max_seconds": 60,
                },
            )

            # A coalesced ``notification dropped`` line is written when its window ends (a timer, at
            # most WINDOW seconds after the drop it gathers): the log is read once every drop counted
            # is in it, or a window and a margin after that, whichever comes first.
            async def logged_all() -> bool:
                logged = sum(
                    int(line.get("drops", 1))
                    for line in server.log_lines()
                    if line.get("event") == "notification dropped"
                )
                return logged >= final["dropped"]

            await wait_until(logged_all, timeout=WINDOW + 5.0, interval=0.5)
        drops_logged: Counter[str] = Counter()
        hub_warnings = 0
        hub_logged_total = 0
        for line in server.log_lines():
            if line.get("event") == "notification dropped":
                drops_logged[str(line.get("reason"))] += int(line.get("drops", 1))
            elif line.get("event") == "transition dropped: subscriber queue full":
                hub_warnings += 1
                hub_logged_total = max(hub_logged_total, int(line.get("dropped_total", 0)))
    finally:
        await hang.stop()

    samples = [kib for _, kib in sampler.samples]
    return {
        "endpoints": ENDPOINTS,
        "todos_per_delivery": len(QUEUES),
        "todos": made,
        "ingest_seconds": ingest_seconds,
        "todos_per_second": made / ingest_seconds if ingest_seconds else 0.0,
        "rss_start_kib": rss_start.get("VmRSS", 0),
        "rss_start_by_process": start_by_process,
        "rss_settled_by_process": settled_by_process,
        "rss_peak_kib": max([*samples, rss_settled.get("VmHWM", 0)]),
        "rss_settled_kib": rss_settled.get("VmRSS", 0),
        "rss_growth_kib": max([*samples, rss_settled.get("VmHWM", 0)]) - rss_start.get("VmRSS", 0),
        # the same peak against the RSS after the first checkpoint (processes warmed up: a first
        # attempt, statements compiled), to separate what the flood costs from what starting costs
        "rss_growth_after_first_kib": max([*samples, rss_settled.get("VmHWM", 0)]) - points[0]["rss_kib"],
        "checkpoints": points,
        "final": final,
        "accounting": {
            "reached_hub_subscriber": final["created"] - final["hub_overflow"],
            "hang_receiver_connections": hang_stats["connections"],
            "drops_logged": dict(drops_logged),
            "drops_logged_total": sum(drops_logged.values()),
            "hub_overflow_warnings": hub_warnings,
            "hub_overflow_logged_total": hub_logged_total,
        },
        "db_statuses": statuses,
        "db_claimable": claimable,
        "mcp_claim": {
            "agents": CLAIM_AGENTS,
            "claimed": len(claim["claimed"]),
            "unique": len(set(claim["claimed"])),
            "errors": claim["errors"],
            "wanted": CLAIM_AGENTS * CLAIMS_PER_AGENT,
        },
    }
