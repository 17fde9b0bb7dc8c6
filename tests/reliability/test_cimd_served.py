"""Client ID Metadata Documents against the real ``switchboard serve`` (issue 29, item 5).

The in-process tests (tests/integration/web/test_cimd.py) reach the document through an injected
resolver; a subprocess cannot take one, so here the document is served over HTTPS on 127.0.0.1 (a
trustme certificate for the IP, trusted through ``SSL_CERT_FILE``) and the server's document allowlist
(``SWITCHBOARD_OAUTH_CIMD_ALLOW_CIDRS``) exempts 127.0.0.1 alone: 127.0.0.2 stands for an address the
SSRF guard refuses. The human is made with the CLI and signs in over HTTP like a browser.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import trustme

from switchboard.core.verbs import DEFAULT_GRANT
from switchboard.web.cimd import MAX_DOCUMENT_BYTES
from tests.integration.web.helpers import REDIRECT_URI, Consent, Human, oauth_agent
from tests.integration.web.test_cimd import DOC_PATH, authorize, refused
from tests.reliability.notify_served import TimedReceiver
from tests.reliability.procs import ServerProcess, provision, server_env, servers
from tests.support.receivers import ListeningSocket, Respond

TABLES = ("oauth_clients", "oauth_codes", "oauth_grants")


def document(client_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "client_name": "Served Docs Agent",
        "redirect_uris": [REDIRECT_URI],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **fields,
    }


def serve(rx: TimedReceiver, doc: dict[str, Any]) -> None:
    headers = [("content-type", "application/json"), ("cache-control", "no-store")]
    rx.behaviour = Respond(200, headers, json.dumps(doc).encode())


def oauth_rows(data: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{data / 'switchboard.db'}?mode=ro", uri=True) as conn:
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}


async def test_a_document_client_authorizes_and_claims_and_bad_documents_are_refused(tmp_path: Path) -> None:
    ca = trustme.CA()
    pem = tmp_path / "test-ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    env = server_env(oauth_cimd_allow_cidrs="127.0.0.1/32", SSL_CERT_FILE=str(pem))
    data = tmp_path / "data"
    tenant = await provision(env, data, slug="cimd-owner", verbs=DEFAULT_GRANT)
    server = ServerProcess(data, env, name="cimd")
    async with TimedReceiver(ca=ca) as rx, ListeningSocket("127.0.0.2") as victim:
        with servers(server):
            server.start()
            await server.ready()
            person = Human(server, tenant.email)  # type: ignore[arg-type]  # base_url and mcp_url alone
            try:
                assert (await person.sign_in()).status_code == 303

                # Refused, each naming its check, never redirecting, storing nothing.
                too_big = rx.hook_url("/big.json")
                serve(rx, document(too_big, padding="x" * MAX_DOCUMENT_BYTES))
                refused(
                    await authorize(person, too_big), "invalid_client", f"larger than {MAX_DOCUMENT_BYTES}"
                )
                far = f"https://127.0.0.2:{victim.port}{DOC_PATH}"
                refused(await authorize(person, far), "invalid_client", "SSRF guard")
                await victim.assert_untouched()
                client_id = rx.hook_url(DOC_PATH)
                serve(rx, document(client_id))
                evil = "http://127.0.0.1:2/steal"
                r = await authorize(person, client_id, redirect_uri=evil)
                refused(r, "invalid_request", "redirect_uri is not one of the redirect_uris")
                assert evil not in r.text
                assert oauth_rows(data) == dict.fromkeys(TABLES, 0)

                # The SDK's own client, identified by the document, through consent to claim_next.
                consent = Consent(slug="doc-agent", verbs=["claim_next", "ack", "self_test"])
                async with oauth_agent(server, person, consent, client_metadata_url=client_id) as agent:  # type: ignore[arg-type]
                    assert "Served Docs Agent" in consent.consent_page
                    made = await agent.ok("self_test", {})
                    claimed = await agent.ok("claim_next", {})
                    assert claimed["todo"]["id"] == made["todo"]["id"]
                    who = await agent.ok("whoami", {})
                    assert who["endpoint"] == "doc-agent" and who["via"] == "oauth"
                # Each document was fetched by the server itself (the guard's TLS to 127.0.0.1), once: the
                # flow ran on the document fetched when the bad redirect was checked (kept, cached).
                assert [r.path for r in rx.requests] == ["/big.json", DOC_PATH]
                assert oauth_rows(data)["oauth_grants"] == 1
            finally:
                await person.close()
