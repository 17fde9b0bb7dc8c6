"""``human`` and ``endpoint`` commands: the web console's and endpoint card's account operations."""

from __future__ import annotations

import argparse

from switchboard.cli.base import (
    EXIT_FAILED,
    REVEAL_NOTE,
    CliError,
    Output,
    emails_by_id,
    endpoint_json,
    human_json,
    render_table,
    require_endpoint,
    require_human,
    warn,
)
from switchboard.core.verbs import DEFAULT_GRANT
from switchboard.manage import deletes
from switchboard.obs.audit import audit
from switchboard.services import Services


async def human_create(services: Services, args: argparse.Namespace) -> Output:
    if await services.accounts.human_by_email(args.email):
        raise CliError(f"a human with email {args.email!r} exists", "conflict", EXIT_FAILED)
    await services.accounts.create_human(args.email, args.password, operator=args.operator, actor="cli")
    human = human_json(await require_human(services, args.email))
    if not human["operator"] and not any(r.is_operator for r in await services.accounts.list_humans()):
        warn("no human is an instance operator: grant the role with `switchboard human operator grant EMAIL`")
    role = " as an instance operator" if human["operator"] else ""
    return Output({"human": human}, f"created human {human['email']} ({human['id']}){role}")


# The console's account operations: each one AdminStore call, the same the web console makes.


async def human_operator(services: Services, args: argparse.Namespace) -> Output:
    row = await require_human(services, args.email)
    grant = args.role == "grant"
    changed = await services.admin.set_operator(row.id, grant)
    if changed:
        audit("human.operator_grant" if grant else "human.operator_revoke", "cli", human_id=row.id)
    human = human_json(await require_human(services, args.email))
    verb = ("granted" if grant else "revoked") if changed else "unchanged"
    return Output({"human": human, "changed": changed}, f"operator role {verb} for {human['email']}")


async def human_delete(services: Services, args: argparse.Namespace) -> Output:
    row = await require_human(services, args.email)
    gone = await deletes.delete_human(services.admin, row.id, actor="cli")
    what = ", ".join(f"{n} {k}" for k, n in gone.items())
    return Output({"deleted": human_json(row), "with": gone}, f"deleted human {row.email} with {what}")


async def human_password(services: Services, args: argparse.Namespace) -> Output:
    row = await require_human(services, args.email)
    await services.admin.set_password(row.id, args.password)
    audit("human.password", "cli", human_id=row.id)
    return Output({"human": human_json(row)}, f"password set for {row.email}; their sessions were ended")


async def human_sign_out(services: Services, args: argparse.Namespace) -> Output:
    row = await require_human(services, args.email)
    ended = await services.admin.end_sessions(row.id)
    audit("human.sign_out_everywhere", "cli", human_id=row.id, sessions=ended)
    return Output(
        {"human": human_json(row), "sessions_ended": ended}, f"ended {ended} sessions of {row.email}"
    )


async def human_list(services: Services, args: argparse.Namespace) -> Output:
    humans = [human_json(row) for row in await services.accounts.list_humans()]
    rows = [[h["email"], h["id"], "yes" if h["operator"] else "no", h["created_at"]] for h in humans]
    return Output(
        {"humans": humans}, render_table(["EMAIL", "ID", "OPERATOR", "CREATED"], rows, "(no humans)")
    )


async def endpoint_vend(services: Services, args: argparse.Namespace) -> Output:
    human = await require_human(services, args.human)
    verbs = list(DEFAULT_GRANT) if args.default_grant else args.verbs
    endpoint, token = await services.accounts.vend_endpoint(
        human.id, args.slug, args.queues, verbs, actor="cli"
    )
    from switchboard.a2a.settings import default_queue, set_default_queue

    if args.a2a_queue:
        await set_default_queue(services, endpoint.id, args.a2a_queue)
    a2a_queue = await default_queue(services, endpoint)
    text = (
        f"vended endpoint {endpoint.slug} ({endpoint.id}) for {human.email}\n"
        f"  verbs:  {', '.join(endpoint.verbs)}\n  queues: {', '.join(endpoint.queues)}\n"
        f"  A2A default queue: {a2a_queue}\n"
        f"token: {token}\n{REVEAL_NOTE}"
    )
    data = {"endpoint": endpoint_json(endpoint, human.email), "token": token, "a2a_default_queue": a2a_queue}
    return Output(data, text)


async def endpoint_list(services: Services, args: argparse.Namespace) -> Output:
    human_id = (await require_human(services, args.human)).id if args.human else None
    emails = await emails_by_id(services)
    endpoints = [
        endpoint_json(ep, emails.get(ep.human_id, ""))
        for ep in await services.accounts.list_endpoints(human_id)
    ]
    rows = [
        [e["slug"], e["human"], e["presence"], ",".join(e["queues"]), ",".join(e["verbs"])] for e in endpoints
    ]
    text = render_table(["SLUG", "HUMAN", "PRESENCE", "QUEUES", "VERBS"], rows, "(no endpoints)")
    return Output({"endpoints": endpoints}, text)


async def endpoint_grant(services: Services, args: argparse.Namespace) -> Output:
    """Add or remove verbs on an existing endpoint, through the scope update the web UI's editor makes."""
    endpoint = await services.accounts.endpoint_by_slug(args.slug)
    if endpoint is None:
        raise CliError(f"no endpoint {args.slug!r}", "not_found", EXIT_FAILED)
    both = sorted(set(args.add or ()) & set(args.remove or ()))
    if both:
        raise CliError(f"both added and removed: {', '.join(both)}")
    verbs = sorted((set(endpoint.verbs) | set(args.add or ())) - set(args.remove or ()))
    if not verbs:
        raise CliError("that would leave the endpoint no verbs (revoke its token instead)")
    await services.accounts.set_scope(endpoint.id, verbs=verbs, actor="cli")
    updated = await services.accounts.endpoint(endpoint.id)
    assert updated is not None
    emails = await emails_by_id(services)
    added = sorted(set(updated.verbs) - set(endpoint.verbs))
    removed = sorted(set(endpoint.verbs) - set(updated.verbs))
    text = (
        f"endpoint {updated.slug}: verbs {', '.join(updated.verbs)}"
        + (f"\n  added:   {', '.join(added)}" if added else "")
        + (f"\n  removed: {', '.join(removed)}" if removed else "")
        + ("" if added or removed else "\n  (unchanged)")
    )
    data = {
        "endpoint": endpoint_json(updated, emails.get(updated.human_id, "")),
        "added": added,
        "removed": removed,
    }
    return Output(data, text)


async def endpoint_delete(services: Services, args: argparse.Namespace) -> Output:
    endpoint = await services.accounts.endpoint_by_slug(args.slug)
    if endpoint is None:
        raise CliError(f"no endpoint with slug {args.slug!r}", "not_found", EXIT_FAILED)
    gone = await deletes.delete_endpoint(services.admin, endpoint, actor="cli")
    what = ", ".join(f"{n} {k}" for k, n in gone.items())
    return Output({"deleted": endpoint.slug, "with": gone}, f"deleted endpoint {endpoint.slug} with {what}")


async def endpoint_revoke_token(services: Services, args: argparse.Namespace) -> Output:
    """The card's "revoke credential": the bearer token stops at once; OAuth connections are apart."""
    endpoint = await require_endpoint(services, args.slug)
    await services.accounts.revoke_token(endpoint.id, actor="cli")
    return Output(
        {"endpoint": endpoint.slug, "token_revoked": True},
        f"revoked the token of {endpoint.slug}; the owner re-vends one in the web UI",
    )
