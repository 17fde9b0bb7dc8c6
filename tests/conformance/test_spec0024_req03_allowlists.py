"""SPEC-0024 REQ-3: what an operator allowlist opens and what it never opens, and the plain-HTTP opt-in,
on servers started with exactly the scenarios' settings. Only create-time checks run here: no todo is
ever made on these servers, so none of the addresses below is ever dialled."""

from __future__ import annotations

from tests.conformance.harness import Conf, ServerSpec, tenant, unique

BROAD = ServerSpec(
    "req03-broad", {"notify_hook_allow_cidrs": "0.0.0.0/0", "push_allow_http": "true"}, humans=("alice",)
)
COVERING = ServerSpec(
    "req03-covering", {"notify_hook_allow_cidrs": "100.64.0.0/10,fc00::/7"}, humans=("alice",)
)
SERVERS = [BROAD, COVERING]


async def create(conf: Conf, *ips: str, scheme: str = "https") -> tuple[bool, str]:
    name = f"{unique('target')}.test"
    conf.hosts.set(name, *ips)
    async with tenant(conf) as a:
        result = await a.agent.call("create_notify_hook", {"url": f"{scheme}://{name}/sb"})
        stored = len((await a.ok("list_notify_hooks"))["hooks"])
        assert stored == (1 if result.ok else 0)
        if not result.ok:
            assert result.code == "invalid_argument", result.data
        return result.ok, str(result.data.get("message", ""))


async def test_req03_a_broad_entry_does_not_open_loopback_or_metadata(confs: dict[str, Conf]) -> None:
    broad = confs[BROAD.name]
    for ip in ("169.254.169.254", "127.0.0.1"):
        ok, message = await create(broad, ip)
        assert not ok, ip
        assert "metadata" in message or "link_local" in message or "loopback" in message
    assert (await create(broad, "10.0.0.5"))[0]  # what the broad entry does open: a private address


async def test_req03_a_covering_range_does_not_open_a_metadata_service(confs: dict[str, Conf]) -> None:
    covering = confs[COVERING.name]
    for ip in ("100.100.100.200", "fd00:ec2::254"):
        ok, message = await create(covering, ip)
        assert not ok and "metadata" in message, (ip, message)
    assert (await create(covering, "100.100.100.201"))[0]
    assert (await create(covering, "fc00::7"))[0]


async def test_req03_plain_http_with_the_opt_in_is_accepted(confs: dict[str, Conf]) -> None:
    assert (await create(confs[BROAD.name], "10.0.0.5", scheme="http"))[0]
    ok, message = await create(confs[COVERING.name], "100.100.100.201", scheme="http")
    assert not ok and "scheme" in message
