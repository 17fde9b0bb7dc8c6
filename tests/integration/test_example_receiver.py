"""examples/notify_receiver.py serves HTTPS and verifies with the stock Standard Webhooks library
(issue 17): a signed request is accepted over TLS, an unsigned one refused."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import trustme
from standardwebhooks import Webhook

from tests.support.receivers import client_ssl_context
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]


async def test_example_receiver_serves_https_and_verifies(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    port = free_port()
    receiver = [sys.executable, str(ROOT / "examples" / "notify_receiver.py")]
    proc = subprocess.Popen(
        [
            *receiver,
            "--cert",
            str(tmp_path / "cert.pem"),
            "--key",
            str(tmp_path / "key.pem"),
            "--port",
            str(port),
        ],
        env={**os.environ, "SWITCHBOARD_HOOK_SECRET": secret},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"https://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, verify=client_ssl_context(ca), timeout=5) as http:
            deadline = time.monotonic() + 20
            while True:
                try:
                    await http.get("/")
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, "the receiver exited"
                    assert time.monotonic() < deadline, "the receiver did not start"
                    await asyncio.sleep(0.1)  # another process: nothing to await
            body = json.dumps({"type": "todo.ready", "todo_id": "td_example"})
            now = datetime.now(UTC)
            headers = {
                "webhook-id": "msg_1",
                "webhook-timestamp": str(int(now.timestamp())),
                "webhook-signature": Webhook(secret).sign("msg_1", now, body),
            }
            signed = await http.post("/hook", content=body, headers=headers)
            unsigned = await http.post("/hook", content=body, headers={"webhook-id": "msg_2"})
        assert signed.status_code == 204
        assert unsigned.status_code == 401
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert b"verified notification" in out and b"td_example" in out
