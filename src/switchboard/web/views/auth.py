"""Sign-in, sign-out, and the first-run setup link.

A failed sign-in says only that the email or the password is wrong (``check_password`` verifies
against a dummy hash for unknown emails, so timing does not tell either). Attempts are limited per
client address and per email from that address, in this instance, so a stranger cannot lock an account
out by spending its attempts from elsewhere; past the same budget for one email from everywhere, each
attempt (right or wrong password alike) waits :data:`SLOW_DOWN_SECONDS` first (docs/web.md).
"""

from __future__ import annotations

import asyncio
import hmac

from starlette.responses import Response

from switchboard.store.accounts import EMAIL
from switchboard.store.errors import Conflict
from switchboard.web.errors import NotFound
from switchboard.web.page import Visit
from switchboard.web.security import safe_next

BAD_LOGIN = "That email and password do not match an account."
PASSWORD_MIN = 10
SLOW_DOWN_SECONDS = 1.0


async def home(v: Visit) -> Response:
    return v.redirect("/endpoints" if v.human else "/login")


async def login(v: Visit) -> Response:
    next_path = safe_next(v.request.query_params.get("next") or v.form.get("next"))
    if v.human is not None and v.request.method == "GET":
        return v.redirect(next_path)
    if v.request.method == "GET":
        return _login_page(v, next_path)
    email = v.form.get("email").strip().lower()[:320]
    password = v.form.get("password")
    client = v.request.client.host if v.request.client else "unknown"
    limiter = v.web.login_limiter
    if not (limiter.allow(f"ip:{client}") and limiter.allow(f"email:{email}|ip:{client}")):
        return _login_page(
            v,
            next_path,
            email=email,
            status=429,
            error="Too many sign-in attempts. Wait a minute, then try again.",
        )
    if not limiter.allow(f"email:{email}"):
        await asyncio.sleep(SLOW_DOWN_SECONDS)  # a brute force across many addresses slows; no lockout
    human = await v.web.services.accounts.check_password(email, password) if email and password else None
    if human is None:
        return _login_page(v, next_path, email=email, status=401, error=BAD_LOGIN)
    sid = v.sign_in_as(human.id)
    await v.web.store.start_session(sid, human.id, v.web.settings.session_hours * 3600)
    return v.redirect(next_path)


def _login_page(v: Visit, next_path: str, *, email: str = "", status: int = 200, error: str = "") -> Response:
    return v.render(
        "login.html", status=status, title="Sign in", next_path=next_path, email=email, error=error
    )


async def logout(v: Visit) -> Response:
    if v.human is not None:
        await v.web.store.end_session(v.sid)
    v.sign_out()
    return v.redirect("/login", "signed_out")


async def setup(v: Visit) -> Response:
    """``/setup/<token>``: valid until used or the server restarts, and only while no human exists."""
    expected = v.web.setup_token
    presented = v.request.path_params.get("token", "")
    if (
        not expected
        or not hmac.compare_digest(expected.encode(), str(presented).encode())
        or await v.web.store.human_count() > 0
    ):
        raise NotFound(
            "This setup link is not valid. It works once, until the server restarts, and only "
            "while the server has no accounts. Use `switchboard human create` instead."
        )
    if v.request.method == "GET":
        return v.render("setup.html", title="Set up Switchboard", email="", errors=[])
    email = v.form.get("email").strip().lower()
    password, again = v.form.get("password"), v.form.get("password2")
    errors = []
    if not EMAIL.match(email):
        errors.append("Enter a valid email address.")
    if len(password) < PASSWORD_MIN:
        errors.append(f"The password must be at least {PASSWORD_MIN} characters.")
    elif password != again:
        errors.append("The two passwords differ.")
    if errors:
        return v.render("setup.html", status=400, title="Set up Switchboard", email=email, errors=errors)
    try:
        human_id = await v.web.services.accounts.create_human(email, password, operator=True)
    except Conflict:
        raise NotFound("An account was created meanwhile; sign in instead.") from None
    v.web.setup_token = None
    sid = v.sign_in_as(human_id)
    await v.web.store.start_session(sid, human_id, v.web.settings.session_hours * 3600)
    return v.redirect("/endpoints", "welcome")
