"""Who is calling the A2A surface, and which verb each A2A method needs.

:func:`authenticate_bearer` is the one place an A2A bearer token becomes an endpoint, with the same
rules as MCP: the endpoint is read from the database for this very request, so a scope change or a
revoked token takes effect on the next call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from switchboard.edge import authorization as authorization_header
from switchboard.services import Services
from switchboard.store.accounts import Endpoint

SEND: Final = "a2a_send_message"
GET: Final = "a2a_get_task"
LIST: Final = "a2a_list_tasks"
CANCEL: Final = "a2a_cancel_task"
PUSH_CONFIG: Final = "a2a_push_config"

# Every JSON-RPC method served, v1.0 and v0.3 names, to the verb its caller must hold (None: any
# authenticated endpoint). Methods not listed are answered by the SDK (-32601 method not found).
METHOD_VERBS: Final[Mapping[str, str | None]] = {
    "SendMessage": SEND,
    "SendStreamingMessage": SEND,
    "GetTask": GET,
    "SubscribeToTask": GET,
    "ListTasks": LIST,
    "CancelTask": CANCEL,
    "CreateTaskPushNotificationConfig": PUSH_CONFIG,
    "GetTaskPushNotificationConfig": PUSH_CONFIG,
    "ListTaskPushNotificationConfigs": PUSH_CONFIG,
    "DeleteTaskPushNotificationConfig": PUSH_CONFIG,
    "GetExtendedAgentCard": None,
    "message/send": SEND,
    "message/stream": SEND,
    "tasks/get": GET,
    "tasks/resubscribe": GET,
    "tasks/cancel": CANCEL,
    "tasks/pushNotificationConfig/set": PUSH_CONFIG,
    "tasks/pushNotificationConfig/get": PUSH_CONFIG,
    "tasks/pushNotificationConfig/list": PUSH_CONFIG,
    "tasks/pushNotificationConfig/delete": PUSH_CONFIG,
    "agent/getAuthenticatedExtendedCard": None,
}
STREAM_METHODS: Final = frozenset(
    {"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"}
)
SEND_METHODS: Final = frozenset({"SendMessage", "SendStreamingMessage", "message/send", "message/stream"})


async def authenticate_bearer(services: Services, token: str) -> Endpoint | None:
    """The endpoint a bearer token acts for, read fresh, or None. Store errors propagate (the caller
    answers 503: a database outage must not look like a bad credential).

    ``switchboard.mcp.auth.authenticate_bearer`` decides (it adds OAuth access tokens and narrows
    ``verbs`` to what the human granted the token), so both surfaces apply one rule."""
    from switchboard.mcp import auth as mcp_auth

    return await mcp_auth.authenticate_bearer(services, token)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header: the one parser every face uses
    (``switchboard.edge.authorization``; ``Bearer`` in any case)."""
    return authorization_header.bearer_token(authorization)


def verbs_needed(method: str, params: Any) -> list[str]:
    """The verbs a call needs. Registering a push URL inline on SendMessage needs the push-config
    verb as well: it makes Switchboard call that URL."""
    verb = METHOD_VERBS.get(method)
    needed = [verb] if verb else []
    if method in SEND_METHODS and isinstance(params, Mapping):
        configuration = params.get("configuration")
        if isinstance(configuration, Mapping) and (
            configuration.get("taskPushNotificationConfig") or configuration.get("pushNotificationConfig")
        ):
            needed.append(PUSH_CONFIG)
    return needed
