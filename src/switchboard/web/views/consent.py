"""The OAuth consent screen: which client is asking, which endpoint it will act as, which verbs.

The SDK's ``/authorize`` has validated the client, its redirect URI and PKCE, and sent the browser
here with the request signed (:meth:`OAuthProvider.authorize`). The human signs in if needed, picks a
new endpoint (slug and queues) or one of theirs, and checks verbs in the same groups and labels as the
vend wizard. For an existing endpoint the grant can only narrow its scope, never widen it.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import RedirectResponse, Response

from switchboard.core.verbs import ALL_VERBS, DEFAULT_GRANT
from switchboard.store.accounts import Endpoint
from switchboard.store.errors import Conflict
from switchboard.web.cimd import document_host
from switchboard.web.errors import BadRequest, NotFound
from switchboard.web.grants import grant_groups, parse_queues, parse_verbs
from switchboard.web.oauth import OAuthProvider
from switchboard.web.page import Visit
from switchboard.web.security import redirect_origin

EXPIRED = (
    "This authorization request has expired or was changed. Start connecting again from your MCP client."
)


async def consent(v: Visit) -> Response:
    oauth = v.web.oauth
    if not isinstance(oauth, OAuthProvider):
        raise NotFound("OAuth is not enabled on this server.")
    blob = v.form.get("req") if v.request.method == "POST" else v.request.query_params.get("req", "")
    request = oauth.open_request(blob) if blob else None
    if request is None:
        raise BadRequest(EXPIRED)
    client = await oauth.get_client(str(request.get("client_id", "")))
    redirect_uri = str(request.get("redirect_uri", ""))
    if client is None or redirect_uri not in {str(u) for u in client.redirect_uris or ()}:
        raise BadRequest(EXPIRED)
    origin = redirect_origin(redirect_uri)
    if origin:
        v.allow_form_action(origin)
    page = {
        "blob": blob,
        "client_name": client.client_name or "An unnamed MCP client",
        "client_uri": str(client.client_uri) if client.client_uri else "",
        "redirect_uri": redirect_uri,
        "client_id": client.client_id,
        # A client metadata document's name and website are its own claim: the host is what is known.
        "document_host": document_host(client.client_id or ""),
    }
    endpoints = await v.web.services.accounts.list_endpoints(v.me.id)
    if v.request.method == "GET":
        requested = [s for s in request.get("scopes") or [] if s in ALL_VERBS]
        return _page(v, page, endpoints, verbs=requested or list(DEFAULT_GRANT))

    if v.form.get("decision") != "approve":
        return RedirectResponse(oauth.deny(request), status_code=303)
    verbs, error = parse_verbs(v.form.getlist("verbs"))
    target = v.form.get("target")
    form = {
        "target": target,
        "slug": v.form.get("slug").strip().lower(),
        "queues": v.form.get("queues"),
        "endpoint": v.form.get("endpoint"),
    }
    endpoint: Endpoint | None = None
    if not error and not verbs:
        error = "Grant at least one verb."
    if not error and target == "existing":
        endpoint = next((e for e in endpoints if e.slug == form["endpoint"]), None)
        if endpoint is None:
            error = "Pick one of your endpoints."
        else:
            missing = sorted(set(verbs) - set(endpoint.verbs))
            if missing:
                error = (
                    f"{endpoint.slug} does not hold {', '.join(missing)}. A connection can only narrow an "
                    "endpoint's scope: uncheck them, widen the scope on the endpoint card first, or pick "
                    "a new endpoint."
                )
    elif not error and target == "new":
        queues, error = parse_queues(form["queues"])
        if not error:  # the slug, queues and verbs are checked by the one vend every face calls
            accounts = v.web.services.accounts
            try:
                endpoint, _unused = await accounts.vend_endpoint(
                    v.me.id, form["slug"], queues, verbs, actor=v.me.email
                )
            except (ValueError, Conflict) as exc:
                error = str(exc)[:300]
            else:
                # Nobody saw the bearer credential vend minted: revoke it, the OAuth token is the way in.
                await accounts.revoke_token(endpoint.id)
    elif not error:
        error = "Choose a new endpoint or one of yours."
    if error or endpoint is None:
        return _page(v, page, endpoints, verbs=verbs, form=form, error=error or EXPIRED, status=400)
    url = await oauth.approve(request, human_id=v.me.id, endpoint_id=endpoint.id, verbs=verbs, client=client)
    return RedirectResponse(url, status_code=303)


def _page(
    v: Visit,
    page: dict[str, str],
    endpoints: list[Endpoint],
    *,
    verbs: list[str],
    form: dict[str, Any] | None = None,
    error: str = "",
    status: int = 200,
) -> Response:
    form = form or {"target": "new", "slug": "", "queues": "inbox", "endpoint": ""}
    return v.render(
        "consent.html",
        status=status,
        title="Connect an MCP client",
        page=page,
        endpoints=endpoints,
        groups=grant_groups(verbs),
        form=form,
        error=error,
    )
