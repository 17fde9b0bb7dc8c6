"""Client metadata documents at the SDK's OAuth routes: the check in front of ``/authorize`` and
``/token``, and the authorization server metadata that advertises them.

The SDK asks the provider for a client and, when there is none, answers "Client ID ... not found":
right for an unknown registration, useless for a document that was too large or named a redirect URI
it does not list. So for a ``client_id`` that is an https URL the document is fetched and checked here
first (:class:`switchboard.web.cimd.ClientDocuments`, cached, so the SDK's own lookup that follows is
a cache hit), and a refusal is answered directly, as JSON naming the check, never as a redirect: for
``/authorize`` the ``redirect_uri`` must equal one of the document's as a string before anything could
redirect to it. Other client ids pass through untouched (dynamic registration is unchanged).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl

from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.routes import build_metadata, cors_middleware
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from switchboard.edge.answers import replaying
from switchboard.edge.boundary import TooLarge, read_body
from switchboard.web.cimd import ClientDocuments, DocumentRefused, is_document_client_id

FORM_CAP = 64 * 1024  # an /authorize or /token form is a few hundred bytes
AUTHORIZE_PATH = "/authorize"
TOKEN_PATH = "/token"
METADATA_PATH = "/.well-known/oauth-authorization-server"


class DocumentClientGate:
    """ASGI: for a request whose ``client_id`` is an https URL, its document must resolve (and, at
    ``/authorize``, list the ``redirect_uri``) before the SDK's handler runs."""

    def __init__(self, app: ASGIApp, documents: ClientDocuments, *, authorize: bool) -> None:
        self.app, self.documents, self.authorize = app, documents, authorize

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method")
        if scope["type"] != "http" or method not in ("GET", "POST"):
            await self.app(scope, receive, send)
            return
        body = b""
        if method == "POST":
            try:
                got = await read_body(scope, receive, FORM_CAP)
            except TooLarge:
                await _refuse(scope, receive, send, 413, "invalid_request", "the form is too large")
                return
            if got is None:  # the client went away mid-body
                return
            body = got
            fields = parse_qsl(body.decode("latin-1"), keep_blank_values=True)
        elif self.authorize:
            fields = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        else:
            fields = []
        params = dict(fields)
        client_id = params.get("client_id", "")
        if is_document_client_id(client_id):
            try:
                client = await self.documents.resolve(client_id)
                redirect_uri = params.get("redirect_uri")
                if self.authorize and redirect_uri is not None and redirect_uri not in client.redirect_uris:
                    raise DocumentRefused(
                        "invalid_request",
                        "redirect_uri is not one of the redirect_uris of the client metadata document",
                    )
            except DocumentRefused as err:
                # RFC 6749 section 5.2: a client that fails at the token endpoint is a 401 there.
                status = 401 if err.error == "invalid_client" and not self.authorize else 400
                # /token is CORS-enabled (the SDK's allows any origin): a browser client reads why.
                cors = {} if self.authorize else {"Access-Control-Allow-Origin": "*"}
                await _refuse(scope, receive, send, status, err.error, err.description, cors)
                return
        await self.app(scope, replaying(body, receive) if method == "POST" else receive, send)


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    error: str,
    text: str,
    headers: dict[str, str] | None = None,
) -> None:
    answer = JSONResponse(
        {"error": error, "error_description": text},
        status_code=status,
        headers={"Cache-Control": "no-store", **(headers or {})},
    )
    await answer(scope, receive, send)


def advertised_metadata(auth: AuthSettings) -> ASGIApp:
    """``/.well-known/oauth-authorization-server`` as the SDK builds it, plus
    ``client_id_metadata_document_supported`` and the ``none`` client authentication that document
    clients (and public registered ones) use."""
    metadata = build_metadata(
        auth.issuer_url,
        auth.service_documentation_url,
        auth.client_registration_options or ClientRegistrationOptions(),
        auth.revocation_options or RevocationOptions(),
    )
    methods = list(metadata.token_endpoint_auth_methods_supported or [])
    metadata = metadata.model_copy(
        update={
            "client_id_metadata_document_supported": True,
            "token_endpoint_auth_methods_supported": [*methods, "none"] if "none" not in methods else methods,
        }
    )
    return cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"])


def route_wrappers(documents: ClientDocuments, auth: AuthSettings) -> dict[str, Callable[[ASGIApp], ASGIApp]]:
    """What :func:`switchboard.mcp.server.build_mcp` wraps the SDK's OAuth routes with, by path."""
    metadata = advertised_metadata(auth)
    return {
        AUTHORIZE_PATH: lambda app: DocumentClientGate(app, documents, authorize=True),
        TOKEN_PATH: lambda app: DocumentClientGate(app, documents, authorize=False),
        METADATA_PATH: lambda _sdk: metadata,
    }
