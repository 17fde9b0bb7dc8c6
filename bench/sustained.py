"""``python -m bench.sustained OUT``: scenario 2's sustained phase alone, for comparing code side by side.

Scenario 2's setup and warm-up on a fresh server, a short 300 todos/s settle, then ``--seconds`` at
``--rate`` todos/s (fan-out deliveries of 10). Prints one JSON line: CPU per process of the server and of
each notify worker (from ``/proc``, over the measured phase), the commit-to-receiver latency (title
stamp) and the ingest latency, the steady delivered rate, the drops, and the slow stretches: per 100 ms of
send time where a todo took longer than ``--slow-ms``, the worst wait before its commit (ingest) and after
it (dispatch). The records go to ``OUT/records.json``.

Not part of ``python -m bench``. The tenth round compared code with it: two worktrees of the commits, each
run with ``PYTHONPATH=<worktree>/src``, alternating (the machine's speed drifts by tens of percent from
minute to minute, so only alternating runs compare; docs/benchmarks.md, "Tenth round").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import s2_dispatch as s2
from bench.common import BenchCA, Progress
from bench.context import Bench, running, sqlite_rows
from bench.procs import ClientProc, ReceiverProc

CLOCK_TICKS = 100  # USER_HZ: /proc/<pid>/stat counts CPU time in these


def _cpu_ticks(pids: list[int]) -> dict[int, int]:
    ticks: dict[int, int] = {}
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


def slow_stretches(records: list[Any], created_ms: dict[str, int], slow_ms: float) -> list[dict[str, Any]]:
    """Per 100 ms of send time with a todo slower than ``slow_ms``: the worst total, before-commit and
    after-commit waits, in ms."""
    rows = [r for r in records if r[0] == "sb" and r[2] > 0]
    if not rows:
        return []
    start = min(r[2] for r in rows)
    buckets: defaultdict[int, list[Any]] = defaultdict(list)
    for r in rows:
        buckets[int((r[2] - start) * 10)].append(r)
    out = []
    for bucket, members in sorted(buckets.items()):
        worst = max((r[1] - r[2]) * 1000 for r in members)
        if worst <= slow_ms:
            continue
        known = [r for r in members if r[3] in created_ms]
        out.append(
            {
                "at_s": bucket / 10,
                "worst_ms": round(worst, 1),
                "before_commit_ms": round(
                    max((created_ms[r[3]] / 1000 - r[2] for r in known), default=0) * 1000, 1
                ),
                "after_commit_ms": round(
                    max((r[1] - created_ms[r[3]] / 1000 for r in known), default=0) * 1000, 1
                ),
                "todos": len(members),
            }
        )
    return out


async def run(out: Path, rate: float, seconds: float, slow_ms: float) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    client = ClientProc()
    receiver: ReceiverProc | None = None
    try:
        await client.run("warm", {})
        b = Bench(root=out, ca=BenchCA.create(out / "ca"), progress=Progress(60), client=client)
        receiver = await b.ok_receiver().ready()
        server, world = await s2.setup(b, "s2", receiver)
        async with running(server, kill=True):
            await s2.switchboard_burst(b, server, world, receiver, s2.WARMUP_TODOS)
            targets = s2.sustained_targets(world)
            await s2.sustained(b, server, receiver, targets, s2.SUSTAINED_FANOUT, 300, 3, drain_timeout=30)
            pids = server.pids()
            before, started = _cpu_ticks(pids), time.monotonic()
            phase = await s2.sustained(
                b, server, receiver, targets, s2.SUSTAINED_FANOUT, rate, seconds, drain_timeout=15
            )
            after, wall = _cpu_ticks(pids), time.monotonic() - started
            records = phase.pop("_records")
            created = {
                str(row[0]): int(row[1])
                for row in sqlite_rows(server.settings["data_dir"], "SELECT id, created_at FROM todos")
            }
        (out / "records.json").write_text(json.dumps(records))
        cores = [round((after[p] - before[p]) / CLOCK_TICKS / wall, 3) for p in pids]
        return {
            "cores": {"server": cores[0], "workers": cores[1:]},
            "latency_ms": phase["latency_stamp"],
            "ingest_ms": phase["ingest_latency"],
            "delivered_per_s": phase["delivered_rate_steady"],
            "dropped": phase["dropped"],
            "slow_stretches": slow_stretches(records, created, slow_ms),
        }
    finally:
        if receiver is not None:
            await receiver.stop()
        await client.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a fresh folder for the run")
    parser.add_argument("--rate", type=float, default=s2.HIGH_RATE, help="todos/s (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=12.0, help="measured seconds (default %(default)s)")
    parser.add_argument("--slow-ms", type=float, default=80.0, help="a slow todo (default %(default)s ms)")
    args = parser.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty (a second run there would meet the first one's data)")
    print(json.dumps(asyncio.run(run(args.out, args.rate, args.seconds, args.slow_ms))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
