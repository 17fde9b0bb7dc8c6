"""``switchboard listen`` and ``switchboard verify`` (issue 17): a person sees a verified notification
without writing a receiver. A real serve delivers to ``switchboard listen`` over HTTPS (private CA via
SWITCHBOARD_CA_BUNDLE); the captured request verifies with ``switchboard verify``, a tampered one not."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import trustme
from standardwebhooks import Webhook

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from tests.reliability.procs import ServerProcess, provision, server_env, servers, switchboard_command
from tests.support.mcp_client import agent
from tests.support.receivers import client_ssl_context
from tests.support.server import free_port


def verify(env: dict[str, str], raw: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*switchboard_command(), "verify", "--json"], input=raw, env=env, capture_output=True, timeout=60
    )


async def test_listen_prints_a_verified_notification_and_verify_checks_a_capture(tmp_path: Path) -> None:
    ca = trustme.CA()
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    data = tmp_path / "data"
    env = server_env(ca_bundle=str(pem), notify_hook_allow_cidrs="127.0.0.1/32")
    tenant = await provision(env, data, slug="lis", verbs=(*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs))
    port = free_port()
    server = ServerProcess(data, env, name="listen")
    with servers(server):
        server.start()
        await server.ready()
        async with agent(server.mcp_url, tenant.token) as a:
            hook = await a.ok("create_notify_hook", {"url": f"https://127.0.0.1:{port}/hook"})
        listen_env = {**env, "SWITCHBOARD_HOOK_SECRET": hook["signing_secret"]}
        cmd = [*switchboard_command(), "listen", "--port", str(port), "--cert", str(tmp_path / "cert.pem")]
        listener = subprocess.Popen(
            [*cmd, "--key", str(tmp_path / "key.pem")],
            env=listen_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            async with httpx.AsyncClient(verify=client_ssl_context(ca), timeout=5) as http:
                while True:  # listening yet? (an unsigned probe is refused with 401)
                    try:
                        probe = await http.post(f"https://127.0.0.1:{port}/hook", content=b"{}")
                        assert probe.status_code == 401
                        break
                    except httpx.TransportError:
                        assert listener.poll() is None and time.monotonic() < deadline, "listen did not start"
                        await asyncio.sleep(0.1)  # another process: nothing to await
            async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
                r = await http.post(
                    tenant.inbound_path,
                    content=json.dumps({"title": "listen to me"}).encode(),
                    headers={"content-type": "application/json", "idempotency-key": "lis-1"},
                )
            assert r.status_code == 202, r.text
            (todo_id,) = r.json()["todos"]
            assert listener.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(listener.stdout.readline), 20)
        finally:
            listener.terminate()
            listener.wait(timeout=10)
    printed = json.loads(line)
    assert printed["payload"]["todo_id"] == todo_id and printed["webhook-id"]

    # A capture of a signed request, as a proxy or `nc -l` would save it.
    body = json.dumps({"type": "todo.ready", "todo_id": todo_id}).encode()
    now = datetime.now(UTC)
    signature = Webhook(hook["signing_secret"]).sign("msg_cap", now, body.decode())
    raw = (
        b"POST /hook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"webhook-id: msg_cap\r\nwebhook-timestamp: {int(now.timestamp())}\r\n".encode()
        + f"webhook-signature: {signature}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    ok = verify(listen_env, raw)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["payload"]["todo_id"] == todo_id
    tampered = verify(listen_env, raw.replace(b"todo.ready", b"todo.READY"))
    assert tampered.returncode == 1 and json.loads(tampered.stdout)["error"] == "not_verified"
    assert b"signature does not verify" in tampered.stderr
