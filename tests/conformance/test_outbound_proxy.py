"""The egress proxy (issue 29 item 3, SWITCHBOARD_OUTBOUND_PROXY) against ``switchboard serve`` with its
notify worker processes: every outbound call goes through a real CONNECT proxy on loopback
(tests/support/connect_proxy.py) that records every request line and tunnels the bytes.

The server is configured with the proxy's fixed address and Basic credentials; each test starts its own
proxy on that address, so what a proxy recorded is that test's traffic alone (tests whose attempts fail
wait for the last of their three attempts, so no retry of theirs reaches the next test's proxy). Names
resolve through the hosts file (boot/sitecustomize.py), by the guard only: the proxy never resolves
anything and dials only loopback literals.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from standardwebhooks import Webhook

from tests.conformance.harness import Conf, ServerSpec, Tenant, body_for, receiver, tenant, unique, wait_until
from tests.conformance.test_a2a_push import pair, push_config, pushes
from tests.support.connect_proxy import ConnectProxy, target_ip
from tests.support.secrets import reveal
from tests.support.server import reserved_port

PROXY_PORT = reserved_port()
USER, PASSWORD = "egress", "conformance-proxy-pass"
reveal(PASSWORD, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())  # never in the server's log
SERVER = ServerSpec(
    "proxy",
    {
        "notify_hook_allow_cidrs": "127.0.0.1/32",
        "a2a_push_allow_cidrs": "127.0.0.1/32",
        "outbound_proxy": f"http://{USER}:{PASSWORD}@127.0.0.1:{PROXY_PORT}",
    },
    humans=("alice",),
    hosts={"hooks.test": ["127.0.0.1"], "dispatch.test": ["127.0.0.1"]},
)


@asynccontextmanager
async def proxy(**kw: object) -> AsyncIterator[ConnectProxy]:
    async with ConnectProxy(PROXY_PORT, credentials=(USER, PASSWORD), **kw) as p:  # type: ignore[arg-type]
        yield p
    assert all(r.method == "CONNECT" and target_ip(r.target) is not None for r in p.requests), p.lines


async def three_attempts(conf: Conf, hook_id: str) -> list[dict[str, object]]:
    lines = await conf.wait_lines("notify attempt", 3, timeout=30, hook_id=hook_id)
    assert [line["attempt"] for line in lines] == [1, 2, 3]  # retried like any connect failure, then given up
    return lines


async def test_notifications_are_delivered_through_the_proxy(conf: Conf) -> None:
    async with proxy() as p, receiver() as rcv, tenant(conf) as a:
        secrets = {}
        for name in ("hooks.test", "dispatch.test"):
            hook = await a.hook(f"https://{name}:{rcv.port}/hook")
            secrets[hook["hook_id"]] = hook["signing_secret"]
        todo_id = await a.todo("through the egress proxy")
        await body_for(rcv, todo_id)
        await wait_until(lambda: len(rcv.requests) >= 2, what="both hooks' notifications")
        assert len(rcv.requests) == 2
        verified = {
            hook_id
            for request in rcv.requests
            for hook_id, secret in secrets.items()
            if _verifies(secret, request.body, request.header_map)
        }
        assert verified == set(secrets)  # each hook's notification, signed with its own secret
        assert {r.header("host") for r in rcv.requests} == {
            f"hooks.test:{rcv.port}",
            f"dispatch.test:{rcv.port}",
        }
        assert all(r.header("proxy-authorization") is None for r in rcv.requests)
    # One tunnel per hook (each host name has its own), each named by the validated address.
    assert p.lines == [f"CONNECT 127.0.0.1:{rcv.port} HTTP/1.1"] * 2
    assert all(r.header("proxy-authorization") == p.expected_auth for r in p.requests)


def _verifies(secret: str, body: bytes, headers: dict[str, str]) -> bool:
    try:
        Webhook(secret).verify(body, headers)
    except Exception:
        return False
    return True


async def test_a_name_resolving_to_a_refused_address_is_refused_before_any_connect(conf: Conf) -> None:
    """The proxy could reach 10.0.0.5 or 127.0.0.2; the guard refuses them first, at create time and
    before an attempt, and the proxy sees nothing."""
    private, rebound = f"{unique('private')}.test", f"{unique('rebind')}.test"
    conf.hosts.set(private, "10.0.0.5")
    conf.hosts.set(rebound, "127.0.0.1")
    async with proxy() as p, receiver() as rcv, tenant(conf) as a:
        refused = await a.agent.call("create_notify_hook", {"url": f"https://{private}/hook"})
        assert not refused.ok and "private" in refused.data["message"]
        hook = await a.hook(f"https://{rebound}:{rcv.port}/hook")
        conf.hosts.set(rebound, "127.0.0.2")  # loopback outside the allowlist, rebound before delivery
        await a.todo("refused at attempt time")
        (line,) = await conf.wait_lines("notify attempt", hook_id=hook["hook_id"])
        assert (line["result"], line["reason"]) == ("rejected_ssrf", "loopback")
        await p.assert_untouched()
        assert rcv.connections == 0


async def test_tls_through_the_tunnel_verifies_the_host_name(conf: Conf) -> None:
    async with proxy() as p, receiver(names=("other.test",)) as rcv, tenant(conf) as a:
        hook = await a.hook(f"https://hooks.test:{rcv.port}/hook")
        await a.todo("a certificate for another name")
        lines = await three_attempts(conf, hook["hook_id"])
        assert {(line["result"], line["reason"]) for line in lines} == {("tls", "hostname_mismatch")}
        assert rcv.requests == []
    assert p.lines == [f"CONNECT 127.0.0.1:{rcv.port} HTTP/1.1"] * 3  # the tunnels were made; TLS failed


async def test_a_proxy_refusing_connect_is_a_retried_delivery_failure(conf: Conf) -> None:
    async with proxy(answer=403) as p, receiver() as rcv, tenant(conf) as a:
        hook = await a.hook(f"https://hooks.test:{rcv.port}/hook")
        await a.todo("the proxy's rules deny it")
        lines = await three_attempts(conf, hook["hook_id"])
        assert {(line["result"], line["stage"], line["reason"]) for line in lines} == {
            ("network", "connect", "proxy_refused")
        }
        assert rcv.connections == 0
        health = await wait_until(lambda: _failed_once(a, hook["hook_id"]), what="health written")
        assert health["last_error"] == "network" and health["last_status"] is None  # not the receiver's 403
    assert p.lines == [f"CONNECT 127.0.0.1:{rcv.port} HTTP/1.1"] * 3


async def _failed_once(a: Tenant, hook_id: str) -> dict[str, object] | None:
    health = await a.health(hook_id)
    return health if health["consecutive_failures"] == 1 else None


async def test_an_a2a_push_goes_through_the_proxy(conf: Conf) -> None:
    async with proxy() as p, receiver() as rcv, pair(conf) as sender:
        url = f"https://hooks.test:{rcv.port}/a2a-hook"
        task = await sender.send("pushed through the proxy", push=push_config(url))
        await sender.finish(task.id)
        got = await pushes(rcv, 3)
        assert [g.seq for g in got] == [1, 2, 3]
        assert {g.request.header("host") for g in got} == {f"hooks.test:{rcv.port}"}
    assert p.lines and set(p.lines) == {f"CONNECT 127.0.0.1:{rcv.port} HTTP/1.1"}
