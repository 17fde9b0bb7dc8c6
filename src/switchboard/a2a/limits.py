"""Per-destination-host limits for push delivery: a token bucket per host, and in-flight counts.

Keyed by host only, so the limit holds across all tenants that point at one receiver. Per instance, like
every rate limit in Switchboard (docs/architecture.md): it protects receivers from this instance; the
database, not this, guarantees that each delivery is sent once.

Unlike ``switchboard.ratelimit.RateLimiter`` (which answers allow/deny), the worker needs to *ask*
before claiming: a host without a token is left out of the claim, so its deliveries wait in the outbox
instead of being dropped, and never occupy a worker while they wait.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict

from switchboard.clock import Clock


class HostLimits:
    def __init__(
        self, clock: Clock, *, per_minute: float, burst: int, inflight: int, max_hosts: int = 100_000
    ) -> None:
        if per_minute <= 0 or burst < 1 or inflight < 1:
            raise ValueError("per_minute must be positive, burst and inflight at least 1")
        self.clock = clock
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.inflight_cap = inflight
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._inflight: defaultdict[str, int] = defaultdict(int)
        self._max_hosts = max_hosts

    def _tokens(self, host: str, now: float) -> float:
        tokens, last = self._buckets.get(host, (self.burst, now))
        return min(self.burst, tokens + max(0.0, now - last) * self.rate)

    def take(self, host: str) -> float:
        """Take a token: 0.0 when one was there, else the seconds until one will be (nothing taken)."""
        now = self.clock.now()
        tokens = self._tokens(host, now)
        if tokens >= 1.0:
            self._buckets[host] = (tokens - 1.0, now)
            self._buckets.move_to_end(host)
            if len(self._buckets) > self._max_hosts:
                self._buckets.popitem(last=False)
            return 0.0
        self._buckets[host] = (tokens, now)
        return (1.0 - tokens) / self.rate

    def blocked_hosts(self) -> list[str]:
        """Hosts to leave out of the next claim: no token left, or at their in-flight cap."""
        now = self.clock.now()
        empty: list[str] = []
        for host in list(self._buckets):
            tokens = self._tokens(host, now)
            if tokens >= self.burst:
                del self._buckets[host]  # a full bucket is the same as none: keep the map small
            elif tokens < 1.0:
                empty.append(host)
        full = [h for h, n in self._inflight.items() if n >= self.inflight_cap]
        return sorted(set(empty) | set(full))

    def next_token_in(self) -> float | None:
        """Seconds until the soonest empty bucket has a token again (to time the next poll)."""
        now = self.clock.now()
        waits = [(1.0 - t) / self.rate for t in (self._tokens(h, now) for h in self._buckets) if t < 1.0]
        return min(waits) if waits else None

    def at_inflight_cap(self, host: str) -> bool:
        return self._inflight.get(host, 0) >= self.inflight_cap

    def started(self, host: str) -> None:
        self._inflight[host] += 1

    def finished(self, host: str) -> None:
        self._inflight[host] -= 1
        if self._inflight[host] <= 0:
            del self._inflight[host]
