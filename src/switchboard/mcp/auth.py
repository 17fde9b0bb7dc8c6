"""Who is calling: bearer credentials to an endpoint, plus the SDK's auth and Host settings.

The SDK authenticates every HTTP request through :class:`EndpointTokenVerifier` (401 from its
``RequireAuthMiddleware`` when it answers ``None``). The access token it builds names the endpoint; the
grant checks re-read the endpoint from the database on every call (see :mod:`switchboard.mcp.gate`),
so the scopes in the token are informational and a scope shrink takes effect at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings

from switchboard.settings import Settings
from switchboard.store.accounts import AccountStore

ENDPOINT_CLAIM = "switchboard_endpoint"
VIA_CLAIM = "switchboard_via"

TokenLookup = Callable[[str], Awaitable[AccessToken | None]]
"""A second way to recognise a bearer token (an OAuth access token, later). It must return an
``AccessToken`` whose claims carry ``switchboard_endpoint`` = the endpoint id it acts for."""


class EndpointTokenVerifier:
    """The SDK ``TokenVerifier``: tries the endpoint credential, then any extra lookups in order.

    Store errors propagate on purpose: answering ``None`` would tell a client its credential is bad
    when only the database is down (the surface turns them into 503).
    """

    def __init__(self, accounts: AccountStore, lookups: Sequence[TokenLookup] = ()) -> None:
        self._accounts = accounts
        self._lookups = list(lookups)

    def add_lookup(self, lookup: TokenLookup) -> None:
        self._lookups.append(lookup)

    async def verify_token(self, token: str) -> AccessToken | None:
        endpoint = await self._accounts.endpoint_by_token(token)
        if endpoint is not None:
            return AccessToken(
                token=token,
                client_id=endpoint.id,
                scopes=list(endpoint.verbs),
                subject=endpoint.slug,
                claims={ENDPOINT_CLAIM: endpoint.id, VIA_CLAIM: "endpoint_credential"},
            )
        for lookup in self._lookups:
            access = await lookup(token)
            if access is not None and endpoint_id_of(access):
                return access
        return None


def endpoint_id_of(access: AccessToken) -> str | None:
    claimed = (access.claims or {}).get(ENDPOINT_CLAIM)
    return claimed if isinstance(claimed, str) and claimed else None


def caller_endpoint_id() -> str | None:
    """The endpoint id of the request being handled, or None outside an authenticated request."""
    access = get_access_token()
    return endpoint_id_of(access) if access is not None else None


def issuer_url(settings: Settings) -> str:
    return settings.public_url or f"http://{settings.listen}"


def auth_settings(settings: Settings) -> AuthSettings:
    # resource_server_url=None: Switchboard issues its own endpoint credentials, so there is no
    # protected-resource metadata to advertise yet; validate_token_resource is then meaningless.
    return AuthSettings(
        issuer_url=issuer_url(settings),  # type: ignore[arg-type]  # pydantic parses the str
        resource_server_url=None,
        validate_token_resource=False,
    )


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """Allow the Host of the listen address and of ``public_url`` only (DNS-rebinding protection)."""
    hosts: set[str] = set()
    origins: set[str] = set()
    host, port = settings.listen_host, settings.listen_port
    listen_names = [host]
    if host in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):  # noqa: S104 - names, not a bind
        listen_names += ["127.0.0.1", "localhost", "[::1]"]
    for name in listen_names:
        name = f"[{name}]" if ":" in name and not name.startswith("[") else name
        hosts.add(f"{name}:{port}")
        origins.add(f"http://{name}:{port}")
    if settings.public_url:
        parts = urlsplit(settings.public_url)
        if parts.hostname:
            default = 443 if parts.scheme == "https" else 80
            netloc_host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            explicit = parts.port or default
            hosts.add(f"{netloc_host}:{explicit}")
            origins.add(f"{parts.scheme}://{netloc_host}:{explicit}")
            if explicit == default:
                hosts.add(netloc_host)
                origins.add(f"{parts.scheme}://{netloc_host}")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(hosts),
        allowed_origins=sorted(origins),
    )
