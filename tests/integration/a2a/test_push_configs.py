"""The four PushNotificationConfig operations: authorized like the task, redacted on read, capped per
task, refused with a clear error (and nothing stored) when the input or the target is bad."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.types.a2a_pb2 import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
)
from a2a.utils.errors import InvalidParamsError, PushNotificationNotSupportedError, TaskNotFoundError

from tests.integration.a2a.conftest import Env, a2a_env, message, push_config, send
from tests.support.receivers import StaticResolver
from tests.support.secrets import reveal

TOKEN = "tok-config-crud-secret-55"


def _get(task_id: str, config_id: str) -> GetTaskPushNotificationConfigRequest:
    return GetTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)


def _list(task_id: str) -> ListTaskPushNotificationConfigsRequest:
    return ListTaskPushNotificationConfigsRequest(task_id=task_id)


def _delete(task_id: str, config_id: str) -> DeleteTaskPushNotificationConfigRequest:
    return DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)


async def test_create_get_list_delete_with_redaction(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    url = env.url("/hook?key=QUERYCANARY")

    created = await client.create_task_push_notification_config(
        push_config(url, task_id=task.id, token=TOKEN, scheme="Basic", credentials="dXNlcjpwYXNzd29yZA==")
    )
    assert created.id.startswith("pnc_") and created.task_id == task.id
    assert created.url == env.url("/hook?[redacted]")
    assert created.token == "[redacted]"
    assert (created.authentication.scheme, created.authentication.credentials) == ("Basic", "[redacted]")

    got = await client.get_task_push_notification_config(_get(task.id, created.id))
    assert got == created
    listed = await client.list_task_push_notification_configs(_list(task.id))
    assert list(listed.configs) == [created]

    await client.delete_task_push_notification_config(_delete(task.id, created.id))
    await client.delete_task_push_notification_config(_delete(task.id, created.id))  # idempotent
    with pytest.raises(TaskNotFoundError, match="push notification config not found"):
        await client.get_task_push_notification_config(_get(task.id, created.id))
    assert (await client.list_task_push_notification_configs(_list(task.id))).configs == []


async def test_create_with_the_same_id_replaces(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    await client.create_task_push_notification_config(
        push_config(env.url("/a"), task_id=task.id, config_id="x")
    )
    again = await client.create_task_push_notification_config(
        push_config(env.url("/b"), task_id=task.id, config_id="x")
    )
    assert again.url.endswith("/b")
    assert [c.url for c in (await client.list_task_push_notification_configs(_list(task.id))).configs] == [
        again.url
    ]


async def test_another_endpoints_task_or_config_is_not_found(env: Env) -> None:
    _, owner_token = await env.endpoint("owner")
    _, other_token = await env.endpoint("other")
    await env.worker()
    owner = await env.client(owner_token)
    other = await env.client(other_token)
    task = await send(owner, message())
    mine = await owner.create_task_push_notification_config(push_config(env.url(), task_id=task.id))

    calls = [
        other.create_task_push_notification_config(push_config(env.url(), task_id=task.id)),
        other.get_task_push_notification_config(_get(task.id, mine.id)),
        other.list_task_push_notification_configs(_list(task.id)),
        other.delete_task_push_notification_config(_delete(task.id, mine.id)),
    ]
    for call in calls:
        with pytest.raises(TaskNotFoundError) as caught:
            await call
        assert caught.value.message == "task not found"
    assert await env.config_count() == 1
    assert (await owner.get_task_push_notification_config(_get(task.id, mine.id))).id == mine.id


async def test_the_per_task_ceiling(tmp_path: Path) -> None:
    async with a2a_env(tmp_path, a2a_push_configs_per_task=2) as env:
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        task = await send(client, message(), push=push_config(env.url(), config_id="one"))
        await client.create_task_push_notification_config(
            push_config(env.url(), task_id=task.id, config_id="two")
        )
        with pytest.raises(InvalidParamsError, match="maximum of 2"):
            await client.create_task_push_notification_config(push_config(env.url(), task_id=task.id))
        await client.create_task_push_notification_config(  # replacing an existing one is not a new one
            push_config(env.url("/moved"), task_id=task.id, config_id="two")
        )
        assert await env.config_count() == 2


@pytest.mark.parametrize(
    ("address", "reason"),
    [("10.0.0.5", "private"), ("169.254.169.254", "link_local"), ("127.0.0.2", "loopback")],
)
async def test_a_private_target_is_refused_at_creation(env: Env, address: str, reason: str) -> None:
    env.resolver.answers["internal.example.com"] = [address]
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    with pytest.raises(InvalidParamsError) as caught:
        await client.create_task_push_notification_config(
            push_config("https://internal.example.com/hook", task_id=task.id, token=TOKEN)
        )
    assert caught.value.message.startswith("url refused: push target rejected")
    # Issue 15: a tenant sees one reason for every refused address class (no internal-DNS oracle).
    assert "(address)" in caught.value.message and reason not in caught.value.message
    assert TOKEN not in str(caught.value) and "internal.example.com" not in caught.value.message
    assert await env.config_count() == 0


async def test_an_inline_config_with_a_refused_target_stores_no_task(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    with pytest.raises(InvalidParamsError, match=r"url refused: push target rejected \(scheme\)"):
        await send(client, message(), push=push_config("http://hooks.test/plain-http"))
    assert await env.todo_count() == 0


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"url": ""}, "url"),
        ({"token": "line\r\nbreak"}, "token must be"),
        ({"scheme": "Bearer"}, "credentials is required"),
        ({"scheme": "Bad Scheme", "credentials": "x"}, "authentication.scheme"),
        ({"scheme": "StandardWebhooks", "credentials": "whsec_" + "ab" * 32}, "whsec_"),
        ({"config_id": "no spaces please"}, "id must be"),
    ],
)
async def test_bad_config_fields_are_refused_and_nothing_is_stored(
    env: Env, fields: dict[str, str], expected: str
) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    url = fields.pop("url", env.url())
    with pytest.raises(InvalidParamsError) as caught:
        await client.create_task_push_notification_config(push_config(url, task_id=task.id, **fields))
    assert expected in f"{caught.value.message} {caught.value.data}"  # a missing url: the SDK's field list
    assert await env.config_count() == 0


async def test_push_disabled_by_configuration_turns_the_card_flag_and_the_operations_off(
    tmp_path: Path,
) -> None:
    """The card may only promise webhooks when delivery runs."""
    async with a2a_env(tmp_path, a2a_push_enabled=False) as env:
        async with httpx.AsyncClient() as http:
            card = await A2ACardResolver(http, env.inst.base_url).get_agent_card()
        assert card.capabilities.push_notifications is False
        assert card.capabilities.push_notifications == env.a2a.push_enabled
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        with pytest.raises(PushNotificationNotSupportedError):
            await send(client, message(), push=push_config(env.url()))
        assert await env.todo_count() == 0  # the inline config is refused too, and nothing is stored
        task = await send(client, message())
        for call in (
            client.create_task_push_notification_config(push_config(env.url(), task_id=task.id)),
            client.get_task_push_notification_config(_get(task.id, "x")),
            client.list_task_push_notification_configs(_list(task.id)),
            client.delete_task_push_notification_config(_delete(task.id, "x")),
        ):
            with pytest.raises(PushNotificationNotSupportedError):
                await call


async def test_push_enabled_means_delivery_runs(env: Env) -> None:
    """The other half of the card rule: the flag is on, so the worker must be running."""
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, env.inst.base_url).get_agent_card()
    assert card.capabilities.push_notifications is True
    assert env.a2a.worker._loop is not None and not env.a2a.worker._loop.done()


async def test_a_minted_signing_secret_is_shown_once(tmp_path: Path) -> None:
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"]})
    async with a2a_env(tmp_path, resolver=resolver) as env:
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        task = await send(client, message())
        created = await client.create_task_push_notification_config(
            push_config(env.url(), task_id=task.id, scheme="standardwebhooks")
        )
        reveal(created.authentication.credentials)
        assert created.authentication.scheme == "StandardWebhooks"
        assert created.authentication.credentials.startswith("whsec_")
        (listed,) = (await client.list_task_push_notification_configs(_list(task.id))).configs
        assert listed.authentication.credentials == "[redacted]"


async def test_v03_config_methods_and_no_value_echoed_in_their_errors(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    task = await send(await env.client(token), message())
    leaked = "tok-v03-never-echoed-19"
    reveal(leaked)
    url = f"{env.inst.base_url}/a2a"

    def call(method: str, params: dict[str, object]) -> dict[str, object]:
        return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:  # v0.3: no version
        stored = await http.post(
            url,
            json=call(
                "tasks/pushNotificationConfig/set",
                {
                    "taskId": task.id,
                    "pushNotificationConfig": {"id": "old", "url": env.url(), "token": TOKEN},
                },
            ),
        )
        listed = await http.post(url, json=call("tasks/pushNotificationConfig/list", {"id": task.id}))
        bad = await http.post(
            url,
            json=call(
                "tasks/pushNotificationConfig/set",
                {"taskId": task.id, "pushNotificationConfig": {"url": env.url(), "token": [leaked]}},
            ),
        )
    assert stored.json()["result"]["pushNotificationConfig"]["token"] == "[redacted]"
    assert [c["pushNotificationConfig"]["id"] for c in listed.json()["result"]] == ["old"]
    assert "error" in bad.json() and leaked not in bad.text
    assert await env.config_count() == 1


async def test_config_operations_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    """The same rules where the ceiling's row lock is a real ``FOR UPDATE``."""
    async with a2a_env(tmp_path, database_url=pg_url, a2a_push_configs_per_task=2) as env:
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        task = await send(client, message())
        results = await asyncio.gather(
            *(
                client.create_task_push_notification_config(
                    push_config(env.url(f"/{n}"), task_id=task.id, token=TOKEN)
                )
                for n in range(4)
            ),
            return_exceptions=True,
        )
        assert sum(isinstance(r, InvalidParamsError) for r in results) == 2  # racing creates: two fit
        listed = (await client.list_task_push_notification_configs(_list(task.id))).configs
        assert len(listed) == 2 and {c.token for c in listed} == {"[redacted]"}
        await client.delete_task_push_notification_config(_delete(task.id, listed[0].id))
        assert await env.config_count() == 1
