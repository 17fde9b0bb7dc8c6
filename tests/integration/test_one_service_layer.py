"""One service layer under every face (issue 16 item 4): for each operation, two faces (the CLI as a
subprocess, the web UI over HTTP as a signed-in human, MCP through the official SDK) drive one running
``switchboard serve`` and its one database, and what they stored is compared. The same bad input gets
the same error from both faces and stores nothing; the same good input stores rows of the same shape.

Operations: vend an endpoint and revoke its token; mint a source secret (register, rotate); create a
route; create, rotate, disable, enable and delete a notify hook. A human does not create hooks
(SPEC-0024 REQ-2: only the endpoint, over MCP), so hook creation compares the MCP SDK with the CLI's
``switchboard call``, and every face's reading of what was stored.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from tests.reliability.procs import ServerProcess, cli, server_env, servers, switchboard_command
from tests.support.mcp_client import agent
from tests.support.secrets import reveal
from tests.support.server import free_port

OWNER = "owner@example.com"
PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
TOKEN = re.compile(r'data-testid="token">([^<]+)<')
SECRET = re.compile(r'data-testid="secret">([^<]+)<')
INBOUND = re.compile(r'id="inbound-url">([^<]+)<')
HOOK_VERBS = (*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs)


def found(pattern: re.Pattern[str], text: str) -> str:
    match = pattern.search(text)
    assert match, f"{pattern.pattern!r} not on the page"
    return html.unescape(match.group(1))


@dataclass
class Refusal:
    exit_code: int
    code: str
    message: str


async def refused(env: Mapping[str, str], data: Path, *args: str, stdin: str | None = None) -> Refusal:
    """A CLI command that must fail: its exit code and its one JSON error object (docs/cli.md)."""
    proc = await asyncio.create_subprocess_exec(
        *switchboard_command(),
        *args,
        "--json",
        "--data",
        str(data),
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate(None if stdin is None else stdin.encode())
    assert proc.returncode != 0, f"switchboard {' '.join(args)} succeeded: {out.decode()}"
    answer = json.loads(out)
    message = answer.get("message") or json.dumps(answer.get("result"))
    assert err.decode().startswith("error: "), err.decode()
    assert proc.returncode is not None
    return Refusal(proc.returncode, answer["error"], message)


class Web:
    """The owner in the web UI: one cookie jar, every form posted with its page's CSRF token."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.AsyncClient(base_url=base_url, timeout=20, follow_redirects=False)

    async def sign_in(self) -> None:
        page = await self.http.get("/login")
        r = await self.http.post(
            "/login", data={"csrf": found(CSRF, page.text), "email": OWNER, "password": PASSWORD}
        )
        assert r.status_code == 303, r.text[-500:]

    async def post(self, path: str, data: Mapping[str, Any], *, csrf_from: str) -> httpx.Response:
        page = await self.http.get(csrf_from)
        assert page.status_code == 200, (csrf_from, page.status_code)
        return await self.http.post(path, data={"csrf": found(CSRF, page.text), **data})

    async def error(self, path: str, data: Mapping[str, Any], *, csrf_from: str) -> str:
        """A form refused with 400: the error the page shows, unescaped."""
        r = await self.post(path, data, csrf_from=csrf_from)
        assert r.status_code == 400, (r.status_code, r.text[-500:])
        return html.unescape(r.text)


@dataclass
class Stack:
    env: dict[str, str]
    data: Path
    server: ServerProcess
    web: Web

    async def cli(self, *args: str, stdin: str | None = None) -> dict[str, Any]:
        return await cli(self.env, self.data, *args, stdin=stdin)

    async def refused(self, *args: str, stdin: str | None = None) -> Refusal:
        return await refused(self.env, self.data, *args, stdin=stdin)

    async def vend(self, slug: str, verbs: tuple[str, ...] = DEFAULT_GRANT) -> str:
        made = await self.cli(
            "endpoint",
            "vend",
            "--human",
            OWNER,
            "--slug",
            slug,
            "--queues",
            "inbox",
            "--verbs",
            ",".join(verbs),
        )
        reveal(made["token"])
        return str(made["token"])


@asynccontextmanager
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    """One human (the owner), one ``switchboard serve`` on its default layout, the owner signed in."""
    data = tmp_path / "data"
    env = server_env(notify_hook_allow_cidrs="127.0.0.1/32")
    await cli(env, data, "human", "create", OWNER, "--password-stdin", stdin=PASSWORD + "\n")
    server = ServerProcess(data, env, name="faces")
    with servers(server):
        server.start()
        await server.ready()
        web = Web(server.base_url)
        try:
            await web.sign_in()
            yield Stack(env, data, server, web)
        finally:
            await web.http.aclose()


def without(row: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in keys}


# -- endpoints: vend and revoke ---------------------------------------------------------------------


async def test_vend_and_revoke_from_cli_and_web_store_the_same(tmp_path: Path) -> None:
    async with stack(tmp_path) as s:
        verbs = ("ack", "claim_next")
        by_cli = await s.cli(
            "endpoint", "vend", "--human", OWNER, "--slug", "by-cli", "--queues", "work,inbox",
            "--verbs", ",".join(verbs),
        )  # fmt: skip
        reveal(by_cli["token"])
        page = await s.web.post(
            "/vend", {"slug": "by-web", "queues": "work, inbox", "verbs": list(verbs)}, csrf_from="/vend"
        )
        assert page.status_code == 200, page.text[-500:]
        web_token = found(TOKEN, page.text)
        reveal(web_token)

        listed = {e["slug"]: e for e in (await s.cli("endpoint", "list"))["endpoints"]}
        assert set(listed) == {"by-cli", "by-web"}
        same = ("id", "slug", "created_at")
        assert without(listed["by-cli"], *same) == without(listed["by-web"], *same)
        assert listed["by-web"]["queues"] == ["inbox", "work"] and listed["by-web"]["verbs"] == list(verbs)
        assert len(web_token) == len(by_cli["token"]) and web_token[:4] == by_cli["token"][:4]

        # The same bad input (a slug taken; then an unknown verb) gets the same error, stores nothing.
        taken = await s.refused(
            "endpoint", "vend", "--human", OWNER, "--slug", "by-web", "--queues", "inbox", "--default-grant"
        )
        assert (taken.exit_code, taken.code) == (1, "conflict")
        shown = await s.web.error(
            "/vend", {"slug": "by-cli", "queues": "inbox", "verbs": ["ack"]}, csrf_from="/vend"
        )
        assert taken.message == "an endpoint with that slug exists already"
        assert taken.message in shown
        assert len((await s.cli("endpoint", "list"))["endpoints"]) == 2

        # Revoke: the CLI's and the card's both leave the endpoint with no bearer credential.
        async with httpx.AsyncClient(timeout=20) as http:

            async def answers(token: str) -> int:
                r = await http.post(
                    s.server.mcp_url,
                    headers={
                        "Authorization": f"Bearer {token}",
                        "Accept": "application/json, text/event-stream",
                    },
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                )
                return r.status_code

            assert await answers(by_cli["token"]) != 401 and await answers(web_token) != 401
            await s.cli("endpoint", "revoke-token", "by-cli")
            r = await s.web.post("/endpoints/by-web/credential/revoke", {}, csrf_from="/endpoints/by-web")
            assert r.status_code == 303
            assert await answers(by_cli["token"]) == 401 and await answers(web_token) == 401
        after = {e["slug"]: e for e in (await s.cli("endpoint", "list"))["endpoints"]}
        assert without(after["by-cli"], *same) == without(after["by-web"], *same)


# -- sources: mint and rotate a secret ----------------------------------------------------------------


async def test_source_secrets_from_cli_and_web_are_minted_alike(tmp_path: Path) -> None:
    async with stack(tmp_path) as s:
        shapes: dict[str, tuple[str, str]] = {}
        for kind, trust in (("gitea", "signature"), ("standard", "signature"), ("generic", "token")):
            made = await s.cli(
                "source",
                "create",
                "--human",
                OWNER,
                "--slug",
                f"cli-{kind}",
                "--kind",
                kind,
                "--trust",
                trust,
            )
            reveal(made["secret"])
            page = await s.web.post(
                "/sources/new", {"slug": f"web-{kind}", "kind": kind, "trust": trust}, csrf_from="/sources"
            )
            assert page.status_code == 200, page.text[-500:]
            web_path = "/" + found(INBOUND, page.text).split("/", 3)[3]
            # a token-trust source's secret is its URL's path token, shown only in its URL
            web_secret = web_path.rsplit("/", 1)[1] if trust == "token" else found(SECRET, page.text)
            reveal(web_secret)
            assert _shape(web_secret) == _shape(made["secret"]), kind
            assert (
                web_path.replace("web-", "cli-").replace(web_secret, made["secret"]) == made["inbound_path"]
            )
            shapes[kind] = (made["secret"], web_secret)

        listed = {x["slug"]: x for x in (await s.cli("source", "list"))["sources"]}
        for kind in shapes:
            assert without(listed[f"cli-{kind}"], "id", "slug", "created_at") == without(
                listed[f"web-{kind}"], "id", "slug", "created_at"
            )

        # Both token URLs open the same way: each face's secret was stored sealed and verifies.
        cli_token, web_token = shapes["generic"]
        async with httpx.AsyncClient(base_url=s.server.base_url, timeout=20) as http:
            got = [
                (await http.post(f"/in/{slug}/{token}", json={"hello": 1})).status_code
                for slug, token in (("cli-generic", cli_token), ("web-generic", web_token))
            ]
            assert got[0] == got[1] and got[0] < 300, got

            # Rotate (the CLI; the web UI has no rotate): minted by the same function, the old URL stops.
            rotated = await s.cli("source", "rotate-secret", "cli-generic")
            reveal(rotated["secret"])
            assert _shape(rotated["secret"]) == _shape(web_token) and rotated["secret"] != cli_token
            assert (await http.post(f"/in/cli-generic/{cli_token}", json={"hello": 2})).status_code == 404
            assert (await http.post(rotated["inbound_path"], json={"hello": 3})).status_code == got[0]

        # The same bad input gets the same error from both faces and stores nothing.
        bad = await s.refused(
            "source",
            "create",
            "--human",
            OWNER,
            "--slug",
            "cli-bad",
            "--kind",
            "generic",
            "--trust",
            "signature",
        )
        assert (bad.exit_code, bad.code) == (2, "invalid")
        shown = await s.web.error(
            "/sources/new", {"slug": "web-bad", "kind": "generic", "trust": "signature"}, csrf_from="/sources"
        )
        assert "generic sources have no signature scheme" in bad.message and bad.message in shown
        dup = await s.refused(
            "source",
            "create",
            "--human",
            OWNER,
            "--slug",
            "web-gitea",
            "--kind",
            "gitea",
            "--trust",
            "signature",
        )
        assert (dup.exit_code, dup.code) == (1, "conflict")
        shown = await s.web.error(
            "/sources/new", {"slug": "cli-gitea", "kind": "gitea", "trust": "signature"}, csrf_from="/sources"
        )
        assert dup.message in shown
        assert len((await s.cli("source", "list"))["sources"]) == 6


def _shape(secret: str) -> tuple[str, int]:
    """What a minted secret looks like, never what it is: its scheme prefix and its length."""
    prefix = (
        "whsec_" if secret.startswith("whsec_") else "hex" if re.fullmatch(r"[0-9a-f]+", secret) else "url"
    )
    return prefix, len(secret)


# -- routes --------------------------------------------------------------------------------------------


async def test_routes_from_cli_and_web_are_checked_and_stored_alike(tmp_path: Path) -> None:
    async with stack(tmp_path) as s:
        await s.vend("sink")
        await s.cli(
            "source", "create", "--human", OWNER, "--slug", "src", "--kind", "gitea", "--trust", "none"
        )

        # An event kind derivation can never produce: refused by both faces with one message (the CLI
        # while parsing, as a usage error), and nothing stored. Only the CLI checked this before.
        for kind in ("a b", "x" * 101, "push\u202e"):
            bad = await s.refused(
                "route", "create", "--source", "src", "--queue", "inbox", "--endpoint", "sink", "--kind", kind
            )
            assert (bad.exit_code, bad.code) == (2, "usage")
            shown = await s.web.error(
                "/routes/new",
                {"source": "src", "kind": kind, "queue": "inbox", "endpoint": "sink"},
                csrf_from="/sources",
            )
            rule = bad.message.removeprefix("argument --kind: ")
            assert "is not an event kind" in rule and rule in shown, (kind, rule)
        assert (await s.cli("route", "list"))["routes"] == []

        by_cli = (
            await s.cli(
                "route",
                "create",
                "--source",
                "src",
                "--queue",
                "inbox",
                "--endpoint",
                "sink",
                "--kind",
                "push",
            )
        )["route"]
        r = await s.web.post(
            "/routes/new",
            {"source": "src", "kind": "issues", "queue": "inbox", "endpoint": "sink"},
            csrf_from="/sources",
        )
        assert r.status_code == 303, r.text[-500:]
        routes = {x["kind"]: x for x in (await s.cli("route", "list"))["routes"]}
        assert routes["push"] == by_cli
        assert without(routes["push"], "id", "kind", "created_at") == without(
            routes["issues"], "id", "kind", "created_at"
        )

        # A duplicate: the same conflict, whichever face made the first.
        dup = await s.refused(
            "route", "create", "--source", "src", "--queue", "inbox", "--endpoint", "sink", "--kind", "issues"
        )
        assert (dup.exit_code, dup.code, dup.message) == (1, "conflict", "that route exists already")
        shown = await s.web.error(
            "/routes/new",
            {"source": "src", "kind": "push", "queue": "inbox", "endpoint": "sink"},
            csrf_from="/sources",
        )
        assert dup.message in shown
        assert len((await s.cli("route", "list"))["routes"]) == 2


# -- notify hooks -------------------------------------------------------------------------------------


async def _hooks(s: Stack, slug: str) -> dict[str, dict[str, Any]]:
    return {h["hook_id"]: h for h in (await s.cli("hook", "list", slug))["hooks"]}


def _receiver() -> str:
    return f"https://127.0.0.1:{free_port()}/hook?QUERYCANARY=1"


async def test_hook_create_over_mcp_and_the_cli_call_store_the_same(tmp_path: Path) -> None:
    async with stack(tmp_path) as s:
        token = await s.vend("hooker", HOOK_VERBS)

        async def by_call(*args: str) -> dict[str, Any]:
            return await s.cli("call", *args, "--token-stdin", "--url", s.server.mcp_url, stdin=token + "\n")

        async with agent(s.server.mcp_url, token) as a:
            made = await a.ok("create_notify_hook", {"url": _receiver(), "queues": ["inbox"]})
            called = await by_call("create_notify_hook", f"url={_receiver()}", 'queues=["inbox"]')
            reveal(made["signing_secret"], called["signing_secret"])
            assert made["signing_secret"] != called["signing_secret"]
            assert _shape(made["signing_secret"])[0] == "whsec_"
            assert len(made["signing_secret"]) == len(called["signing_secret"])
            keep = ("hook_id", "url", "signing_secret")
            assert without(made, *keep) == without(called, *keep)

            # Every face reads the two stored rows alike: the CLI's list, MCP's list, the web card.
            stored = await _hooks(s, "hooker")
            assert set(stored) == {made["hook_id"], called["hook_id"]}
            varying = ("hook_id", "url", "created_at")
            assert without(stored[made["hook_id"]], *varying) == without(stored[called["hook_id"]], *varying)
            over_mcp = {h["hook_id"]: h for h in (await a.ok("list_notify_hooks"))["hooks"]}
            assert over_mcp == stored
            card = (await s.web.http.get("/endpoints/hooker")).text
            assert made["hook_id"] in card and called["hook_id"] in card
            assert "QUERYCANARY" not in json.dumps(stored) and "QUERYCANARY" not in card

            # The same bad input, the same refusal from the SDK and from `switchboard call`.
            for args in ({"url": "http://127.0.0.1:9/x"}, {"url": _receiver(), "queues": ["elsewhere"]}):
                sdk = await a.call("create_notify_hook", args)
                assert not sdk.ok
                cli_args = [f"{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in args.items()]
                fail = await s.refused(
                    "call", "create_notify_hook", *cli_args, "--token-stdin", "--url", s.server.mcp_url,
                    stdin=token + "\n",
                )  # fmt: skip
                assert fail.code == sdk.data["code"] == "invalid_argument", (fail, sdk.data)
                assert json.loads(fail.message)["message"] == sdk.data["message"]
            assert set(await _hooks(s, "hooker")) == set(stored)


async def test_hook_rotate_over_mcp_and_from_the_card_store_the_same(tmp_path: Path) -> None:
    async with stack(tmp_path) as s:
        token = await s.vend("rot", HOOK_VERBS)
        async with agent(s.server.mcp_url, token) as a:
            first = await a.ok("create_notify_hook", {"url": _receiver()})
            second = await a.ok("create_notify_hook", {"url": _receiver()})
            reveal(first["signing_secret"], second["signing_secret"])

            over_mcp = await a.ok("rotate_notify_hook", {"hook_id": first["hook_id"]})
            reveal(over_mcp["signing_secret"])
            page = await s.web.post(
                f"/endpoints/rot/hooks/{second['hook_id']}/rotate", {}, csrf_from="/endpoints/rot"
            )
            assert page.status_code == 200, page.text[-500:]
            assert over_mcp["signing_secret"] not in page.text
            card_secret = found(re.compile(r'data-testid="new-secret">([^<]+)<'), page.text)
            reveal(card_secret)
            assert card_secret != second["signing_secret"]
            assert len(card_secret) == len(over_mcp["signing_secret"])

            stored = await _hooks(s, "rot")
            varying = ("hook_id", "url", "created_at", "previous_secret_valid_until")
            assert without(stored[first["hook_id"]], *varying) == without(stored[second["hook_id"]], *varying)
            assert stored[first["hook_id"]]["previous_secret_valid_until"] is not None
            assert stored[second["hook_id"]]["previous_secret_valid_until"] is not None

            # An unknown hook: not found from both faces, nothing changes.
            missing = "nh_00000000000000000000000000"
            sdk = await a.call("rotate_notify_hook", {"hook_id": missing})
            assert not sdk.ok and sdk.data["code"] == "not_found"
            r = await s.web.post(f"/endpoints/rot/hooks/{missing}/rotate", {}, csrf_from="/endpoints/rot")
            assert r.status_code == 404
            assert await _hooks(s, "rot") == stored


async def test_hook_disable_enable_delete_from_cli_web_and_mcp_store_the_same(tmp_path: Path) -> None:
    async with stack(tmp_path) as s:
        token = await s.vend("own", HOOK_VERBS)
        async with agent(s.server.mcp_url, token) as a:
            ids = []
            for _ in range(3):
                made = await a.ok("create_notify_hook", {"url": _receiver()})
                reveal(made["signing_secret"])
                ids.append(made["hook_id"])
            one, two, three = ids

            off = await s.cli("hook", "disable", "own", one)
            assert off["changed"] is True
            r = await s.web.post(f"/endpoints/own/hooks/{two}/disable", {}, csrf_from="/endpoints/own")
            assert r.status_code == 303
            stored = await _hooks(s, "own")
            varying = ("hook_id", "url", "created_at", "disabled_at")
            assert without(stored[one], *varying) == without(stored[two], *varying)
            assert stored[one]["disabled_reason"] == "operator" and stored[one]["enabled"] is False
            assert stored[one]["disabled_at"] is not None and stored[two]["disabled_at"] is not None
            assert off["hook"] == stored[one]

            on = await s.cli("hook", "enable", "own", one)
            assert on["changed"] is True
            r = await s.web.post(f"/endpoints/own/hooks/{two}/enable", {}, csrf_from="/endpoints/own")
            assert r.status_code == 303
            stored = await _hooks(s, "own")
            assert without(stored[one], *varying) == without(stored[two], *varying)
            assert without(stored[one], *varying) == without(stored[three], *varying)
            assert stored[one]["enabled"] is True

            # Another endpoint's (or no) hook: not found from both faces, and nothing changes.
            await s.vend("stranger", HOOK_VERBS)
            miss = await s.refused("hook", "disable", "stranger", one)
            assert (miss.exit_code, miss.code) == (1, "not_found")
            await s.web.post("/vend/quick", {"slug": "spare", "queues": "inbox"}, csrf_from="/endpoints")
            r = await s.web.post(f"/endpoints/spare/hooks/{one}/disable", {}, csrf_from="/endpoints/spare")
            assert r.status_code == 404
            assert await _hooks(s, "own") == stored

            # Delete from each of the three faces: each row goes, and only it.
            assert (await s.cli("hook", "delete", "own", one))["deleted"] == one
            assert set(await _hooks(s, "own")) == {two, three}
            r = await s.web.post(f"/endpoints/own/hooks/{two}/delete", {}, csrf_from="/endpoints/own")
            assert r.status_code == 303
            assert set(await _hooks(s, "own")) == {three}
            await a.ok("delete_notify_hook", {"hook_id": three})
            assert await _hooks(s, "own") == {}
            gone = await s.refused("hook", "delete", "own", three)
            assert (gone.exit_code, gone.code) == (1, "not_found")
            sdk = await a.call("delete_notify_hook", {"hook_id": one})
            assert not sdk.ok and sdk.data["code"] == "not_found"
