"""SPEC-0018: the A2A task surface over the a2a-sdk client. Tasks are todos; only their sender sees them."""

from __future__ import annotations

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
)
from google.protobuf.json_format import MessageToDict

from switchboard.core.verbs import DEFAULT_GRANT
from switchboard.store.schema_a2a import a2a_push_outbox, a2a_task_events, a2a_tasks
from tests.integration.a2a.conftest import A2A_VERBS, Env, message, send
from tests.support.mcp_client import agent
from tests.support.world import gitea_delivery, make_world, pr_payload

UNKNOWN = "td_01JZZZZZZZZZZZZZZZZZZZZZZZ"


async def test_agent_card_declares_the_endpoint_auth_and_capabilities(env: Env) -> None:
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, env.inst.base_url).get_agent_card()
    (interface,) = card.supported_interfaces
    assert interface.url == f"{env.inst.base_url}/a2a"
    assert (interface.protocol_binding, interface.protocol_version) == ("JSONRPC", "1.0")
    assert card.capabilities.push_notifications is True
    assert card.capabilities.streaming is True
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert "bearer" in card.security_requirements[0].schemes


async def test_send_claim_ack_completes_the_task_with_the_result_as_artifact(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)

    task = await send(client, message("Summarise PR 482"))
    assert task.status.state == TaskState.TASK_STATE_SUBMITTED
    assert task.history[0].parts[0].text == "Summarise PR 482"

    claimed = (await worker.ok("claim_next"))["todo"]
    assert claimed["id"] == task.id
    assert claimed["queue"] == "inbox" and claimed["title"] == "Summarise PR 482"
    assert claimed["payload"]["a2a"]["from"] == "client"
    assert claimed["payload"]["a2a"]["message"]["parts"] == [{"text": "Summarise PR 482"}]
    working = await client.get_task(GetTaskRequest(id=task.id))
    assert working.status.state == TaskState.TASK_STATE_WORKING

    await worker.ok(
        "ack",
        {"todo_id": task.id, "lease": claimed["lease"], "result": {"summary": "adds the thing", "files": 3}},
    )
    done = await client.get_task(GetTaskRequest(id=task.id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    (artifact,) = done.artifacts
    assert MessageToDict(artifact.parts[0].data) == {"summary": "adds the thing", "files": 3}
    assert done.context_id == task.context_id


async def test_a_named_endpoint_is_targeted_and_a_failed_task_says_why(env: Env) -> None:
    _, token = await env.endpoint("client")
    first = await env.worker("first")
    second = await env.worker("second")
    client = await env.client(token)

    task = await send(client, message("Deploy", endpoint="second"))
    assert (await first.ok("claim_next"))["todo"] is None
    mine = (await second.ok("claim_next"))["todo"]
    assert mine["id"] == task.id
    await second.ok(
        "fail", {"todo_id": task.id, "lease": mine["lease"], "error": "disk full", "retry": False}
    )
    failed = await client.get_task(GetTaskRequest(id=task.id))
    assert failed.status.state == TaskState.TASK_STATE_FAILED
    assert failed.status.message.parts[0].text == "disk full"


async def test_another_endpoints_task_reads_exactly_like_an_unknown_one(env: Env) -> None:
    _, owner_token = await env.endpoint("owner")
    _, other_token = await env.endpoint("other")
    await env.worker()
    owner = await env.client(owner_token)
    other = await env.client(other_token)
    task = await send(owner, message())

    for task_id in (task.id, UNKNOWN, "not-an-id"):
        with pytest.raises(TaskNotFoundError) as caught:
            await other.get_task(GetTaskRequest(id=task_id))
        assert caught.value.message == "task not found"
        with pytest.raises(TaskNotFoundError) as caught:
            await other.cancel_task(CancelTaskRequest(id=task_id))
        assert caught.value.message == "task not found"
    assert (await other.list_tasks(ListTasksRequest())).tasks == []
    assert (await owner.get_task(GetTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_SUBMITTED


async def test_list_tasks_pages_newest_first_and_filters(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    ids = [(await send(client, message(f"job {n}", queue="inbox"))).id for n in range(5)]
    await worker.ok("claim", {"todo_id": ids[0]})

    first = await client.list_tasks(ListTasksRequest(page_size=2))
    assert [t.id for t in first.tasks] == [ids[4], ids[3]]
    assert first.total_size == 5 and first.next_page_token == ids[3]
    second = await client.list_tasks(ListTasksRequest(page_size=2, page_token=first.next_page_token))
    assert [t.id for t in second.tasks] == [ids[2], ids[1]]
    working = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
    assert [t.id for t in working.tasks] == [ids[0]]
    with pytest.raises(InvalidParamsError):
        await client.list_tasks(ListTasksRequest(page_size=1000))


async def test_cancel_a_live_task_once(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    lease = (await worker.ok("claim_next"))["todo"]["lease"]

    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=task.id))
    refused = await worker.call("ack", {"todo_id": task.id, "lease": lease})
    assert refused.code == "canceled"  # the worker learns its todo was canceled


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        (message(queue="Not A Queue"), "message.metadata.queue"),
        (message(queue="nobody-drains-this"), "none of your endpoints drains that queue"),
        (message(endpoint="ghost"), "no endpoint of yours by that name"),
        (message(endpoint="stranger"), "no endpoint of yours by that name"),
    ],
)
async def test_bad_messages_are_refused_and_store_nothing(env: Env, msg: object, expected: str) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    other_human = await env.services.accounts.create_human("someone@example.com", "correct horse battery")
    await env.endpoint("stranger", queues=("inbox",), human_id=other_human)
    client = await env.client(token)
    with pytest.raises(InvalidParamsError) as caught:
        await send(client, msg)  # type: ignore[arg-type]
    assert expected in caught.value.message
    assert await env.todo_count() == 0


async def test_credentials_and_grants(env: Env) -> None:
    _, token = await env.endpoint("client")
    _, reader_token = await env.endpoint("reader", verbs=["a2a_get_task"])
    _, consumer_token = await env.endpoint("consumer", verbs=DEFAULT_GRANT)
    assert not set(A2A_VERBS) & set(DEFAULT_GRANT)  # A2A verbs are never granted by default
    await env.worker()
    task = await send(await env.client(token), message())
    body = {"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": task.id}}
    url = f"{env.inst.base_url}/a2a"
    async with httpx.AsyncClient(headers={"A2A-Version": "1.0"}) as http:
        missing = await http.post(url, json=body)
        wrong = await http.post(url, json=body, headers={"Authorization": "Bearer sbt_nope"})
        consumer = await http.post(url, json=body, headers={"Authorization": f"Bearer {consumer_token}"})
        reader = await http.post(url, json=body, headers={"Authorization": f"Bearer {reader_token}"})
        send_body = {"jsonrpc": "2.0", "id": 8, "method": "SendMessage", "params": {}}
        reader_send = await http.post(
            url, json=send_body, headers={"Authorization": f"Bearer {reader_token}"}
        )
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert consumer.status_code == 403 and consumer.json()["error"] == "insufficient_scope"
    assert "a2a_get_task" in consumer.json()["error_description"]
    assert reader.status_code == 200 and reader.json()["error"]["code"] == -32001  # not its task
    assert reader_send.status_code == 403
    reader_client = await env.client(reader_token)
    with pytest.raises(A2AClientError, match="403"):
        await reader_client.list_tasks(ListTasksRequest())


async def test_a_scope_shrink_takes_effect_on_the_next_call(env: Env) -> None:
    client_ep, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    await env.services.accounts.set_scope(client_ep.id, verbs=["a2a_send_message"])
    with pytest.raises(A2AClientError, match="403"):
        await client.get_task(GetTaskRequest(id=task.id))


async def test_v03_method_names_are_served_on_the_same_endpoint(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    url = f"{env.inst.base_url}/a2a"
    legacy_send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": "m1",
                "role": "user",
                "parts": [{"kind": "text", "text": "legacy hello"}],
                "metadata": {"queue": "inbox"},
            },
            "configuration": {"blocking": False},
        },
    }
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:  # no A2A-Version: 0.3
        sent = (await http.post(url, json=legacy_send)).json()
        task_id = sent["result"]["id"]
        got = (
            await http.post(
                url, json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task_id}}
            )
        ).json()
        unknown = (
            await http.post(
                url, json={"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": UNKNOWN}}
            )
        ).json()
    assert sent["result"]["kind"] == "task" and sent["result"]["status"]["state"] == "submitted"
    assert got["result"]["id"] == task_id
    assert unknown["error"]["code"] == -32001


async def test_the_send_request_parses_with_the_sdk_types(env: Env) -> None:
    """Guard for the harness itself: the helper builds what the SDK client sends."""
    request = SendMessageRequest(message=message())
    assert MessageToDict(request)["message"]["metadata"] == {"queue": "inbox"}


async def test_a_webhook_source_called_a2a_makes_todos_not_tasks(env: Env) -> None:
    """SendMessage writes its task row itself, in its todo's transaction (``fanout.writes_task``): a
    webhook todo whose source happens to be called "a2a" gets no task, moves like any todo, and reads
    as unknown on the A2A surface."""
    world = await make_world(env.inst, slug="hooked", source_slug="a2a", verbs=(*DEFAULT_GRANT, *A2A_VERBS))
    assert world.source.slug == "a2a"
    body, headers = gitea_delivery(world.secret, pr_payload())
    async with env.inst.client() as http:
        r = await http.post(world.inbound_path, content=body, headers=headers)
    assert r.status_code == 202, r.text
    (todo_id,) = r.json()["todos"]
    worker = await env.stack.enter_async_context(agent(env.inst.mcp_url, world.token))
    claimed = await worker.ok("claim", {"todo_id": todo_id})
    assert claimed["todo"]["source"] == "a2a"
    assert (await worker.ok("ack", {"todo_id": todo_id, "lease": claimed["todo"]["lease"]}))["todo"][
        "status"
    ] == "done"
    await env.settle()
    assert (
        await env.count(a2a_tasks),
        await env.count(a2a_task_events),
        await env.count(a2a_push_outbox),
    ) == (
        0,
        0,
        0,
    )
    with pytest.raises(TaskNotFoundError):
        await (await env.client(world.token)).get_task(GetTaskRequest(id=todo_id))
    # and a task sent over A2A beside it still gets its row and its events
    task = await send(await env.client(world.token), message(queue="inbox"))
    await env.settle()
    assert await env.count(a2a_tasks) == 1
    assert await env.count(a2a_task_events, a2a_task_events.c.task_id == task.id) >= 1
