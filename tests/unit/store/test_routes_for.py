"""Ingest picks a delivery's routes from all of its source's (``routes_for``), read with the source."""

from __future__ import annotations

from switchboard.store.sources import RouteTarget, routes_for

ROUTES = [
    RouteTarget("r1", "inbox", "ep_a", None),
    RouteTarget("r2", "reviews", "ep_a", "pull_request"),
    RouteTarget("r3", "inbox", "ep_a", "pull_request"),  # same place as the catch-all r1: one todo
    RouteTarget("r4", "builds", "ep_b", "push"),
]


def test_a_kind_takes_its_routes_and_the_catch_alls_once_each_in_order() -> None:
    assert [r.route_id for r in routes_for(ROUTES, "pull_request")] == ["r1", "r2"]
    assert [r.route_id for r in routes_for(ROUTES, "push")] == ["r1", "r4"]


def test_no_kind_takes_only_catch_alls_and_no_routes_take_nothing() -> None:
    assert [r.route_id for r in routes_for(ROUTES, None)] == ["r1"]
    assert routes_for([], "push") == []
