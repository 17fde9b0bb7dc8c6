"""SPEC-0024 REQ-4 (Standard Webhooks signing), checked by receivers with the stock ``standardwebhooks``
verifier and by hand, against ``switchboard serve``. The grace-end check runs on a second server whose
grace period is a few seconds (``SWITCHBOARD_NOTIFY_GRACE_HOURS``), the server's own setting for it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import re
import time
from datetime import datetime

from standardwebhooks import Webhook

from tests.conformance.harness import NOTIFY, Conf, ServerSpec, ip_url, next_body, receiver, tenant
from tests.support.receivers import HangBeforeHeaders, RecordedRequest, Respond

SIGNING = NOTIFY
GRACE_SECONDS = 6.0
GRACE = ServerSpec(
    "req04-grace",
    {"notify_hook_allow_cidrs": "127.0.0.1/32", "notify_grace_hours": GRACE_SECONDS / 3600},
    humans=("alice",),
)
SERVERS = [SIGNING, GRACE]
MSG_ID = re.compile(r"^msg_[0-9A-HJKMNP-TV-Z]{26}$")


def expected_signature(secret: str, request: RecordedRequest) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{request.header('webhook-id')}.{request.header('webhook-timestamp')}.".encode() + request.body
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def entries(request: RecordedRequest) -> list[str]:
    header = request.header("webhook-signature") or ""
    return [part.removeprefix("v1,") for part in header.split(" ") if part]


async def test_req04_a_receiver_verifies_a_notification(confs: dict[str, Conf]) -> None:
    conf = confs[SIGNING.name]
    async with receiver() as rcv, tenant(conf) as a:
        secret = (await a.hook(ip_url(rcv)))["signing_secret"]
        assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
        before = int(time.time())
        await a.todo("verify me by hand")
        request, _ = await next_body(rcv)
        assert entries(request) == [expected_signature(secret, request)]
        assert MSG_ID.match(request.header("webhook-id") or "")
        stamp = int(request.header("webhook-timestamp") or "0")
        assert before - 1 <= stamp <= int(time.time()) + 1
        async with conf.http() as http:
            version = (await http.get("/healthz")).json()["version"]
        assert request.header("content-type") == "application/json"
        assert request.header("user-agent") == f"switchboard/{version}"
        assert request.method == "POST"


async def test_req04_a_stock_standard_webhooks_library_verifies_it(confs: dict[str, Conf]) -> None:
    conf = confs[SIGNING.name]
    async with receiver() as rcv, tenant(conf) as a:
        secret = (await a.hook(ip_url(rcv)))["signing_secret"]
        ids = await a.todos(3, "stock verifier")
        seen = set()
        for _ in ids:
            request, _ = await next_body(rcv)
            event = Webhook(secret).verify(request.body, request.header_map)
            seen.add(event["todo_id"])
        assert seen == set(ids)


async def test_req04_retries_keep_the_id(confs: dict[str, Conf]) -> None:
    conf = confs[SIGNING.name]
    async with receiver(HangBeforeHeaders()) as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        secret = hook["signing_secret"]
        await a.todo("the first attempt times out")
        first = await rcv.next_request(timeout=15)
        rcv.behaviour = Respond(204)
        second = await rcv.next_request(timeout=20)
        assert first.header("webhook-id") == second.header("webhook-id")
        assert first.body == second.body
        assert int(second.header("webhook-timestamp") or 0) > int(first.header("webhook-timestamp") or 0)
        assert first.header("webhook-signature") != second.header("webhook-signature")
        for request in (first, second):  # a verifier with its 5-minute tolerance accepts each attempt
            Webhook(secret).verify(request.body, request.header_map)
        lines = await conf.wait_lines("notify attempt", 2, timeout=30, hook_id=hook["hook_id"])
        assert [line["result"] for line in lines] == ["timeout", "2xx"]
        assert {line["notification_id"] for line in lines} == {first.header("webhook-id")}


async def test_req04_rotation_grace(confs: dict[str, Conf]) -> None:
    conf = confs[SIGNING.name]
    async with receiver() as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        old = hook["signing_secret"]
        rotated = await a.ok("rotate_notify_hook", {"hook_id": hook["hook_id"]})
        new = rotated["signing_secret"]
        assert new != old and new.startswith("whsec_")
        until = datetime.fromisoformat(rotated["previous_secret_valid_until"].replace("Z", "+00:00"))
        assert 23.9 * 3600 < until.timestamp() - time.time() <= 24 * 3600 + 5  # the default grace, 24 h
        await a.todo("signed twice")
        request, _ = await next_body(rcv)
        got = entries(request)
        assert len(got) == 2
        assert sorted(got) == sorted([expected_signature(new, request), expected_signature(old, request)])
        for secret in (old, new):
            Webhook(secret).verify(request.body, request.header_map)


async def test_req04_grace_end_destroys_the_previous_secret(confs: dict[str, Conf]) -> None:
    conf = confs[GRACE.name]
    async with receiver() as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        old = hook["signing_secret"]
        rotated = await a.ok("rotate_notify_hook", {"hook_id": hook["hook_id"]})
        new = rotated["signing_secret"]
        until = datetime.fromisoformat(rotated["previous_secret_valid_until"].replace("Z", "+00:00"))
        await a.todo("inside the grace")
        request, _ = await next_body(rcv)
        assert len(entries(request)) == 2
        # The grace is wall-clock time; previous_secret_valid_until is shown to the second (rounded down).
        await asyncio.sleep(max(0.0, until.timestamp() - time.time()) + 1.5)
        await a.todo("after the grace")
        request, _ = await next_body(rcv)
        assert entries(request) == [expected_signature(new, request)]
        Webhook(new).verify(request.body, request.header_map)
        assert expected_signature(old, request) not in entries(request)


async def test_req04_a_caller_cannot_supply_its_own_secret(confs: dict[str, Conf]) -> None:
    conf = confs[SIGNING.name]
    mine = "whsec_" + base64.b64encode(b"k" * 32).decode()
    async with receiver() as rcv, tenant(conf) as a:
        result = await a.agent.call("create_notify_hook", {"url": ip_url(rcv), "signing_secret": mine})
        if result.ok:  # an unknown argument may be ignored, but never used as the secret
            assert result.data["signing_secret"] != mine
        else:
            assert result.code == "invalid_argument"
