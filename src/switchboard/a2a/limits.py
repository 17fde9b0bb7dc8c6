"""Per-destination limits for push delivery: a token bucket and an in-flight count per **pinned IP**.

Keyed by the addresses the SSRF guard validated for an attempt (the only ones the transport may dial),
not by the URL's host name: many names for one address share that address's limit, so registering
``a.example``, ``b.example``, ... for one receiver does not multiply its rate. An attempt takes a token
from every address its name resolved to (any of them may be dialled). The limit holds across all
tenants. Per instance, like every rate limit in Switchboard (docs/architecture.md): it protects
receivers from this instance; the database, not this, guarantees that each delivery is sent once.

Unlike ``switchboard.ratelimit`` (which answers allow/deny), the worker needs to *ask* before claiming:
the outbox knows host names only, so the addresses each host resolved to at its last attempt are
remembered (:meth:`learn`) and a host whose addresses are out of tokens or at their in-flight cap is
left out of the claim. Its deliveries wait in the outbox instead of being dropped, and never occupy a
worker while they wait. The check that counts is the one at attempt time, on the addresses just
validated; the memory only spares a claim that would be handed straight back.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Sequence

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
        self._names: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # host -> IPs at its last attempt
        self._max_hosts = max_hosts
        self._max_names = min(max_hosts, 10_000)  # scanned by blocked_hosts() on every claim

    def _tokens(self, key: str, now: float) -> float:
        tokens, last = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + max(0.0, now - last) * self.rate)

    def learn(self, host: str, ips: Sequence[str]) -> None:
        """Remember what ``host`` resolved to (validated) at its latest attempt."""
        self._names[host] = tuple(ips)
        self._names.move_to_end(host)
        if len(self._names) > self._max_names:
            self._names.popitem(last=False)

    def take(self, ips: Sequence[str] | str) -> float:
        """Take a token from every address: 0.0 when each had one, else the seconds until all will
        (nothing taken)."""
        keys = (ips,) if isinstance(ips, str) else tuple(dict.fromkeys(ips))
        now = self.clock.now()
        levels = {key: self._tokens(key, now) for key in keys}
        short = [key for key, tokens in levels.items() if tokens < 1.0]
        if short:
            for key in short:
                self._buckets[key] = (levels[key], now)
            return max((1.0 - levels[key]) / self.rate for key in short)
        for key, tokens in levels.items():
            self._buckets[key] = (tokens - 1.0, now)
            self._buckets.move_to_end(key)
        while len(self._buckets) > self._max_hosts:
            self._buckets.popitem(last=False)
        return 0.0

    def _blocked_keys(self) -> set[str]:
        now = self.clock.now()
        empty: set[str] = set()
        for key in list(self._buckets):
            tokens = self._tokens(key, now)
            if tokens >= self.burst:
                del self._buckets[key]  # a full bucket is the same as none: keep the map small
            elif tokens < 1.0:
                empty.add(key)
        return empty | {k for k, n in self._inflight.items() if n >= self.inflight_cap}

    def blocked_hosts(self) -> list[str]:
        """Host names to leave out of the next claim: an address they resolved to last time has no
        token left, or is at its in-flight cap."""
        blocked = self._blocked_keys()
        if not blocked:
            return []
        return sorted(host for host, ips in self._names.items() if blocked.intersection(ips))

    def next_token_in(self) -> float | None:
        """Seconds until the soonest empty bucket has a token again (to time the next poll)."""
        now = self.clock.now()
        waits = [(1.0 - t) / self.rate for t in (self._tokens(k, now) for k in self._buckets) if t < 1.0]
        return min(waits) if waits else None

    def at_inflight_cap(self, ips: Sequence[str] | str) -> bool:
        keys = (ips,) if isinstance(ips, str) else ips
        return any(self._inflight.get(key, 0) >= self.inflight_cap for key in keys)

    def host_blocked(self, host: str) -> bool:
        """What the claim knows of ``host`` from its last attempt: is any of its addresses full?"""
        return self.at_inflight_cap(self._names.get(host, ()))

    def started(self, ips: Sequence[str] | str) -> None:
        for key in (ips,) if isinstance(ips, str) else dict.fromkeys(ips):
            self._inflight[key] += 1

    def finished(self, ips: Sequence[str] | str) -> None:
        for key in (ips,) if isinstance(ips, str) else dict.fromkeys(ips):
            self._inflight[key] -= 1
            if self._inflight[key] <= 0:
                del self._inflight[key]
