"""HostLimits: rate and in-flight limits keyed by the validated addresses, and what a claim may skip."""

from __future__ import annotations

import pytest

from switchboard.a2a.gate import served_version
from switchboard.a2a.limits import HostLimits
from switchboard.core.clock import ManualClock


def test_names_of_one_address_share_its_window() -> None:
    clock = ManualClock(1000.0)
    limits = HostLimits(clock, per_minute=60, burst=2, inflight=4)  # at most 2 in any 2 s
    for host in ("a.test", "b.test"):
        limits.learn(host, ["192.0.2.1"])
    assert limits.take(["192.0.2.1"]) == 0.0
    assert limits.take(["192.0.2.1"]) == 0.0
    assert limits.take(["192.0.2.1"]) == pytest.approx(2.0)  # burst spent: room 2 s after the first
    assert limits.blocked_hosts() == ["a.test", "b.test"]
    assert limits.next_room_in() == pytest.approx(2.0)
    clock.advance(2.0)
    assert limits.blocked_hosts() == ["a.test", "b.test"]  # a closed window: exactly 2 s is still in it
    clock.advance(0.001)
    assert limits.blocked_hosts() == [] and limits.next_room_in() is None
    assert limits.take(["192.0.2.1"]) == 0.0
    assert limits.take(["192.0.2.1"]) == 0.0
    assert limits.take(["192.0.2.1"]) > 0  # never more than the burst in one window


def test_the_sustained_rate_is_per_minute() -> None:
    clock = ManualClock(0.0)
    limits = HostLimits(clock, per_minute=120, burst=20, inflight=4)  # the defaults: 20 in any 10 s
    admitted = 0
    for _ in range(6000):  # a minute in 10 ms steps, asking at every step
        admitted += limits.take("192.0.2.1") == 0.0
        clock.advance(0.01)
    assert admitted == 120


def test_an_attempt_takes_from_every_address_or_from_none() -> None:
    clock = ManualClock(1000.0)
    limits = HostLimits(clock, per_minute=60, burst=1, inflight=4)
    assert limits.take(["192.0.2.1"]) == 0.0
    assert limits.take(["192.0.2.2", "192.0.2.1"]) > 0  # one address is dry: nothing taken
    assert limits.take(["192.0.2.2"]) == 0.0  # so .2 still had its token


def test_in_flight_is_counted_per_address() -> None:
    limits = HostLimits(ManualClock(0.0), per_minute=60, burst=10, inflight=1)
    limits.learn("a.test", ["192.0.2.1"])
    limits.learn("b.test", ["192.0.2.1", "192.0.2.9"])
    limits.started(["192.0.2.1"])
    assert limits.at_inflight_cap(["192.0.2.9", "192.0.2.1"])
    assert limits.host_blocked("b.test") and limits.blocked_hosts() == ["a.test", "b.test"]
    limits.finished(["192.0.2.1"])
    assert not limits.host_blocked("a.test") and limits.blocked_hosts() == []


@pytest.mark.parametrize(
    ("version", "method", "served"),
    [
        ("1.0", "GetTask", True),
        ("1.2", "GetTask", True),
        ("", "tasks/get", True),
        ("0.3", "tasks/get", True),
        ("1.0", "tasks/get", False),
        ("2.0", "GetTask", False),
        ("0.4", "tasks/get", False),
        ("one", "GetTask", False),
    ],
)
def test_served_versions(version: str, method: str, served: bool) -> None:
    assert served_version(version, method) is served
