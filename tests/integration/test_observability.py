"""Metrics and logs a Grafana user expects (issue 17), from a real ``switchboard serve``: /metrics passes
``promtool check metrics`` and holds the per-queue backlog and oldest-pending gauges, the MCP latency
histogram by verb, build info and process metrics; the example alert rules pass ``promtool check rules``
and their unit tests; every series the example dashboard queries exists; SWITCHBOARD_LOG_FORMAT=text and
SWITCHBOARD_LOG_LEVEL apply; audit events name actor, action and ids and never a secret."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from switchboard import __version__
from tests.reliability.procs import (
    ServerProcess,
    Tenant,
    cli,
    provision,
    server_env,
    servers,
    switchboard_command,
)
from tests.support.mcp_client import agent

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian package prometheus; scripts/test installs it)")
    return found


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        metric, _, value = line.rpartition(" ")
        base, _, rest = metric.partition("{")
        if base != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    raise AssertionError(f"no sample {name}{labels}")


def test_alert_rules_check_and_fire() -> None:
    tool = promtool()
    checked = subprocess.run(
        [tool, "check", "rules", str(EXAMPLES / "prometheus" / "alerts.yml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [tool, "test", "rules", "alerts.test.yml"],
        cwd=EXAMPLES / "prometheus",
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


async def _deliver(server: ServerProcess, tenant: Tenant, key: str) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
        r = await http.post(
            tenant.inbound_path,
            content=json.dumps({"title": key}).encode(),
            headers={"content-type": "application/json", "idempotency-key": key},
        )
    assert r.status_code == 202, r.text


async def test_metrics_and_logs_of_a_real_server(tmp_path: Path) -> None:
    tool = promtool()
    data = tmp_path / "data"
    env = server_env(log_format="text", log_level="WARNING")
    tenant = await provision(env, data, slug="obs", verbs=("claim_next", "ack"), queue="obs-q")
    server = ServerProcess(data, env, name="obs")
    with servers(server):
        server.start()
        await server.ready()
        for key in ("one", "two"):
            await _deliver(server, tenant, key)
        async with agent(server.mcp_url, tenant.token) as a:
            await a.ok("claim_next", {})
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
            r = await http.get("/metrics")
            # A failed sign-in: an audit line, never the password.
            page = await http.get("/login")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf
            await http.post(
                "/login",
                data={"csrf": csrf.group(1), "email": tenant.email, "password": "wrong-password-123"},
            )
    assert r.status_code == 200
    text = r.text

    checked = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    assert sample(text, "switchboard_queue_backlog", queue="obs-q") == 1
    assert sample(text, "switchboard_queue_oldest_pending_seconds", queue="obs-q") >= 0
    assert sample(text, "switchboard_mcp_request_seconds_count", method="tools/call", verb="claim_next") == 1
    counted = [line for line in text.splitlines() if line.startswith("switchboard_mcp_request_seconds_count")]
    assert len(counted) >= 2 and not any('method="other"' in line for line in counted), counted
    assert sample(text, "switchboard_build_info", version=__version__) == 1
    assert sample(text, "process_resident_memory_bytes") > 0
    assert sample(text, "process_cpu_seconds_total") > 0
    assert (
        sample(text, "switchboard_notify_hook_delivery_seconds_count") == 0
    )  # no hook here; see test_upgrades

    # Every series the example dashboard queries is one the server exposes.
    dashboard = json.loads((EXAMPLES / "grafana" / "switchboard-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    names = {n for e in exprs for n in re.findall(r"\b((?:switchboard|process)_[a-z0-9_]+)", e)}
    families = set(
        re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE)
    )  # labelled series may have no sample yet
    missing = {n for n in names if not any(n == f or n.startswith(f + "_") for f in families)}
    assert names and not missing, missing
    # And every series the example alert rules use (a renamed metric would silence an alert for ever).
    rules = (EXAMPLES / "prometheus" / "alerts.yml").read_text()
    used = set(re.findall(r"\b(switchboard_[a-z0-9_]+)", rules)) - {"switchboard"}
    unknown = {n for n in used if not any(n == f or n.startswith(f + "_") for f in families)}
    assert len(used) >= 8 and not unknown, unknown

    # Logs: text lines at WARNING and above, plus the audit trail (always at INFO).
    lines = [line for line in server.log_path.read_text().splitlines() if line and not line.startswith("---")]
    assert lines and not any(line.startswith("{") for line in lines), lines[:3]
    audits = [line for line in lines if "switchboard.audit:" in line]
    failed = [line for line in audits if "action=login_failed" in line]
    assert failed and "wrong-password-123" not in "\n".join(lines)
    assert not any(" INFO " in line for line in lines if "switchboard.audit:" not in line)


async def test_audit_lines_for_vend_and_hooks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = server_env()
    made = await cli(
        env, data, "human", "create", "au@example.com", "--password-stdin", stdin="a long passphrase\n"
    )
    proc = subprocess.run(
        [
            *switchboard_command(),
            "endpoint",
            "vend",
            "--human",
            "au@example.com",
            "--slug",
            "au",
            "--queues",
            "q",
            "--default-grant",
            "--json",
            "--data",
            str(data),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    token = json.loads(proc.stdout)["token"]
    (entry,) = [json.loads(line) for line in proc.stderr.splitlines() if '"audit"' in line]
    assert entry["logger"] == "switchboard.audit" and entry["action"] == "token.vend"
    assert entry["actor"] == "cli" and entry["human_id"] == made["human"]["id"] and entry["endpoint_id"]
    assert token not in proc.stderr
