"""Token buckets keyed by an id (endpoint, source, hook). In-process by design: limits protect this
instance's resources; the database enforces every cross-instance guarantee."""

from __future__ import annotations

from collections import OrderedDict

from switchboard.clock import Clock


class RateLimiter:
    def __init__(
        self, clock: Clock, per_minute: float, *, burst: float | None = None, max_keys: int = 100_000
    ):
        self.clock = clock
        self.rate = per_minute / 60.0
        self.burst = burst if burst is not None else max(1.0, per_minute)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._max_keys = max_keys

    def allow(self, key: str, cost: float = 1.0) -> bool:
        now = self.clock.now()
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        allowed = tokens >= cost
        if allowed:
            tokens -= cost
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        if len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return allowed
