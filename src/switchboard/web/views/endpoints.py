"""Endpoints: the list, the vend wizard, quick-vend, and the endpoint card with its controls.

Every lookup goes through :func:`own_endpoint`: an endpoint that is not the signed-in human's is
``NotFound`` before anything is read or changed, for the instance operator too (SPEC-0024 REQ-10).
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from switchboard.a2a.component import A2AComponent
from switchboard.a2a.configs import PUSH_VERB
from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.manage import deletes
from switchboard.notify.component import NotifyComponent
from switchboard.notify.errors import HookNotFound, InvalidHook
from switchboard.notify.process import WorkerUnavailable
from switchboard.obs.audit import audit
from switchboard.store.accounts import SLUG, Endpoint
from switchboard.store.errors import Conflict
from switchboard.web.errors import BadRequest, NotFound
from switchboard.web.grants import grant_groups, parse_queues, parse_verbs
from switchboard.web.page import Visit
from switchboard.web.views.confirm import confirm_delete

RECENT_TODOS = 25
PUSH_CONFIGS_SHOWN = 100


async def own_endpoint(v: Visit) -> Endpoint:
    slug = str(v.request.path_params.get("slug", ""))
    if not SLUG.match(slug):
        raise NotFound()
    endpoint = await v.web.services.accounts.endpoint_by_slug(slug)
    if endpoint is None or endpoint.human_id != v.me.id:
        raise NotFound()
    return endpoint


def a2a_of(v: Visit) -> A2AComponent | None:
    return v.web.services.parts.get(A2AComponent)


def notify_of(v: Visit) -> NotifyComponent | None:
    component = v.web.services.parts.get(NotifyComponent)
    return component if component is not None and component.enabled else None


# -- the list -------------------------------------------------------------------------------------


async def index(v: Visit) -> Response:
    return await _index(v)


async def _index(v: Visit, *, status: int = 200, quick: dict[str, Any] | None = None) -> Response:
    endpoints = await v.web.services.accounts.list_endpoints(v.me.id)
    ids = [e.id for e in endpoints]
    todo_counts = await v.web.store.todo_counts(ids)
    hook_counts = await v.web.store.hook_counts(ids)
    return v.render(
        "endpoints.html",
        status=status,
        title="Endpoints",
        nav="endpoints",
        endpoints=endpoints,
        todo_counts=todo_counts,
        hook_counts=hook_counts,
        quick=quick or {"slug": "", "queues": "inbox", "error": ""},
        default_groups=grant_groups(DEFAULT_GRANT),
    )


async def quick_vend(v: Visit) -> Response:
    """Quick-vend: the default grant (consumer verbs only, never an outbound-HTTP verb)."""
    slug = v.form.get("slug").strip().lower()
    queues, error = parse_queues(v.form.get("queues"))
    if not error:  # the slug, queues and verbs are checked by the one vend every face calls
        try:
            endpoint, token = await v.web.services.accounts.vend_endpoint(
                v.me.id, slug, queues, list(DEFAULT_GRANT), actor=v.me.email
            )
        except (ValueError, Conflict) as exc:
            error = _vend_error(exc)
        else:
            return _reveal_token(v, endpoint, token, "vended")
    return await _index(v, status=400, quick={"slug": slug, "queues": v.form.get("queues"), "error": error})


# -- the wizard -----------------------------------------------------------------------------------


async def wizard(v: Visit) -> Response:
    if v.request.method == "GET":
        return _wizard(v, slug="", queues="inbox", verbs=list(DEFAULT_GRANT), error="")
    slug = v.form.get("slug").strip().lower()
    queues, error = parse_queues(v.form.get("queues"))
    verbs, verb_error = parse_verbs(v.form.getlist("verbs"))
    error = error or verb_error
    if not error and not verbs:
        error = "Grant at least one verb."
    if not error:  # the slug, queues and verbs are checked by the one vend every face calls
        try:
            endpoint, token = await v.web.services.accounts.vend_endpoint(
                v.me.id, slug, queues, verbs, actor=v.me.email
            )
        except (ValueError, Conflict) as exc:
            error = _vend_error(exc)
        else:
            return _reveal_token(v, endpoint, token, "vended")
    return _wizard(v, slug=slug, queues=v.form.get("queues"), verbs=verbs, error=error, status=400)


def _wizard(v: Visit, *, slug: str, queues: str, verbs: list[str], error: str, status: int = 200) -> Response:
    return v.render(
        "vend.html",
        status=status,
        title="Vend an endpoint",
        nav="endpoints",
        slug=slug,
        queues=queues,
        groups=grant_groups(verbs),
        error=error,
    )


def _vend_error(exc: Exception) -> str:
    """The vend's own message (a taken slug, the per-human cap, a bad name), as the CLI prints it."""
    return str(exc)[:300]


def _reveal_token(v: Visit, endpoint: Endpoint, token: str, what: str) -> Response:
    mcp_url = v.base_url() + "/mcp"
    return v.render(
        "token.html",
        title="Endpoint credential",
        nav="endpoints",
        endpoint=endpoint,
        token=token,
        what=what,
        mcp_url=mcp_url,
    )


# -- the card -------------------------------------------------------------------------------------


async def card(v: Visit, *, notice: dict[str, Any] | None = None) -> Response:
    endpoint = await own_endpoint(v)
    services = v.web.services
    notify = notify_of(v)
    hooks = await notify.store.list_for_endpoint(endpoint.id) if notify else []
    histories = {h.id: await notify.verbs.history(endpoint, h.id) for h in hooks} if notify else {}
    todos = await services.todos.list_for_endpoint(endpoint.id, limit=RECENT_TODOS)
    grants = await v.web.store.grants_for_endpoint(endpoint.id)
    counts = (await v.web.store.todo_counts([endpoint.id])).get(endpoint.id, {})
    a2a = a2a_of(v)
    push_configs = await a2a.configs.list_for_endpoint(endpoint.id, PUSH_CONFIGS_SHOWN + 1) if a2a else []
    push_deliveries = await a2a.replay.deliveries.recent_pushes(endpoint.id) if a2a else []
    return v.render(
        "endpoint.html",
        title=endpoint.slug,
        nav="endpoints",
        endpoint=endpoint,
        hooks=hooks,
        histories=histories,
        notice=notice,
        hooks_enabled=notify is not None,
        hook_ceiling=notify.verbs.ceiling if notify else 0,
        hook_rate=int(v.web.services.settings.notify_rate_per_minute),
        todos=todos,
        counts=counts,
        grants=grants,
        groups=grant_groups(endpoint.verbs, current_scope=True),
        queues_text=", ".join(endpoint.queues),
        mcp_url=v.base_url() + "/mcp",
        oauth_on=v.web.oauth is not None,
        # A scope cut pauses outbound calls (docs/notify-hooks.md, docs/a2a.md): the card says so.
        hooks_paused=set(NOTIFY_HOOKS.verbs).isdisjoint(endpoint.verbs),
        push_configs=push_configs[:PUSH_CONFIGS_SHOWN],
        push_configs_more=len(push_configs) > PUSH_CONFIGS_SHOWN,
        push_paused=PUSH_VERB not in endpoint.verbs,
        push_deliveries=push_deliveries,  # issue 29: with a Resend button each (views/push_replay.py)
    )


def _back(endpoint: Endpoint, msg: str) -> tuple[str, str]:
    return f"/endpoints/{endpoint.slug}", msg


async def set_presence(v: Visit) -> Response:
    endpoint = await own_endpoint(v)
    state = v.form.get("state")
    if state not in ("in", "out", "clear"):
        raise BadRequest("Choose in, out or clear. Nothing was changed.")
    await v.web.services.presence.override(endpoint.id, None if state == "clear" else state)
    return v.redirect(*_back(endpoint, "presence_cleared" if state == "clear" else "presence_set"))


async def set_scope(v: Visit) -> Response:
    endpoint = await own_endpoint(v)
    queues, error = parse_queues(v.form.get("queues"))
    verbs, verb_error = parse_verbs(v.form.getlist("verbs"))
    error = error or verb_error
    if error:
        raise BadRequest(error + " Nothing was changed.")
    await v.web.services.accounts.set_scope(endpoint.id, verbs=verbs, queues=queues)
    return v.redirect(*_back(endpoint, "scope_saved"))


async def revoke_credential(v: Visit) -> Response:
    endpoint = await own_endpoint(v)
    await v.web.services.accounts.revoke_token(endpoint.id, actor=v.me.email)
    return v.redirect(*_back(endpoint, "credential_revoked"))


async def revend_credential(v: Visit) -> Response:
    endpoint = await own_endpoint(v)
    token = await v.web.services.accounts.revend_token(endpoint.id, actor=v.me.email)
    return _reveal_token(v, endpoint, token, "re-vended")


async def hook_action(v: Visit) -> Response:
    """Disable, re-enable, delete, send a test to, or rotate one of the endpoint's hooks (SPEC-0024
    REQ-10, issue 19), through the same service functions the MCP verbs use (notify/service.py)."""
    endpoint = await own_endpoint(v)
    notify = notify_of(v)
    action = str(v.request.path_params.get("action", ""))
    hook_id = str(v.request.path_params.get("hook_id", ""))
    if notify is None or action not in ("disable", "enable", "delete", "test", "rotate", "resend", "recover"):
        raise NotFound()
    verbs = notify.verbs
    try:  # each call finds the hook among this endpoint's own: another endpoint's is not found alike
        if action == "delete":
            await verbs.delete(endpoint, hook_id, actor=v.me.email)
            return v.redirect(*_back(endpoint, "hook_deleted"))
        if action == "test":
            try:
                result = await verbs.send_test(endpoint, hook_id)
            except (WorkerUnavailable, TimeoutError):
                result = {"outcome": "failed", "error": "worker_unavailable"}
            audit(
                "hook.test",
                v.me.email,
                endpoint_id=endpoint.id,
                hook_id=hook_id,
                outcome=result.get("outcome"),
            )
            return await card(v, notice={"kind": "test", "hook_id": hook_id, "result": result})
        if action in ("resend", "recover"):  # issue 29: the service writes the audit line
            return await card(v, notice=await _replay(v, endpoint, hook_id, action))
        if action == "rotate":
            rotated = await verbs.rotate(endpoint, hook_id, by_owner=True, actor=v.me.email)
            fresh = await notify.store.get(endpoint.id, hook_id)
            notice = {
                "kind": "rotate",
                "hook_id": hook_id,
                "result": rotated,
                "valid_until": fresh.rotating_until,
            }
            return await card(v, notice=notice)
        await verbs.set_enabled(endpoint, hook_id, action == "enable", actor=v.me.email)
    except HookNotFound:
        raise NotFound("That hook does not exist on this endpoint.") from None
    return v.redirect(*_back(endpoint, "hook_disabled" if action == "disable" else "hook_enabled"))


async def _replay(v: Visit, endpoint: Endpoint, hook_id: str, action: str) -> dict[str, Any]:
    """Resend one delivery-log row, or recover the hook's failures since a time (notify/replay.py)."""
    notify = notify_of(v)
    assert notify is not None
    actor = v.me.email
    try:
        if action == "resend":
            result = await notify.verbs.resend(endpoint, str(v.form.get("notification") or ""), actor=actor)
        else:
            result = await notify.verbs.recover(endpoint, hook_id, v.form.get("since"), actor=actor)
    except InvalidHook as err:
        raise BadRequest(err.message + " Nothing was sent.") from None
    except (WorkerUnavailable, TimeoutError):
        result = {"error": "worker_unavailable"}
    return {"kind": action, "hook_id": hook_id, "result": result}


async def delete_push_config(v: Visit) -> Response:
    """The owner removes one of the endpoint's tasks' A2A push configs, through the same store call as
    the A2A DeleteTaskPushNotificationConfig; another endpoint's config is not found alike."""
    endpoint = await own_endpoint(v)
    a2a = a2a_of(v)
    task_id = str(v.request.path_params.get("task_id", ""))
    config_id = str(v.request.path_params.get("config_id", ""))
    if a2a is None or not await a2a.configs.delete(endpoint.id, task_id, config_id):
        raise NotFound("That push config does not exist on this endpoint.")
    audit("a2a_push_config.delete", v.me.email, endpoint_id=endpoint.id, task_id=task_id, config=config_id)
    return v.redirect(*_back(endpoint, "push_config_deleted"))


async def revoke_connection(v: Visit) -> Response:
    endpoint = await own_endpoint(v)
    grant_id = str(v.request.path_params.get("grant_id", ""))
    oauth = v.web.oauth
    if oauth is None or not await oauth.store.revoke_grant_of_endpoint(grant_id, endpoint.id):
        raise NotFound("That connection does not exist on this endpoint.")
    return v.redirect(*_back(endpoint, "connection_revoked"))


ENDPOINT_GOES = {
    "todos": "todos (all states)",
    "live_todos": "of them still pending, claimed or failed",
    "hooks": "notify hooks",
    "routes": "routes to it",
    "connections": "OAuth connections",
}


async def delete_endpoint(v: Visit) -> Response:
    """GET: a confirmation that says what goes with the endpoint; POST: delete it (and those)."""
    endpoint = await own_endpoint(v)
    admin = v.web.services.admin
    if v.request.method == "GET":
        counts = await admin.endpoint_dependents(endpoint.id)
        return confirm_delete(
            v,
            nav="endpoints",
            what="endpoint",
            name=endpoint.slug,
            action=f"/endpoints/{endpoint.slug}/delete",
            cancel=f"/endpoints/{endpoint.slug}",
            goes=[(counts[k], label) for k, label in ENDPOINT_GOES.items()],
            note="Its bearer credential and OAuth tokens stop working at once, and its A2A tasks go too. "
            "Deliveries that matched its routes are no longer routed anywhere.",
        )
    await deletes.delete_endpoint(admin, endpoint, actor=v.me.email)
    return v.redirect("/endpoints", "endpoint_deleted")
