"""Issue 15, hostile input against the real ``switchboard serve`` process, driven from outside: poison
text, malformed bodies, connection floods, cross-tenant routes, file modes, unverified twins."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import re
import stat
import statistics
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import GetTaskRequest, ListTasksRequest, Message, Part, Role, SendMessageRequest
from mcp.shared.exceptions import MCPError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from switchboard.core.verbs import A2A, DEFAULT_GRANT
from tests.integration.web.helpers import REDIRECT_URI, Human, ManualFlow, register_client
from tests.reliability.procs import CliFailed, ServerProcess, Tenant, cli, provision, server_env, servers
from tests.support.mcp_client import agent

PARSER_WORDS = ("Traceback", "codec", "decode", "Expecting", "RecursionError", "line 1 column", "char ")
HEADER_TIMEOUT = 3.0


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path, **settings: str | float | int
) -> AsyncIterator[tuple[ServerProcess, Tenant]]:
    env = server_env(mcp_rate_per_minute=1_000_000, **settings)
    data = tmp_path / "data"
    tenant = await provision(env, data, slug="alice", verbs=DEFAULT_GRANT)
    server = ServerProcess(data, env, name="hostile")
    with servers(server):
        server.start()
        await server.ready()
        yield server, tenant


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Tenant]]:
    """One server (as :func:`running` starts it) for the tests below that only send what must be
    refused and store nothing: each of them would otherwise pay for a server start of its own."""
    env = server_env(mcp_rate_per_minute=1_000_000)
    data = tmp_path_factory.mktemp("hostile-refusing") / "data"
    tenant = asyncio.run(provision(env, data, slug="alice", verbs=DEFAULT_GRANT))
    server = ServerProcess(data, env, name="hostile-refusing")
    with servers(server):
        server.start()
        asyncio.run(server.ready())
        yield server, tenant


async def test_lone_surrogate_and_nan_webhooks_are_400_and_store_nothing(tmp_path: Path) -> None:
    async with running(tmp_path) as (server, tenant), httpx.AsyncClient(base_url=server.base_url) as http:
        poison = [
            b'{"title": "x", "body": "\\ud800"}',
            b'{"\\udfff": 1}',
            b'{"n": NaN}',
            b'{"n": -Infinity}',
            b"[" * 70 + b"]" * 70,
        ]
        for body in poison:
            r = await http.post(tenant.inbound_path, content=body)
            assert r.status_code == 400, (body, r.text)
            assert r.json()["error"] == "invalid_json"
        good = await http.post(tenant.inbound_path, json={"title": "fine \u202e text", "ok": "\U0001f600"})
        assert good.status_code == 202
        async with agent(server.mcp_url, tenant.token) as a:
            first = await a.ok("claim_next")
            assert first["todo"]["id"] == good.json()["todos"][0]
            assert first["todo"]["payload"]["ok"] == "\U0001f600"
            assert (await a.ok("claim_next"))["todo"] is None  # nothing else was stored
            await a.ok(
                "ack",
                {"todo_id": first["todo"]["id"], "lease": first["todo"]["lease"], "result": {"fine": True}},
            )


async def test_poison_ack_result_is_refused_before_any_change(tmp_path: Path) -> None:
    async with running(tmp_path) as (server, tenant), httpx.AsyncClient(base_url=server.base_url) as http:
        assert (await http.post(tenant.inbound_path, json={"title": "t"})).status_code == 202
        async with agent(server.mcp_url, tenant.token) as a:
            todo = (await a.ok("claim_next"))["todo"]
            # The SDK client cannot even send a lone surrogate; a raw JSON-RPC body can. The boundary
            # refuses it before authentication: 400, a JSON-RPC parse error, no parser text.
            raw = (
                b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ack","arguments":'
                b'{"todo_id":"' + todo["id"].encode() + b'","lease":"' + todo["lease"].encode() + b'",'
                b'"result":"\\ud800"}}}'
            )
            for body in (raw, raw.replace(b'"\\ud800"', b"NaN")):
                r = await http.post(
                    "/mcp",
                    content=body,
                    headers={
                        "authorization": f"Bearer {tenant.token}",
                        "content-type": "application/json",
                        "accept": "application/json, text/event-stream",
                    },
                )
                assert r.status_code == 400 and r.json()["error"]["code"] == -32700
            # Still claimed by us: the refused ack changed nothing, a good one completes it.
            held = {"todo_id": todo["id"], "lease": todo["lease"]}
            assert (await a.ok("heartbeat", held))["todo"]["status"] == "claimed"
            done = await a.ok("ack", {**held, "result": {"deep": [[["ok"]]]}})
            assert done["todo"]["status"] == "done"


MALFORMED = {
    "deep": b"[" * 5000,
    "deep-object": b'{"a":' * 1200 + b"1" + b"}" * 1200,
    "invalid-utf8": b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}',
    "nan": b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"v":NaN}}',
    "surrogate": b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[{"text":"\\ud800"}]}}}',
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_malformed_bodies_get_4xx_without_parser_text_on_every_surface(
    refusing: tuple[ServerProcess, Tenant], case: str
) -> None:
    body = MALFORMED[case]
    server, tenant = refusing
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        paths = ["/a2a", "/mcp", tenant.inbound_path, "/register", "/login", "/sources/new", "/routes/new"]
        for path in paths:
            for headers in ({"content-type": "application/json"}, {}):
                r = await http.post(path, content=body, headers=headers)
                assert 400 <= r.status_code < 500, (path, r.status_code, r.text[:300])
                assert not any(word in r.text for word in PARSER_WORDS), (path, r.text[:300])
        assert (await http.get("/healthz")).status_code == 200


async def test_register_bodies_are_capped_at_the_configured_limit(
    refusing: tuple[ServerProcess, Tenant],
) -> None:
    server, _ = refusing
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        filler = "x" * (2 * 1024 * 1024)
        meta = {"redirect_uris": ["http://127.0.0.1:9/cb"], "client_name": "big", "extra": filler}
        r = await http.post("/register", json=meta)
        assert r.status_code == 413


@pytest.mark.alone  # probe latency under a flood: measured with the machine to itself (scripts/test)
async def test_two_thousand_silent_or_trickling_connections_do_not_take_the_server_down(
    tmp_path: Path,
) -> None:
    flood = 2000
    async with running(tmp_path, header_timeout_seconds=HEADER_TIMEOUT, max_connections=1000) as (server, _):
        log_before = server.log_path.read_text(errors="replace").count("\n")
        window = HEADER_TIMEOUT + 8
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.reliability.flood", str(server.port), str(flood), str(window),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        latencies: list[float] = []
        async with httpx.AsyncClient(base_url=server.base_url, timeout=5) as http:
            while proc.returncode is None and len(latencies) < 400:
                started = time.monotonic()
                r = await http.get("/healthz", headers={"connection": "close"})
                latencies.append(time.monotonic() - started)
                assert r.status_code == 200
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await proc.wait()
        async with asyncio.timeout(window + 30):
            out, _ = await proc.communicate()
        closed_after = json.loads(out)
        print(f"/healthz during the flood: {len(latencies)} probes, slowest {max(latencies):.3f} s")
        # Every probe answered, the typical one at once. scripts/test runs this alone (no other test
        # process competes for the two cores); the slowest is still bounded loosely for slower machines.
        assert len(latencies) >= 20 and statistics.median(latencies) < 0.25 and max(latencies) < 3.0
        # The server closed every hostile connection, none later than its header deadline (+ slack).
        assert -1.0 not in closed_after and 0.0 not in closed_after
        assert max(closed_after) <= HEADER_TIMEOUT + 2.5, sorted(closed_after)[-5:]
        new_lines = server.log_path.read_text(errors="replace").splitlines()[log_before:]
        about = [line for line in new_lines if "connection" in line.lower() or "accept" in line.lower()]
        assert len(about) <= 5, about


async def test_cli_refuses_a_cross_tenant_route(tmp_path: Path) -> None:
    env = server_env()
    data = tmp_path / "data"
    await provision(env, data, slug="alice", verbs=DEFAULT_GRANT)
    await provision(env, data, slug="bob", verbs=DEFAULT_GRANT)
    with pytest.raises(CliFailed, match="no endpoint"):
        await cli(
            env, data, "route", "create", "--source", "alice-src", "--queue", "inbox", "--endpoint", "bob"
        )
    routes = (await cli(env, data, "route", "list"))["routes"]
    assert {(r["source"], r["endpoint"]) for r in routes} == {("alice-src", "alice"), ("bob-src", "bob")}
    with pytest.raises(CliFailed, match="kind"):
        await cli(
            env, data, "route", "create", "--source", "alice-src", "--queue", "inbox", "--endpoint", "alice",
            "--kind", "push\u202eevil",
        )  # fmt: skip


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_data_directory_and_database_files_are_private(tmp_path: Path) -> None:
    async with running(tmp_path) as (server, tenant), httpx.AsyncClient(base_url=server.base_url) as http:
        assert (await http.post(tenant.inbound_path, json={"title": "t"})).status_code == 202
        data = server.data_dir
        assert mode(data) == 0o700
        files = [data / "switchboard.db", data / "switchboard.db-wal", data / "switchboard.db-shm"]
        assert [mode(f) for f in files if f.exists()] == [0o600] * len([f for f in files if f.exists()])
        assert files[0].exists() and files[1].exists()
        server.stop()
        for f in files:
            if f.exists():
                f.chmod(0o644)
        data.chmod(0o755)
        server.start()
        await server.ready()
        assert mode(data) == 0o700
        assert all(mode(f) == 0o600 for f in files if f.exists())


def gitea_sig(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def test_unverified_twin_never_stands_in_for_the_signed_delivery(tmp_path: Path) -> None:
    env = server_env()
    data = tmp_path / "data"
    tenant = await provision(env, data, slug="carol", verbs=DEFAULT_GRANT, kind="gitea", trust="none")
    server = ServerProcess(data, env, name="twin")
    with servers(server):
        server.start()
        await server.ready()
        async with httpx.AsyncClient(base_url=server.base_url) as http:
            event = {"x-gitea-event": "issues", "content-type": "application/json"}
            fake = json.dumps({"action": "opened", "issue": {"title": "attacker"}}).encode()
            real = json.dumps({"action": "opened", "issue": {"title": "genuine"}}).encode()
            r1 = await http.post(
                tenant.inbound_path, content=fake, headers={**event, "x-gitea-delivery": "D1"}
            )
            assert r1.status_code == 202 and r1.json()["verified"] is False
            signed = {**event, "x-gitea-delivery": "D1", "x-gitea-signature": gitea_sig(tenant.secret, real)}
            r2 = await http.post(tenant.inbound_path, content=real, headers=signed)
            assert r2.status_code == 202 and r2.json()["verified"] is True
            assert r2.json()["deduplicated"] == 0 and len(r2.json()["todos"]) == 1
            # The same signed body re-sent without its delivery header dedupes on the body while live.
            bare = {**event, "x-gitea-signature": gitea_sig(tenant.secret, real)}
            r3 = await http.post(tenant.inbound_path, content=real, headers=bare)
            r4 = await http.post(tenant.inbound_path, content=real, headers=bare)
            assert r3.json()["deduplicated"] == 0 and r4.json()["deduplicated"] == 1
        async with agent(server.mcp_url, tenant.token) as a:
            claimed = {}
            while (todo := (await a.ok("claim_next"))["todo"]) is not None:
                claimed[todo["id"]] = todo["payload"]["issue"]["title"]
        assert claimed[r2.json()["todos"][0]] == "genuine"
        assert claimed[r1.json()["todos"][0]] == "attacker"


async def test_endpoints_per_human_are_capped(tmp_path: Path) -> None:
    env = server_env(endpoints_per_human=2)
    data = tmp_path / "data"
    await provision(env, data, slug="dave", verbs=DEFAULT_GRANT)
    vend = ("endpoint", "vend", "--human", "dave@example.com", "--queues", "inbox", "--verbs", "claim_next")
    await cli(env, data, *vend, "--slug", "dave-2")
    with pytest.raises(CliFailed, match="ENDPOINTS_PER_HUMAN"):
        await cli(env, data, *vend, "--slug", "dave-3")


async def sign_in(base_url: str, source_ip: str, email: str, password: str) -> int:
    transport = httpx.AsyncHTTPTransport(local_address=source_ip)
    async with httpx.AsyncClient(
        base_url=base_url, transport=transport, follow_redirects=False, timeout=60
    ) as http:
        page = await http.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf, "login page has no CSRF field"
        r = await http.post("/login", data={"csrf": csrf.group(1), "email": email, "password": password})
        return r.status_code


async def test_the_right_password_signs_in_during_a_flood_of_wrong_ones(tmp_path: Path) -> None:
    async with running(tmp_path, login_attempts_per_minute=3) as (server, tenant):
        attackers = [f"127.0.0.{n}" for n in range(2, 6)]

        async def attack(ip: str) -> list[int]:
            return [await sign_in(server.base_url, ip, tenant.email, f"guess {i}") for i in range(6)]

        statuses = {s for per_ip in await asyncio.gather(*map(attack, attackers)) for s in per_ip}
        assert statuses == {401, 429}  # each attacking address runs out of its own attempts
        assert await sign_in(server.base_url, "127.0.0.9", tenant.email, "correct horse battery") == 303


HOSTILE_REDIRECTS = [
    "https://a;b.example/cb",
    "https://x.example,evil.example/cb",
    "https://x'.example/cb",
    "https://*.example/cb",
    "https://user:pw@x.example/cb",
    "http://user@127.0.0.1/cb",
]


async def test_public_oauth_client_revokes_its_token_and_hostile_registrations_are_refused(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as (server, tenant):
        person = Human(server, tenant.email)  # type: ignore[arg-type]  # duck-typed: base_url, mcp_url
        try:
            for uri in HOSTILE_REDIRECTS:
                r = await register_client(person.http, redirect_uris=[uri])
                assert r.status_code == 400, (uri, r.text)
            meta = {
                "client_name": "Trusted\u202e\u200bevil",
                "redirect_uris": [REDIRECT_URI],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            }
            registered = await person.http.post("/register", json=meta)
            assert registered.status_code == 201, registered.text
            assert (await person.sign_in("correct horse battery")).status_code == 303
            flow = ManualFlow(server, person, client=registered.json())  # type: ignore[arg-type]
            consent = await flow.start()
            assert consent.status_code == 200
            assert "\u202e" not in consent.text and "\u200b" not in consent.text and "Trusted" in consent.text
            answer = await flow.answer(consent, slug="public-one", verbs=["claim_next"])
            assert answer.status_code == 303, answer.text[-1500:]
            code = parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]
            client_id = flow.client["client_id"]
            exchanged = await person.http.post(
                "/token",
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": REDIRECT_URI,
                    "code_verifier": flow.verifier,
                    "resource": server.mcp_url,
                    "client_id": client_id,
                },
            )
            assert exchanged.status_code == 200, exchanged.text
            token = exchanged.json()["access_token"]
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
            mcp_headers = {
                "accept": "application/json, text/event-stream",
                "authorization": f"Bearer {token}",
            }
            assert (await person.http.post("/mcp", json=init, headers=mcp_headers)).status_code == 200
            revoked = await person.http.post("/revoke", data={"token": token, "client_id": client_id})
            assert revoked.status_code == 200, revoked.text
            assert (await person.http.post("/mcp", json=init, headers=mcp_headers)).status_code == 401
        finally:
            await person.close()


MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


async def test_one_endpoint_opening_sessions_without_end_cannot_block_another(tmp_path: Path) -> None:
    settings = {"mcp_max_sessions": 30, "mcp_sessions_per_endpoint": 8}
    env = server_env(mcp_rate_per_minute=1_000_000, **settings)
    data = tmp_path / "data"
    greedy, other = await asyncio.gather(
        provision(env, data, slug="greedy", verbs=["claim_next"]),
        provision(env, data, slug="other", verbs=["claim_next"]),
    )
    server = ServerProcess(data, env, name="sessions")
    with servers(server):
        server.start()
        await server.ready()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:

            async def initialize(token: str) -> httpx.Response:
                headers = {
                    "accept": "application/json, text/event-stream",
                    "authorization": f"Bearer {token}",
                }
                return await http.post("/mcp", json=MCP_INIT, headers=headers)

            opened = [await initialize(greedy.token) for _ in range(100)]  # far past the instance cap
            assert {r.status_code for r in opened} == {200}
            sids = [r.headers["mcp-session-id"] for r in opened]
            assert (await initialize(other.token)).status_code == 200
            # The greedy endpoint's oldest sessions were closed; its newest still work.
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            headers = {
                "accept": "application/json, text/event-stream",
                "authorization": f"Bearer {greedy.token}",
                "mcp-protocol-version": "2025-11-25",
            }
            oldest = await http.post("/mcp", json=ping, headers={**headers, "mcp-session-id": sids[0]})
            newest = await http.post("/mcp", json=ping, headers={**headers, "mcp-session-id": sids[-1]})
            assert oldest.status_code == 404 and newest.status_code == 200
        assert '"level": "error"' not in server.log_path.read_text(errors="replace")


async def test_a_legacy_poison_todo_is_buried_not_claimed_and_the_queue_goes_on(tmp_path: Path) -> None:
    async with running(tmp_path) as (server, tenant), httpx.AsyncClient(base_url=server.base_url) as http:
        poisoned = (await http.post(tenant.inbound_path, json={"title": "old"})).json()["todos"][0]
        # A row as the server stored it before the text boundary existed: a lone surrogate, escaped.
        engine = create_async_engine(f"sqlite+aiosqlite:///{server.data_dir / 'switchboard.db'}")
        try:
            async with engine.begin() as conn:
                await conn.execute(
                    text("UPDATE todos SET payload = :p WHERE id = :id"),
                    {"p": '{"x":"\\ud800"}', "id": poisoned},
                )
        finally:
            await engine.dispose()
        fine = (await http.post(tenant.inbound_path, json={"title": "new"})).json()["todos"][0]
        async with agent(server.mcp_url, tenant.token) as a:
            claimed = await a.ok("claim_next")
            assert claimed["todo"]["id"] == fine
            listed = {t["id"]: t for t in (await a.ok("list_todos"))["todos"]}
            assert listed[poisoned]["status"] == "dead" and "cannot be sent" in listed[poisoned]["last_error"]
            assert listed[fine]["status"] == "claimed"


async def test_every_answer_carries_the_baseline_security_headers(
    refusing: tuple[ServerProcess, Tenant],
) -> None:
    server, _ = refusing
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        answers = [
            await http.get("/no/such/page"),
            await http.get("/mcp/nope"),
            await http.get("/.well-known/nothing"),
            await http.put("/healthz"),
            await http.post("/a2a", content=b"[" * 2000),
            await http.get("/login"),
        ]
        for r in answers:
            assert r.headers.get("x-content-type-options") == "nosniff", (r.url, r.status_code)
            assert "content-security-policy" in r.headers and "x-frame-options" in r.headers, r.url
        assert "default-src 'self'" in answers[-1].headers["content-security-policy"]  # the UI's own set wins


async def test_a2a_get_task_and_list_tasks_keep_working_after_hostile_ack_results(tmp_path: Path) -> None:
    verbs = sorted({*DEFAULT_GRANT, *A2A.verbs})
    env = server_env(mcp_rate_per_minute=1_000_000)
    data = tmp_path / "data"
    tenant = await provision(env, data, slug="erin", verbs=verbs)
    server = ServerProcess(data, env, name="a2a")
    with servers(server):
        server.start()
        await server.ready()
        async with (
            httpx.AsyncClient(headers={"authorization": f"Bearer {tenant.token}"}, timeout=30) as http,
            agent(server.mcp_url, tenant.token) as a,
        ):
            client = await create_client(server.base_url, ClientConfig(httpx_client=http, streaming=False))
            try:
                results: list[Any] = [
                    {"text": "\u202e reversed \u200b hidden \U0001f600", "n": 1e308},
                    nest("deep", 32),  # the deepest result allowed (MAX_RESULT_DEPTH)
                    "\x00 nul and \r\n line breaks",
                    [None, True, -0.0, 10**30],
                ]
                for result in results:
                    message = Message(
                        message_id=f"m-{len(str(result))}",
                        role=Role.ROLE_USER,
                        parts=[Part(text="do it \u202e")],
                        metadata={"queue": "inbox"},
                    )
                    send = SendMessageRequest(message=message)
                    send.configuration.return_immediately = True  # the agent claims it below
                    (sent,) = [e.task async for e in client.send_message(send)]
                    todo = (await a.ok("claim_next"))["todo"]
                    with pytest.raises(MCPError, match="nests deeper than 64"):  # refused at the boundary
                        await a.call(
                            "ack", {"todo_id": todo["id"], "lease": todo["lease"], "result": nest("x", 80)}
                        )
                    too_deep = await a.call(
                        "ack", {"todo_id": todo["id"], "lease": todo["lease"], "result": nest("x", 50)}
                    )
                    assert too_deep.code == "invalid_argument"  # would break GetTask: refused, nothing done
                    assert (
                        await a.ok("ack", {"todo_id": todo["id"], "lease": todo["lease"], "result": result})
                    )["todo"]["status"] == "done"
                    got = await client.get_task(GetTaskRequest(id=sent.id))
                    assert got.id == sent.id
                listed = await client.list_tasks(ListTasksRequest())
                assert len(listed.tasks) == len(results)
            finally:
                await client.close()
        assert '"level": "error"' not in server.log_path.read_text(errors="replace")


def nest(leaf: Any, depth: int) -> Any:
    for i in range(depth - 1):
        leaf = [leaf] if i % 2 else {"k": leaf}
    return leaf
