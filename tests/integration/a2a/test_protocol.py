"""Protocol details: the A2A-Version query parameter, -32009 for an unsupported version, the v0.3
delete's ``null`` result, and ListTaskPushNotificationConfigs paging."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import ListTaskPushNotificationConfigsRequest
from a2a.utils.errors import InvalidParamsError

from tests.integration.a2a.conftest import Env, message, push_config, send


def _call(method: str, params: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def _setup(env: Env) -> tuple[str, str]:
    _, token = await env.endpoint("client")
    await env.worker()
    task = await send(await env.client(token), message())
    return token, task.id


async def test_the_version_query_parameter_is_read(env: Env) -> None:
    token, task_id = await _setup(env)
    url = f"{env.inst.base_url}/a2a"
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        by_param = (await http.post(f"{url}?A2A-Version=1.0", json=_call("GetTask", {"id": task_id}))).json()
        none = (await http.post(url, json=_call("GetTask", {"id": task_id}))).json()
    assert by_param["result"]["id"] == task_id
    assert none["error"]["code"] == -32009  # no version at all is 0.3, which has no GetTask


@pytest.mark.parametrize(
    ("method", "version"),
    [
        ("GetTask", "2.0"),
        ("GetTask", "abc"),
        ("tasks/get", "1.0"),  # a v0.3 name under 1.0 (the SDK's v0.3 adapter said -32603)
        ("tasks/get", "0.4"),
    ],
)
async def test_an_unsupported_version_is_32009(env: Env, method: str, version: str) -> None:
    token, task_id = await _setup(env)
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}", "A2A-Version": version}
    ) as http:
        answer = (await http.post(f"{env.inst.base_url}/a2a", json=_call(method, {"id": task_id}, 7))).json()
    assert answer["error"]["code"] == -32009
    assert answer["id"] == 7


async def test_an_unsupported_version_in_the_query_is_32009(env: Env) -> None:
    token, task_id = await _setup(env)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        answer = (
            await http.post(
                f"{env.inst.base_url}/a2a?A2A-Version=3.1", json=_call("GetTask", {"id": task_id})
            )
        ).json()
    assert answer["error"]["code"] == -32009


async def test_the_v03_delete_returns_a_null_result(env: Env) -> None:
    token, task_id = await _setup(env)
    url = f"{env.inst.base_url}/a2a"
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:  # v0.3
        await http.post(
            url,
            json=_call(
                "tasks/pushNotificationConfig/set",
                {"taskId": task_id, "pushNotificationConfig": {"id": "c1", "url": env.url()}},
            ),
        )
        deleted = (
            await http.post(
                url,
                json=_call(
                    "tasks/pushNotificationConfig/delete", {"id": task_id, "pushNotificationConfigId": "c1"}
                ),
            )
        ).json()
        again = (
            await http.post(
                url,
                json=_call(
                    "tasks/pushNotificationConfig/delete", {"id": task_id, "pushNotificationConfigId": "c1"}
                ),
            )
        ).json()
    assert deleted == {"jsonrpc": "2.0", "id": 1, "result": None}
    assert again == {"jsonrpc": "2.0", "id": 1, "result": None}  # idempotent
    assert await env.config_count() == 0


async def test_list_configs_honours_page_size(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    for n in range(5):
        await client.create_task_push_notification_config(
            push_config(env.url(f"/h{n}"), task_id=task.id, config_id=f"c{n}")
        )
    seen: list[str] = []
    page_token = ""
    for _ in range(5):
        page = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id, page_size=2, page_token=page_token)
        )
        assert len(page.configs) <= 2
        seen += [c.id for c in page.configs]
        page_token = page.next_page_token
        if not page_token:
            break
    assert seen == ["c0", "c1", "c2", "c3", "c4"]
    everything = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert [c.id for c in everything.configs] == seen and everything.next_page_token == ""
    with pytest.raises(InvalidParamsError, match="pageToken"):
        await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id, page_size=2, page_token="nope")
        )
