"""Where the retry of an outbound attempt is decided, for notify hooks and A2A push alike.

A failed attempt (a :class:`~switchboard.push.PushError`) is tried again when the push taxonomy calls
it retryable (a network error, a timeout, 408, 429, a 5xx; docs/push.md), when the policy retries TLS
failures too (A2A push: a certificate can be mid-renewal), and while the backoff has attempts left.
The wait is the backoff's, lengthened to a receiver's ``Retry-After`` up to ``retry_after_cap`` when
the policy honours it (A2A push). Everything else ends the notification: a redirect, any other 4xx, a
status outside 2xx-5xx, a target the SSRF guard refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from switchboard.delivery.backoff import Backoff
from switchboard.push import PushError, RetryableStatus, TLSFailure


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    backoff: Backoff
    retry_tls: bool = False
    retry_after_cap: float | None = None  # None: a Retry-After is not honoured

    @property
    def max_attempts(self) -> int:
        return self.backoff.max_attempts

    def may_attempt(self, attempts: int) -> bool:
        """May another attempt start after ``attempts`` were made?"""
        return not self.backoff.exhausted(attempts)

    def retryable(self, err: PushError) -> bool:
        """Would this failure be tried again, attempts permitting?"""
        return err.retryable or (self.retry_tls and isinstance(err, TLSFailure))

    def next_delay(self, err: PushError, attempts: int) -> float | None:
        """Seconds until the next attempt after the ``attempts``-th failed with ``err``; None: final."""
        if not self.retryable(err) or not self.may_attempt(attempts):
            return None
        delay = self.backoff.delay(attempts)
        if (
            self.retry_after_cap is not None
            and isinstance(err, RetryableStatus)
            and err.retry_after is not None
        ):
            delay = min(self.retry_after_cap, max(delay, err.retry_after))
        return delay
