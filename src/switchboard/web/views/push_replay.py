"""The endpoint card's A2A push replay (issue 29): resend one push from the card's delivery log, or
recover a push config's failed pushes since a time. Both call :class:`~switchboard.a2a.replay.PushReplay`,
the operation the MCP verbs call, which writes the audit line; both are POSTs with the CSRF token."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from switchboard.a2a.replay import PushNotFound, PushReplayError
from switchboard.web.errors import BadRequest, NotFound
from switchboard.web.page import Visit
from switchboard.web.views.endpoints import a2a_of, card, own_endpoint


async def resend_push(v: Visit) -> Response:
    endpoint = await own_endpoint(v)
    a2a = a2a_of(v)
    if a2a is None:
        raise NotFound()
    notification = str(v.form.get("notification") or "")
    result = await _run(a2a.replay.resend(endpoint, notification, actor=v.me.email))
    return await card(v, notice={"kind": "push_resend", "result": result})


async def recover_push(v: Visit) -> Response:
    endpoint = await own_endpoint(v)
    a2a = a2a_of(v)
    if a2a is None:
        raise NotFound()
    task_id = str(v.request.path_params.get("task_id", ""))
    config_id = str(v.request.path_params.get("config_id", ""))
    result = await _run(
        a2a.replay.recover(endpoint, task_id, config_id, v.form.get("since"), actor=v.me.email)
    )
    return await card(
        v, notice={"kind": "push_recover", "config_id": config_id, "task_id": task_id, "result": result}
    )


async def _run(call: Any) -> dict[str, Any]:
    try:
        result: dict[str, Any] = await call
    except PushNotFound:
        raise NotFound("That A2A push or push config does not exist on this endpoint.") from None
    except PushReplayError as err:
        raise BadRequest(err.message + " Nothing was sent.") from None
    return result
