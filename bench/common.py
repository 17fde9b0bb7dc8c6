"""Shared helpers: statistics, the stderr progress line, the bench CA, /proc readings, metrics parsing."""

from __future__ import annotations

import math
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme

#: Host names the bench uses for receivers; the server launcher's resolver maps them to 127.0.0.1.
HOST_SUFFIX = ".bench.test"
RECEIVER_HOST = f"rcv{HOST_SUFFIX}"
LOOPBACK = "127.0.0.1"

# -- statistics ---------------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile of ``values`` (0 <= p <= 100); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo))


def summarize_ms(seconds: Iterable[float]) -> dict[str, float]:
    """p50, p90, p99, max and mean of latencies given in seconds, reported in milliseconds."""
    values = [v * 1000.0 for v in seconds]
    if not values:
        return {"n": 0, "p50": math.nan, "p90": math.nan, "p99": math.nan, "max": math.nan, "mean": math.nan}
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values),
        "mean": sum(values) / len(values),
    }


def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


# -- ports, CA ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released): connecting is refused at once."""
    return free_port()


@dataclass(frozen=True)
class BenchCA:
    """A throwaway trustme CA and one receiver certificate, written as PEM files for other processes."""

    ca_pem: str
    cert_pem: str
    key_pem: str

    @classmethod
    def create(cls, folder: Path) -> BenchCA:
        folder.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        # The receiver certificate names the bench host (Switchboard dials it through its resolver) and
        # 127.0.0.1 (the peers' plain httpx clients use the address, as they resolve with the system).
        leaf = ca.issue_cert(RECEIVER_HOST, LOOPBACK)
        ca_pem = folder / "ca.pem"
        cert_pem = folder / "receiver-chain.pem"
        key_pem = folder / "receiver-key.pem"
        ca.cert_pem.write_to_path(str(ca_pem))
        leaf.private_key_pem.write_to_path(str(key_pem))
        with cert_pem.open("wb") as fh:
            for blob in leaf.cert_chain_pems:
                fh.write(blob.bytes())
        return cls(str(ca_pem), str(cert_pem), str(key_pem))


# -- /proc ----------------------------------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads); 0 when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and all its children, those that ended included (the kernel adds a reaped
    child's time to its parent's ``cutime``): a PostgreSQL cluster's postmaster and every backend,
    also the connections a peer opens and closes within the measured window."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rfind(")") + 2 :].split()
    reaped = (int(fields[13]) + int(fields[14])) / _CLK_TCK
    return cpu_seconds(pid) + reaped + sum(cpu_seconds(child) for child in children_of(pid))


def children_of(pid: int) -> list[int]:
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        if int(raw[raw.rfind(")") + 2 :].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def memory_kib(pids: int | Sequence[int]) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) in KiB, summed over ``pids`` (the server and its notify worker: the sum
    of the peaks bounds the peak of the sum from above), with RSS split into anonymous memory (the heap),
    file-backed pages and shared memory (SQLite's WAL index is a shared mapping)."""
    out: dict[str, int] = {}
    for pid in [pids] if isinstance(pids, int) else pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                    out[key] = out.get(key, 0) + int(value.split()[0])
        except OSError:
            pass
    return out


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return one, five, fifteen


class CpuMeter:
    """CPU used by a set of processes over a window, in cores (CPU seconds per wall second)."""

    def __init__(self, pids: dict[str, int | Sequence[int]], trees: dict[str, int] | None = None) -> None:
        """``trees``: name -> a process counted with all its children (:func:`tree_cpu_seconds`)."""
        self.pids = {name: ([p] if isinstance(p, int) else list(p)) for name, p in pids.items()}
        self.trees = dict(trees or {})
        self._start: dict[str, float] = {}
        self._t0 = 0.0

    def _read(self) -> dict[str, float]:
        return {
            **{name: sum(cpu_seconds(p) for p in pids) for name, pids in self.pids.items()},
            **{name: tree_cpu_seconds(pid) for name, pid in self.trees.items()},
        }

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._start = self._read()

    def stop(self) -> dict[str, float]:
        wall = max(time.monotonic() - self._t0, 1e-9)
        end = self._read()
        return {name: round((end[name] - self._start.get(name, 0.0)) / wall, 2) for name in end}


# -- Prometheus text --------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


# -- progress ------------------------------------------------------------------------------------------


@dataclass
class Progress:
    """One stderr line: a bar over the planned seconds of every phase, the phase name and elapsed time.

    Phases carry an estimated duration; the bar moves with time inside a phase (capped at its estimate)
    and jumps to the phase's end when it finishes, so it never goes backwards.
    """

    total_estimate: float
    tty: bool = field(default_factory=lambda: sys.stderr.isatty())
    _done: float = 0.0
    _phase: str = "starting"
    _phase_estimate: float = 0.0
    _phase_started: float = field(default_factory=time.monotonic)
    _started: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """A redrawn bar on a terminal; one plain line per phase otherwise (CI logs, pipes)."""
        if not self.tty:
            return
        self._thread = threading.Thread(target=self._loop, name="bench-progress", daemon=True)
        self._thread.start()

    def phase(self, name: str, estimate: float) -> None:
        with self._lock:
            self._done += min(time.monotonic() - self._phase_started, self._phase_estimate)
            self._phase = name
            self._phase_estimate = max(estimate, 0.1)
            self._phase_started = time.monotonic()
        if not self.tty:
            print(f"[bench {self._elapsed()}] {name}", file=sys.stderr, flush=True)

    def finish_phase(self) -> None:
        with self._lock:
            self._done += self._phase_estimate
            self._phase_started = time.monotonic()
            self._phase_estimate = 0.0

    def note(self, text: str) -> None:
        """A line of its own above the bar."""
        with self._lock:
            if self.tty:
                sys.stderr.write("\r\x1b[2K" + text + "\n")
            else:
                sys.stderr.write(text + "\n")
            sys.stderr.flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()

    def _elapsed(self) -> str:
        secs = int(time.monotonic() - self._started)
        return f"{secs // 60}m{secs % 60:02d}s"

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            with self._lock:
                inside = min(time.monotonic() - self._phase_started, self._phase_estimate)
                frac = min((self._done + inside) / max(self.total_estimate, 1e-9), 0.999)
                width = 30
                filled = int(frac * width)
                bar = "#" * filled + "-" * (width - filled)
                line = f"\r\x1b[2K[{bar}] {frac * 100:3.0f}% {self._elapsed()}  {self._phase}"
                sys.stderr.write(line[:200])
                sys.stderr.flush()


def fmt(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
