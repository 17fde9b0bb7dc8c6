"""Inbound webhooks over real HTTP: trust modes, derivation, routing, dedup, and bad input storing nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from switchboard.core.clock import ManualClock
from switchboard.store.schema import todos
from switchboard.store.transitions import Transition
from tests.support.server import Instance, make_settings, run_instance
from tests.support.world import gitea_delivery, github_delivery, make_world, pr_payload, standard_delivery


@pytest.fixture
async def inst(tmp_path: Path) -> AsyncIterator[Instance]:
    clock = ManualClock(datetime.now(UTC).timestamp())  # Standard Webhooks timestamps are checked against it
    async with run_instance(make_settings(tmp_path), clock=clock) as i:
        yield i


async def count_todos(inst: Instance) -> int:
    async with inst.services.db.read() as conn:
        return int((await conn.execute(select(func.count()).select_from(todos))).scalar_one())


async def all_todos(inst: Instance) -> list[Any]:
    async with inst.services.db.read() as conn:
        return list((await conn.execute(select(todos).order_by(todos.c.created_at))).all())


async def test_signed_gitea_pull_request_becomes_a_verified_todo(inst: Instance) -> None:
    w = await make_world(inst)
    body, headers = gitea_delivery(w.secret, pr_payload())
    async with inst.client() as http:
        r = await http.post(w.inbound_path, content=body, headers=headers)
    assert r.status_code == 202, r.text
    data = r.json()
    assert data["verified"] is True and len(data["todos"]) == 1
    (row,) = await all_todos(inst)
    assert row.id == data["todos"][0] and row.endpoint_id == w.endpoint.id and row.queue == "inbox"
    assert row.kind == "pull_request" and "482" in row.title and "acme/widgets" in row.title
    assert row.verified and not row.via_token and row.status == "pending"
    assert json.loads(row.payload)["pull_request"]["number"] == 482


async def test_signed_github_issue(inst: Instance) -> None:
    w = await make_world(inst, kind="github")
    payload = {
        "action": "opened",
        "issue": {"number": 7, "title": "Crash"},
        "repository": {"full_name": "o/r"},
    }
    body, headers = github_delivery(w.secret, payload)
    async with inst.client() as http:
        r = await http.post(w.inbound_path, content=body, headers=headers)
    assert r.status_code == 202 and r.json()["verified"] is True
    (row,) = await all_todos(inst)
    assert row.kind == "issues" and "#7" in row.title


async def test_standard_webhooks_sender(inst: Instance) -> None:
    w = await make_world(inst, kind="standard")
    body, headers = standard_delivery(w.secret, {"type": "invoice.paid", "title": "Invoice 12 paid"})
    async with inst.client() as http:
        r = await http.post(w.inbound_path, content=body, headers=headers)
    assert r.status_code == 202, r.text
    (row,) = await all_todos(inst)
    assert row.kind == "invoice.paid" and row.verified


async def test_bad_signature_on_signature_source_is_refused_and_stores_nothing(inst: Instance) -> None:
    w = await make_world(inst)
    body, headers = gitea_delivery("not-the-secret", pr_payload())
    async with inst.client() as http:
        r = await http.post(w.inbound_path, content=body, headers=headers)
    assert r.status_code == 401 and r.json()["error"] == "bad_signature"
    assert await count_todos(inst) == 0


async def test_trust_none_keeps_unverified_delivery_but_not_push_eligible(inst: Instance) -> None:
    w = await make_world(inst, trust="none")
    seen: list[Transition] = []

    async def rec(t: Transition) -> None:
        seen.append(t)

    inst.services.hub.subscribe("rec", rec)
    forged, headers = gitea_delivery("forged", pr_payload())
    good, good_headers = gitea_delivery(w.secret, pr_payload(number=5))
    async with inst.client() as http:
        r1 = await http.post(w.inbound_path, content=forged, headers=headers)
        r2 = await http.post(w.inbound_path, content=good, headers=good_headers)
    assert r1.status_code == 202 and r1.json()["verified"] is False
    assert r2.status_code == 202 and r2.json()["verified"] is True
    await inst.services.hub.idle()
    assert [t.push_eligible for t in seen] == [False, True]


async def test_token_trust(inst: Instance) -> None:
    w = await make_world(inst, trust="token", kind="generic")
    async with inst.client() as http:
        ok = await http.post(w.inbound_path, json={"title": "deploy finished"})
        wrong = await http.post(f"/in/{w.source.slug}/not-the-token", json={"title": "x"})
        bare = await http.post(f"/in/{w.source.slug}", json={"title": "x"})
    assert ok.status_code == 202 and ok.json()["verified"] is True
    assert wrong.status_code == 404 and bare.status_code == 404
    (row,) = await all_todos(inst)
    assert row.via_token and row.title == "deploy finished"


async def test_oversized_body_is_413_and_stores_nothing(inst: Instance) -> None:
    w = await make_world(inst, trust="token", kind="generic")
    big = b'{"title": "' + b"x" * (1024 * 1024) + b'"}'

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    async with inst.client() as http:
        declared = await http.post(w.inbound_path, content=big, headers={"content-type": "application/json"})
        streamed = await http.post(
            w.inbound_path, content=chunks(), headers={"content-type": "application/json"}
        )
    assert declared.status_code == 413 and declared.json()["error"] == "too_large"
    assert streamed.status_code == 413
    assert await count_todos(inst) == 0


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"", b"\xff\xfe", b'{"a": 1} trailing', b"[" * 100_000, b'{"n": ' + b"9" * 5000 + b"}"],
)
async def test_malformed_json_is_400_with_reason_and_stores_nothing(inst: Instance, body: bytes) -> None:
    w = await make_world(inst, trust="token", kind="generic")
    async with inst.client() as http:
        r = await http.post(w.inbound_path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"] == "invalid_json" and r.json()["message"].startswith(
        "the body is not valid JSON"
    )
    assert await count_todos(inst) == 0


async def test_unknown_source_is_404(inst: Instance) -> None:
    async with inst.client() as http:
        r = await http.post("/in/nope", json={})
    assert r.status_code == 404 and r.json()["error"] == "not_found"


async def test_redelivery_dedups_onto_the_live_todo(inst: Instance) -> None:
    w = await make_world(inst)
    body, headers = gitea_delivery(w.secret, pr_payload(), delivery="fixed-delivery-id")
    async with inst.client() as http:
        first = await http.post(w.inbound_path, content=body, headers=headers)
        second = await http.post(w.inbound_path, content=body, headers=headers)
    assert len(first.json()["todos"]) == 1
    assert second.status_code == 202 and second.json() == {**second.json(), "todos": [], "deduplicated": 1}
    assert await count_todos(inst) == 1


async def test_kind_routes_and_unrouted_events(inst: Instance) -> None:
    w = await make_world(inst, route_queue="inbox")
    s = inst.services
    await s.accounts.set_scope(w.endpoint.id, queues=["inbox", "reviews"])
    await s.sources.add_route(w.source.slug, "reviews", w.endpoint.slug, "pull_request")
    body, headers = gitea_delivery(w.secret, pr_payload())
    push_body, push_headers = gitea_delivery(
        w.secret, {"ref": "refs/heads/main", "commits": []}, event="push"
    )
    async with inst.client() as http:
        pr = await http.post(w.inbound_path, content=body, headers=headers)
        push = await http.post(w.inbound_path, content=push_body, headers=push_headers)
    assert len(pr.json()["todos"]) == 2  # the catch-all route and the pull_request route
    assert len(push.json()["todos"]) == 1
    queues = sorted(r.queue for r in await all_todos(inst) if r.kind == "pull_request")
    assert queues == ["inbox", "reviews"]


async def test_quarantined_source_still_stores_but_excludes_push(inst: Instance) -> None:
    w = await make_world(inst)
    await inst.services.sources.set_quarantine(w.source.id, True)
    seen: list[Transition] = []

    async def rec(t: Transition) -> None:
        seen.append(t)

    inst.services.hub.subscribe("rec", rec)
    body, headers = gitea_delivery(w.secret, pr_payload())
    async with inst.client() as http:
        assert (await http.post(w.inbound_path, content=body, headers=headers)).status_code == 202
    await inst.services.hub.idle()
    assert len(seen) == 1 and seen[0].push_excluded and not seen[0].pushable


async def test_flood_from_one_source_is_rate_limited_without_affecting_another(tmp_path: Path) -> None:
    async with run_instance(make_settings(tmp_path), clock=ManualClock()) as inst:
        noisy = await make_world(inst, slug="noisy", trust="token", kind="generic")
        quiet = await make_world(inst, slug="quiet", trust="token", kind="generic")
        statuses = []
        async with inst.client() as http:
            for i in range(620):
                statuses.append((await http.post(noisy.inbound_path, json={"title": f"n{i}"})).status_code)
            other = await http.post(quiet.inbound_path, json={"title": "still fine"})
        assert statuses.count(202) == 600 and statuses.count(429) == 20
        assert other.status_code == 202
