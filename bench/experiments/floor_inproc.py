"""CPU per MCP call, in process: the app's ASGI callable driven directly, no sockets, one call at a time.

A what-if and profiling aid for issue 30's call floor (not the shipped benchmark: ``bench/floor.py``
measures the real server). Figures here are CPU milliseconds per call of the whole path from the
outermost middleware to the last byte sent, and they hold on a busy machine because they are CPU time.

``python -m bench.experiments.floor_inproc [--calls N] [--profile out.pstats] [--verb V]``: ``whoami``
(the floor), ``claim_next`` (the claim-with-ack loop: each call acks the todo the previous one claimed)
or ``pair`` (``claim_next`` then ``ack``, two calls per todo); the claim verbs on todos seeded with a
payload of about 1.5 KB, as a forge's delivery carries.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.server import make_settings, run_instance

from switchboard.core.verbs import DEFAULT_GRANT

VERSION = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "inproc", "version": "1"},
}


def _scope(port: int, headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", port),
        "state": {},
    }


async def _call(app: Any, scope: dict[str, Any], body: bytes) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    done = False

    async def receive() -> dict[str, Any]:
        nonlocal done
        if not done:
            done = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(dict(scope, headers=list(scope["headers"])), receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, payload


PAYLOAD = {"action": "opened", "pull_request": {"number": 1, "title": "t" * 80, "body": "b" * 1200}}


async def main(calls: int, profile: str, legacy: bool, verb: str = "whoami") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = make_settings(Path(tmp), mcp_rate_per_minute=10_000_000)
        async with run_instance(settings) as inst:
            app = inst.server.config.loaded_app
            accounts = inst.services.accounts
            human = await accounts.create_human("bench@example.com", "correct horse battery staple 1")
            vended, token = await accounts.vend_endpoint(human, "bench", ["inbox"], list(DEFAULT_GRANT))
            headers = {
                "host": f"127.0.0.1:{inst.port}",
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "authorization": f"Bearer {token}",
                "mcp-protocol-version": VERSION,
                "mcp-method": "tools/call",
                "mcp-name": "whoami",
            }
            if legacy:
                raise SystemExit("legacy: not built")
            if verb != "whoami":
                from switchboard.store.todos import NewTodo

                for _ in range(0, calls + 400, 500):
                    await inst.services.todos.create(
                        [NewTodo(vended.id, "inbox", "seeded", PAYLOAD) for _ in range(500)]
                    )
            held: dict[str, Any] = {}

            def body(i: int, name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
                params = {"name": name, "arguments": arguments, "_meta": ENVELOPE}
                raw = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})
                return dict(_scope(inst.port, dict(headers, **{"mcp-name": name}))), raw.encode()

            async def one(i: int) -> None:
                if verb == "whoami":
                    calls_ = [("whoami", {})]
                elif verb == "claim_next":
                    calls_ = [("claim_next", {"ack": held} if held else {})]
                else:
                    calls_ = [("claim_next", {})]
                for name, arguments in calls_:
                    scope, raw = body(i, name, arguments)
                    status, out = await _call(app, scope, raw)
                    assert status == 200 and b'"isError":false' in out.replace(b" ", b""), out[:300]
                    if name == "claim_next":
                        todo = json.loads(out)["result"]["structuredContent"]["todo"]
                        ack = {"todo_id": todo["id"], "lease": todo["lease"]}
                        held.clear()
                        if verb == "claim_next":
                            held.update(ack)
                        else:
                            scope, raw = body(i, "ack", ack)
                            status, out = await _call(app, scope, raw)
                            assert status == 200 and b'"isError":false' in out.replace(b" ", b""), out[:300]

            for i in range(300):  # warm-up
                await one(i)
            prof = cProfile.Profile() if profile else None
            cpu, wall = time.process_time(), time.perf_counter()
            if prof:
                prof.enable()
            for i in range(calls):
                await one(i)
            if prof:
                prof.disable()
                prof.dump_stats(profile)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            unit = "todo" if verb != "whoami" else "call"
            line = f"{calls} x {verb}: {1000 * cpu / calls:.3f} ms CPU per {unit}, {1000 * wall / calls:.3f} ms wall"
            if prof:  # the deterministic figure: CPU is inflated by the profiler and by the machine's load
                line += f", {pstats.Stats(prof).total_calls / calls:,.0f} Python function calls per {unit}"
            print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--profile", default="")
    parser.add_argument("--legacy", action="store_true")
    parser.add_argument("--verb", choices=("whoami", "claim_next", "pair"), default="whoami")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.profile, args.legacy, args.verb))
