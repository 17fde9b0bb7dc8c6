"""Rate limits keyed by an id (endpoint, source, hook, address). In-process by default: those limits
protect this instance's resources. A limit that must hold for the cluster (SPEC-0024's 120
notifications per minute per hook; the MCP call limit per endpoint) is given a shared store on
PostgreSQL (:class:`SharedWindow`, implemented by :class:`switchboard.store.windows.SharedWindows`):
:meth:`WindowLimiter.admit` takes from the database instead of this process's log, one admission at a
time or in leased chunks (:class:`Leases`).

One limiter for every limit in the tree (issue 16): :class:`WindowLimiter`, a sliding window and a
*ceiling*. No ``window``-second interval ever holds more than ``limit`` admissions for one key. Where
a limit is "N per minute with a burst of B" (A2A push per address, OAuth registrations per hour), it
is B in any ``60 x B / N`` seconds (:meth:`WindowLimiter.per_minute`): never more than B at once, N a
minute sustained. A token bucket (an average with a burst on top) was replaced because it admits more
than its number in some minute: with burst 120 and 120 a minute, 233 in one minute was measured
(issue 14), and SPEC-0024's "120 notifications per minute" per hook is a promise to the receiver.
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from switchboard.core.clock import Clock


class SharedWindow(Protocol):
    """Where a shared window keeps its admissions (the database): the same rule, for every process."""

    async def take(self, key: str, limit: int, window: float, *, count: int = 1, hold: float = 0.0) -> int:
        """Take up to ``count`` admissions for ``key``, each counted as made ``hold`` seconds from now
        (a lease: the caller may use them until then); how many were taken."""
        ...


@dataclass(slots=True)
class _Lease:
    left: int  # admissions taken from the shared window and not used yet
    expires: float  # this clock's time after which the unused ones are let go
    size: int  # how many the last refill asked for
    used: int = 0
    full: bool = False  # the refill found the window full: refuse until expires, without asking again


class Leases:
    """Admissions taken from a shared window in chunks and used here without a round trip (the MCP call
    limit, issue 18). A chunk is counted in the shared window over the whole of its lease (from the take
    until ``hold`` seconds later), every moment a call from it can be made: the shared window's bound
    holds for every call admitted anywhere. What a lease leaves unused is lost (the cluster then admits
    fewer, never more), so the chunk follows the key's demand: 1 at first, then what the last lease's
    rate of use asks for over one lease (at most doubling, at most ``max_chunk``), back to what was used
    when one expires with some left. A refill that finds the window full (the store answers 0 only
    then, never for a busy window; fewer than asked is not full) is remembered for ``hold`` seconds: a
    caller over the limit is refused without a round trip, and may be refused up to ``hold`` seconds
    after the window has room."""

    def __init__(self, hold: float, max_chunk: int, max_keys: int) -> None:
        self.hold, self.max_chunk, self.max_keys = hold, max_chunk, max_keys
        self._held: dict[str, _Lease] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def use(self, key: str, now: float) -> bool | None:
        """True: admitted from the lease; False: refused (the window was full at the last refill,
        less than ``hold`` ago); None: a refill must decide."""
        lease = self._held.get(key)
        if lease is None or now >= lease.expires:
            return None
        if lease.full:
            return False
        if lease.left <= 0:
            return None
        lease.left -= 1
        lease.used += 1
        return True

    async def refill(self, key: str, clock: Clock, take: Callable[[int], Awaitable[int]]) -> bool:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # one refill per key at a time: concurrent callers share its chunk
            decided = self.use(key, clock.now())
            if decided is not None:
                return decided
            last = self._held.get(key)
            size = 1 if last is None or last.full else self._next_size(last, clock.now())
            started = clock.now()
            got = await take(size)
            self._forget_expired(started)
            self._held[key] = _Lease(
                left=max(0, got - 1), expires=started + self.hold, size=size, full=got <= 0
            )
            if got <= 0:
                return False
            self._held[key].used = 1
            return True

    def _next_size(self, last: _Lease, now: float) -> int:
        """The key's demand over one lease, from its last lease: what it used, scaled up when it ran out
        early (at most doubling, at most ``max_chunk``)."""
        if last.left > 0 or now >= last.expires:
            return max(1, min(self.max_chunk, last.used))
        elapsed = max(1e-3, now - (last.expires - self.hold))
        wanted = math.ceil(last.used * self.hold / elapsed)
        return max(1, min(self.max_chunk, 2 * last.size, wanted))

    def _forget_expired(self, now: float) -> None:
        if len(self._held) < self.max_keys:
            return
        for key in [k for k, lease in self._held.items() if now >= lease.expires]:
            del self._held[key]
            lock = self._locks.get(key)
            if lock is not None and not lock.locked():
                del self._locks[key]


class WindowLimiter:
    """At most ``limit`` admissions per key in any ``window`` seconds (a sliding log, exact).

    Each key keeps the times of its admissions within the last ``window`` seconds, at most ``limit`` of
    them; a new one is admitted only when fewer than ``limit`` are, so every closed interval of
    ``window`` seconds holds at most ``limit``. A refusal takes nothing: what is refused does not count.
    Memory is one float per admission of the last window (at most ``limit`` per key): a limit set far
    above the real rate costs what the rate costs, not what the limit allows (kept whole, a raised MCP
    limit's logs grew to ``limit`` floats per endpoint, and every full garbage collection walked them:
    the soak's claim p99 rose with them, docs/benchmarks.md). Keys idle for a whole window are
    forgotten (forgetting them changes no answer). If the clock steps back, a key's times are moved
    back with it, so a step never lets more through and never blocks a key for the length of the step.

    :meth:`take` answers the question a scheduler asks (how long until a slot frees), which is what
    a limiter that delays work instead of dropping it needs.
    """

    def __init__(
        self,
        clock: Clock,
        limit: int,
        window: float = 60.0,
        *,
        max_keys: int = 100_000,
        shared: SharedWindow | None = None,
        lease: float = 0.0,
    ) -> None:
        """``shared``: admit() takes from it, and the window holds for all who share it. ``lease`` (with
        ``shared``): take admissions in chunks held that many seconds (:class:`Leases`), so most calls
        cost no round trip to the shared store."""
        if limit < 1 or window <= 0:
            raise ValueError("limit must be at least 1 and window positive")
        self.clock = clock
        self.shared = shared
        self.leases = Leases(lease, max(1, limit // 10), max_keys) if shared and lease > 0 else None
        self.limit = limit
        self.window = window
        self._max_keys = max_keys  # past it, the key admitted least recently is forgotten
        # key -> admission times, oldest first; keys ordered by their newest admission, oldest first
        self._log: OrderedDict[str, deque[float]] = OrderedDict()

    @classmethod
    def per_minute(
        cls, clock: Clock, per_minute: float, *, burst: float | None = None, max_keys: int = 100_000
    ) -> WindowLimiter:
        """``per_minute`` sustained with at most ``burst`` (default: ``per_minute``) at once: ``burst``
        admissions in any ``60 x burst / per_minute`` seconds."""
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        limit = max(1, int(burst if burst is not None else per_minute))
        return cls(clock, limit, 60.0 * limit / per_minute, max_keys=max_keys)

    def allow(self, key: str, limit: int | None = None) -> bool:
        """Admit one for ``key`` if its window has room (this process's log)."""
        return self.take(key, limit) == 0.0

    async def admit(self, key: str, limit: int | None = None) -> bool:
        """Admit one for ``key`` if its window has room: in the shared store when there is one (every
        process and instance on the database counts), else as :meth:`allow`. ``limit``: this key's own
        limit for this call (a notify hook's ``rate_per_minute``), else the limiter's."""
        cap = self._limit(limit)
        shared = self.shared
        if shared is None:
            return self.allow(key, cap)
        leases = self.leases
        if leases is None:
            return await shared.take(key, cap, self.window) > 0
        decided = leases.use(key, self.clock.now())
        if decided is not None:
            return decided

        def take(count: int) -> Awaitable[int]:
            return shared.take(key, cap, self.window, count=count, hold=leases.hold)

        return await leases.refill(key, self.clock, take)

    def _limit(self, limit: int | None) -> int:
        if limit is None:
            return self.limit
        if limit < 1:
            raise ValueError("limit must be at least 1")
        return limit

    def take(self, key: str, limit: int | None = None) -> float:
        """Admit one for ``key`` and return 0.0, or admit nothing and return the seconds until the
        window has room again. ``limit`` as in :meth:`admit`: when a key's limit changes, its log is
        rebuilt with the new length, keeping its newest admissions, so a lower limit holds at once."""
        cap = self._limit(limit)
        now = self.clock.now()
        self._forget_idle(now)
        times = self._log.get(key)
        if times is None:
            times = self._log[key] = deque(maxlen=cap)
        elif times and times[-1] > now:  # the clock stepped back: move this key's history with it
            step = times[-1] - now
            times = self._log[key] = deque((t - step for t in times), maxlen=cap)
        elif times.maxlen != cap:
            times = self._log[key] = deque(times, maxlen=cap)  # keeps the newest ``cap``
        horizon = now - self.window
        while times and times[0] < horizon:  # out of every closed window from now on: never counted again
            times.popleft()
        if len(times) == cap:
            wait = times[0] + self.window - now
            if wait >= 0:
                return max(wait, 1e-9)  # the oldest is still inside the closed window: no room
        times.append(now)  # drops the oldest when full
        self._log.move_to_end(key)
        if len(self._log) > self._max_keys:
            self._log.popitem(last=False)
        return 0.0

    def kept(self, key: str) -> int:
        """How many admission times this process holds for ``key`` (what its memory costs)."""
        times = self._log.get(key)
        return 0 if times is None else len(times)

    def wait(self, key: str) -> float:
        """Seconds until ``key`` could be admitted (0.0: now), taking nothing: for a scheduler that
        leaves a full key out of its next claim instead of dropping its work."""
        now = self.clock.now()
        times = self._log.get(key)
        if times is None or len(times) < (times.maxlen or self.limit):
            return 0.0
        oldest = times[0] - max(0.0, times[-1] - now)  # as take() would see it after a clock step back
        if now - oldest > self.window:
            return 0.0
        return max(oldest + self.window - now, 1e-9)

    def waiting(self) -> dict[str, float]:
        """Every key with no room now, with the seconds until it has room: what a scheduler leaves out
        of its next claim, and when to look again."""
        self._forget_idle(self.clock.now())
        return {key: wait for key in self._log if (wait := self.wait(key)) > 0}

    def used(self, key: str) -> int:
        """Admissions for ``key`` within the last window (for metrics and tests)."""
        now = self.clock.now()
        return sum(1 for t in self._log.get(key, ()) if now - t <= self.window)

    def __len__(self) -> int:
        """Keys held now (each admitted within its last window)."""
        return len(self._log)

    def _forget_idle(self, now: float) -> None:
        while self._log:
            key, times = next(iter(self._log.items()))
            if times and now - times[-1] <= self.window:
                return
            del self._log[key]
