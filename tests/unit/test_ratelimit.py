"""The tree's one limiter, switchboard.core.ratelimit.WindowLimiter, on an injected clock.

It is a ceiling: no closed interval of ``window`` seconds ever holds more than ``limit`` admissions of
one key, whatever the arrival pattern (checked by brute force over every window that starts at an
admission). A token bucket with burst 120 at 120 a minute admitted 233 in one minute on the burst-then-
steady arrivals below (issue 14); the window's "N a minute with a burst of B" never passes N.
"""

from __future__ import annotations

import random

import pytest

from switchboard.core.clock import ManualClock
from switchboard.core.ratelimit import WindowLimiter


def busiest_window(times: list[float], window: float) -> int:
    """The most admissions any closed interval of ``window`` seconds holds (an interval holding the most
    can always be slid to start at an admission)."""
    times = sorted(times)
    best, j = 0, 0
    for i, start in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] - start <= window:
            j += 1
        best = max(best, j - i)
    return best


def admitted(limiter: WindowLimiter, clock: ManualClock, arrivals: list[float]) -> list[float]:
    start = clock.now()
    out = []
    for t in arrivals:
        clock.advance(start + t - clock.now())
        if limiter.allow("nh_1"):
            out.append(t)
    return out


def steady(per_second: float, seconds: float) -> list[float]:
    return [i / per_second for i in range(int(per_second * seconds))]


def test_a_burst_gets_the_limit_and_no_more_until_the_oldest_leaves_the_window() -> None:
    clock = ManualClock(1000.0)
    limiter = WindowLimiter(clock, 120, 60.0)
    assert sum(limiter.allow("nh_1") for _ in range(200)) == 120
    clock.advance(30)
    assert not limiter.allow("nh_1")  # a token bucket refilling 2/s would have 60 here
    assert limiter.take("nh_1") == pytest.approx(30.0)  # until the first of the burst is a window old
    assert limiter.wait("nh_1") == pytest.approx(30.0) and limiter.wait("nh_other") == 0.0  # a peek
    clock.advance(30)
    assert not limiter.allow("nh_1")  # exactly 60 s: still inside the closed window
    clock.advance(0.001)
    assert limiter.wait("nh_1") == 0.0
    assert sum(limiter.allow("nh_1") for _ in range(200)) == 120
    assert limiter.allow("nh_2")  # keys are independent


@pytest.mark.parametrize(
    "arrivals",
    [
        pytest.param(steady(4, 180), id="steady 4/s for 3 min"),
        pytest.param([0.0] * 150 + steady(4, 120), id="burst then steady"),
        pytest.param(sorted(random.Random(14).uniform(0, 240) for _ in range(2000)), id="random"),
    ],
)
def test_no_window_ever_holds_more_than_the_limit(arrivals: list[float]) -> None:
    clock = ManualClock(1000.0)
    got = admitted(WindowLimiter(clock, 120, 60.0), clock, arrivals)
    assert busiest_window(got, 60.0) == 120  # the ceiling is reached, never passed
    # and what is refused is refused only while a window is full
    assert len(got) >= 120 * int((arrivals[-1] - arrivals[0]) // 60)


def test_per_minute_with_a_burst_holds_both_on_the_arrivals_a_bucket_let_through() -> None:
    """Where a token bucket (burst 120 + 2/s) gave 233 in a minute (issue 14)."""
    clock = ManualClock(1000.0)
    got = admitted(WindowLimiter.per_minute(clock, 120, burst=120), clock, [0.0] * 150 + steady(4, 120))
    assert busiest_window(got, 60.0) == 120
    clock = ManualClock(1000.0)
    small = WindowLimiter.per_minute(clock, 120, burst=20)  # 20 in any 10 s
    assert (small.limit, small.window) == (20, 10.0)
    got = admitted(small, clock, [0.0] * 150 + steady(4, 120))
    assert busiest_window(got, 10.0) == 20 and busiest_window(got, 60.0) <= 120
    assert got[:21] == [0.0] * 20 + [got[20]] and got[20] > 10.0


def test_keys_past_the_bound_forget_the_least_recent() -> None:
    clock = ManualClock(1000.0)
    limiter = WindowLimiter(clock, 1, 60.0, max_keys=2)
    assert limiter.allow("a") and limiter.allow("b") and limiter.allow("c")
    assert len(limiter) == 2
    assert not limiter.allow("c") and not limiter.allow("b")
    assert limiter.allow("a")  # forgotten: memory stays bounded under a spray of keys


def test_a_clock_step_back_neither_lets_more_through_nor_blocks_for_the_step() -> None:
    clock = ManualClock(1000.0)
    limiter = WindowLimiter(clock, 3, 60.0)
    assert [limiter.allow("k") for _ in range(4)] == [True, True, True, False]
    clock.advance(-3600)  # an hour back
    assert not limiter.allow("k")  # the three are still within the window, counted from now
    clock.advance(60.001)
    assert limiter.allow("k")  # not an hour later


def test_idle_keys_are_forgotten() -> None:
    clock = ManualClock(1000.0)
    limiter = WindowLimiter(clock, 2, 60.0)
    for i in range(1000):
        limiter.allow(f"k{i}")
    assert limiter.used("k1") == 1
    clock.advance(61)
    limiter.allow("fresh")
    assert len(limiter) == 1  # only "fresh": the others held nothing inside the window
    assert limiter.used("k1") == 0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        WindowLimiter(ManualClock(), 0)
    with pytest.raises(ValueError):
        WindowLimiter(ManualClock(), 1, 0)


def test_a_per_call_limit_is_the_keys_own_and_a_lowered_one_holds_at_once() -> None:
    """A notify hook's own rate_per_minute (issue 29): the limiter's 120 for other keys, the call's for
    this one; lowering it keeps the key's newest admissions, so the new bound holds in the same window."""
    clock = ManualClock(1000.0)
    limiter = WindowLimiter(clock, 120, 60.0)
    assert sum(limiter.allow("nh_low", 10) for _ in range(30)) == 10
    assert sum(limiter.allow("nh_default") for _ in range(130)) == 120
    clock.advance(1)
    assert sum(limiter.allow("nh_busy", 50) for _ in range(50)) == 50
    clock.advance(1)
    assert not limiter.allow("nh_busy", 5)  # 50 in the window already: 5 admits none
    assert limiter.wait("nh_busy") > 0
    clock.advance(60)
    assert sum(limiter.allow("nh_busy", 5) for _ in range(20)) == 5
    steady = []
    for _ in range(400):  # arrivals every half second against a limit of 10: 10 in any closed 60 s
        clock.advance(0.5)
        if limiter.allow("nh_steady", 10):
            steady.append(clock.now())
    assert busiest_window(steady, 60.0) == 10 and len(steady) == 40
    with pytest.raises(ValueError):
        limiter.allow("nh_low", 0)


def test_memory_follows_the_rate_not_a_limit_set_far_above_it() -> None:
    """A limit of 120,000 a minute (the soak's) at 10 calls a second keeps one minute of times, not
    120,000: the log once kept ``limit`` times per key whatever their age, and every full garbage
    collection walked them (the soak's claim p99 rose as they grew)."""
    clock = ManualClock(1000.0)
    limiter = WindowLimiter(clock, 120_000, 60.0)
    for _ in range(6000):  # ten minutes
        assert limiter.allow("ep")
        clock.advance(0.1)
    assert 599 <= limiter.kept("ep") <= 601
    tight = WindowLimiter(clock, 3, 60.0)  # and the window still holds exactly at a low limit
    assert [tight.allow("ep") for _ in range(4)] == [True, True, True, False]
    clock.advance(60.0)  # the first three are exactly one window old: still inside the closed window
    assert not tight.allow("ep")
    clock.advance(0.001)
    assert tight.allow("ep") and tight.kept("ep") == 1
