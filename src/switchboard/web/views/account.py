"""Your account (change password, sign out everywhere), the operator's people page (invite, remove,
grant or revoke the operator role) and accepting an invitation.

Each action is one :class:`switchboard.store.admin.AdminStore` call, the same the CLI makes. The people
page shows humans and counts only: the operator never sees another tenant's endpoints, hooks or todos.
"""

from __future__ import annotations

from starlette.responses import Response

from switchboard.manage import deletes
from switchboard.obs.audit import audit
from switchboard.store.admin import PASSWORD_MIN
from switchboard.store.errors import Conflict
from switchboard.store.errors import NotFound as StoreNotFound
from switchboard.web.errors import BadRequest, NotFound
from switchboard.web.page import Visit
from switchboard.web.store import hash_id
from switchboard.web.views.confirm import confirm_delete

INVITE_HOURS = 72


async def account(v: Visit) -> Response:
    return _account(v)


def _account(v: Visit, *, status: int = 200, error: str = "") -> Response:
    return v.render("account.html", status=status, title="Your account", nav="account", error=error,
                    password_min=PASSWORD_MIN)  # fmt: skip


async def change_password(v: Visit) -> Response:
    current, new, again = v.form.get("current"), v.form.get("password"), v.form.get("password2")
    if await v.web.services.accounts.check_password(v.me.email, current) is None:
        return _account(v, status=400, error="The current password is not right. Nothing was changed.")
    if len(new) < PASSWORD_MIN:
        return _account(v, status=400, error=f"The new password must be at least {PASSWORD_MIN} characters.")
    if new != again:
        return _account(v, status=400, error="The two new passwords differ. Nothing was changed.")
    await v.web.services.admin.set_password(v.me.id, new, keep_session=hash_id(v.sid))
    audit("human.password", v.me.email, human_id=v.me.id)
    return v.redirect("/account", "password_changed")


async def sign_out_everywhere(v: Visit) -> Response:
    ended = await v.web.services.admin.end_sessions(v.me.id)
    audit("human.sign_out_everywhere", v.me.email, human_id=v.me.id, sessions=ended)
    v.sign_out()
    return v.redirect("/login", "signed_out_everywhere")


# -- the operator's people page -------------------------------------------------------------------


def _operator(v: Visit) -> None:
    if not v.me.is_operator:
        raise NotFound()


async def people(v: Visit) -> Response:
    _operator(v)
    return await _people(v)


async def _people(v: Visit, *, status: int = 200, error: str = "", invite_url: str = "",
                  form_email: str = "") -> Response:  # fmt: skip
    services = v.web.services
    humans = await services.accounts.list_humans()
    invites = await services.admin.list_invites()
    emails = {h.id: h.email for h in humans}
    return v.render(
        "people.html",
        status=status,
        title="People",
        nav="people",
        humans=humans,
        invites=invites,
        emails=emails,
        error=error,
        invite_url=invite_url,
        form_email=form_email,
        invite_hours=INVITE_HOURS,
    )


async def invite(v: Visit) -> Response:
    _operator(v)
    email = v.form.get("email").strip().lower()[:320]
    operator = v.form.get("operator") == "on"
    try:
        token = await v.web.services.admin.invite(
            email, operator=operator, invited_by=v.me.id, lifetime_seconds=INVITE_HOURS * 3600
        )
    except ValueError as exc:
        return await _people(v, status=400, error=f"{str(exc).capitalize()}.", form_email=email)
    except Conflict:
        return await _people(v, status=400, error="Someone with that email has an account already.",
                             form_email=email)  # fmt: skip
    audit("human.invite", v.me.email, email=email, operator=operator)
    return await _people(v, invite_url=f"{v.base_url()}/invite/{token}")


async def revoke_invite(v: Visit) -> Response:
    _operator(v)
    email = v.form.get("email")
    if not await v.web.services.admin.revoke_invite(email):
        raise NotFound("That invitation does not exist.")
    audit("human.invite_revoke", v.me.email, email=email)
    return v.redirect("/people", "invite_revoked")


async def _other_human(v: Visit) -> str:
    _operator(v)
    human_id = str(v.request.path_params.get("human_id", ""))
    row = await v.web.services.accounts.human_by_id(human_id)
    if row is None:
        raise NotFound()
    return str(row.id)


async def set_operator(v: Visit) -> Response:
    human_id = await _other_human(v)
    grant = v.form.get("operator") == "on"
    try:
        changed = await v.web.services.admin.set_operator(human_id, grant)
    except Conflict as exc:
        raise BadRequest(f"{str(exc).capitalize()}. Nothing was changed.") from None
    if changed:
        audit("human.operator_grant" if grant else "human.operator_revoke", v.me.email, human_id=human_id)
    if human_id == v.me.id and not grant:
        return v.redirect("/endpoints", "operator_revoked")
    return v.redirect("/people", "operator_granted" if grant else "operator_revoked")


async def delete_human(v: Visit) -> Response:
    human_id = await _other_human(v)
    admin = v.web.services.admin
    row = await v.web.services.accounts.human_by_id(human_id)
    assert row is not None
    if v.request.method == "GET":
        return confirm_delete(
            v,
            nav="people",
            what="human",
            name=row.email,
            action=f"/people/{human_id}/delete",
            cancel="/people",
            goes=[(n, label) for label, n in (await admin.human_dependents(human_id)).items()],
            verb="Remove",
            note="Their endpoints take their todos, notify hooks, routes and OAuth connections with them. "
            "Their sources and the routes from those sources go too. They are signed out at once.",
        )
    try:
        await deletes.delete_human(admin, human_id, actor=v.me.email)
    except Conflict as exc:
        raise BadRequest(f"{str(exc).capitalize()}. Nothing was changed.") from None
    except StoreNotFound:
        raise NotFound() from None
    if human_id == v.me.id:
        v.sign_out()
        return v.redirect("/login", "account_deleted")
    return v.redirect("/people", "human_removed")


# -- accepting an invitation (signed out) ---------------------------------------------------------


async def accept_invite(v: Visit) -> Response:
    token = str(v.request.path_params.get("token", ""))
    admin = v.web.services.admin
    found = await admin.open_invite(token)
    if found is None:
        raise NotFound(
            "This invitation is not valid: it was used, revoked or has expired. Ask for a new one."
        )
    if v.request.method == "GET":
        return v.render(
            "invite.html", title="Join Switchboard", invite=found, errors=[], password_min=PASSWORD_MIN
        )
    password, again = v.form.get("password"), v.form.get("password2")
    errors = []
    if len(password) < PASSWORD_MIN:
        errors.append(f"The password must be at least {PASSWORD_MIN} characters.")
    elif password != again:
        errors.append("The two passwords differ.")
    if errors:
        return v.render("invite.html", status=400, title="Join Switchboard", invite=found, errors=errors,
                        password_min=PASSWORD_MIN)  # fmt: skip
    try:
        human_id = await admin.accept_invite(token, password)
    except (StoreNotFound, Conflict):
        raise NotFound("This invitation was used meanwhile; sign in instead.") from None
    audit("human.invite_accept", found.email, human_id=human_id)
    sid = v.sign_in_as(human_id)
    await v.web.store.start_session(sid, human_id, v.web.settings.session_hours * 3600)
    return v.redirect("/endpoints", "welcome_invited")
