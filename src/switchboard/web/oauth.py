"""Switchboard as the OAuth 2.1 authorization server MCP clients expect, on the MCP SDK's interfaces.

The SDK's ``create_auth_routes`` serves discovery, ``/authorize`` (PKCE S256 only), ``/token``
(authorization code and refresh), ``/register`` (RFC 7591) and ``/revoke`` (RFC 7009) and does every
protocol check; this provider stores what they need and hands ``/authorize`` to the consent screen
(:mod:`switchboard.web.views.consent`), where a signed-in human picks the endpoint and the verbs.

An access token acts as exactly one endpoint, with the verbs the human granted. The MCP side sees it
through :meth:`OAuthProvider.lookup_access_token` (registered as a token lookup, see
:mod:`switchboard.mcp.auth`) as the same ``AccessToken`` shape an endpoint credential produces; its
scopes are the grant intersected with the endpoint's scope *now*, so shrinking the endpoint's scope
shrinks every token at once, and widening it never widens a token.
"""

from __future__ import annotations

import time
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    RegistrationError,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import ValidationError

from switchboard.core.text import storable, summary
from switchboard.core.verbs import ALL_VERBS
from switchboard.mcp.auth import ENDPOINT_CLAIM, GRANT_CLAIM, OAUTH_CLIENT_CLAIM, VIA_CLAIM, VIA_OAUTH
from switchboard.obs.logs import get_logger
from switchboard.services import Services
from switchboard.web.cimd import (
    DOCUMENT_KEY_PREFIX,
    ClientDocuments,
    DocumentRefused,
    is_document_client_id,
    stored_id,
    stored_key,
)
from switchboard.web.keys import Keys
from switchboard.web.oauth_store import ACCESS, REFRESH, CodeRecord, OAuthStore
from switchboard.web.redirects import MAX_REDIRECT_URIS, redirect_uri_problem

log = get_logger("switchboard.web.oauth")

CONSENT_PATH = "/oauth/consent"
REQUEST_MAX_AGE = 600  # seconds a human has to finish the consent screen
CODE_SECONDS = 120.0


class SwitchboardCode(AuthorizationCode):
    """The SDK's code model plus what the consent decided."""

    human_id: str
    endpoint_id: str
    verbs: list[str]


class SwitchboardRefresh(RefreshToken):
    token_hash: str
    grant_id: str


class SwitchboardAccess(AccessToken):
    grant_id: str


class OAuthProvider(OAuthAuthorizationServerProvider[SwitchboardCode, SwitchboardRefresh, AccessToken]):
    """The SDK's provider interface over :class:`OAuthStore`; the SEP-990 identity-assertion grant
    keeps the SDK's default (unsupported)."""

    def __init__(
        self,
        services: Services,
        store: OAuthStore,
        keys: Keys,
        *,
        issuer: str,
        resource: str,
        documents: ClientDocuments | None = None,
    ) -> None:
        self.services = services
        self.store = store
        self.keys = keys
        self.issuer = issuer
        self.resource = resource
        self.documents = documents  # None: client metadata documents are off

    # -- clients --------------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if is_document_client_id(client_id):
            if self.documents is None:
                return None
            try:
                return (await self.documents.resolve(client_id)).info.model_copy(deep=True)
            except DocumentRefused:
                return None  # the gate in front of /authorize and /token said which check failed
        if client_id.startswith(DOCUMENT_KEY_PREFIX):
            return None  # a document client's row is reached through its URL only
        found = await self.store.client(client_id)
        if found is None:
            return None
        info, secret = found
        # The scope a client registered is only a hint: the consent screen decides. Every verb name
        # is acceptable in an /authorize request so a client asking for some is not turned away.
        info.update(client_id=client_id, client_secret=secret, scope=" ".join(sorted(ALL_VERBS)))
        try:
            return OAuthClientInformationFull.model_validate(info)
        except ValidationError:
            log.error("stored oauth client did not parse", client_id=client_id)
            return None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        uris = [str(u) for u in client_info.redirect_uris or ()]
        if not uris:
            raise RegistrationError("invalid_redirect_uri", "at least one redirect URI is required")
        if len(uris) > MAX_REDIRECT_URIS:
            raise RegistrationError("invalid_redirect_uri", f"at most {MAX_REDIRECT_URIS} redirect URIs")
        for uri in uris:
            problem = redirect_uri_problem(uri)
            if problem:
                raise RegistrationError("invalid_redirect_uri", problem)
        # Shown on the consent screen: one line of visible words, nothing that reorders or hides text.
        name = summary(storable(client_info.client_name or ""), 200) or None
        info = client_info.model_dump(mode="json", exclude={"client_id", "client_secret", "scope"})
        info["client_name"] = name
        await self.store.create_client(client_info.client_id or "", name, info, client_info.client_secret)
        log.info("oauth client registered", client_id=client_info.client_id, client_name=name or "")

    # -- authorization ------------------------------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        """Hand the validated request to the consent screen, signed (stateless: any instance can finish it)."""
        if params.resource is not None and params.resource.rstrip("/") != self.resource.rstrip("/"):
            raise AuthorizeError("invalid_target", f"this server's MCP resource is {self.resource}")
        blob = self.keys.sign_request(
            {
                "client_id": client.client_id,
                "redirect_uri": str(params.redirect_uri),
                "explicit": params.redirect_uri_provided_explicitly,
                "state": params.state,
                "challenge": params.code_challenge,
                "scopes": params.scopes,
                "resource": params.resource,
            }
        )
        return f"{CONSENT_PATH}?req={blob}"

    def open_request(self, blob: str) -> dict[str, Any] | None:
        return self.keys.open_request(blob, REQUEST_MAX_AGE)

    async def approve(
        self,
        request: dict[str, Any],
        *,
        human_id: str,
        endpoint_id: str,
        verbs: list[str],
        client: OAuthClientInformationFull | None = None,
    ) -> str:
        """The human approved: mint a single-use code and return where to send the browser. A client
        metadata document's client is stored now (the row its code and grant hang off), not before."""
        client_id = str(request["client_id"])
        if is_document_client_id(client_id) and client is not None:
            info = client.model_dump(mode="json", include={"client_id", "client_name", "redirect_uris"})
            await self.store.remember_document_client(stored_id(client_id), client.client_name, info)
        code = await self.store.create_code(
            client_id=stored_key(client_id),
            human_id=human_id,
            endpoint_id=endpoint_id,
            verbs=verbs,
            code_challenge=request["challenge"],
            redirect_uri=request["redirect_uri"],
            redirect_uri_explicit=bool(request["explicit"]),
            resource=request.get("resource"),
            lifetime_seconds=CODE_SECONDS,
        )
        log.info("oauth consent approved", client_id=request["client_id"], endpoint_id=endpoint_id)
        return construct_redirect_uri(
            request["redirect_uri"], code=code, state=request.get("state"), iss=self.issuer
        )

    def deny(self, request: dict[str, Any]) -> str:
        return construct_redirect_uri(
            request["redirect_uri"],
            error="access_denied",
            error_description="the human declined",
            state=request.get("state"),
            iss=self.issuer,
        )

    # -- codes ----------------------------------------------------------------------------------------

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> SwitchboardCode | None:
        record = await self.store.code(authorization_code, stored_key(client.client_id))
        if record is None:
            return None
        return _code_model(authorization_code, record, self._wall(record.expires_at), client.client_id or "")

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: SwitchboardCode
    ) -> OAuthToken:
        record = await self.store.code(authorization_code.code, stored_key(client.client_id))
        pair = None if record is None else await self.store.exchange_code(authorization_code.code, record)
        if pair is None:
            raise TokenError("invalid_grant", "authorization code is invalid, used or expired")
        log.info(
            "oauth tokens issued", client_id=client.client_id, endpoint_id=authorization_code.endpoint_id
        )
        return self._token(pair.access_token, pair.refresh_token, pair.verbs)

    # -- refresh ------------------------------------------------------------------------------------

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> SwitchboardRefresh | None:
        record = await self.store.token(refresh_token, REFRESH)
        if record is None or record.client_id != stored_key(client.client_id):
            return None
        if record.rotated:
            # A spent refresh token came back: someone holds a copy. Revoke everything under the grant.
            await self.store.revoke_grant(record.grant_id)
            log.warning("oauth refresh token reused; grant revoked", client_id=client.client_id)
            return None
        return SwitchboardRefresh(
            token=refresh_token,
            client_id=client.client_id or "",
            scopes=list(record.verbs),
            expires_at=int(self._wall(record.expires_at)),
            resource=record.resource,
            token_hash=record.token_hash,
            grant_id=record.grant_id,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: SwitchboardRefresh, scopes: list[str]
    ) -> OAuthToken:
        record = await self.store.token(refresh_token.token, REFRESH)
        pair = None if record is None else await self.store.rotate(record, scopes)
        if pair is None:
            raise TokenError("invalid_grant", "refresh token is invalid, used or expired")
        return self._token(pair.access_token, pair.refresh_token, pair.verbs)

    # -- access tokens ----------------------------------------------------------------------------

    async def load_access_token(self, token: str) -> SwitchboardAccess | None:
        """For ``/revoke`` only: the token as its OAuth client sees it (``client_id`` is the client's,
        which the revocation handler compares). MCP requests go through :meth:`lookup_access_token`."""
        record = await self.store.token(token, ACCESS)
        if record is None:
            return None
        return SwitchboardAccess(
            token=token,
            client_id=await self.store.presented_id(record.client_id),
            scopes=list(record.verbs),
            expires_at=int(self._wall(record.expires_at)),
            resource=record.resource,
            grant_id=record.grant_id,
        )

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        grant_id = getattr(token, "grant_id", None)
        if isinstance(grant_id, str):
            await self.store.revoke_grant(grant_id)
            log.info("oauth grant revoked by its client", client_id=token.client_id)

    async def lookup_access_token(self, token: str) -> AccessToken | None:
        """An OAuth access token as the MCP gate expects it: the endpoint credential's shape, with the
        effective verbs (grant ∩ the endpoint's scope now)."""
        record = await self.store.token(token, ACCESS)
        if record is None:
            return None
        endpoint = await self.services.accounts.endpoint(record.endpoint_id)
        if endpoint is None:
            return None
        effective = sorted(set(record.verbs) & set(endpoint.verbs))
        return AccessToken(
            token=token,
            client_id=endpoint.id,
            scopes=effective,
            subject=endpoint.slug,
            expires_at=int(self._wall(record.expires_at)),
            resource=record.resource,
            claims={
                ENDPOINT_CLAIM: endpoint.id,
                VIA_CLAIM: VIA_OAUTH,
                OAUTH_CLIENT_CLAIM: record.client_id,
                GRANT_CLAIM: list(record.verbs),
            },
        )

    # -- helpers --------------------------------------------------------------------------------------

    def _token(self, access: str, refresh: str, verbs: tuple[str, ...]) -> OAuthToken:
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=int(self.store.access_seconds),
            scope=" ".join(verbs) or None,
            refresh_token=refresh,
        )

    def _wall(self, expires_at_ms: int) -> float:
        """Expiry in wall-clock seconds. The SDK compares expiries with ``time.time()``; the store
        already refused anything expired by the server's clock, so translate the remaining lifetime."""
        remaining = expires_at_ms / 1000 - self.services.clock.now()
        return time.time() + max(remaining, 0.0)


def _code_model(code: str, record: CodeRecord, expires_at: float, client_id: str) -> SwitchboardCode:
    return SwitchboardCode(
        code=code,
        scopes=list(record.verbs),
        expires_at=expires_at,
        client_id=client_id,
        code_challenge=record.code_challenge,
        redirect_uri=record.redirect_uri,  # type: ignore[arg-type]  # pydantic parses the str
        redirect_uri_provided_explicitly=record.redirect_uri_explicit,
        resource=record.resource,
        subject=record.endpoint_id,
        human_id=record.human_id,
        endpoint_id=record.endpoint_id,
        verbs=list(record.verbs),
    )
