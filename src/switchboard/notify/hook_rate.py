"""A hook's own per-minute limit (issue 29): the bound every face checks (the write is
:func:`switchboard.notify.store.set_rate` on :func:`switchboard.store.notify_hooks.update_rate`).

Why a limit of its own: SPEC-0024's 120 per minute is a ceiling the server keeps for every receiver; an
endpoint whose receiver takes less (a small CI runner, a rate-limited chat relay) may ask for fewer, never
more. ``None`` is "the server's" (``SWITCHBOARD_NOTIFY_RATE_PER_MINUTE``, 120 by default). The value is
read with the hook at match time, so a change holds from the next notification on, in every process.
"""

from __future__ import annotations

from switchboard.notify.errors import InvalidHook

MAX_RATE = 120  # SPEC-0024: "at most 120 notifications per minute" per hook
MIN_RATE = 1


def checked_rate(value: object) -> int | None:
    """``rate_per_minute`` as a caller gave it: an integer 1..120, or None (the server's limit)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidHook(f"rate_per_minute must be an integer from {MIN_RATE} to {MAX_RATE}, or null")
    if not MIN_RATE <= value <= MAX_RATE:
        raise InvalidHook(
            f"rate_per_minute must be from {MIN_RATE} to {MAX_RATE} (SPEC-0024's ceiling); got {value}"
        )
    return value
