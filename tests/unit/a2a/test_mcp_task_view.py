"""The MCP Tasks face of one TaskRecord (a2a/mcp_task_view.py) and the SendMessage submit_work stands
for (a2a/submit.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from a2a.types.a2a_pb2 import Role
from a2a.utils.errors import InternalError, InvalidParamsError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from switchboard.a2a.mcp_task_view import (
    FAILED_MESSAGE,
    SEQ_META,
    answer_of,
    question_of,
    task_object,
    tool_result,
)
from switchboard.a2a.submit import send_request, submit_result, verb_error
from switchboard.a2a.views import TaskRecord
from switchboard.core.verbs import ALL_VERBS, DEFAULT_GRANT, METHOD_GRANTS

QUESTION = {"messageId": "ask-1f", "role": "ROLE_AGENT", "parts": [{"text": "Which branch?"}]}
RECORD = TaskRecord(
    id="td_01JABCDEFGHJKMNPQRSTVWXYZ0",
    context_id="ctx-1",
    owner_endpoint_id="ep_producer",
    endpoint_id="ep_worker",
    queue="inbox",
    status="pending",
    message=json.dumps({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "deploy"}]}),
    result=None,
    last_error=None,
    last_seq=1,
    created_at=1_765_000_000_000,
    updated_at=1_765_000_000_500,
)


def test_a_queued_task_is_working_with_its_id_times_and_sequence() -> None:
    task = task_object(RECORD)
    assert task["taskId"] == RECORD.id and task["status"] == "working"
    assert task["createdAt"] == "2025-12-06T05:46:40.000Z"
    assert task["lastUpdatedAt"] == "2025-12-06T05:46:40.500Z"
    assert task["ttlMs"] is None and task["pollIntervalMs"] > 0
    assert task["_meta"][SEQ_META] == 1
    assert not {"result", "error", "inputRequests", "statusMessage"} & set(task)


def asking(*, question: dict[str, Any] = QUESTION) -> TaskRecord:
    return replace(
        RECORD,
        status="claimed",
        followups=json.dumps(
            [{"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "hi"}]}, question]
        ),
        input_required_at=RECORD.updated_at + 1000,
        last_seq=3,
    )


def test_an_open_question_is_input_required_keyed_by_its_message_id() -> None:
    record = asking()
    assert question_of(record) == ("ask-1f", "Which branch?")
    task = task_object(record)
    assert task["status"] == "input_required" and task["statusMessage"] == "Which branch?"
    assert task["lastUpdatedAt"] == "2025-12-06T05:46:41.500Z"  # the ask moved it
    (key, request) = next(iter(task["inputRequests"].items()))
    assert key == "ask-1f" and request["method"] == "elicitation/create"
    assert request["params"]["requestedSchema"]["required"] == ["answer"]
    assert "inputRequests" not in task_object(record, detailed=False)  # CreateTaskResult: plain


def test_an_answered_question_is_no_longer_asked() -> None:
    record = replace(asking(), input_required_at=None)
    assert question_of(record) is None
    assert task_object(record)["status"] == "working"


@pytest.mark.parametrize(
    ("result", "text", "structured"),
    [('{"ok":true}', '{"ok":true}', {"ok": True}), ('"shipped"', "shipped", "shipped")],
)
def test_a_done_todo_is_completed_with_the_ack_result(result: str, text: str, structured: Any) -> None:
    task = task_object(replace(RECORD, status="done", result=result))
    assert task["status"] == "completed"
    assert task["result"] == {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": False,
    }
    assert "result" not in task_object(replace(RECORD, status="done", result=result), detailed=False)


def test_an_ack_without_a_result_is_an_empty_tool_result() -> None:
    assert tool_result(None) == {"content": [], "isError": False}
    assert tool_result("null") == {"content": [], "isError": False}


def test_a_dead_todo_is_failed_with_a_json_rpc_error() -> None:
    task = task_object(replace(RECORD, status="dead", last_error="disk full"))
    assert task["status"] == "failed" and task["statusMessage"] == "disk full"
    assert task["error"] == {"code": -32603, "message": "disk full"}
    assert task_object(replace(RECORD, status="dead"))["error"]["message"] == FAILED_MESSAGE


def test_a_canceled_todo_is_cancelled() -> None:
    assert task_object(replace(RECORD, status="canceled"))["status"] == "cancelled"


@pytest.mark.parametrize(
    ("response", "want"),
    [
        ({"action": "accept", "content": {"answer": "release-7"}}, "release-7"),
        ({"action": "accept", "content": {"answer": ""}}, None),
        ({"action": "accept", "content": {"answer": 7}}, None),
        ({"action": "accept"}, None),
        ({"action": "decline"}, None),
        ("release-7", None),
    ],
)
def test_only_an_accepted_string_answer_is_an_answer(response: object, want: str | None) -> None:
    assert answer_of(response) == want


def test_submit_work_is_a_send_message_with_the_queue_and_endpoint_as_metadata() -> None:
    request = send_request("deploy\x00 it", "inbox", "worker", "m-1", "ctx-9")
    message = request.message
    assert message.message_id == "m-1" and message.context_id == "ctx-9" and not message.task_id
    assert message.role == Role.ROLE_USER
    assert message.parts[0].text == "deploy\ufffd it"  # storable: no NUL reaches a text column
    assert MessageToDict(message.metadata) == {"queue": "inbox", "endpoint": "worker"}
    assert request.configuration.return_immediately


def test_submit_work_without_ids_gets_a_fresh_message_id_and_no_metadata() -> None:
    one, two = send_request("x", None, None, None, None), send_request("x", None, None, None, None)
    assert one.message.message_id.startswith("mcp-") and one.message.message_id != two.message.message_id
    assert MessageToDict(one.message.metadata) == {} and one.message.context_id == ""


def test_submit_result_and_error_vocabulary() -> None:
    assert submit_result(asking()) == {
        "task_id": RECORD.id,
        "context_id": "ctx-1",
        "queue": "inbox",
        "status": "input_required",
        "seq": 3,
    }
    assert verb_error(TaskNotFoundError("task not found")).code == "not_found"
    assert verb_error(InternalError("down")).code == "unavailable"
    refused = verb_error(InvalidParamsError("message.metadata.queue must name a queue"))
    assert refused.code == "invalid_argument" and "metadata.queue" in refused.message


def test_submit_work_and_the_task_methods_need_a_grant_outside_the_default() -> None:
    assert "submit_work" in ALL_VERBS and "submit_work" not in DEFAULT_GRANT
    assert set(METHOD_GRANTS) == {"tasks/get", "tasks/update", "tasks/cancel"}
    assert set(METHOD_GRANTS.values()) == {"submit_work"}
