"""A signed-in human over plain HTTP (cookies and CSRF like a browser), and an MCP client that connects
with OAuth through the SDK's own ``OAuthClientProvider``, its consent submitted by that human."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tests.support.mcp_client import Agent
from tests.support.server import Instance

PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
REQ = re.compile(r'name="req" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "page has no CSRF field"
    return found.group(1)


class Human:
    """A browser without a browser: one cookie jar, forms posted with the page's CSRF token."""

    def __init__(self, inst: Instance, email: str) -> None:
        self.inst = inst
        self.email = email
        self.http = httpx.AsyncClient(base_url=inst.base_url, timeout=10, follow_redirects=False)

    async def close(self) -> None:
        await self.http.aclose()

    async def sign_in(self, password: str = PASSWORD) -> httpx.Response:
        page = await self.http.get("/login")
        return await self.http.post(
            "/login", data={"csrf": csrf_of(page.text), "email": self.email, "password": password}
        )

    async def csrf(self, path: str = "/endpoints") -> str:
        page = await self.http.get(path)
        assert page.status_code == 200, (path, page.status_code)
        return csrf_of(page.text)

    async def post(self, path: str, data: dict[str, Any], *, csrf_from: str = "/endpoints") -> httpx.Response:
        return await self.http.post(path, data={"csrf": await self.csrf(csrf_from), **data})


@asynccontextmanager
async def human(inst: Instance, email: str, *, operator: bool = False) -> AsyncIterator[tuple[Human, str]]:
    human_id = await inst.services.accounts.create_human(email, PASSWORD, operator=operator)
    h = Human(inst, email)
    r = await h.sign_in()
    assert r.status_code == 303, r.text
    try:
        yield h, human_id
    finally:
        await h.close()


@dataclass
class MemoryStorage:
    tokens: OAuthToken | None = None
    client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class Consent:
    """How the human answers the consent screen, and what the flow saw."""

    decision: str = "approve"
    target: str = "new"
    slug: str = "oauth-agent"
    queues: str = "inbox"
    endpoint: str = ""
    verbs: Sequence[str] = ("claim_next", "ack", "list_todos")
    consent_page: str = ""
    redirected_to: str = ""
    result: asyncio.Future[AuthorizationCodeResult] | None = field(default=None, repr=False)


REDIRECT_URI = "http://127.0.0.1:1/callback"  # never dialled: the consent's redirect is read, not followed


def oauth_provider(
    inst: Instance,
    person: Human,
    consent: Consent,
    storage: MemoryStorage,
    client_metadata_url: str | None = None,
) -> OAuthClientProvider:
    """The SDK's client OAuth support; its "browser" is ``person``, who submits the consent form. With
    ``client_metadata_url`` the client identifies itself by that metadata document instead of
    registering (when the server advertises support)."""
    loop = asyncio.get_running_loop()
    consent.result = loop.create_future()

    async def redirect_handler(authorization_url: str) -> None:
        r = await person.http.get(authorization_url)  # the SDK's /authorize: 302 to the consent screen
        assert r.status_code == 302, r.text
        page = await person.http.get(r.headers["location"])
        assert page.status_code == 200, page.text
        consent.consent_page = page.text
        req = REQ.search(page.text)
        assert req is not None
        form: dict[str, Any] = {
            "csrf": csrf_of(page.text),
            "req": req.group(1),
            "decision": consent.decision,
            "target": consent.target,
            "slug": consent.slug,
            "queues": consent.queues,
            "endpoint": consent.endpoint,
            "verbs": list(consent.verbs),
        }
        answer = await person.http.post("/oauth/consent", data=form)
        assert answer.status_code == 303, answer.text
        consent.redirected_to = answer.headers["location"]
        query = parse_qs(urlsplit(consent.redirected_to).query)
        assert consent.result is not None
        consent.result.set_result(
            AuthorizationCodeResult(
                code=query.get("code", [""])[0],
                state=query.get("state", [None])[0],
                iss=query.get("iss", [None])[0],
            )
        )

    async def callback_handler() -> AuthorizationCodeResult:
        assert consent.result is not None
        return await consent.result

    return OAuthClientProvider(
        server_url=inst.mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="Test MCP client",
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=client_metadata_url,
    )


@asynccontextmanager
async def oauth_agent(
    inst: Instance,
    person: Human,
    consent: Consent,
    storage: MemoryStorage | None = None,
    client_metadata_url: str | None = None,
) -> AsyncIterator[Agent]:
    """An MCP client authorised through the whole OAuth flow (register, authorize, consent, exchange).
    It lives in a task of its own, as tests.support.mcp_client explains."""
    storage = storage or MemoryStorage()
    auth = oauth_provider(inst, person, consent, storage, client_metadata_url)
    ready: asyncio.Future[Agent] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def own() -> None:
        try:
            async with (
                httpx2.AsyncClient(auth=auth, timeout=30) as http,
                Client(streamable_http_client(inst.mcp_url, http_client=http)) as client,
            ):
                ready.set_result(Agent(client))
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
                return
            raise

    task = asyncio.create_task(own())
    try:
        yield await ready
    finally:
        stop.set()
        await task


# -- the same protocol by hand, for the cases the SDK client never produces ----------------------------


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


async def register_client(
    http: httpx.AsyncClient, *, redirect_uris: Sequence[str] = (REDIRECT_URI,), name: str = "Manual client"
) -> httpx.Response:
    return await http.post(
        "/register",
        json={
            "client_name": name,
            "redirect_uris": list(redirect_uris),
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_post",
        },
    )


@dataclass
class ManualFlow:
    inst: Instance
    person: Human
    client: dict[str, Any] = field(default_factory=dict)
    verifier: str = ""
    challenge: str = ""

    async def start(self, *, state: str = "st-1", resource: str | None = None) -> httpx.Response:
        """Register (once) and send the human's browser to /authorize; returns the consent page."""
        if not self.client:
            r = await register_client(self.person.http)
            assert r.status_code == 201, r.text
            self.client = r.json()
        self.verifier, self.challenge = pkce()
        params = {
            "response_type": "code",
            "client_id": self.client["client_id"],
            "redirect_uri": REDIRECT_URI,
            "state": state,
            "code_challenge": self.challenge,
            "code_challenge_method": "S256",
            "resource": resource or self.inst.mcp_url,
        }
        r = await self.person.http.get("/authorize", params=params)
        if r.status_code != 302 or not r.headers["location"].startswith("/oauth/consent"):
            return r
        return await self.person.http.get(r.headers["location"])

    async def answer(self, page: httpx.Response, **fields: Any) -> httpx.Response:
        req = REQ.search(page.text)
        assert req is not None, page.text
        form = {"csrf": csrf_of(page.text), "req": req.group(1), "decision": "approve", "target": "new"}
        form.update({"slug": "manual", "queues": "inbox"})
        form.update(fields)
        return await self.person.http.post("/oauth/consent", data=form)

    async def code(self, **fields: Any) -> str:
        answer = await self.answer(await self.start(), **fields)
        assert answer.status_code == 303, answer.text
        query = parse_qs(urlsplit(answer.headers["location"]).query)
        return query["code"][0]

    async def token(self, data: dict[str, str]) -> httpx.Response:
        body = {"client_id": self.client["client_id"], "client_secret": self.client["client_secret"], **data}
        return await self.person.http.post("/token", data=body)

    async def exchange(self, code: str) -> httpx.Response:
        return await self.token(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT_URI,
                "code_verifier": self.verifier,
                "resource": self.inst.mcp_url,
            }
        )
