"""The Authorization guard's parts: the one bearer parser every face uses, and the ASGI guard that
refuses a second header and hands a bearer one on in one spelling. End to end, against the server:
tests/conformance/test_limits_by_identity.py."""

from __future__ import annotations

import json

import pytest
from starlette.types import Message, Receive, Scope, Send

from switchboard.edge.authorization import OneAuthorization, bearer_token, bearer_value


@pytest.mark.parametrize(
    "raw",
    [b"Bearer tok", b"bearer tok", b"BEARER tok", b"BeArEr tok", b"Bearer   tok", b"  Bearer\ttok  "],
)
def test_every_spelling_of_bearer_gives_the_token(raw: bytes) -> None:
    assert bearer_value(raw) == b"tok"
    assert bearer_token(raw.decode()) == "tok"


@pytest.mark.parametrize(
    "raw", [b"", b"Bearer", b"Bearer ", b"Bearertok", b"Basic dG9r", b"Bearer a b", b"Bearer " + b"x" * 4097]
)
def test_what_is_not_one_bearer_token_gives_none(raw: bytes) -> None:
    assert bearer_value(raw) is None


async def _through(headers: list[tuple[bytes, bytes]]) -> tuple[list[Scope], list[Message]]:
    seen: list[Scope] = []
    sent: list[Message] = []

    async def app(scope: Scope, _receive: Receive, _send: Send) -> None:
        seen.append(scope)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    await OneAuthorization(app)(scope, receive, send)
    return seen, sent


async def test_two_authorization_headers_are_refused_before_the_app() -> None:
    seen, sent = await _through(
        [(b"host", b"x"), (b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")]
    )
    assert seen == []
    assert sent[0]["status"] == 400
    assert json.loads(sent[1]["body"])["error"] == "invalid_request"
    assert b"Bearer a" not in sent[1]["body"]  # no token echoed


async def test_a_bearer_header_is_handed_on_in_one_spelling() -> None:
    seen, _ = await _through([(b"host", b"x"), (b"authorization", b"  bEaReR    tok ")])
    assert seen[0]["headers"] == [(b"host", b"x"), (b"authorization", b"Bearer tok")]


async def test_another_scheme_is_handed_on_unchanged() -> None:
    seen, _ = await _through([(b"authorization", b"Basic dG9rOnNlY3JldA==")])
    assert seen[0]["headers"] == [(b"authorization", b"Basic dG9rOnNlY3JldA==")]
