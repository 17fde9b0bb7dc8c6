"""How one UI request is handled, the same way for every page.

1. The method must be one the page declares (else 405).
2. The session cookie is read (a signed random id); a browser without a valid one gets a fresh,
   anonymous id, so every form, the sign-in form included, can carry a CSRF token bound to it.
3. A POST body is read with a size cap, as ``application/x-www-form-urlencoded`` only, and its
   ``csrf`` field must match the session: otherwise the handler never runs and nothing changes.
4. Pages that need a human redirect to sign-in (same-origin ``next`` only).
5. View exceptions become pages; every response carries the secureHeaders set (applied around the
   route by :class:`switchboard.web.security.SecureHeaders`) and ``Cache-Control: no-store``.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from switchboard.core.ratelimit import WindowLimiter
from switchboard.obs.logs import get_logger
from switchboard.services import Services
from switchboard.settings import Settings
from switchboard.store.errors import StoreUnavailable
from switchboard.web.errors import CsrfRejected, TooLarge, WebError
from switchboard.web.hosts import HostCheck
from switchboard.web.keys import Keys
from switchboard.web.render import Renderer
from switchboard.web.security import CSP_SCOPE_KEY, SecureHeaders, safe_next
from switchboard.web.store import Human, WebStore

log = get_logger("switchboard.web")

COOKIE = "sb_session"
MAX_FORM_BYTES = 64 * 1024

FLASH = {
    "signed_out": ("ok", "You are signed out."),
    "welcome": ("ok", "Your operator account is ready. Vend your first endpoint below."),
    "hook_disabled": ("ok", "Hook disabled. It will not be called until it is re-enabled."),
    "hook_enabled": ("ok", "Hook re-enabled; its failure count was reset."),
    "hook_deleted": ("ok", "Hook deleted."),
    "push_config_deleted": ("ok", "Push config deleted. Its pending deliveries went with it."),
    "presence_set": ("ok", "Presence override saved."),
    "presence_cleared": ("ok", "Presence override cleared: the endpoint's own clock-in state applies."),
    "scope_saved": ("ok", "Scope saved. It applies to the endpoint's next call."),
    "credential_revoked": ("ok", "Bearer credential revoked. Calls with it are refused from now on."),
    "connection_revoked": ("ok", "OAuth connection revoked. Its tokens stop working at once."),
    "quarantine_on": ("warn", "Source quarantined: its deliveries still become todos but ring nothing."),
    "quarantine_off": ("ok", "Source released from quarantine."),
    "route_added": ("ok", "Route added."),
    "route_deleted": ("ok", "Route deleted."),
    "todo_requeued": ("ok", "Todo requeued: it is pending again with a fresh set of attempts."),
    "todo_canceled": ("ok", "Todo canceled."),
    "endpoint_deleted": ("ok", "Endpoint deleted, with its todos, hooks, routes and connections."),
    "source_deleted": ("ok", "Source deleted, with its routes."),
    "password_changed": ("ok", "Password changed. Your other sessions were signed out."),
    "signed_out_everywhere": ("ok", "You are signed out everywhere."),
    "invite_revoked": ("ok", "Invitation revoked."),
    "operator_granted": ("ok", "Operator role granted."),
    "operator_revoked": ("ok", "Operator role revoked."),
    "human_removed": ("ok", "Account removed."),
    "account_deleted": ("ok", "Your account was removed."),
    "welcome_invited": ("ok", "Your account is ready. Vend your first endpoint below."),
}


@dataclass
class Web:
    """What every page shares: built once by :class:`switchboard.web.component.WebComponent`."""

    services: Services
    store: WebStore
    keys: Keys
    renderer: Renderer
    login_limiter: WindowLimiter
    oauth: Any = None  # OAuthProvider when OAuth is on
    setup_token: str | None = None

    @property
    def settings(self) -> Settings:
        return self.services.settings

    @property
    def tls(self) -> bool:
        return (self.settings.public_url or "").startswith("https://")


class Form:
    """A parsed urlencoded body: ``get`` for single fields, ``getlist`` for checkbox groups."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self._pairs = list(pairs)

    def get(self, name: str, default: str = "") -> str:
        for key, value in self._pairs:
            if key == name:
                return value
        return default

    def getlist(self, name: str) -> list[str]:
        return [value for key, value in self._pairs if key == name]


@dataclass
class Visit:
    """One request as a view sees it."""

    web: Web
    request: Request
    sid: str
    human: Human | None
    form: Form = field(default_factory=lambda: Form([]))
    new_sid: bool = False
    cookie_max_age: int | None = None

    @property
    def csrf(self) -> str:
        return self.web.keys.csrf_token(self.sid)

    @property
    def me(self) -> Human:
        """The signed-in human (pages that reach a view without one were redirected already)."""
        assert self.human is not None
        return self.human

    def base_url(self) -> str:
        return (self.web.settings.public_url or str(self.request.base_url)).rstrip("/")

    def render(self, template: str, *, status: int = 200, title: str = "", **context: Any) -> Response:
        msg = self.request.query_params.get("msg", "")
        kind, text = FLASH.get(msg, ("", ""))
        body = self.web.renderer.render(
            template,
            {
                "human": self.human,
                "csrf": self.csrf,
                "title": title,
                "flash": {"kind": kind, "text": text} if text else None,
                "nav": context.pop("nav", ""),
                "path": self.request.url.path,
                **context,
            },
        )
        return HTMLResponse(body, status_code=status)

    def redirect(self, path: str, msg: str | None = None) -> Response:
        """303 to a same-origin path only."""
        target = safe_next(path)
        if msg:
            target += ("&" if "?" in target else "?") + urlencode({"msg": msg})
        return RedirectResponse(target, status_code=303)

    def sign_in_as(self, human_id: str) -> str:
        """Rotate the session id on sign-in (no session fixation); the caller stores the session."""
        self.sid = secrets.token_urlsafe(32)
        self.new_sid = True
        self.cookie_max_age = int(self.web.settings.session_hours * 3600)
        return self.sid

    def sign_out(self) -> None:
        self.sid = secrets.token_urlsafe(32)
        self.new_sid = True
        self.cookie_max_age = None
        self.human = None

    def allow_form_action(self, *sources: str) -> None:
        """Let a form on this page redirect to another origin (the OAuth client's redirect URI)."""
        self.request.scope[CSP_SCOPE_KEY] = tuple(sources)


Handler = Callable[[Visit], Awaitable[Response]]


class Page:
    """One UI route as a plain ASGI app (so the 405 and error pages go through it too)."""

    def __init__(self, web: Web, handler: Handler, *, methods: Sequence[str], signed_in: bool) -> None:
        self.web = web
        self.handler = handler
        self.methods = {m.upper() for m in methods} | ({"HEAD"} if "GET" in methods else set())
        self.signed_in = signed_in
        self.hosts = HostCheck(web.settings.public_url)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self._respond(request)
        response.headers["cache-control"] = "no-store"
        await response(scope, receive, send)

    async def _respond(self, request: Request) -> Response:
        sid = self._session_id(request)
        visit = Visit(self.web, request, sid or secrets.token_urlsafe(32), None, new_sid=sid is None)
        try:
            if not self.hosts.allows(request.headers.get("host")):
                return self._error(
                    visit,
                    400,
                    "Unknown host",
                    "This server answers its web pages only at its public address.",
                )
            if request.method not in self.methods:
                response = self._error(visit, 405, "Not allowed", "This page does not accept that request.")
                response.headers["allow"] = ", ".join(sorted(self.methods))
                return self._with_cookie(visit, response)
            if sid is not None:
                visit.human = await self.web.store.session_human(sid)
            if request.method == "POST":
                visit.form = await _read_form(request)
                if not self.web.keys.csrf_ok(visit.sid, visit.form.get("csrf")):
                    raise CsrfRejected()
            if self.signed_in and visit.human is None:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return self._with_cookie(visit, RedirectResponse(f"/login?next={quote(target)}", 303))
            response = await self.handler(visit)
        except WebError as exc:
            response = self._error(visit, exc.status, exc.title, exc.message)
        except StoreUnavailable:
            response = self._error(
                visit,
                503,
                "Database unavailable",
                "The database cannot be reached right now. Try again shortly.",
            )
            response.headers["retry-after"] = "5"
        except Exception:
            log.error("web page crashed", path=request.url.path, exc_info=True)
            response = self._error(
                visit, 500, "Internal error", "Something broke on our side; the server logged it."
            )
        return self._with_cookie(visit, response)

    def _session_id(self, request: Request) -> str | None:
        raw = request.cookies.get(COOKIE)
        return self.web.keys.open_cookie(raw) if raw else None

    def _with_cookie(self, visit: Visit, response: Response) -> Response:
        if visit.new_sid:
            response.set_cookie(
                COOKIE,
                self.web.keys.sign_cookie(visit.sid),
                max_age=visit.cookie_max_age,
                path="/",
                httponly=True,
                samesite="lax",
                secure=self.web.tls or visit.request.url.scheme == "https",
            )
        return response

    def _error(self, visit: Visit, status: int, title: str, message: str) -> Response:
        return visit.render("error.html", status=status, title=title, heading=title, message=message)


async def _read_form(request: Request) -> Form:
    """Our forms are small and urlencoded; anything else is refused before it is buffered."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_FORM_BYTES):
        raise TooLarge()
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise TooLarge()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if body and ctype != "application/x-www-form-urlencoded":
        return Form([])  # no csrf field: refused as a forged form
    try:
        pairs = parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, max_num_fields=500, strict_parsing=False
        )
    except (UnicodeDecodeError, ValueError):
        return Form([])
    return Form(pairs)


def route(
    web: Web, path: str, handler: Handler, *, methods: Sequence[str] = ("GET",), signed_in: bool = True
) -> Route:
    page = SecureHeaders(Page(web, handler, methods=methods, signed_in=signed_in), force_hsts=web.tls)
    return Route(path, endpoint=page)
