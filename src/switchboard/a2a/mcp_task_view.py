"""A task as the MCP Tasks extension shows it (``io.modelcontextprotocol/tasks``, SEP-2663).

Built from the one :class:`~switchboard.a2a.views.TaskRecord` GetTask reads, so the MCP face and the
A2A face of a todo cannot drift apart: the same id, the same lifecycle (mcp/tasks_ext_status.py), and
the same per-task sequence, shown in ``_meta`` (``SEQ_META``).

* ``input_required``: the worker's open question (MCP ``ask``) is the ``statusMessage`` and the one
  entry of ``inputRequests``, a form elicitation with one string field, ``answer``. Its key is the
  question's A2A messageId: unique over the task's lifetime, as the extension requires.
* ``completed``: the worker's ack result as a ``CallToolResult`` (text, plus ``structuredContent``).
* ``failed`` (a dead todo): ``error`` is a JSON-RPC error object with the todo's last error.
* ``ttlMs`` is null: a task lives as long as its todo (retention deletes ended todos, and then
  ``tasks/get`` answers not found).
"""

from __future__ import annotations

import json
from typing import Any, Final

from mcp_types import INTERNAL_ERROR

from switchboard.a2a.views import TaskRecord
from switchboard.mcp.tasks_ext_status import COMPLETED, FAILED, INPUT_REQUIRED, mcp_status
from switchboard.mcp.tools import iso

SEQ_META: Final = "io.github.switchboard/seq"
CONTEXT_META: Final = "io.github.switchboard/contextId"
QUEUE_META: Final = "io.github.switchboard/queue"
POLL_INTERVAL_MS: Final = 2000
ANSWER_FIELD: Final = "answer"
FAILED_MESSAGE: Final = "the work failed and will not be retried"


def question_of(record: TaskRecord) -> tuple[str, str] | None:
    """(key, text) of the worker's open question, or None when nothing is asked."""
    raw = record.question
    if raw is None:
        return None
    message = json.loads(raw)
    text = " ".join(p["text"] for p in message.get("parts", ()) if isinstance(p.get("text"), str))
    return str(message.get("messageId") or f"ask-{record.input_required_at}"), text


def task_object(record: TaskRecord, *, detailed: bool = True) -> dict[str, Any]:
    """The extension's ``Task``; ``detailed`` adds the status's payload (``DetailedTask``: what
    ``tasks/get`` answers). ``CreateTaskResult`` is the plain one."""
    status = mcp_status(record.status, record.input_required)
    updated = max(record.updated_at, record.input_required_at or 0)
    task: dict[str, Any] = {
        "taskId": record.id,
        "status": status,
        "createdAt": iso(record.created_at),
        "lastUpdatedAt": iso(updated),
        "ttlMs": None,
        "pollIntervalMs": POLL_INTERVAL_MS,
        "_meta": {SEQ_META: record.last_seq, CONTEXT_META: record.context_id, QUEUE_META: record.queue},
    }
    if status == INPUT_REQUIRED:
        asked = question_of(record)
        if asked is not None:
            key, text = asked
            task["statusMessage"] = text
            if detailed:
                task["inputRequests"] = {key: _elicitation(text)}
    elif status == COMPLETED and detailed:
        task["result"] = tool_result(record.result)
    elif status == FAILED:
        task["statusMessage"] = record.last_error or FAILED_MESSAGE
        if detailed:
            task["error"] = {"code": INTERNAL_ERROR, "message": record.last_error or FAILED_MESSAGE}
    return task


def tool_result(result_json: str | None) -> dict[str, Any]:
    """The worker's ack result as the ``CallToolResult`` the submit_work call would have returned."""
    value = None if result_json is None else json.loads(result_json)
    if value is None:
        return {"content": [], "isError": False}
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return {"content": [{"type": "text", "text": text}], "structuredContent": value, "isError": False}


def _elicitation(question: str) -> dict[str, Any]:
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": question,
            "requestedSchema": {
                "type": "object",
                "properties": {ANSWER_FIELD: {"type": "string", "description": "Your answer to the worker"}},
                "required": [ANSWER_FIELD],
            },
        },
    }


def answer_of(response: object) -> str | None:
    """The answer text of one ``inputResponses`` entry (an accepted form elicitation), or None when
    the entry is not one (declined, cancelled, or no string ``answer``)."""
    if not isinstance(response, dict) or response.get("action") != "accept":
        return None
    content = response.get("content")
    answer = content.get(ANSWER_FIELD) if isinstance(content, dict) else None
    return answer if isinstance(answer, str) and answer else None
