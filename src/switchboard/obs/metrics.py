"""The SPEC-0023 registry: ``switchboard_*`` series with bounded labels only.

One :class:`Metrics` per server instance (its own ``CollectorRegistry``), so several instances in one
test process do not share counters.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from switchboard import __version__

# Delivery latency runs from seconds (a receiver on the LAN) to hours (retries with backoff).
DELIVERY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ingest = Counter(
            "switchboard_ingest_total",
            "Inbound webhook deliveries by outcome.",
            ["outcome"],
            registry=r,
        )
        self.transitions = Counter(
            "switchboard_todo_transitions_total",
            "Todo transitions by kind (created, requeued, claimed, done, failed, dead, canceled).",
            ["transition"],
            registry=r,
        )
        self.claims = Counter(
            "switchboard_claims_total",
            "claim_next, claim_many and claim calls by result.",
            ["result"],
            registry=r,
        )
        self.claim_waiters = Gauge(
            "switchboard_mcp_claim_waiters",
            "claim_next and claim_many calls waiting (wait_seconds) for a todo on this instance.",
            registry=r,
        )
        self.mcp_calls = Counter(
            "switchboard_mcp_calls_total",
            "MCP tool calls by verb and result code.",
            ["verb", "code"],
            registry=r,
        )
        self.credential_cache = Counter(
            "switchboard_mcp_credential_cache_total",
            "Endpoint credentials verified from the instance's cache of verified credentials (hit) or by "
            "reading the endpoint from the database (miss).",
            ["result"],
            registry=r,
        )
        self.doorbells = Counter(
            "switchboard_doorbell_rings_total", "Channel doorbell rings by kind.", ["kind"], registry=r
        )
        self.hook_subscriber_errors = Counter(
            "switchboard_transition_subscriber_errors_total",
            "Transition subscribers that raised or overflowed.",
            ["subscriber", "error"],
            registry=r,
        )
        # The cluster relay (store/relay.py): other instances' ready transitions, on PostgreSQL.
        self.relay_events = Counter(
            "switchboard_cluster_relay_events_total",
            "Transitions the cluster relay received from other instances (received), and payloads it "
            "could not read (malformed).",
            ["result"],
            registry=r,
        )
        self.relay_connected = Gauge(
            "switchboard_cluster_relay_connected",
            "1 while the cluster relay's LISTEN connection is up (0: doorbells of other instances' "
            "todos wait for the heartbeat).",
            registry=r,
        )
        self.relay_reconnects = Counter(
            "switchboard_cluster_relay_reconnects_total",
            "Times the cluster relay's LISTEN connection came back after dropping.",
            registry=r,
        )
        self.ingest_seconds = Histogram(
            "switchboard_ingest_seconds",
            "Inbound webhook handling time.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        # SPEC-0024 REQ-11.
        self.notify_notifications = Counter(
            "switchboard_notify_hook_notifications_total",
            "Notify hook notifications by type and outcome.",
            ["type", "outcome"],
            registry=r,
        )
        self.notify_attempts = Counter(
            "switchboard_notify_hook_attempts_total",
            "Notify hook attempts by result.",
            ["result"],
            registry=r,
        )
        self.notify_disabled = Counter(
            "switchboard_notify_hooks_disabled_total",
            "Notify hooks disabled by reason.",
            ["reason"],
            registry=r,
        )
        self.notify_worker_errors = Counter(
            "switchboard_notify_worker_errors_total",
            "Notifications a delivery worker could not finish because of an unexpected error (REQ-12), "
            "by the stage it was at; the worker carries on.",
            ["stage"],
            registry=r,
        )
        self.notify_queue_depth = Gauge(
            "switchboard_notify_hook_queue_depth",
            "Notifications waiting in this instance's queue.",
            registry=r,
        )
        # A2A push notifications (docs/a2a.md).
        self.a2a_push_deliveries = Counter(
            "switchboard_a2a_push_deliveries_total",
            "A2A push deliveries by final outcome (delivered, failed, exhausted, revoked).",
            ["outcome"],
            registry=r,
        )
        self.a2a_push_attempts = Counter(
            "switchboard_a2a_push_attempts_total",
            "A2A push delivery attempts by result.",
            ["result"],
            registry=r,
        )
        self.a2a_push_deferred = Counter(
            "switchboard_a2a_push_deferred_total",
            "A2A push deliveries made to wait by the per-destination-host rate limit.",
            registry=r,
        )
        self.a2a_push_outbox_depth = Gauge(
            "switchboard_a2a_push_outbox_depth",
            "Undelivered rows in the A2A push outbox (every instance's), as of this instance's last poll.",
            registry=r,
        )
        self.a2a_push_oldest_undelivered_seconds = Gauge(
            "switchboard_a2a_push_oldest_undelivered_seconds",
            "Age of the oldest undelivered A2A push delivery, as of this instance's last poll.",
            registry=r,
        )
        self.a2a_calls = Counter(
            "switchboard_a2a_calls_total",
            "A2A JSON-RPC calls by method and result code.",
            ["method", "code"],
            registry=r,
        )

        # Operations (docs/self-hosting.md, "Observability").
        Gauge("switchboard_build_info", "The running build (value 1).", ["version"], registry=r).labels(
            __version__
        ).set(1)
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, fds...
        PlatformCollector(registry=r)  # python_info
        self.queue_backlog = Gauge(
            "switchboard_queue_backlog",
            "Todos waiting on a queue (pending, or failed and due for retry), across every tenant, as of "
            'this scrape. Queue names beyond the largest METRICS_MAX_QUEUES are summed as queue="_other".',
            ["queue"],
            registry=r,
        )
        self.queue_oldest_pending = Gauge(
            "switchboard_queue_oldest_pending_seconds",
            "Age of the oldest pending todo on a queue, as of this scrape (0 when none is pending).",
            ["queue"],
            registry=r,
        )
        self.queue_stats_errors = Counter(
            "switchboard_queue_stats_errors_total",
            "Scrapes whose queue statistics could not be read (the queue gauges kept their last values).",
            registry=r,
        )
        # Observed where the notification is delivered: in a notify worker child by default, whose
        # bucket counts are relayed here (switchboard.notify.wire), hence mergeable.
        self.notify_delivery_seconds = MergeableHistogram(
            "switchboard_notify_hook_delivery_seconds",
            "From the committed transition's match to the receiver's 2xx, per delivered notify-hook "
            "notification (retries included).",
            DELIVERY_BUCKETS,
            registry=r,
        )
        # The A2A push worker runs in the server process: a plain histogram. Its clock is the outbox
        # row's created_at, written in the transaction that committed the task's transition.
        self.a2a_delivery_seconds = Histogram(
            "switchboard_a2a_push_delivery_seconds",
            "From the committed task transition (its push enqueued) to the receiver's 2xx, per delivered "
            "A2A push (retries included).",
            buckets=DELIVERY_BUCKETS,
            registry=r,
        )
        self.mcp_request_seconds = Histogram(
            "switchboard_mcp_request_seconds",
            "MCP requests on /mcp from arrival to the end of the response, by JSON-RPC method and tool "
            '(verb="" for methods other than tools/call).',
            ["method", "verb"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )

        # The retention sweep (queue/retention.py, docs/reliability.md "Retention").
        self.retention_pruned = Counter(
            "switchboard_retention_pruned_total",
            "Rows the retention sweep deleted, by table (todos, todo_events, a2a_tasks; rows below an "
            "A2A task go by cascade, uncounted).",
            ["table"],
            registry=r,
        )
        self.retention_sweeps = Counter(
            "switchboard_retention_sweeps_total",
            "Retention sweeps this instance finished (each deletes what is past retention, maybe nothing).",
            registry=r,
        )
        self.retention_oldest_terminal = Gauge(
            "switchboard_retention_oldest_terminal_seconds",
            "Age of the oldest terminal todo kept, as of the last retention sweep (0 when none).",
            registry=r,
        )
        # Operator events (switchboard.operator): the operator webhook's own deliveries.
        self.operator_events = Counter(
            "switchboard_operator_events_total",
            "Operator webhook events by type and outcome (delivered; failed: given up after its attempts; "
            "dropped: the in-memory queue was full).",
            ["type", "outcome"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Children:
    """A labelled metric's children, kept by label values: ``labels()`` takes a lock and builds a key on
    every call, which the hot paths (every MCP call, every todo move) should not pay. Use it only for
    labels from a bounded set."""

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._kept: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._kept.get(values)
        if child is None:
            child = self._kept[values] = self._metric.labels(*values)
        return child


class MergeableHistogram(Collector):
    """A label-less histogram that can also take another process's bucket increments (``merge``), so a
    worker child's observations reach the server's /metrics exactly (prometheus_client's Histogram cannot
    be added to)."""

    def __init__(
        self, name: str, documentation: str, buckets: Sequence[float], *, registry: CollectorRegistry
    ) -> None:
        self.name, self.documentation = name, documentation
        self.bounds = (*sorted(buckets), math.inf)
        self._cumulative = [0.0] * len(self.bounds)
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, value: float) -> None:
        with self._lock:
            for i in range(bisect.bisect_left(self.bounds, value), len(self.bounds)):
                self._cumulative[i] += 1
            self._sum += value

    def merge(self, sample: str, labels: dict[str, str], delta: float) -> None:
        """Add a relayed increment of one sample (``<name>_bucket`` with ``le``, or ``<name>_sum``)."""
        with self._lock:
            if sample == self.name + "_sum":
                self._sum += delta
            elif sample == self.name + "_bucket":
                le = float(labels["le"])
                if le in self.bounds:
                    self._cumulative[self.bounds.index(le)] += delta

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            buckets = [(_le(b), c) for b, c in zip(self.bounds, self._cumulative, strict=True)]
            total = self._sum
        yield HistogramMetricFamily(self.name, self.documentation, buckets=buckets, sum_value=total)

    def describe(self) -> Iterable[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation)


def _le(bound: float) -> str:
    """A bucket bound as the exposition format writes it (``0.05``, ``1.0``, ``+Inf``)."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))
