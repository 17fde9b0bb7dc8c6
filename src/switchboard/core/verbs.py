"""The grantable verbs, in the groups the vend wizard, quick-vend and the OAuth consent screen show.

The notify-hook verbs (SPEC-0024 REQ-2) and the A2A verbs make Switchboard send HTTP requests to URLs the
caller chooses, so they are never in the default grant nor in "all consumer verbs".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VerbGroup:
    key: str
    label: str
    description: str
    verbs: tuple[str, ...]
    outbound_http: bool = False


CONSUMER = VerbGroup(
    "consumer",
    "Work the queue",
    "Claim, heartbeat, acknowledge and fail the endpoint's own todos; clock in and out; ask an A2A "
    "task's sender for input.",
    (
        "claim_next",
        "claim",
        "heartbeat",
        "ack",
        "fail",
        "list_todos",
        "self_test",
        "clock_in",
        "clock_out",
        "ask",
    ),
)
NOTIFY_HOOKS = VerbGroup(
    "notify_hooks",
    "Notify hooks: grants outbound HTTP calls",
    "Register HTTPS URLs that Switchboard will call when work is ready. Switchboard makes outbound "
    "HTTP requests to the URLs this endpoint registers.",
    (
        "create_notify_hook",
        "list_notify_hooks",
        "rotate_notify_hook",
        "delete_notify_hook",
        "resend_notification",
        "recover_notify_hook",
        "resend_a2a_push",  # issue 29: A2A pushes replayed as notifications are (a2a/replay.py)
        "recover_a2a_push",
    ),
    outbound_http=True,
)
A2A = VerbGroup(
    "a2a",
    "A2A tasks and push notifications: grants outbound HTTP calls",
    "Send A2A messages that become tasks, read and cancel them, and register push-notification URLs "
    "that Switchboard will call on every task transition.",
    ("a2a_send_message", "a2a_get_task", "a2a_list_tasks", "a2a_cancel_task", "a2a_push_config"),
    outbound_http=True,
)

# The MCP face of A2A's SendMessage (a2a/submit.py): puts work on the queue of another endpoint of the
# same human and follows it as an MCP task (the Tasks extension). Not in the default grant: a worker's
# credential should not be able to hand work to its siblings (docs/mcp.md, "The Tasks extension").
# It registers no URL, so it grants no outbound HTTP call.
PRODUCER = VerbGroup(
    "producer",
    "Submit work to your other endpoints",
    "Put a todo on a queue one of your other endpoints drains (submit_work) and follow it as an MCP "
    "task: poll it, answer the worker's questions, cancel it.",
    ("submit_work",),
)

GROUPS: tuple[VerbGroup, ...] = (CONSUMER, NOTIFY_HOOKS, A2A, PRODUCER)
ALL_VERBS: frozenset[str] = frozenset(v for g in GROUPS for v in g.verbs)
DEFAULT_GRANT: tuple[str, ...] = CONSUMER.verbs


def unknown_verbs(verbs: list[str] | tuple[str, ...]) -> list[str]:
    return [v for v in verbs if v not in ALL_VERBS]


# Verbs that are batch or combined forms of a grantable verb: they need that verb's grant and add no
# grant name of their own (an endpoint granted ``claim_next`` may claim several at once).
# ``update_notify_hook`` changes only what create sets (a hook's own, lower rate limit: issue 29), so
# the grant to create a hook covers it; it can only make fewer outbound calls, never more.
GRANTED_BY: dict[str, str] = {
    "claim_many": "claim_next",
    "ack_many": "ack",
    "update_notify_hook": "create_notify_hook",
}


def required_grant(verb: str) -> str:
    """The grant a verb needs: its own name, or the verb it is a batch form of (``GRANTED_BY``)."""
    return GRANTED_BY.get(verb, verb)


# MCP request methods other than tools/call that need a verb's grant (the gate checks it): the Tasks
# extension's, which only the endpoint that submitted the work may call on its task (a2a/mcp_tasks.py).
METHOD_GRANTS: dict[str, str] = {
    "tasks/get": "submit_work",
    "tasks/update": "submit_work",
    "tasks/cancel": "submit_work",
}
