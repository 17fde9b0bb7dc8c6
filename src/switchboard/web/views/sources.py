"""Sources (SPEC-0003) and routes (SPEC-0006): register, quarantine, route to queues and endpoints.

A route is managed by the human who owns its source, and may only target that human's endpoints.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from switchboard.manage import deletes
from switchboard.manage import sources as manage
from switchboard.obs.audit import audit
from switchboard.store.accounts import SLUG
from switchboard.store.errors import Conflict
from switchboard.store.errors import NotFound as StoreNotFound
from switchboard.store.sources import KINDS, TRUSTS, Source
from switchboard.web.errors import NotFound
from switchboard.web.page import Visit
from switchboard.web.views.confirm import confirm_delete

KIND_LABELS = {
    "gitea": "Gitea (X-Gitea-Signature)",
    "github": "GitHub (X-Hub-Signature-256)",
    "standard": "Standard Webhooks (webhook-signature)",
    "generic": "Generic (token URL or unsigned)",
}
TRUST_LABELS = {
    "signature": "Signature (verify the HMAC header)",
    "token": "Token (secret URL path)",
    "none": "None (accept, mark unverified)",
}


async def _own_source(v: Visit) -> Source:
    slug = str(v.request.path_params.get("slug", ""))
    if SLUG.match(slug):
        for source in await v.web.services.sources.list_sources(v.me.id):
            if source.slug == slug:
                return source
    raise NotFound()


async def index(v: Visit) -> Response:
    return await _index(v)


async def _index(
    v: Visit,
    *,
    status: int = 200,
    source_form: dict[str, Any] | None = None,
    route_form: dict[str, Any] | None = None,
) -> Response:
    services = v.web.services
    sources = await services.sources.list_sources(v.me.id)
    routes = await services.sources.list_routes(v.me.id)
    endpoints = await services.accounts.list_endpoints(v.me.id)
    return v.render(
        "sources.html",
        status=status,
        title="Sources & routes",
        nav="sources",
        sources=sources,
        routes=routes,
        endpoints=endpoints,
        endpoint_queues={e.slug: e.queues for e in endpoints},
        kinds=[(k, KIND_LABELS[k]) for k in KINDS],
        trusts=[(t, TRUST_LABELS[t]) for t in TRUSTS],
        base_url=v.base_url(),
        source_form=source_form or {"slug": "", "kind": "gitea", "trust": "signature", "error": ""},
        route_form=route_form or {"source": "", "kind": "", "queue": "", "endpoint": "", "error": ""},
    )


async def create_source(v: Visit) -> Response:
    slug = v.form.get("slug").strip().lower()
    kind, trust = v.form.get("kind"), v.form.get("trust")
    form = {"slug": slug, "kind": kind, "trust": trust, "error": ""}
    if kind not in KINDS or trust not in TRUSTS:
        form["error"] = "Pick a kind and a trust mode from the lists."
        return await _index(v, status=400, source_form=form)
    try:  # the slug and the kind/trust pairing are checked by the one function every face calls
        minted = await manage.register_source(
            v.web.services.sources, v.me.id, slug, kind, trust, actor=v.me.email
        )
    except (ValueError, Conflict) as exc:
        form["error"] = str(exc)[:300]
        return await _index(v, status=400, source_form=form)
    return v.render(
        "source_created.html",
        title="Source registered",
        nav="sources",
        source=minted.source,
        secret=minted.secret,
        inbound_url=v.base_url() + minted.inbound_path,
        kind_label=KIND_LABELS[kind],
    )


async def quarantine(v: Visit) -> Response:
    source = await _own_source(v)
    on = v.form.get("quarantined") == "on"
    await v.web.services.sources.set_quarantine(source.id, on)
    return v.redirect("/sources", "quarantine_on" if on else "quarantine_off")


async def create_route(v: Visit) -> Response:
    services = v.web.services
    form = {
        "source": v.form.get("source"),
        "kind": v.form.get("kind").strip(),
        "queue": v.form.get("queue").strip().lower(),
        "endpoint": v.form.get("endpoint"),
        "error": "",
    }
    own_sources = {s.slug for s in await services.sources.list_sources(v.me.id)}
    own_endpoints = {e.slug for e in await services.accounts.list_endpoints(v.me.id)}
    if form["source"] not in own_sources:
        form["error"] = "Pick one of your sources."
    elif form["endpoint"] not in own_endpoints:
        form["error"] = "Pick one of your endpoints."
    else:
        try:  # the queue and event kind are checked by the one function every face calls
            await manage.create_route(
                services.sources,
                form["source"],
                form["queue"],
                form["endpoint"],
                form["kind"] or None,
                actor=v.me.email,
            )
        except (ValueError, Conflict, StoreNotFound) as exc:
            form["error"] = str(exc)[:300]
    if form["error"]:
        return await _index(v, status=400, route_form=form)
    return v.redirect("/sources", "route_added")


async def delete_route(v: Visit) -> Response:
    route_id = str(v.request.path_params.get("route_id", ""))
    if not await v.web.store.route_for_human(route_id, v.me.id):
        raise NotFound()
    await v.web.services.sources.delete_route(route_id)
    audit("route.delete", v.me.email, route_id=route_id)
    return v.redirect("/sources", "route_deleted")


async def delete_source(v: Visit) -> Response:
    """GET: a confirmation that says what goes with the source; POST: delete it and its routes."""
    source = await _own_source(v)
    admin = v.web.services.admin
    if v.request.method == "GET":
        counts = await admin.source_dependents(source.id)
        return confirm_delete(
            v,
            nav="sources",
            what="source",
            name=source.slug,
            action=f"/sources/{source.slug}/delete",
            cancel="/sources",
            goes=[(counts["routes"], "routes from it")],
            note=f"Its signing secret is destroyed and deliveries to its URL are refused from now on. "
            f"The {counts['todos']} todos it already made stay with the endpoints they were routed to.",
        )
    await deletes.delete_source(admin, source, actor=v.me.email)
    return v.redirect("/sources", "source_deleted")
