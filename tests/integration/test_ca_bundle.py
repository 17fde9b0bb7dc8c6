"""SWITCHBOARD_CA_BUNDLE (issue 17): a private CA is trusted for outbound calls in addition to the system
store, not instead of it (as SSL_CERT_FILE would); a file that is not PEM is refused in one line."""

from __future__ import annotations

import json
import ssl
import subprocess
from pathlib import Path

import httpx
import trustme
from standardwebhooks import Webhook

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.services import outbound_ssl_context
from tests.reliability.procs import ServerProcess, provision, server_env, servers, switchboard_command
from tests.support.mcp_client import agent
from tests.support.receivers import HTTPSReceiver
from tests.support.server import free_port


def test_the_bundle_adds_to_the_system_store(tmp_path: Path) -> None:
    ca = trustme.CA()
    pem = tmp_path / "private-ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    system = ssl.create_default_context().get_ca_certs()
    combined = outbound_ssl_context(pem).get_ca_certs()
    assert len(system) > 0, "this machine has no system CA store to add to"
    assert len(combined) == len(system) + 1
    assert all(cert in combined for cert in system)


def test_a_bundle_that_is_not_pem_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate")
    env = server_env(ca_bundle=str(bogus))
    done = subprocess.run(
        [*switchboard_command(), "serve", "--data", str(tmp_path), "--listen", f"127.0.0.1:{free_port()}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    reason = f"{bogus}: not a readable PEM file of CA certificates"
    assert done.stderr == f"error: invalid configuration: SWITCHBOARD_CA_BUNDLE: {reason}\n"


async def test_a_hook_behind_a_private_ca_is_delivered(tmp_path: Path) -> None:
    ca = trustme.CA()
    pem = tmp_path / "private-ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    data = tmp_path / "data"
    env = server_env(ca_bundle=str(pem), notify_hook_allow_cidrs="127.0.0.1/32")
    env.pop("SSL_CERT_FILE", None)  # the machine may set it; the bundle alone must do
    tenant = await provision(env, data, slug="ca", verbs=(*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs))
    server = ServerProcess(data, env, name="ca")
    with servers(server):
        server.start()
        await server.ready()
        async with (
            HTTPSReceiver(ca=ca, cert_hostnames=("127.0.0.1",)) as receiver,
            agent(server.mcp_url, tenant.token) as a,
        ):
            hook = await a.ok("create_notify_hook", {"url": f"https://127.0.0.1:{receiver.port}/hook"})
            async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
                r = await http.post(
                    tenant.inbound_path,
                    content=json.dumps({"title": "private ca"}).encode(),
                    headers={"content-type": "application/json", "idempotency-key": "ca-1"},
                )
            assert r.status_code == 202, r.text
            request = await receiver.next_request(timeout=15)
    Webhook(hook["signing_secret"]).verify(request.body, request.header_map)
