"""OAuth Client ID Metadata Documents against a running server (issue 29, item 5).

The document is served over HTTPS on loopback with a trustme certificate for ``clients.test``, a name
only the injected resolver knows; the instance's document allowlist (SWITCHBOARD_OAUTH_CIMD_ALLOW_CIDRS)
exempts 127.0.0.1 alone, so 127.0.0.2 stands for an address the SSRF guard refuses. The first test is
the SDK's own client (``client_metadata_url``) through consent to ``claim_next``; the rest speak the
protocol by hand for the refusals, which must name the failed check, never redirect, and store nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import func, select

from switchboard.core.clock import ManualClock
from switchboard.store.schema_web import oauth_clients, oauth_codes, oauth_grants
from switchboard.store.todos import NewTodo
from switchboard.web.cimd import MAX_DOCUMENT_BYTES
from tests.integration.web.helpers import REDIRECT_URI, REQ, Consent, Human, csrf_of, human, oauth_agent, pkce
from tests.support.receivers import (
    HTTPSReceiver,
    ListeningSocket,
    Respond,
    StaticResolver,
    client_ssl_context,
    make_ca,
    redirect,
)
from tests.support.server import Instance, make_settings, run_instance

HOST = "clients.test"
REFUSED_HOST = "refused.test"  # resolves to 127.0.0.2, outside the allowlist
DOC_PATH = "/oauth/client.json"


@dataclass
class Env:
    inst: Instance
    rx: HTTPSReceiver
    clock: ManualClock
    resolver: StaticResolver

    @property
    def client_id(self) -> str:
        return self.rx.url(DOC_PATH, hostname=HOST)

    def serve(
        self, doc: dict[str, Any] | bytes, *, cache: str = "max-age=300", ctype: str = "application/json"
    ) -> None:
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        self.rx.behaviour = Respond(200, [("content-type", ctype), ("cache-control", cache)], body)

    def document(self, **fields: Any) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "client_name": "Docs Agent",
            "client_uri": "https://clients.test/",
            "redirect_uris": [REDIRECT_URI],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            **fields,
        }


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    ca = make_ca()
    resolver = StaticResolver({HOST: ["127.0.0.1"], REFUSED_HOST: ["127.0.0.2"]})
    clock = ManualClock(time.time())  # near real time: the SDK compares token expiries with time.time()
    settings = make_settings(tmp_path, oauth_cimd_allow_cidrs="127.0.0.1/32")
    async with (
        HTTPSReceiver(ca, cert_hostnames=(HOST, REFUSED_HOST)) as rx,
        run_instance(settings, clock=clock, resolver=resolver, ssl_context=client_ssl_context(ca)) as inst,
    ):
        yield Env(inst, rx, clock, resolver)


async def rows(inst: Instance) -> dict[str, int]:
    async with inst.services.db.read() as conn:
        return {
            t.name: int((await conn.execute(select(func.count()).select_from(t))).scalar_one())
            for t in (oauth_clients, oauth_codes, oauth_grants)
        }


NOTHING = {"oauth_clients": 0, "oauth_codes": 0, "oauth_grants": 0}


async def authorize(person: Human, client_id: str, *, redirect_uri: str = REDIRECT_URI) -> httpx.Response:
    _, challenge = pkce()
    return await person.http.get(
        "/authorize",
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "state": "st",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        },
    )


def refused(r: httpx.Response, error: str, words: str) -> None:
    """A direct JSON refusal naming the check: never a redirect to the client."""
    assert r.status_code in (400, 401), (r.status_code, r.text)
    assert "location" not in r.headers
    body = r.json()
    assert body["error"] == error, body
    assert words in body["error_description"], body


# -- the whole flow, by the SDK's own client ---------------------------------------------------------


async def test_sdk_client_by_metadata_document_authorizes_and_claims(env: Env) -> None:
    env.serve(env.document())
    async with human(env.inst, "cim@example.com") as (person, human_id):
        consent = Consent(slug="doc-agent", verbs=["claim_next", "ack", "list_todos"])
        async with oauth_agent(env.inst, person, consent, client_metadata_url=env.client_id) as agent:
            endpoint = await env.inst.services.accounts.endpoint_by_slug("doc-agent")
            assert endpoint is not None and endpoint.human_id == human_id
            created = await env.inst.services.todos.create(
                [
                    NewTodo(
                        endpoint_id=endpoint.id,
                        queue="inbox",
                        title="from a doc client",
                        payload={},
                        verified=True,
                    )
                ]
            )
            claimed = await agent.ok("claim_next", {})
            assert claimed["todo"]["id"] == created.created[0]
            who = await agent.ok("whoami")
            assert who["via"] == "oauth" and who["endpoint"] == "doc-agent"
    # The consent screen showed the document's name and the URL's host, marked as the client's claim.
    page = consent.consent_page
    assert "Docs Agent" in page and 'data-testid="self-asserted"' in page
    assert f'data-testid="document-host">{HOST}<' in page
    assert consent.redirected_to.startswith(REDIRECT_URI + "?")
    # One fetch served the whole flow (authorize, consent twice, token): the cache.
    assert len(env.rx.requests) == 1
    request = env.rx.requests[0]
    assert (
        request.method == "GET"
        and request.path == DOC_PATH
        and request.header("accept") == "application/json"
    )
    # The client was stored at approval, keyed by its URL's digest; no registration happened.
    assert await rows(env.inst) == {"oauth_clients": 1, "oauth_codes": 0, "oauth_grants": 1}


async def test_discovery_advertises_documents_and_keeps_registration(env: Env) -> None:
    async with httpx.AsyncClient(base_url=env.inst.base_url, timeout=10) as http:
        meta = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert meta["client_id_metadata_document_supported"] is True
    assert meta["registration_endpoint"] == env.inst.base_url + "/register"
    assert "none" in meta["token_endpoint_auth_methods_supported"]
    assert meta["issuer"] == env.inst.base_url and meta["code_challenge_methods_supported"] == ["S256"]


# -- by hand: refresh and revoke of a document client ----------------------------------------------


async def approve(person: Human, consent_url: str, slug: str) -> str:
    page = await person.http.get(consent_url)
    assert page.status_code == 200, page.text
    req = REQ.search(page.text)
    assert req is not None
    form = {"csrf": csrf_of(page.text), "req": req.group(1), "decision": "approve", "target": "new"}
    form.update({"slug": slug, "queues": "inbox", "verbs": "claim_next"})
    answer = await person.http.post("/oauth/consent", data=form)
    assert answer.status_code == 303, answer.text
    return parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]


async def test_document_client_exchanges_refreshes_and_revokes_without_a_secret(env: Env) -> None:
    env.serve(env.document())
    async with human(env.inst, "ref@example.com") as (person, _):
        verifier, challenge = pkce()
        start = await person.http.get(
            "/authorize",
            params={
                "response_type": "code",
                "client_id": env.client_id,
                "redirect_uri": REDIRECT_URI,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "resource": env.inst.mcp_url,
            },
        )
        assert start.status_code == 302 and start.headers["location"].startswith("/oauth/consent")
        assert await rows(env.inst) == NOTHING  # nothing is stored before the human approves
        code = await approve(person, start.headers["location"], "by-hand")
        token = {"client_id": env.client_id}
        first = await person.http.post(
            "/token",
            data={
                **token,
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT_URI,
                "code_verifier": verifier,
                "resource": env.inst.mcp_url,
            },
        )
        assert first.status_code == 200, first.text
        tokens = first.json()
        again = await person.http.post(
            "/token", data={**token, "grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}
        )
        assert again.status_code == 200, again.text
        fresh = again.json()
        revoked = await person.http.post("/revoke", data={**token, "token": fresh["access_token"]})
        assert revoked.status_code == 200, revoked.text
        gone = await person.http.post(
            "/token", data={**token, "grant_type": "refresh_token", "refresh_token": fresh["refresh_token"]}
        )
        assert gone.status_code == 400 and gone.json()["error"] == "invalid_grant"


# -- refusals -----------------------------------------------------------------------------------------


async def test_a_document_over_the_size_cap_is_refused(env: Env) -> None:
    env.serve(env.document(padding="x" * MAX_DOCUMENT_BYTES))
    async with human(env.inst, "big@example.com") as (person, _):
        refused(
            await authorize(person, env.client_id),
            "invalid_client",
            f"larger than {MAX_DOCUMENT_BYTES} bytes",
        )
    assert await rows(env.inst) == NOTHING


async def test_a_document_on_a_refused_address_is_never_dialled(env: Env) -> None:
    async with ListeningSocket("127.0.0.2") as victim, human(env.inst, "ssrf@example.com") as (person, _):
        client_id = f"https://{REFUSED_HOST}:{victim.port}{DOC_PATH}"
        refused(await authorize(person, client_id), "invalid_client", "SSRF guard")
        # The token endpoint says the same, as RFC 6749's 401 for a client that fails.
        r = await person.http.post(
            "/token", data={"client_id": client_id, "grant_type": "authorization_code", "code": "sboc_x"}
        )
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == "*"
        refused(r, "invalid_client", "SSRF guard")
        await victim.assert_untouched()
    assert await rows(env.inst) == NOTHING


async def test_a_redirect_uri_the_document_does_not_list_is_refused_without_a_redirect(env: Env) -> None:
    env.serve(env.document())
    async with human(env.inst, "redir@example.com") as (person, _):
        evil = "http://127.0.0.1:2/steal"
        r = await authorize(person, env.client_id, redirect_uri=evil)
        refused(r, "invalid_request", "redirect_uri is not one of the redirect_uris")
        assert evil not in r.text
        # A near miss is a miss: redirect URIs compare as strings.
        refused(
            await authorize(person, env.client_id, redirect_uri=REDIRECT_URI + "/"),
            "invalid_request",
            "redirect_uri",
        )
    assert await rows(env.inst) == NOTHING


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"client_id": "https://clients.test/someone-else.json"}, "client_id does not equal the URL"),
        ({"token_endpoint_auth_method": "private_key_jwt"}, 'token_endpoint_auth_method must be "none"'),
        ({"token_endpoint_auth_method": "client_secret_basic", "client_secret": "s3"}, "client secret"),
        ({"redirect_uris": []}, "needs redirect_uris"),
        ({"redirect_uris": ["javascript:alert(1)"]}, "redirect_uris: redirect URI scheme"),
        ({"grant_types": ["client_credentials"]}, "grant_types must include authorization_code"),
    ],
)
async def test_a_document_breaking_a_rule_is_refused_naming_it(
    env: Env, change: dict[str, Any], words: str
) -> None:
    env.serve(env.document(**change))
    async with human(env.inst, "rule@example.com") as (person, _):
        refused(await authorize(person, env.client_id), "invalid_client", words)
    assert await rows(env.inst) == NOTHING


async def test_not_json_wrong_type_redirects_and_errors_are_refused(env: Env) -> None:
    async with human(env.inst, "bad@example.com") as (person, _):
        env.serve(b"<html>hello</html>", ctype="application/json")
        refused(await authorize(person, env.client_id), "invalid_client", "is not JSON")
        env.serve(env.document(), ctype="text/html")
        # Refusals are not cached: a fixed document is read at the next attempt.
        refused(await authorize(person, env.client_id), "invalid_client", "not served as application/json")
        async with ListeningSocket() as elsewhere:
            env.rx.behaviour = redirect(f"https://{HOST}:{elsewhere.port}{DOC_PATH}")
            refused(await authorize(person, env.client_id), "invalid_client", "redirects are not followed")
            await elsewhere.assert_untouched()
        env.rx.behaviour = Respond(404)
        refused(await authorize(person, env.client_id), "invalid_client", "answered HTTP 404")
        with_query = env.client_id + "?tenant=QUERYCANARY-in-a-client-id"  # never logged (secrecy scan)
        refused(await authorize(person, with_query), "invalid_client", "answered HTTP 404")
    assert await rows(env.inst) == NOTHING


async def test_an_unreachable_document_and_a_malformed_client_id_are_refused(env: Env) -> None:
    async with ListeningSocket() as closed_port:
        port = closed_port.port
    async with human(env.inst, "gone@example.com") as (person, _):
        refused(
            await authorize(person, f"https://{HOST}:{port}{DOC_PATH}"),
            "invalid_client",
            "could not be fetched",
        )
        refused(await authorize(person, f"https://{HOST}/"), "invalid_request", "must have a path")
        refused(await authorize(person, f"https://{HOST}/a/../b.json"), "invalid_request", ". or .. segments")
        # An unknown name and a refused address get one answer: no map of internal DNS for anyone.
        unknown = await authorize(person, f"https://unknown.test{DOC_PATH}")
        refused(unknown, "invalid_client", "SSRF guard")
        same = unknown.json()["error_description"]
        refused(await authorize(person, f"https://{REFUSED_HOST}{DOC_PATH}"), "invalid_client", same)
    assert await rows(env.inst) == NOTHING


async def test_the_cache_keeps_a_document_for_its_max_age_within_bounds(env: Env) -> None:
    async with human(env.inst, "cache@example.com") as (person, _):
        env.serve(env.document(), cache="public, max-age=120")
        assert (await authorize(person, env.client_id)).status_code == 302
        env.clock.advance(100)
        assert (await authorize(person, env.client_id)).status_code == 302
        assert len(env.rx.requests) == 1
        env.clock.advance(30)  # past 120 s: read again
        env.serve(env.document(), cache="no-store")
        assert (await authorize(person, env.client_id)).status_code == 302
        assert len(env.rx.requests) == 2
        env.clock.advance(59)  # no-store is held to the 60 s minimum
        assert (await authorize(person, env.client_id)).status_code == 302
        assert len(env.rx.requests) == 2
        env.clock.advance(2)
        env.serve(env.document(redirect_uris=["https://clients.test/cb"]))  # the client changed its document
        refused(await authorize(person, env.client_id), "invalid_request", "redirect_uri is not one of")
        assert len(env.rx.requests) == 3


async def test_switched_off_nothing_is_fetched_or_advertised(tmp_path: Path) -> None:
    ca = make_ca()
    resolver = StaticResolver({HOST: ["127.0.0.1"]})
    settings = make_settings(
        tmp_path, oauth_cimd_allow_cidrs="127.0.0.1/32", oauth_client_metadata_documents=False
    )
    async with (
        HTTPSReceiver(ca, cert_hostnames=(HOST,)) as rx,
        run_instance(settings, resolver=resolver, ssl_context=client_ssl_context(ca)) as inst,
        human(inst, "off@example.com") as (person, _),
    ):
        meta = (await person.http.get("/.well-known/oauth-authorization-server")).json()
        assert meta.get("client_id_metadata_document_supported") is None and meta["registration_endpoint"]
        r = await authorize(person, rx.url(DOC_PATH, hostname=HOST))
        assert r.status_code == 400 and r.json()["error"] == "invalid_request" and "location" not in r.headers
        assert rx.requests == [] and rx.connections == 0


@pytest.mark.postgres
async def test_two_instances_on_postgres_share_a_document_client(tmp_path: Path, pg_url: str) -> None:
    """Approved twice on one instance (the row is kept, then refreshed), exchanged on the other, which
    reads the document itself: codes and grants hang off the stored digest on PostgreSQL too."""
    ca = make_ca()
    resolver = StaticResolver({HOST: ["127.0.0.1"]})
    clock = ManualClock(time.time())
    ssl_context = client_ssl_context(ca)

    def settings(name: str) -> Any:
        return make_settings(tmp_path / name, pg_url, oauth_cimd_allow_cidrs="127.0.0.1/32")

    async with (
        HTTPSReceiver(ca, cert_hostnames=(HOST,)) as rx,
        run_instance(settings("one"), clock=clock, resolver=resolver, ssl_context=ssl_context) as one,
        run_instance(settings("two"), clock=clock, resolver=resolver, ssl_context=ssl_context) as two,
    ):
        env = Env(one, rx, clock, resolver)
        env.serve(env.document())
        async with human(one, "pgdoc@example.com") as (person, _):
            codes = []
            for slug in ("pg-doc-a", "pg-doc-b"):
                verifier, challenge = pkce()
                start = await person.http.get(
                    "/authorize",
                    params={
                        "response_type": "code",
                        "client_id": env.client_id,
                        "redirect_uri": REDIRECT_URI,
                        "code_challenge": challenge,
                        "code_challenge_method": "S256",
                    },
                )
                assert start.status_code == 302, start.text
                codes.append((await approve(person, start.headers["location"], slug), verifier))
            async with httpx.AsyncClient(base_url=two.base_url, timeout=10) as other:
                for code, verifier in codes:
                    r = await other.post(
                        "/token",
                        data={
                            "client_id": env.client_id,
                            "grant_type": "authorization_code",
                            "code": code,
                            "redirect_uri": REDIRECT_URI,
                            "code_verifier": verifier,
                        },
                    )
                    assert r.status_code == 200, r.text
        assert await rows(one) == {"oauth_clients": 1, "oauth_codes": 0, "oauth_grants": 2}
        assert len(rx.requests) == 2  # each instance read the document once
