"""SPEC-0024 REQ-3 (target validation, the SSRF guard) against ``switchboard serve`` from outside.

Names resolve through the hosts file the server and its worker processes read (boot/sitecustomize.py);
the SSRF answers (10.0.0.5, 169.254.169.254, ...) are only ever given to the guard, which must refuse
them before any connection. The operator allowlist is ``127.0.0.1/32``, so 127.0.0.1 stands for an
address the guard accepts and every other loopback address is refused: the rebinding scenario rebinds
from 127.0.0.1 to 127.0.0.2, and nothing outside 127/8 is ever an address the guard would dial.
"""

from __future__ import annotations

import json

from tests.conformance.harness import (
    NOTIFY,
    Conf,
    ip_url,
    next_body,
    receiver,
    tenant,
    unique,
    wait_until,
)
from tests.support.receivers import ListeningSocket, redirect

SERVER = NOTIFY


async def refused(conf: Conf, url: str) -> str:
    """Create a hook for ``url`` on a fresh endpoint: it must fail with invalid_argument and store nothing."""
    async with tenant(conf) as a:
        result = await a.agent.call("create_notify_hook", {"url": url})
        assert not result.ok and result.code == "invalid_argument", (url, result.data)
        assert "signing_secret" not in result.data
        assert (await a.ok("list_notify_hooks"))["hooks"] == []
        return str(result.data.get("message", ""))


async def test_req03_private_target_refused_at_create(conf: Conf) -> None:
    name = f"{unique('private')}.test"
    conf.hosts.set(name, "10.0.0.5")
    message = await refused(conf, f"https://{name}/sb")
    assert "private" in message


async def test_req03_same_host_receiver_when_the_operator_opts_in(conf: Conf) -> None:
    name = f"{unique('same')}.test"
    conf.hosts.set(name, "127.0.0.1")
    async with tenant(conf) as a:
        stored = await a.hook(f"https://{name}:9443/sb")
        assert stored["enabled"] is True and stored["url"] == f"https://{name}:9443/sb"
        for url in (f"https://127.0.0.1:{conf.port}/sb", f"https://{name}:{conf.port}/sb"):
            own = await a.agent.call("create_notify_hook", {"url": url})
            assert not own.ok and own.code == "invalid_argument" and "self" in own.data["message"], own.data
        assert len((await a.ok("list_notify_hooks"))["hooks"]) == 1


async def test_req03_every_refused_address_class_is_named(conf: Conf) -> None:
    """The guard refuses each class REQ-3 lists (any one refused address refuses the target) and the
    message names it."""
    cases = {
        "loopback": ["127.0.0.2"],
        "link_local": ["169.254.10.10"],
        "metadata": ["169.254.169.254"],
        "private": ["192.168.1.10"],
        "unique_local": ["fc00::5"],
        "cgnat": ["100.64.0.1"],
        "unspecified": ["0.0.0.0"],
        "multicast": ["224.0.0.1"],
    }
    for reason, ips in cases.items():
        name = f"{unique(reason.replace('_', '-'))}.test"
        conf.hosts.set(name, *ips)
        message = await refused(conf, f"https://{name}/sb")
        assert reason in message or (reason == "metadata" and "link_local" in message), (reason, message)
    mixed = f"{unique('mixed')}.test"
    conf.hosts.set(mixed, "127.0.0.1", "10.0.0.5")  # one good address does not save a refused one
    assert "private" in await refused(conf, f"https://{mixed}/sb")
    assert "unresolvable" in await refused(conf, f"https://{unique('nowhere')}.test/sb")


async def test_req03_userinfo_and_overlong_urls_are_refused(conf: Conf) -> None:
    assert "userinfo" in await refused(conf, "https://user:pass@hooks.test/sb")
    long_url = "https://hooks.test/" + "a" * 2040
    assert len(long_url.encode()) > 2048
    assert "too_long" in await refused(conf, long_url)


async def test_req03_dns_rebinding_between_create_and_delivery(conf: Conf) -> None:
    name = f"{unique('rebind')}.test"
    conf.hosts.set(name, "127.0.0.1")  # an address the guard accepts, at create time
    async with ListeningSocket() as sock, tenant(conf) as a:
        hook = await a.hook(f"https://{name}:{sock.port}/sb")
        conf.hosts.set(name, "127.0.0.2")  # rebound before delivery: loopback outside the allowlist
        await a.todo("after the rebind")
        (line,) = await conf.wait_lines("notify attempt", hook_id=hook["hook_id"])
        assert line["result"] == "rejected_ssrf" and line.get("status") is None
        await sock.assert_untouched()  # nothing dialled the create-time address either
        health = await wait_until(lambda: _failed_once(a, hook["hook_id"]), what="health written")
        assert health["last_error"] == "rejected_ssrf" and health["last_status"] is None
        assert len(conf.lines("notify attempt", hook_id=hook["hook_id"])) == 1  # never retried


async def _failed_once(a: object, hook_id: str) -> dict[str, object] | None:
    from tests.conformance.harness import Tenant

    assert isinstance(a, Tenant)
    health = await a.health(hook_id)
    return health if health["consecutive_failures"] == 1 else None


async def test_req03_redirect_is_a_failure(conf: Conf) -> None:
    async with (
        ListeningSocket() as target,
        receiver(redirect("http://169.254.169.254/")) as metadata_rcv,
        receiver(redirect(f"https://hooks.test:{target.port}/moved")) as moved_rcv,
        tenant(conf) as a,
    ):
        hooks = [await a.hook(ip_url(metadata_rcv)), await a.hook(ip_url(moved_rcv))]
        await a.todo("answered with a redirect")
        for hook in hooks:
            (line,) = await conf.wait_lines("notify attempt", hook_id=hook["hook_id"])
            assert line["result"] == "3xx" and line["status"] == 302
            health = await wait_until(lambda h=hook: _failed_once(a, h["hook_id"]), what="health written")
            assert health["last_status"] == 302 and health["last_error"] == "redirect"
        await target.assert_untouched()  # the Location was never dialled
        assert len(metadata_rcv.requests) == 1 and len(moved_rcv.requests) == 1


async def test_req03_plain_http_without_the_opt_in(conf: Conf) -> None:
    assert "scheme" in await refused(conf, "http://dispatch.test/sb")


async def test_req03_tls_verifies_the_certificate_against_the_url_host(conf: Conf) -> None:
    """The receiver's certificate is valid for another name: the attempt fails as ``tls``, with no request."""
    async with receiver(names=("elsewhere.test",)) as rcv, tenant(conf) as a:
        hook = await a.hook(f"https://hooks.test:{rcv.port}/sb")
        await a.todo("to a receiver with someone else's certificate")
        line = (await conf.wait_lines("notify attempt", hook_id=hook["hook_id"]))[0]
        assert line["result"] == "tls" and line.get("status") is None
        assert rcv.requests == []


async def test_req03_a_validated_hook_delivers_by_name(conf: Conf) -> None:
    """The control for the refusals above: a name that resolves to the allowlisted address delivers,
    over TLS verified against that name."""
    async with receiver() as rcv, tenant(conf) as a:
        await a.hook(f"https://hooks.test:{rcv.port}/sb")
        todo = await a.todo("by name")
        request, sent = await next_body(rcv)
        assert sent["todo_id"] == todo and request.header("host") == f"hooks.test:{rcv.port}"
        assert json.loads(request.body)["type"] == "todo.ready"
