"""Per-destination limits for push delivery: a rate window and an in-flight count per **pinned IP**.

Keyed by the addresses the SSRF guard validated for an attempt (the only ones the transport may dial),
not by the URL's host name: many names for one address share that address's limit, so registering
``a.example``, ``b.example``, ... for one receiver does not multiply its rate. An attempt takes from
every address its name resolved to (any of them may be dialled), or from none. The limit holds across
all tenants. Per instance, like every rate limit in Switchboard (docs/architecture.md): it protects
receivers from this instance; the database, not this, guarantees that each delivery is sent once.

The rate is the tree's one limiter, :class:`switchboard.core.ratelimit.WindowLimiter`: at most ``burst``
attempts to one address in any ``60 x burst / per_minute`` seconds (20 in any 10 s with the defaults),
so the sustained rate is ``per_minute`` and never more than ``burst`` go at once (docs/a2a.md).

The worker needs to *ask* before claiming: the outbox knows host names only, so the addresses each host
resolved to at its last attempt are remembered (:meth:`learn`) and a host whose addresses have no room
or are at their in-flight cap is left out of the claim. Its deliveries wait in the outbox instead of
being dropped, and never occupy a worker while they wait. The check that counts is the one at attempt
time, on the addresses just validated; the memory only spares a claim that would be handed straight
back.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Sequence

from switchboard.core.clock import Clock
from switchboard.core.ratelimit import WindowLimiter


def _keys(ips: Sequence[str] | str) -> tuple[str, ...]:
    return (ips,) if isinstance(ips, str) else tuple(dict.fromkeys(ips))


class HostLimits:
    def __init__(
        self, clock: Clock, *, per_minute: float, burst: int, inflight: int, max_hosts: int = 100_000
    ) -> None:
        if per_minute <= 0 or burst < 1 or inflight < 1:
            raise ValueError("per_minute must be positive, burst and inflight at least 1")
        self.clock = clock
        self.window = WindowLimiter(clock, burst, 60.0 * burst / per_minute)
        self.inflight_cap = inflight
        self._inflight: defaultdict[str, int] = defaultdict(int)
        self._names: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # host -> IPs at its last attempt
        self._max_names = min(max_hosts, 10_000)  # scanned by blocked_hosts() on every claim

    def learn(self, host: str, ips: Sequence[str]) -> None:
        """Remember what ``host`` resolved to (validated) at its latest attempt."""
        self._names[host] = tuple(ips)
        self._names.move_to_end(host)
        if len(self._names) > self._max_names:
            self._names.popitem(last=False)

    def take(self, ips: Sequence[str] | str) -> float:
        """Admit one attempt at every address: 0.0 when each had room, else the seconds until all will
        (nothing taken)."""
        keys = _keys(ips)
        wait = max((self.window.wait(key) for key in keys), default=0.0)
        if wait > 0:
            return wait
        for key in keys:
            self.window.take(key)
        return 0.0

    def blocked_hosts(self) -> list[str]:
        """Host names to leave out of the next claim: an address they resolved to last time has no
        room left, or is at its in-flight cap."""
        full = set(self.window.waiting())
        full.update(k for k, n in self._inflight.items() if n >= self.inflight_cap)
        if not full:
            return []
        return sorted(host for host, ips in self._names.items() if full.intersection(ips))

    def next_room_in(self) -> float | None:
        """Seconds until the soonest full address has room again (to time the next poll)."""
        return min(self.window.waiting().values(), default=None)

    def at_inflight_cap(self, ips: Sequence[str] | str) -> bool:
        return any(self._inflight.get(key, 0) >= self.inflight_cap for key in _keys(ips))

    def host_blocked(self, host: str) -> bool:
        """What the claim knows of ``host`` from its last attempt: is any of its addresses full?"""
        return self.at_inflight_cap(self._names.get(host, ()))

    def started(self, ips: Sequence[str] | str) -> None:
        for key in _keys(ips):
            self._inflight[key] += 1

    def finished(self, ips: Sequence[str] | str) -> None:
        for key in _keys(ips):
            self._inflight[key] -= 1
            if self._inflight[key] <= 0:
                del self._inflight[key]
