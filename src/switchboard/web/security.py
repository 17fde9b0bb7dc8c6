"""The secureHeaders set every UI response carries, and same-origin redirect validation.

Applied as plain ASGI around each UI route (not around the whole app: MCP, ingest and OAuth JSON
endpoints have their own rules). The policy allows only this origin's own files: the UI ships its CSS
and JS and has no inline script or style, so ``'unsafe-inline'`` is never needed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP_SCOPE_KEY = "switchboard.csp_form_action"

_BASE_CSP = (
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
)


_CSP_SOURCE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?://[A-Za-z0-9.\[\]:-]+)?")


def content_security_policy(form_action: Iterable[str] = ()) -> str:
    """``form-action`` also governs where a submitted form may redirect, so the OAuth consent form
    adds the client's redirect origin (and only that) through the scope key above."""
    # Defence in depth: registration already validates redirect hosts; a source that could end the
    # directive or add one is dropped here rather than copied into a header.
    sources = " ".join(["'self'", *(src for src in form_action if _CSP_SOURCE.fullmatch(src))])
    return "; ".join([*_BASE_CSP, f"form-action {sources}"])


class SecureHeaders:
    """Adds the header set to every response of the wrapped app, error pages included."""

    def __init__(self, app: ASGIApp, *, force_hsts: bool = False) -> None:
        self.app = app
        self.force_hsts = force_hsts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tls = self.force_hsts or scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _OWNED]
                extra = scope.get(CSP_SCOPE_KEY, ())
                headers += [
                    (b"content-security-policy", content_security_policy(extra).encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"same-origin"),
                    (b"cross-origin-opener-policy", b"same-origin"),
                    (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), payment=()"),
                ]
                if tls:
                    headers.append((b"strict-transport-security", b"max-age=31536000; includeSubDomains"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


_OWNED = {
    b"content-security-policy",
    b"x-content-type-options",
    b"x-frame-options",
    b"referrer-policy",
    b"cross-origin-opener-policy",
    b"permissions-policy",
    b"strict-transport-security",
}


def safe_next(target: object, default: str = "/endpoints") -> str:
    """A same-origin path to redirect to after an action, else ``default``.

    Refuses absolute URLs, scheme-relative ``//host`` and ``/\\host`` (browsers treat a backslash
    as a slash), control characters, and anything that does not start with a single ``/``.
    """
    if not isinstance(target, str) or not target.startswith("/") or len(target) > 2000:
        return default
    if target.startswith(("//", "/\\")) or any(ord(c) < 0x20 or c == "\\" for c in target):
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return default
    return target


def redirect_origin(uri: str) -> str | None:
    """The CSP source expression for an OAuth client's registered redirect URI."""
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https") and parts.netloc:
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}"
    if parts.scheme:
        return f"{parts.scheme}:"
    return None
