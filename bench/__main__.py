"""``python -m bench``: every scenario, one run, then docs/benchmarks.md and a final table.

Options: ``--only s1,s2`` runs a subset (the document is only rewritten by a full run),
``--quick`` shrinks every scenario for a smoke run (never published), ``--no-doc`` skips the document.
Raw results (JSON, server logs, the profile) go to ``bench/results/<timestamp>/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import (
    floor,
    report,
    s1_ingest,
    s2_dispatch,
    s3_overflow,
    s4_claim,
    s5_profile,
    s6_retention,
    soak,
    startup,
)
from bench.common import BenchCA, Progress, load_average
from bench.context import Bench
from bench.procs import ClientProc

SCENARIOS = {
    "s1": s1_ingest,
    "s2": s2_dispatch,
    "s3": s3_overflow,
    "s4": s4_claim,
    "s5": s5_profile,
    "s6": s6_retention,
    "startup": startup,
}
# Run only when named in --only (scenario 4 measures the floor through its own server).
EXTRA = {"floor": floor, "soak": soak}
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated scenarios (s1..s5, floor, s6, soak, startup); default: s1..s6, startup",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--out", default="", help="results folder (default bench/results/<timestamp>)")
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> int:
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(SCENARIOS)
    scenarios = {**SCENARIOS, **EXTRA}
    unknown = [s for s in chosen if s not in scenarios]
    if unknown:
        print(f"unknown scenarios: {', '.join(unknown)}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / stamp
    root.mkdir(parents=True, exist_ok=True)
    progress = Progress(sum(scenarios[s].ESTIMATE for s in chosen) * (0.4 if args.quick else 1.0))
    progress.start()
    started = time.monotonic()
    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": "python -m bench" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else ""),
        "load_before": load_average(),
        "quick": args.quick,
        "results_dir": str(root),
        "git": report.git_info(),
    }
    results: dict[str, Any] = {}
    client = ClientProc()
    try:
        await client.run("warm", {})
        bench = Bench(
            root=root, ca=BenchCA.create(root / "ca"), progress=progress, client=client, quick=args.quick
        )
        for name in chosen:
            module = scenarios[name]
            t0 = time.monotonic()
            results[name] = await module.run(bench)
            results[name]["wall_seconds"] = round(time.monotonic() - t0, 1)
            (root / "results.json").write_text(
                json.dumps({"meta": meta, "results": results}, indent=1, default=str)
            )
        meta["notes"] = bench.notes
    finally:
        await client.stop()
        progress.close()
    meta["load_after"] = load_average()
    meta["wall_seconds"] = round(time.monotonic() - started, 1)
    meta["machine"] = report.machine_info()
    (root / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    print(report.final_table(meta, results))
    write = not args.no_doc and not args.quick and set(chosen) == set(SCENARIOS)
    if write:
        report.write_doc(DOC, meta, results)
        print(f"\nwrote {DOC.relative_to(DOC.parent.parent)}; raw results in {root}")
    else:
        print(f"\nraw results in {root} (docs/benchmarks.md not rewritten)")
    return 0


def main() -> int:
    return asyncio.run(_main(_args(sys.argv[1:])))


if __name__ == "__main__":
    raise SystemExit(main())
