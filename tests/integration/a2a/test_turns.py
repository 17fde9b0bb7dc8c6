"""Issue 20: follow-up messages (SendMessage with a taskId) and contextId continuation, as a generic A2A
client sends them (docs/a2a.md, "Follow-up messages")."""

from __future__ import annotations

import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError

from tests.integration.a2a.conftest import Env, message, send

UNKNOWN = "td_01JZZZZZZZZZZZZZZZZZZZZZZZ"


def follow_up(task_id: str, text: str, message_id: str, context_id: str = "") -> Message:
    return Message(
        message_id=message_id,
        task_id=task_id,
        context_id=context_id,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
    )


async def test_a_follow_up_is_appended_and_reaches_the_worker(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    task = await send(client, message("first turn"))

    again = await send(client, follow_up(task.id, "second turn", "m-second", task.context_id))
    assert again.id == task.id
    assert [m.parts[0].text for m in again.history] == ["first turn", "second turn"]
    resent = await send(client, follow_up(task.id, "second turn", "m-second"))  # a retry: no new turn
    assert len(resent.history) == 2
    assert await env.todo_count() == 1

    claimed = (await worker.ok("claim_next"))["todo"]
    assert claimed["id"] == task.id
    (turn,) = claimed["payload"]["a2a"]["followups"]
    assert turn["parts"] == [{"text": "second turn"}] and turn["messageId"] == "m-second"

    latest = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
    assert [m.parts[0].text for m in latest.history] == ["second turn"]
    none = await client.get_task(GetTaskRequest(id=task.id, history_length=0))
    assert len(none.history) == 0


async def test_follow_ups_to_other_or_finished_tasks_are_refused(env: Env) -> None:
    _, token = await env.endpoint("client")
    _, other_token = await env.endpoint("other")
    worker = await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    with pytest.raises(TaskNotFoundError):
        await send(client, follow_up(UNKNOWN, "x", "m-x"))
    with pytest.raises(TaskNotFoundError):  # another endpoint's task reads like an unknown one
        await send(await env.client(other_token), follow_up(task.id, "x", "m-y"))
    with pytest.raises(InvalidParamsError):
        await send(client, follow_up(task.id, "x", "m-z", context_id="ctx-another"))
    lease = (await worker.ok("claim_next"))["todo"]["lease"]
    await worker.ok("ack", {"todo_id": task.id, "lease": lease, "result": "done"})
    with pytest.raises(UnsupportedOperationError):  # A2A: a terminal task accepts no more messages
        await send(client, follow_up(task.id, "too late", "m-late"))
    done = await client.get_task(GetTaskRequest(id=task.id))
    assert len(done.history) == 1


async def test_context_id_continues_a_conversation_in_a_new_task(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    first = await send(client, message("one"))
    second_msg = message("two")
    second_msg.context_id = first.context_id
    second = await send(client, second_msg)
    assert second.id != first.id and second.context_id == first.context_id
