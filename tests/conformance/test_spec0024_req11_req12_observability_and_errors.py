"""SPEC-0024 REQ-11 (observability, secrecy) and REQ-12 (error handling) against ``switchboard serve``.

The signer failure is injected by the test's start-up hook (boot/sitecustomize.py, ``SBCONF_SIGNER_FAILS``)
in the worker processes: any notification whose body carries the marker fails while its attempt is being
signed, outside the send."""

from __future__ import annotations

import re

from tests.conformance.harness import (
    MARKER,
    NOTIFY,
    Conf,
    body_for,
    delta,
    ip_url,
    receiver,
    tenant,
    wait_until,
)
from tests.support.receivers import Respond

SERVER = NOTIFY
SERIES = {
    "switchboard_notify_hook_notifications_total": {
        "type": {"todo.ready", "todos.backlog"},
        "outcome": {"delivered", "failed", "dropped"},
    },
    "switchboard_notify_hook_attempts_total": {
        "result": {"2xx", "3xx", "4xx", "5xx", "timeout", "network", "tls", "rejected_ssrf", "other"}
    },
    "switchboard_notify_hooks_disabled_total": {"reason": {"consecutive_failures", "operator"}},
}


async def test_req11_secret_never_logged(conf: Conf) -> None:
    async with receiver(Respond(503)) as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv, "/sb?key=QUERYCANARY-req11"))
        old = hook["signing_secret"]
        first = await a.todo("fails three times")
        await wait_until(lambda: len(rcv.requests) >= 3, timeout=20, what="three failed attempts")
        new = (await a.ok("rotate_notify_hook", {"hook_id": hook["hook_id"]}))["signing_secret"]
        rcv.behaviour = Respond(204)
        second = await a.todo("delivered after the rotation")
        await body_for(rcv, second, timeout=20)
        await conf.wait_lines("notify attempt", 4, timeout=20, hook_id=hook["hook_id"])
        log = conf.raw_log()
        signatures = {
            part.split(",", 1)[1]
            for request in rcv.requests
            for part in (request.header("webhook-signature") or "").split(" ")
            if "," in part
        }
        assert len(signatures) >= 3  # two attempts in one second carry the same signature
        for needle in (
            old,
            new,
            old.removeprefix("whsec_"),
            new.removeprefix("whsec_"),
            "QUERYCANARY",
            *signatures,
        ):
            assert needle not in log, needle[:12]
        assert hook["hook_id"] in log and first  # the log does name what happened: ids are not secrets


async def test_req11_every_attempt_logs_one_line_with_its_ids(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        todo = await a.todo("logged")
        await body_for(rcv, todo)
        (line,) = await conf.wait_lines("notify attempt", hook_id=hook["hook_id"])
        assert line["notification_id"] == rcv.requests[0].header("webhook-id")
        assert (
            line["attempt"] == 1 and line["result"] == "2xx" and isinstance(line["duration_ms"], int | float)
        )


async def test_req11_metric_series_have_bounded_labels_only(conf: Conf) -> None:
    async with receiver() as rcv, tenant(conf) as a:
        hook = await a.hook(ip_url(rcv))
        await body_for(rcv, await a.todo("for the counters"))
        spare = await a.hook(ip_url(rcv, "/spare"))  # a human's disable: the third series gets a sample
        assert (await a.human.hook_action(a.slug, spare["hook_id"], "disable")).status_code == 303
        metrics = await conf.metrics()
    for name, labels in SERIES.items():
        samples = [dict(k) for (n, k) in metrics.samples if n == name]
        assert samples, f"{name} is not exported"
        for sample in samples:
            assert set(sample) == set(labels), (name, sample)
            for label, allowed in labels.items():
                assert sample[label] in allowed, (name, sample)
    assert "switchboard_notify_hook_queue_depth" in metrics.text
    for needle in (hook["hook_id"], a.slug, "127.0.0.1", str(rcv.port)):
        assert not re.search(rf"switchboard_notify\w*\{{[^}}]*{re.escape(needle)}", metrics.text), needle


async def test_req12_an_injected_signing_failure_leaves_every_worker_running(conf: Conf) -> None:
    """More failures than a worker process has workers (32), then a plain notification: it is delivered,
    so no failure took a worker with it; each failure is logged with the hook id and counted. Four hooks
    take nine failures each: a signing failure is a failed delivery of its hook (docs/notify-hooks.md),
    so ten in a row would disable a hook (REQ-8) and hide the plain notification for another reason."""
    before = await conf.metrics()
    async with receiver() as rcv, tenant(conf) as a:
        hooks = [await a.hook(ip_url(rcv, f"/h{i}")) for i in range(4)]
        failing = await a.todos(9, MARKER)
        plain = await a.todo("delivered after thirty-six signer failures")
        await body_for(rcv, plain, timeout=20)
        assert all(f"{MARKER}" not in r.body.decode() for r in rcv.requests)

        async def all_counted() -> bool:
            after = await conf.metrics()
            return delta(
                after,
                before,
                "switchboard_notify_hook_notifications_total",
                type="todo.ready",
                outcome="failed",
            ) >= len(failing) * len(hooks)

        await wait_until(all_counted, timeout=20, what="every signer failure counted")
        ids = {hook["hook_id"] for hook in hooks}
        failures = [
            line for line in conf.log_lines() if line.get("hook_id") in ids and line.get("level") == "error"
        ]
        assert len(failures) >= 1 and all("stage" in line for line in failures)
