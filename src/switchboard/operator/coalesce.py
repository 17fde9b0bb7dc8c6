"""At most one operator event per key per window, each saying how many occurrences it stands for.

The first occurrence of a key after a quiet window is emitted at once (``count: 1``); the ones that
follow within the window are gathered and emitted as one event when the window ends, by a timer, never
by waiting for a later occurrence; :meth:`Coalescer.close` emits what is gathered. The sum of ``count``
over the emitted events equals the occurrences. Keys are bounded: past ``max_keys`` gathered at once, a
new key's occurrence is refused (the caller counts and logs it), so a flood of distinct keys cannot grow
memory.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Emit = Callable[[str, dict[str, Any]], None]  # (event type, data with ``count``)
MAX_KEYS = 1000


@dataclass
class _Gathered:
    type: str
    data: dict[str, Any]
    count: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class Coalescer:
    def __init__(
        self,
        emit: Emit,
        window: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self.emit, self.window, self._clock, self.max_keys = emit, window, clock, max_keys
        self._last: dict[tuple[str, str], float] = {}  # key -> when its last event was emitted
        self._gathered: dict[tuple[str, str], _Gathered] = {}
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    def add(self, type_: str, key: str, data: dict[str, Any], *, count: int = 1, reason: str = "") -> bool:
        """``count`` occurrences of ``key`` (``reason``: tallied per reason when given); False: refused
        (too many keys gathered at once)."""
        k = (type_, key)
        now = self._clock()
        if k not in self._gathered and now - self._last.get(k, -self.window) >= self.window:
            self._last[k] = now
            self._prune(now)
            self.emit(type_, {**data, "count": count, **({"reasons": {reason: count}} if reason else {})})
            return True
        gathered = self._gathered.get(k)
        if gathered is None:
            if len(self._gathered) >= self.max_keys:
                return False
            gathered = self._gathered[k] = _Gathered(type_, dict(data))
        gathered.data.update(data)
        gathered.count += count
        if reason:
            gathered.reasons[reason] = gathered.reasons.get(reason, 0) + count
        if k not in self._timers:
            self._schedule(k, max(0.0, self._last.get(k, now) + self.window - now))
        return True

    def _schedule(self, k: tuple[str, str], delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to time it: emit now rather than risk losing it
            self.flush(k)
            return
        self._timers[k] = loop.call_later(delay, self.flush, k)

    def flush(self, k: tuple[str, str]) -> None:
        """Emit what ``k`` gathered (the timer calls this at the window's end)."""
        timer = self._timers.pop(k, None)
        if timer is not None:
            timer.cancel()
        gathered = self._gathered.pop(k, None)
        if gathered is None or gathered.count == 0:
            return
        self._last[k] = self._clock()
        data = {**gathered.data, "count": gathered.count}
        if gathered.reasons:
            data["reasons"] = gathered.reasons
        self.emit(gathered.type, data)

    def close(self) -> None:
        """Emit everything gathered, now (shutdown)."""
        for k in list(self._gathered):
            self.flush(k)

    def _prune(self, now: float) -> None:
        """Forget keys quiet for a whole window: their next occurrence is emitted at once anyway."""
        if len(self._last) > 4 * self.max_keys:
            for k in [
                k for k, at in self._last.items() if now - at >= self.window and k not in self._gathered
            ]:
                del self._last[k]
