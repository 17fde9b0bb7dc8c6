"""The one backoff schedule of the tree: how long to wait after the n-th failed attempt.

Used by the todo retry scheduler (ADR-0007), A2A push (the same shape, its own settings) and notify
hooks (an explicit, jittered schedule: SPEC-0024 REQ-7's "about 1 second and then about 5 seconds").
What is retried at all is decided elsewhere (:mod:`switchboard.delivery.retry` for outbound delivery).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

MAX_DOUBLINGS = 64  # 2**64 x any base is past every cap; larger exponents would overflow a float


@dataclass(frozen=True, slots=True)
class Backoff:
    """``base`` x 2^(attempt-1) capped at ``cap`` (or ``steps[attempt-1]``, the last step repeating),
    each delay drawn from ``[1 - jitter, 1 + jitter]`` x that, so failures do not retry in lockstep.
    ``max_attempts`` is how many attempts a piece of work gets in all."""

    base: float = 30.0
    cap: float = 3600.0
    max_attempts: int = 5
    steps: tuple[float, ...] = ()
    jitter: float = 0.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after ``attempt`` attempts failed (``attempt`` >= 1)."""
        if self.steps:
            delay = self.steps[min(max(attempt, 1), len(self.steps)) - 1]
        else:
            delay = min(self.cap, self.base * 2 ** min(MAX_DOUBLINGS, max(0, attempt - 1)))
        if self.jitter:
            return float(delay * random.uniform(1 - self.jitter, 1 + self.jitter))
        return float(delay)

    def exhausted(self, attempts: int) -> bool:
        """True once ``attempts`` attempts were made: no further one may start."""
        return attempts >= self.max_attempts
