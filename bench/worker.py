"""Bench-only notify worker: ``switchboard.notify.worker`` with the bench launcher's two seams.

``bench/server.py`` starts it in place of ``python -m switchboard.notify.worker`` when a scenario sets
``notify_process``: ``python -m bench.worker CA_PEM PATCHES_JSON [PROFILE_PATH]``. The resolver maps ``*.bench.test``
to 127.0.0.1 and TLS trusts the bench CA (checks on), as in the server; the what-if patches apply here
too, since this is where the dispatcher runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import sys

from bench.server import _Profiling, bench_resolver
from switchboard.notify.worker import run
from switchboard.obs import configure_logging


def _first_to_claim(path: str) -> bool:
    try:
        os.close(os.open(path + ".claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def main(argv: list[str]) -> int:
    ca_pem, patches, profile_path = argv[0], json.loads(argv[1]), argv[2] if len(argv) > 2 else ""
    if profile_path and _first_to_claim(profile_path):
        # scenario 5: the server forwards SIGUSR1/SIGUSR2 to every worker process; one of them (they
        # share the work alike, each for its share of the endpoints) is profiled
        profiling = _Profiling(profile_path)
        signal.signal(signal.SIGUSR1, profiling.start)
        signal.signal(signal.SIGUSR2, profiling.stop)
    if patches:
        import bench.experiments.patches_s4  # noqa: F401  (registers scenario 4's patches)
        from bench.experiments.patches import apply

        apply(patches)
    configure_logging()
    ctx = ssl.create_default_context(cafile=ca_pem)
    return asyncio.run(run(resolver=bench_resolver, ssl_context=ctx))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
