"""Who is calling: a bearer credential or an OAuth access token, each resolved to one endpoint.

The SDK authenticates every HTTP request through :class:`EndpointTokenVerifier` (401 from its
``RequireAuthMiddleware`` when it answers ``None``). Both kinds of credential come out in one shape:
``AccessToken(client_id=<endpoint id>, subject=<slug>, scopes=<verbs>, claims={switchboard_endpoint:
<endpoint id>, switchboard_via: ...})``. The endpoint is read from the database at most once per call:
for a credential, by the verifier, which keeps a verified credential's row while it is provably current
(:class:`EndpointTokenVerifier`) and which the gate reuses; for an OAuth token, by the gate. The gate
then checks the verb against the endpoint's scope; :class:`GrantNarrowing` then
holds an OAuth token to the verbs its human granted, so a verb the token lacks is ``forbidden`` exactly
as a verb the endpoint lacks.

Other surfaces (A2A) authenticate with :func:`authenticate_bearer`, which applies the same rules.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import PrivateAttr
from starlette.types import ASGIApp, Receive, Scope, Send

from switchboard.core.ratelimit import WindowLimiter
from switchboard.core.verbs import required_grant
from switchboard.mcp.errors import error_result
from switchboard.services import TokenLookup
from switchboard.settings import Settings
from switchboard.store.accounts import TOKEN_PREFIX, AccountStore, Endpoint, hash_token
from switchboard.store.changes import EndpointEpoch

if TYPE_CHECKING:
    from switchboard.obs.metrics import Metrics
    from switchboard.services import Services

ENDPOINT_CLAIM = "switchboard_endpoint"
VIA_CLAIM = "switchboard_via"
VIA_CREDENTIAL = "endpoint_credential"
VIA_OAUTH = "oauth"
OAUTH_CLIENT_CLAIM = "switchboard_oauth_client"
GRANT_CLAIM = "switchboard_grant"  # the verbs the human granted the OAuth client

VERIFIED_TTL = 2.0  # seconds a verified credential is trusted without reading its endpoint again
VERIFIED_KEPT = 4096  # credentials remembered at most (one per endpoint in use)

# TokenLookup (switchboard.services): a second way to recognise a bearer token (an OAuth access token).
# It must return an ``AccessToken`` whose claims carry ``switchboard_endpoint`` = the endpoint id it acts
# for, and whose scopes are the verbs it may call now.


class EndpointAccess(AccessToken):
    """An endpoint credential's ``AccessToken``, carrying the endpoint row it was verified as, so the
    gate takes the row from the request's own token (no second read, no lookup, no race with another
    request of the same credential). The row is not a field: it is not compared or serialized."""

    _endpoint: Endpoint | None = PrivateAttr(default=None)

    @property
    def endpoint(self) -> Endpoint | None:
        return self._endpoint


@dataclass(slots=True)
class _Verified:
    endpoint: Endpoint
    access: EndpointAccess
    generation: tuple[int, int]  # EndpointChanges.generation before the read
    epoch: int | None  # SQLite's endpoint epoch before the read (None on PostgreSQL)
    at: float


class EndpointTokenVerifier:
    """The SDK ``TokenVerifier``: tries the endpoint credential, then any extra lookups in order.

    A verified credential is kept (by its hash, never the token itself) with the endpoint row it
    resolved to, and is answered from there without a database read while all of these hold:

    * it was read less than :data:`VERIFIED_TTL` seconds ago;
    * no write to that endpoint's row committed in this process since (``EndpointChanges``: scope,
      token re-vend or revoke, presence, delete): such a write applies to the very next request;
    * on SQLite, no endpoint row of the file has changed since (``EndpointEpoch``: a counter that
      triggers on ``endpoints`` move in the writer's transaction), so a write by another process (the
      CLI) applies to the very next request too, while writes to other tables (claims, acks, ingest)
      leave the entry trusted.

    So on SQLite nothing is ever answered from a row that differs from the database; on PostgreSQL a
    change made through another instance is announced at its commit (``store.changes.announce``) and
    invalidates here when the cluster relay hears it, within :data:`VERIFIED_TTL` at most.

    Store errors propagate on purpose: answering ``None`` would tell a client its credential is bad
    when only the database is down (the surface turns them into 503).
    """

    def __init__(
        self,
        accounts: AccountStore,
        lookups: Sequence[TokenLookup] = (),
        *,
        sqlite_path: Path | None = None,
        ttl: float = VERIFIED_TTL,
        now: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
    ) -> None:
        self._accounts = accounts
        self._lookups = list(lookups)
        self._changes = accounts.changes
        self._epoch = EndpointEpoch(sqlite_path) if sqlite_path is not None else None
        self._ttl, self._now = ttl, now
        counter = metrics.credential_cache if metrics is not None else None
        self._hits = counter.labels(result="hit") if counter is not None else None
        self._misses = counter.labels(result="miss") if counter is not None else None
        # token hash -> what it was verified as; least recently verified first.
        self._verified: OrderedDict[str, _Verified] = OrderedDict()

    def add_lookup(self, lookup: TokenLookup) -> None:
        self._lookups.append(lookup)

    async def verify_token(self, token: str) -> AccessToken | None:
        if token.startswith(TOKEN_PREFIX):
            key = hash_token(token)
            hit = self._fresh(key)
            if hit is not None:
                if self._hits is not None:
                    self._hits.inc()
                return hit.access
            if self._misses is not None:
                self._misses.inc()
            # Stamp before reading: a change that commits meanwhile makes the entry stale, not wrong.
            epoch = self._epoch.current() if self._epoch is not None else None
            changes = self._changes.total
            endpoint = await self._accounts.endpoint_by_token(token)
            if endpoint is not None:
                access = EndpointAccess(
                    token=token,
                    client_id=endpoint.id,
                    scopes=list(endpoint.verbs),
                    subject=endpoint.slug,
                    claims={ENDPOINT_CLAIM: endpoint.id, VIA_CLAIM: VIA_CREDENTIAL},
                )
                access._endpoint = endpoint
                if self._changes.total == changes:  # else an endpoint changed while we read: no entry
                    self._remember(key, endpoint, access, epoch)
                return access
        for lookup in self._lookups:
            found = await lookup(token)
            if found is not None and endpoint_id_of(found):
                return found
        return None

    def verified(self, access: AccessToken) -> Endpoint | None:
        """The endpoint this request's credential was verified as, or None (an OAuth token, or an
        entry no longer current): then the caller reads it itself."""
        return access.endpoint if isinstance(access, EndpointAccess) else None

    def _fresh(self, key: str) -> _Verified | None:
        hit = self._verified.get(key)
        if hit is None:
            return None
        if self._now() - hit.at >= self._ttl or self._changes.generation(hit.endpoint.id) != hit.generation:
            return None
        if self._epoch is not None and self._epoch.current() != hit.epoch:
            return None
        return hit

    def _remember(self, key: str, endpoint: Endpoint, access: EndpointAccess, epoch: int | None) -> None:
        if self._epoch is not None and epoch is None:
            return  # the endpoint epoch could not be read: nothing to vouch for the row later
        generation = self._changes.generation(endpoint.id)
        self._verified[key] = _Verified(endpoint, access, generation, epoch, self._now())
        self._verified.move_to_end(key)
        while len(self._verified) > VERIFIED_KEPT:
            self._verified.popitem(last=False)


def verifier_for(services: Services) -> EndpointTokenVerifier:
    """The verifier for one instance: the endpoint credential plus every lookup components registered
    in ``services.token_lookups`` (the web UI registers the OAuth access-token lookup)."""
    db = services.db
    path = db.engine.url.database if db.is_sqlite else None
    sqlite_path = Path(path) if path and path != ":memory:" else None
    return EndpointTokenVerifier(
        services.accounts, services.token_lookups, sqlite_path=sqlite_path, metrics=services.metrics
    )


def endpoint_id_of(access: AccessToken) -> str | None:
    claimed = (access.claims or {}).get(ENDPOINT_CLAIM)
    return claimed if isinstance(claimed, str) and claimed else None


def authenticated_endpoint(scope: Scope) -> str | None:
    """The endpoint id the SDK's bearer check verified this ASGI request as (``scope["user"]``, set by
    its authentication middleware), or None: what per-endpoint limits key on (sessioncap.py)."""
    user = scope.get("user")
    return endpoint_id_of(user.access_token) if isinstance(user, AuthenticatedUser) else None


def caller_endpoint_id() -> str | None:
    """The endpoint id of the request being handled, or None outside an authenticated request."""
    access = get_access_token()
    return endpoint_id_of(access) if access is not None else None


def is_oauth(access: AccessToken) -> bool:
    return (access.claims or {}).get(VIA_CLAIM) == VIA_OAUTH


def effective_verbs(access: AccessToken, endpoint: Endpoint) -> tuple[str, ...]:
    """The verbs a credential may call now: the endpoint's scope, narrowed to the grant for OAuth."""
    if not is_oauth(access):
        return endpoint.verbs
    granted = (access.claims or {}).get(GRANT_CLAIM)
    allowed = set(granted) if isinstance(granted, list) else set(access.scopes)
    return tuple(v for v in endpoint.verbs if v in allowed)


def may_call(endpoint: Endpoint, verb: str) -> bool:
    """Whether this call's credential may also use ``verb`` (a verb that does another's work too, as
    ``claim_next`` with ``ack``, checks the other's grant with it)."""
    access = get_access_token()
    verbs = effective_verbs(access, endpoint) if access is not None else endpoint.verbs
    return required_grant(verb) in verbs


async def authenticate_bearer(services: Services, token: str) -> Endpoint | None:
    """One bearer token (endpoint credential ``sbt_...`` or OAuth access token ``sboa_...``) to the
    endpoint it acts as, read fresh, with ``verbs`` replaced by its effective scope; None when the
    token is unknown, revoked or expired. For surfaces outside MCP (A2A): check the verb against the
    returned ``verbs`` exactly as the MCP gate does. Store errors propagate (answer 503, not 401)."""
    if not token or len(token) > 200:
        return None
    # A verifier of its own, with no cache: this is one request's one check.
    access = await EndpointTokenVerifier(services.accounts, services.token_lookups).verify_token(token)
    if access is None:
        return None
    endpoint_id = endpoint_id_of(access)
    endpoint = await services.accounts.endpoint(endpoint_id) if endpoint_id else None
    if endpoint is None:
        return None
    if access.expires_at is not None and access.expires_at < int(time.time()):
        return None
    return dataclasses.replace(endpoint, verbs=effective_verbs(access, endpoint))


class GrantNarrowing:
    """MCP server middleware, installed inside the gate: an OAuth token may call only the verbs its
    human granted. The gate has already rate-limited, re-read the endpoint and checked its scope; this
    adds the grant, answering ``forbidden`` with the gate's own words (and the gate counts it)."""

    def __init__(self, ungated: Collection[str]) -> None:
        self._ungated = ungated

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        access = get_access_token()
        if access is None or not is_oauth(access) or ctx.method not in ("tools/call", "tools/list"):
            return await call_next(ctx)
        granted = set(access.scopes) | set(self._ungated)
        if ctx.method == "tools/call":
            params = ctx.params if isinstance(ctx.params, Mapping) else {}
            name = params.get("name")
            if isinstance(name, str) and required_grant(name) not in granted:
                return error_result("forbidden", f"the verb {name[:64]!r} is not granted to this endpoint")
            return await call_next(ctx)
        result = await call_next(ctx)
        if isinstance(result, dict) and isinstance(result.get("tools"), list):
            result["tools"] = [
                t
                for t in result["tools"]
                if isinstance(t, dict)
                and isinstance(t.get("name"), str)
                and required_grant(t["name"]) in granted
            ]
        return result


class RegistrationLimit:
    """Dynamic client registration is unauthenticated by design (RFC 7591): cap it per client address
    so nobody can fill the clients table. Refusals are the RFC's JSON error shape, with 429."""

    def __init__(self, app: ASGIApp, limiter: WindowLimiter) -> None:
        self.app, self.limiter = app, limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        key = f"register:{client[0] if client else 'unknown'}"
        if scope["type"] == "http" and scope.get("method") == "POST" and not self.limiter.allow(key):
            body = b'{"error":"invalid_client_metadata","error_description":"too many registrations; retry later"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 429,
                    "headers": [(b"content-type", b"application/json"), (b"retry-after", b"60")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def issuer_url(settings: Settings) -> str:
    return (settings.public_url or f"http://{settings.listen}").rstrip("/")


def mcp_resource_url(settings: Settings) -> str:
    """The MCP endpoint as an RFC 8707 resource (what OAuth tokens are issued for)."""
    return issuer_url(settings) + "/mcp"


def oauth_issuer_problem(settings: Settings) -> str | None:
    """Why this server cannot act as an OAuth issuer, or None. RFC 8414 wants https; the SDK allows
    plain http on loopback only (local use and tests)."""
    parts = urlsplit(issuer_url(settings))
    if parts.scheme == "https":
        return None
    if parts.scheme == "http" and parts.hostname in ("localhost", "127.0.0.1", "::1"):
        return None
    return "the issuer must be https (set SWITCHBOARD_PUBLIC_URL=https://...) or a loopback http address"


def auth_settings(settings: Settings, *, oauth: bool = False) -> AuthSettings:
    """Without OAuth there is no protected-resource metadata to advertise. With it, clients discover
    the authorization server from ``/.well-known/oauth-protected-resource/mcp``; the audience of OAuth
    tokens is checked when they are issued (``/authorize`` refuses another ``resource``), and endpoint
    credentials have none, so the SDK's own ``validate_token_resource`` stays off."""
    if not oauth:
        return AuthSettings(
            issuer_url=issuer_url(settings),  # type: ignore[arg-type]  # pydantic parses the str
            resource_server_url=None,
            validate_token_resource=False,
        )
    return AuthSettings(
        issuer_url=issuer_url(settings),  # type: ignore[arg-type]
        resource_server_url=mcp_resource_url(settings),  # type: ignore[arg-type]
        validate_token_resource=False,
        client_registration_options=ClientRegistrationOptions(enabled=True),
        revocation_options=RevocationOptions(enabled=True),
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
