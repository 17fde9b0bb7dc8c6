"""``hook`` commands: an endpoint's notify hooks as its owner sees them on the endpoint card, through the
same service (switchboard.notify.service) the card and the MCP verbs call."""

from __future__ import annotations

import argparse

from switchboard.cli.base import EXIT_FAILED, CliError, Output, render_table, require_endpoint
from switchboard.notify.errors import HookNotFound, InvalidHook
from switchboard.notify.service import NotifyHooks, hook_service
from switchboard.services import Services


def _not_found(args: argparse.Namespace) -> CliError:
    return CliError(f"no hook {args.hook_id!r} on endpoint {args.slug!r}", "not_found", EXIT_FAILED)


async def hook_list(services: Services, args: argparse.Namespace) -> Output:
    """The endpoint card's hook list: URLs redacted, health shown, never a secret."""
    endpoint = await require_endpoint(services, args.slug)
    hooks = (await hook_service(services).list(endpoint))["hooks"]
    rows = [
        [
            h["hook_id"],
            "yes" if h["enabled"] else f"no ({h['disabled_reason'] or '-'})",
            str(h["last_status"] or "-"),
            str(h["consecutive_failures"]),
            str(h["rate_per_minute"] or "server"),
            h["url"],
        ]
        for h in hooks
    ]
    text = render_table(["HOOK", "ENABLED", "LAST", "FAILURES", "PER_MIN", "URL"], rows, "(no hooks)")
    return Output({"endpoint": endpoint.slug, "hooks": hooks}, text)


async def hook_set_enabled(services: Services, args: argparse.Namespace) -> Output:
    """The owner's disable / re-enable from the endpoint card (SPEC-0024 REQ-10), the card's own service
    call: a disable is recorded as the human's (``disabled_reason: operator``), which only a human lifts."""
    endpoint = await require_endpoint(services, args.slug)
    enable = args.action == "enable"
    verbs: NotifyHooks = hook_service(services)
    try:
        changed = await verbs.set_enabled(endpoint, args.hook_id, enable, actor="cli")
        hook = await verbs.view(endpoint, args.hook_id)
    except HookNotFound:
        raise _not_found(args) from None
    verb = ("enabled" if enable else "disabled") if changed else "unchanged"
    return Output({"hook": hook, "changed": changed}, f"hook {hook['hook_id']} {verb}")


async def hook_delete(services: Services, args: argparse.Namespace) -> Output:
    endpoint = await require_endpoint(services, args.slug)
    try:
        await hook_service(services).delete(endpoint, args.hook_id, actor="cli")
    except HookNotFound:
        raise _not_found(args) from None
    return Output({"deleted": args.hook_id, "endpoint": endpoint.slug}, f"deleted hook {args.hook_id}")


async def hook_rate(services: Services, args: argparse.Namespace) -> Output:
    """The hook's own per-minute limit (issue 29), as the endpoint's update_notify_hook sets it: 1..120,
    or ``default`` for the server's; out of range is refused and nothing changes."""
    endpoint = await require_endpoint(services, args.slug)
    rate: object = None if args.rate == "default" else _int_or_text(args.rate)
    try:
        hook = await hook_service(services).set_rate(endpoint, args.hook_id, rate, actor="cli")
    except HookNotFound:
        raise _not_found(args) from None
    except InvalidHook as err:
        raise CliError(err.message, "invalid_argument", EXIT_FAILED) from None
    said = hook["rate_per_minute"] or "the server's limit"
    return Output({"hook": hook}, f"hook {hook['hook_id']}: at most {said} a minute")


def _int_or_text(value: str) -> object:
    try:
        return int(value)
    except ValueError:
        return value
