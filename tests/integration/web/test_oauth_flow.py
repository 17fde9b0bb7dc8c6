"""MCP OAuth against a running server.

The first test drives the whole flow with the MCP SDK's own client OAuth support (discovery, dynamic
registration, authorize, the consent form posted with its CSRF token, PKCE exchange, then verbs). The
rest speak the protocol by hand for what the SDK client never does: deny, replay a code, reuse a
refresh token, revoke, ask for another resource, register a hostile redirect URI.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.mcp.auth import authenticate_bearer
from tests.integration.web.helpers import (
    REDIRECT_URI,
    Consent,
    Human,
    ManualFlow,
    MemoryStorage,
    csrf_of,
    human,
    oauth_agent,
    pkce,
    register_client,
)
from tests.support.mcp_client import agent
from tests.support.server import Instance

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
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def mcp_status(inst: Instance, token: str) -> int:
    async with httpx2.AsyncClient(timeout=10) as http:
        r = await http.post(
            inst.mcp_url, json=MCP_INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        )
    return r.status_code


async def test_sdk_client_registers_authorizes_exchanges_and_calls(inst: Instance) -> None:
    async with human(inst, "ada@example.com") as (person, human_id):
        storage = MemoryStorage()
        consent = Consent(slug="claude-laptop", verbs=["claim_next", "ack", "list_todos"])
        async with oauth_agent(inst, person, consent, storage) as client:
            who = await client.ok("whoami")
            assert who["endpoint"] == "claude-laptop"
            assert set(who["verbs"]) == {"claim_next", "ack", "list_todos"}
            assert (await client.ok("claim_next", {}))["todo"] is None
            assert (await client.call("self_test")).code == "forbidden"  # a verb the token lacks
            listed = {t.name for t in (await client.client.list_tools()).tools}
            assert {"claim_next", "ack", "list_todos"} <= listed and "self_test" not in listed
        # The consent screen named the client and listed the grant groups, outbound HTTP ones labelled.
        assert "Test MCP client" in consent.consent_page
        assert NOTIFY_HOOKS.label in consent.consent_page
        assert consent.redirected_to.startswith(REDIRECT_URI + "?")
        assert storage.tokens is not None and storage.tokens.refresh_token
        # The endpoint was vended for the human; the OAuth token is its only credential.
        endpoint = await inst.services.accounts.endpoint_by_slug("claude-laptop")
        assert endpoint is not None and endpoint.human_id == human_id and endpoint.token_hint is None


async def test_existing_endpoint_token_is_held_to_its_grant(inst: Instance) -> None:
    accounts = inst.services.accounts
    async with human(inst, "bo@example.com") as (person, human_id):
        endpoint, bearer = await accounts.vend_endpoint(human_id, "worker", ["inbox"], list(DEFAULT_GRANT))
        consent = Consent(target="existing", endpoint="worker", verbs=["claim_next", "list_todos"])
        async with oauth_agent(inst, person, consent) as client:
            assert (await client.ok("whoami"))["endpoint"] == "worker"
            assert (await client.call("self_test")).code == "forbidden"  # the endpoint has it; the grant not
            await accounts.set_scope(endpoint.id, verbs=[*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs])
            assert (
                await client.call("list_notify_hooks")
            ).code == "forbidden"  # widening never widens a token
            await accounts.set_scope(endpoint.id, verbs=["ack"])
            assert (await client.call("claim_next", {})).code == "forbidden"  # shrinking shrinks it at once
        async with agent(inst.mcp_url, bearer) as by_bearer:  # the bearer credential is untouched
            assert (await by_bearer.ok("whoami"))["endpoint"] == "worker"


async def test_consent_cannot_widen_an_existing_endpoint(inst: Instance) -> None:
    accounts = inst.services.accounts
    async with human(inst, "cy@example.com") as (person, human_id):
        await accounts.vend_endpoint(human_id, "narrow", ["inbox"], ["claim_next"])
        flow = ManualFlow(inst, person)
        page = await flow.start()
        answer = await flow.answer(
            page, target="existing", endpoint="narrow", verbs=["claim_next", "create_notify_hook"]
        )
        assert answer.status_code == 400
        assert "does not hold create_notify_hook" in answer.text
        assert (await accounts.endpoint_by_slug("narrow")).verbs == ("claim_next",)  # type: ignore[union-attr]


async def test_consent_cannot_pick_another_humans_endpoint(inst: Instance) -> None:
    accounts = inst.services.accounts
    async with (
        human(inst, "owner@example.com") as (_owner, owner_id),
        human(inst, "mallory@example.com") as (
            mallory,
            _,
        ),
    ):
        await accounts.vend_endpoint(owner_id, "theirs", ["inbox"], list(DEFAULT_GRANT))
        flow = ManualFlow(inst, mallory)
        page = await flow.start()
        assert "theirs" not in page.text
        answer = await flow.answer(page, target="existing", endpoint="theirs", verbs=["claim_next"])
        assert answer.status_code == 400 and "Pick one of your endpoints" in answer.text


async def test_deny_redirects_with_access_denied_and_state(inst: Instance) -> None:
    async with human(inst, "di@example.com") as (person, _):
        flow = ManualFlow(inst, person)
        answer = await flow.answer(await flow.start(state="keep-me"), decision="deny")
        assert answer.status_code == 303
        query = parse_qs(urlsplit(answer.headers["location"]).query)
        assert query["error"] == ["access_denied"] and query["state"] == ["keep-me"]
        assert await inst.services.accounts.list_endpoints() == []


async def test_code_is_single_use_and_needs_the_pkce_verifier(inst: Instance) -> None:
    async with human(inst, "ed@example.com") as (person, _):
        flow = ManualFlow(inst, person)
        code = await flow.code(slug="pkce-agent", queues="inbox", verbs=["claim_next"])
        verifier = flow.verifier
        flow.verifier = "x" * 64
        wrong = await flow.exchange(code)
        assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
        flow.verifier = verifier
        first = await flow.exchange(code)
        assert first.status_code == 200, first.text
        tokens = first.json()
        assert tokens["token_type"] == "Bearer" and tokens["scope"] == "claim_next"
        replay = await flow.exchange(code)
        assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
        assert await mcp_status(inst, tokens["access_token"]) == 200


async def test_refresh_rotates_and_reuse_revokes_the_grant(inst: Instance) -> None:
    async with human(inst, "fa@example.com") as (person, _):
        flow = ManualFlow(inst, person)
        first = (await flow.exchange(await flow.code(slug="rot", verbs=["claim_next", "ack"]))).json()
        refreshed = await flow.token({"grant_type": "refresh_token", "refresh_token": first["refresh_token"]})
        assert refreshed.status_code == 200, refreshed.text
        second = refreshed.json()
        assert second["refresh_token"] != first["refresh_token"]
        assert await mcp_status(inst, second["access_token"]) == 200
        reuse = await flow.token({"grant_type": "refresh_token", "refresh_token": first["refresh_token"]})
        assert reuse.status_code == 400 and reuse.json()["error"] == "invalid_grant"
        # Reuse means a copy exists somewhere: everything issued under the grant stops working.
        assert await mcp_status(inst, second["access_token"]) == 401
        again = await flow.token({"grant_type": "refresh_token", "refresh_token": second["refresh_token"]})
        assert again.status_code == 400


async def test_revocation_stops_the_token(inst: Instance) -> None:
    async with human(inst, "gu@example.com") as (person, _):
        flow = ManualFlow(inst, person)
        tokens = (await flow.exchange(await flow.code(slug="rev", verbs=["claim_next"]))).json()
        assert await mcp_status(inst, tokens["access_token"]) == 200
        r = await person.http.post(
            "/revoke",
            data={
                "token": tokens["access_token"],
                "client_id": flow.client["client_id"],
                "client_secret": flow.client["client_secret"],
            },
        )
        assert r.status_code == 200
        assert await mcp_status(inst, tokens["access_token"]) == 401
        refused = await flow.token({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]})
        assert refused.status_code == 400


async def test_authenticate_bearer_gives_the_effective_scope_for_both_credentials(inst: Instance) -> None:
    services = inst.services
    async with human(inst, "ha@example.com") as (person, human_id):
        endpoint, bearer = await services.accounts.vend_endpoint(
            human_id, "both", ["inbox"], list(DEFAULT_GRANT)
        )
        flow = ManualFlow(inst, person)
        code = await flow.code(target="existing", endpoint="both", verbs=["claim_next", "ack"])
        tokens = (await flow.exchange(code)).json()
        by_bearer = await authenticate_bearer(services, bearer)
        by_oauth = await authenticate_bearer(services, tokens["access_token"])
        assert by_bearer is not None and by_bearer.id == endpoint.id and by_bearer.verbs == endpoint.verbs
        assert (
            by_oauth is not None
            and by_oauth.id == endpoint.id
            and set(by_oauth.verbs) == {"claim_next", "ack"}
        )
        assert await authenticate_bearer(services, "sboa_not-a-token") is None
        assert (
            await authenticate_bearer(services, tokens["refresh_token"]) is None
        )  # refresh tokens are not access


async def test_authorize_refuses_another_resource(inst: Instance) -> None:
    async with human(inst, "ib@example.com") as (person, _):
        flow = ManualFlow(inst, person)
        r = await flow.start(resource="https://elsewhere.example/mcp")
        assert r.status_code == 302
        assert parse_qs(urlsplit(r.headers["location"]).query)["error"] == ["invalid_target"]


@pytest.mark.parametrize(
    "uri",
    [
        "javascript:alert(1)",
        "http://evil.example/cb",
        "data:text/html,hi",
        "https://x.example/cb#frag",
        "file:///etc",
    ],
)
async def test_registration_refuses_dangerous_redirect_uris(inst: Instance, uri: str) -> None:
    async with human(inst, "jo@example.com") as (person, _):
        r = await register_client(person.http, redirect_uris=[uri])
        assert r.status_code == 400
        assert r.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata")


async def test_discovery_metadata(inst: Instance) -> None:
    async with httpx2.AsyncClient(base_url=inst.base_url, timeout=10) as http:
        prm = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
        meta = (await http.get("/.well-known/oauth-authorization-server")).json()
        unauthenticated = await http.post("/mcp", json=MCP_INIT, headers=MCP_HEADERS)
    assert prm["resource"] == inst.mcp_url and prm["authorization_servers"] == [inst.base_url]
    assert meta["issuer"] == inst.base_url
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert {"authorization_code", "refresh_token"} <= set(meta["grant_types_supported"])
    for key in ("authorization_endpoint", "token_endpoint", "registration_endpoint", "revocation_endpoint"):
        assert meta[key].startswith(inst.base_url)
    assert unauthenticated.status_code == 401
    assert "resource_metadata=" in unauthenticated.headers["www-authenticate"]


async def test_consent_sends_a_signed_out_human_through_sign_in_and_back(inst: Instance) -> None:
    await inst.services.accounts.create_human("kay@example.com", "correct horse battery")
    person = Human(inst, "kay@example.com")
    try:
        flow = ManualFlow(inst, person)
        r = await register_client(person.http)
        flow.client = r.json()
        _, challenge = pkce()
        authorize = await person.http.get(
            "/authorize",
            params={
                "response_type": "code",
                "client_id": flow.client["client_id"],
                "redirect_uri": REDIRECT_URI,
                "state": "s",
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            },
        )
        consent_url = authorize.headers["location"]
        to_login = await person.http.get(consent_url)
        assert to_login.status_code == 303 and to_login.headers["location"].startswith("/login?next=")
        login_page = await person.http.get(to_login.headers["location"])
        signed_in = await person.http.post(
            "/login",
            data={
                "csrf": csrf_of(login_page.text),
                "email": "kay@example.com",
                "password": "correct horse battery",
                "next": re.search(r'name="next" value="([^"]+)"', login_page.text).group(1),  # type: ignore[union-attr]
            },
        )
        assert signed_in.status_code == 303 and signed_in.headers["location"] == consent_url
        assert "Manual client" in (await person.http.get(signed_in.headers["location"])).text
    finally:
        await person.close()
