"""Get-modify-set (the a2a-sdk pattern) keeps every stored secret; the placeholder is never stored; and
which header carries what (token-only configs included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskPushNotificationConfigRequest
from a2a.utils.errors import InvalidParamsError
from standardwebhooks import Webhook

from switchboard.a2a.config_types import SendableConfig
from switchboard.a2a.configs import PUSH_VERB
from switchboard.a2a.push_attempts import SCOPE_REVOKED
from tests.integration.a2a.conftest import Env, a2a_env, message, push_config, send
from tests.support.secrets import reveal

TOKEN = "tok-roundtrip-original-71"
CREDS = "bearer-roundtrip-original-93"
QUERY = "key=QUERY-ROUNDTRIP-CANARY-17"


def _get(task_id: str, config_id: str) -> GetTaskPushNotificationConfigRequest:
    return GetTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)


async def stored(env: Env, task_id: str) -> list[SendableConfig]:
    """What delivery would use: the stored values, opened."""
    async with env.services.db.read() as conn:
        rows = await env.a2a.configs.targets_in(conn, task_id)
    found = [await env.a2a.configs.sendable(row_id) for row_id, _ in rows]
    return [c for c in found if c is not None]


async def test_get_then_set_keeps_credentials_token_and_query(env: Env) -> None:
    reveal(QUERY)
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    created = await client.create_task_push_notification_config(
        push_config(
            env.url(f"/hook?{QUERY}"), task_id=task.id, token=TOKEN, scheme="Bearer", credentials=CREDS
        )
    )

    # The a2a-sdk pattern: read the config, change what you mean to, write the whole object back.
    got = await client.get_task_push_notification_config(_get(task.id, created.id))
    assert (got.token, got.authentication.credentials) == ("[redacted]", "[redacted]")
    assert got.url.endswith("/hook?[redacted]")
    written = await client.create_task_push_notification_config(got)
    assert written == got

    (sendable,) = await stored(env, task.id)
    assert "[redacted]" not in (sendable.url + (sendable.token or "") + (sendable.credentials or ""))

    await worker.ok("claim_next")
    await env.settle()
    (push,) = env.pushes()
    assert push.request.path == f"/hook?{QUERY}"
    assert push.request.header("authorization") == f"Bearer {CREDS}"
    assert push.request.header("x-a2a-notification-token") == TOKEN


async def test_a_minted_signing_secret_survives_the_round_trip(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    created = await client.create_task_push_notification_config(
        push_config(env.url(), task_id=task.id, scheme="StandardWebhooks")
    )
    secret = created.authentication.credentials
    reveal(secret)
    got = await client.get_task_push_notification_config(_get(task.id, created.id))
    await client.create_task_push_notification_config(got)

    await worker.ok("claim_next")
    await env.settle()
    (push,) = env.pushes()
    Webhook(secret).verify(push.request.body, push.request.header_map)  # raises if the secret changed


async def test_a_placeholder_with_nothing_to_keep_is_refused_and_nothing_is_stored(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    task = await send(client, message())

    refusals = [
        push_config(env.url(), task_id=task.id, token="[redacted]"),  # no id: nothing stored to keep
        push_config(env.url(), task_id=task.id, config_id="fresh", scheme="Bearer", credentials="[redacted]"),
        push_config(env.url("/hook?[redacted]"), task_id=task.id, config_id="fresh"),
    ]
    for config in refusals:
        with pytest.raises(InvalidParamsError, match="placeholder"):
            await client.create_task_push_notification_config(config)
    assert await env.config_count() == 0

    await client.create_task_push_notification_config(
        push_config(env.url("/a?x=1"), task_id=task.id, config_id="kept", scheme="Bearer", credentials=CREDS)
    )
    mismatched = [
        # The credentials stay with their scheme: a Bearer credential is not sent as Basic.
        push_config(
            env.url("/a?x=1"), task_id=task.id, config_id="kept", scheme="Basic", credentials="[redacted]"
        ),
        # A redacted query only keeps the stored URL it stands for.
        push_config(env.url("/b?[redacted]"), task_id=task.id, config_id="kept"),
        # No token stored: nothing for the placeholder to keep.
        push_config(env.url("/a?x=1"), task_id=task.id, config_id="kept", token="[redacted]"),
    ]
    for config in mismatched:
        with pytest.raises(InvalidParamsError, match="placeholder"):
            await client.create_task_push_notification_config(config)
    (sendable,) = await stored(env, task.id)
    assert (sendable.url, sendable.scheme, sendable.credentials) == (env.url("/a?x=1"), "Bearer", CREDS)


async def test_an_inline_config_with_a_placeholder_is_refused_and_no_task_is_stored(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    with pytest.raises(InvalidParamsError, match="placeholder"):
        await send(client, message(), push=push_config(env.url(), config_id="c", token="[redacted]"))
    assert await env.todo_count() == 0
    assert await env.config_count() == 0


async def test_a_token_only_config_is_delivered_as_bearer_and_in_the_sdk_header(env: Env) -> None:
    _, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    await send(client, message(), push=push_config(env.url(), token=TOKEN))
    await worker.ok("claim_next")
    await env.settle()
    pushes = env.pushes()
    assert len(pushes) == 2
    for push in pushes:
        # A2A v1.0 (PR #1793): the token is the Bearer credential; a2a-sdk receivers read the header.
        assert push.request.header("authorization") == f"Bearer {TOKEN}"
        assert push.request.header("x-a2a-notification-token") == TOKEN


async def test_authentication_wins_the_authorization_header_over_the_token(env: Env) -> None:
    _, token = await env.endpoint("client")
    await env.worker()
    client = await env.client(token)
    await send(
        client,
        message(),
        push=push_config(env.url(), token=TOKEN, scheme="Basic", credentials="dXNlcjpwYXNz"),
    )
    await env.settle()
    (push,) = env.pushes()
    assert push.request.header("authorization") == "Basic dXNlcjpwYXNz"
    assert push.request.header("x-a2a-notification-token") == TOKEN


async def test_signing_configs_carry_the_token_as_bearer(tmp_path: Path) -> None:
    async with a2a_env(tmp_path) as env:
        _, token = await env.endpoint("client")
        await env.worker()
        client = await env.client(token)
        task = await send(client, message())
        created = await client.create_task_push_notification_config(
            push_config(env.url(), task_id=task.id, token=TOKEN, scheme="StandardWebhooks")
        )
        reveal(created.authentication.credentials)
        await client.cancel_task(CancelTaskRequest(id=task.id))
        await env.settle()
        (push,) = env.pushes()
        assert push.request.header("authorization") == f"Bearer {TOKEN}"
        assert push.request.header("webhook-signature")
        assert json.loads(push.request.body)["task"]["id"] == task.id


async def test_a_config_whose_owner_lost_the_push_verb_gets_no_attempt(env: Env) -> None:
    """The grant is read with the config, right before each attempt (docs/a2a.md): once the owner's
    endpoint no longer holds ``a2a_push_config``, nothing goes out and the delivery ends as revoked."""
    client_endpoint, token = await env.endpoint("client")
    worker = await env.worker()
    client = await env.client(token)
    task = await send(client, message())
    await client.create_task_push_notification_config(push_config(env.url("/hook"), task_id=task.id))
    (before,) = await stored(env, task.id)
    assert before.granted

    kept = [v for v in client_endpoint.verbs if v != PUSH_VERB]
    assert len(kept) == len(client_endpoint.verbs) - 1
    await env.services.accounts.set_scope(client_endpoint.id, verbs=kept)
    (after,) = await stored(env, task.id)
    assert not after.granted

    await worker.ok("claim_next")
    await env.settle()
    assert env.pushes() == []
    assert env.metric("switchboard_a2a_push_deliveries_total", outcome=SCOPE_REVOKED) == 1
