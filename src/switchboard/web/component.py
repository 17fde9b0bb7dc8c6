"""The web UI as a server component: its routes, the OAuth provider it registers for the MCP surface,
the first-run setup link, and a sweeper for expired sessions, codes and tokens.

Built before the MCP surface (``create_app`` builds components first), so the provider and its
access-token lookup are on ``services`` (``oauth_provider``, ``token_lookups``) when ``build_mcp`` wires auth.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from switchboard.core.ratelimit import WindowLimiter
from switchboard.mcp.auth import auth_settings, mcp_resource_url, oauth_issuer_problem
from switchboard.obs.logs import get_logger
from switchboard.process.tasks import cancel_and_wait
from switchboard.push.from_settings import outbound_for, parse_cidrs
from switchboard.services import Services
from switchboard.settings import Settings
from switchboard.store.console import BACKLOG_BUCKET_SECONDS
from switchboard.web.cimd import ClientDocuments
from switchboard.web.cimd_gate import route_wrappers
from switchboard.web.keys import Keys, derive_key
from switchboard.web.oauth import OAuthProvider
from switchboard.web.oauth_store import OAuthStore
from switchboard.web.page import Web, route
from switchboard.web.render import STATIC, Renderer
from switchboard.web.security import SecureHeaders
from switchboard.web.store import WebStore
from switchboard.web.views import account, auth, consent, console, endpoints, instance, push_replay, sources

if TYPE_CHECKING:
    from switchboard.mcp.tools import ToolRegistrar

log = get_logger("switchboard.web")

SWEEP_SECONDS = 600.0


class WebComponent:
    def __init__(self, services: Services) -> None:
        s = services.settings
        self.services = services
        self.oauth_problem: str | None = None
        oauth: OAuthProvider | None = None
        keys = Keys(derive_key(s))
        if s.oauth_enabled:
            self.oauth_problem = oauth_issuer_problem(s)
            if self.oauth_problem is None:
                store = OAuthStore(
                    services.db,
                    services.envelope,
                    services.clock,
                    access_seconds=s.oauth_access_token_seconds,
                    refresh_seconds=s.oauth_refresh_token_days * 86400,
                )
                documents = _client_documents(services)
                oauth = OAuthProvider(
                    services,
                    store,
                    keys,
                    issuer=_issuer_string(s),
                    resource=mcp_resource_url(s),
                    documents=documents,
                )
                services.oauth_provider = oauth
                services.token_lookups.append(oauth.lookup_access_token)
        per_minute = s.login_attempts_per_minute
        self.web = Web(
            services=services,
            store=WebStore(services.db, services.clock),
            keys=keys,
            renderer=Renderer(),
            login_limiter=WindowLimiter.per_minute(services.clock, per_minute),
            oauth=oauth,
        )
        services.parts.add(self)

    def mcp_tools(self) -> Sequence[ToolRegistrar]:
        return ()

    def routes(self) -> Sequence[BaseRoute]:
        w = self.web
        post = ("POST",)
        both = ("GET", "POST")
        return [
            route(w, "/", auth.home, signed_in=False),
            route(w, "/login", auth.login, methods=both, signed_in=False),
            route(w, "/logout", auth.logout, methods=post, signed_in=False),
            route(w, "/setup/{token}", auth.setup, methods=both, signed_in=False),
            route(w, "/endpoints", endpoints.index),
            route(w, "/vend", endpoints.wizard, methods=both),
            route(w, "/vend/quick", endpoints.quick_vend, methods=post),
            route(w, "/endpoints/{slug}", endpoints.card),
            route(w, "/endpoints/{slug}/presence", endpoints.set_presence, methods=post),
            route(w, "/endpoints/{slug}/scope", endpoints.set_scope, methods=post),
            route(w, "/endpoints/{slug}/credential/revoke", endpoints.revoke_credential, methods=post),
            route(w, "/endpoints/{slug}/credential/revend", endpoints.revend_credential, methods=post),
            route(w, "/endpoints/{slug}/hooks/{hook_id}/{action}", endpoints.hook_action, methods=post),
            route(
                w,
                "/endpoints/{slug}/push-configs/{task_id}/{config_id}/delete",
                endpoints.delete_push_config,
                methods=post,
            ),
            route(
                w,
                "/endpoints/{slug}/push-configs/{task_id}/{config_id}/recover",
                push_replay.recover_push,
                methods=post,
            ),
            route(w, "/endpoints/{slug}/push-deliveries/resend", push_replay.resend_push, methods=post),
            route(
                w,
                "/endpoints/{slug}/connections/{grant_id}/revoke",
                endpoints.revoke_connection,
                methods=post,
            ),
            route(w, "/endpoints/{slug}/delete", endpoints.delete_endpoint, methods=both),
            route(w, "/queues", console.queues),
            route(w, "/todos", console.todo_list),
            route(w, "/dead-letters", console.dead_letters),
            route(w, "/todos/{todo_id}", console.todo_detail),
            route(w, "/todos/{todo_id}/requeue", console.requeue, methods=post),
            route(w, "/todos/{todo_id}/cancel", console.cancel, methods=post),
            route(w, "/account", account.account),
            route(w, "/account/password", account.change_password, methods=post),
            route(w, "/account/sign-out-everywhere", account.sign_out_everywhere, methods=post),
            route(w, "/people", account.people),
            route(w, "/people/invite", account.invite, methods=post),
            route(w, "/people/invites/revoke", account.revoke_invite, methods=post),
            route(w, "/people/{human_id}/operator", account.set_operator, methods=post),
            route(w, "/people/{human_id}/delete", account.delete_human, methods=both),
            route(w, "/invite/{token}", account.accept_invite, methods=both, signed_in=False),
            route(w, "/sources", sources.index),
            route(w, "/sources/{slug}/delete", sources.delete_source, methods=both),
            route(w, "/sources/new", sources.create_source, methods=post),
            route(w, "/sources/{slug}/quarantine", sources.quarantine, methods=post),
            route(w, "/routes/new", sources.create_route, methods=post),
            route(w, "/routes/{route_id}/delete", sources.delete_route, methods=post),
            route(w, "/instance", instance.instance),
            route(w, "/oauth/consent", consent.consent, methods=both),
            Mount(
                "/static", app=SecureHeaders(StaticFiles(directory=STATIC), force_hsts=w.tls), name="static"
            ),
        ]

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        if self.oauth_problem:
            log.warning("mcp oauth is off", reason=self.oauth_problem)
        if await self.web.store.human_count() == 0:
            # First run: a one-time link to create the first (operator) human. Valid until used or
            # restart; `switchboard human create` is the scripted alternative.
            self.web.setup_token = secrets.token_urlsafe(24)
            log.warning(
                "no account exists yet: open the setup link to create the first (operator) account",
                setup_url=f"{_browser_base(self.services)}/setup/{self.web.setup_token}",
            )
        sweeper = asyncio.create_task(self._sweep(), name="web-sweeper")
        sampler = asyncio.create_task(self._sample_backlog(), name="web-backlog-sampler")
        try:
            yield
        finally:
            await cancel_and_wait(sweeper, sampler)

    async def _sample_backlog(self) -> None:
        """One backlog sample per bucket for the queues page's sparkline (the first at start)."""
        while True:
            try:
                await self.services.console.sample_backlog()
            except Exception:
                log.error("backlog sample failed", exc_info=True)
            await asyncio.sleep(BACKLOG_BUCKET_SECONDS / 5)  # several tries per bucket: none is missed

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                await self.web.store.sweep_sessions()
                await self.services.admin.sweep_invites()
                if self.web.oauth is not None:
                    await self.web.oauth.store.sweep()
            except Exception:
                log.error("web sweep failed", exc_info=True)


def _issuer_string(settings: Settings) -> str:
    """The issuer exactly as the SDK's metadata renders it, so RFC 9207 ``iss`` compares equal."""
    return str(auth_settings(settings, oauth=True).issuer_url)


def _browser_base(services: Services) -> str:
    s = services.settings
    if s.public_url:
        return s.public_url.rstrip("/")
    host = s.listen_host
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 - a bind-all address is not one a browser can open
        host = "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{s.listen_port}"


__all__ = ["WebComponent"]


def _client_documents(services: Services) -> ClientDocuments | None:
    """OAuth client metadata documents, fetched through their own allowlist
    (SWITCHBOARD_OAUTH_CIMD_ALLOW_CIDRS), and the wrappers of the SDK's routes that check and
    advertise them; None when SWITCHBOARD_OAUTH_CLIENT_METADATA_DOCUMENTS is off."""
    s = services.settings
    if not s.oauth_client_metadata_documents:
        return None
    allow = parse_cidrs(s.oauth_cimd_allow_cidrs)
    documents = ClientDocuments(lambda: outbound_for(services, allow)[1], services.clock)
    services.oauth_route_wrappers.update(route_wrappers(documents, auth_settings(s, oauth=True)))
    return documents
