"""The A2A request handler: the SDK's abstract ``RequestHandler`` implemented over the todo store.

Why not ``DefaultRequestHandler``: it runs an ``AgentExecutor`` in-process and pushes inline from the
task's event loop. Here a task is a todo that a worker endpoint claims over MCP, possibly on another
instance, hours later; the queue is the ledger, and push runs from the transition hook and the durable
outbox. The SDK's JSON-RPC routes and dispatchers (v1.0 and v0.3 method names) are used as they are.

Every method authorizes first: the task must be the caller's (the endpoint that sent the message), and
any other id, another endpoint's included, is answered exactly like an unknown one (-32001).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Final, TypeVar

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf.json_format import MessageToDict

from switchboard.a2a import errors
from switchboard.a2a.config_types import ConfigInput
from switchboard.a2a.configs import ConfigStore, parse_config
from switchboard.a2a.errors import ConfigRefused
from switchboard.a2a.fanout import writes_task
from switchboard.a2a.gate import caller
from switchboard.a2a.settings import default_queue
from switchboard.a2a.stream import SCOPE_KEY as SSE_IDS_KEY
from switchboard.a2a.stream import EventIds, events_of, is_terminal, last_event_id
from switchboard.a2a.tasks import A2A_KIND, A2A_SOURCE, SendIntent, TaskStore
from switchboard.a2a.turns import Turns
from switchboard.a2a.views import (
    STATUSES_OF_STATE,
    TERMINAL_STATUSES,
    TaskRecord,
    config_view,
    message_to_json,
    state_name,
    task_view,
)
from switchboard.a2a.waiter import TaskWaiter
from switchboard.ids import looks_like, new_id
from switchboard.obs.logs import get_logger
from switchboard.push import Validator
from switchboard.services import Services
from switchboard.store.accounts import QUEUE, SLUG, Endpoint
from switchboard.store.errors import Conflict, StoreUnavailable
from switchboard.store.todos import NewTodo
from switchboard.text import storable, summary

log = get_logger("switchboard.a2a")

_CONTEXT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
MAX_MESSAGE_ID: Final = 255
# Interrupted states a ListTasks filter may name: input-required (a worker's MCP ask) matches the
# tasks waiting for their sender; auth-required and rejected are valid and match nothing.
INTERRUPTED_STATES: Final = frozenset(
    {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED, TaskState.TASK_STATE_REJECTED}
)
DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 100
_CODES: Final[dict[type[A2AError], str]] = {
    TaskNotFoundError: "task_not_found",
    TaskNotCancelableError: "not_cancelable",
    PushNotificationNotSupportedError: "push_not_supported",
    UnsupportedOperationError: "unsupported",
    InvalidParamsError: "invalid_params",
    ExtendedAgentCardNotConfiguredError: "unsupported",
    InternalError: "internal",
}

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def surface(func: F) -> F:
    """Count every call by method and result code, and turn what is not an A2A error into one whose
    message is safe to show (the SDK would otherwise put ``str(exc)`` in the response)."""

    @functools.wraps(func)
    async def wrapper(self: Handler, params: Any, context: ServerCallContext) -> Any:
        method = str(context.state.get("method", func.__name__))
        try:
            if params is not None:
                validate_proto_required_fields(params)
            result = await func(self, params, context)
        except ConfigRefused as err:
            self._count(method, err.reason)
            raise errors.invalid(err.message) from None
        except A2AError as err:
            self._count(method, _CODES.get(type(err), "error"))
            raise
        except StoreUnavailable:
            self._count(method, "unavailable")
            raise errors.unavailable() from None
        except Exception as exc:
            self._count(method, "internal")
            log.error("a2a call crashed", method=method, error_type=type(exc).__name__)
            raise errors.internal() from None
        self._count(method, "ok")
        return result

    return wrapper  # type: ignore[return-value]


class Handler(RequestHandler):
    def __init__(
        self,
        services: Services,
        *,
        tasks: TaskStore,
        configs: ConfigStore,
        validator: Validator,
        push_enabled: bool,
        ceiling: int,
    ) -> None:
        self.services = services
        self.tasks, self.configs, self.validator = tasks, configs, validator
        self.push_enabled = push_enabled
        self.ceiling = ceiling
        self.waiter: TaskWaiter | None = None  # set by the component
        self.turns: Turns | None = None  # set by the component (input-required and back)
        self.send_wait = 0.0  # SWITCHBOARD_A2A_SEND_WAIT_SECONDS

    def _count(self, method: str, code: str) -> None:
        from switchboard.a2a.auth import METHOD_VERBS

        label = method if method in METHOD_VERBS else "unknown"
        self.services.metrics.a2a_calls.labels(label, code).inc()

    async def _own(self, endpoint: Endpoint, task_id: str) -> TaskRecord:
        record = await self.tasks.get(endpoint.id, task_id) if looks_like("td", task_id) else None
        if record is None:
            raise errors.task_not_found()
        return record

    # -- tasks -------------------------------------------------------------------------------------

    @surface
    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        endpoint = caller(context)
        record = await self._send(endpoint, params)
        return await self._answer(endpoint, record, params)

    async def _send(self, endpoint: Endpoint, params: SendMessageRequest) -> TaskRecord:
        """Create the message's task, or find the one a resend of the same messageId created."""
        message = params.message
        _history(params.configuration.history_length, params.configuration.HasField("history_length"))
        if not message.parts:
            raise errors.invalid("message.parts must not be empty")
        if len(message.message_id) > MAX_MESSAGE_ID:
            raise errors.invalid(f"message.messageId must be at most {MAX_MESSAGE_ID} characters")
        if message.task_id:
            return await self._follow_up(endpoint, message)
        first = await self._resent(endpoint, message.message_id)
        if first is not None:  # a resend (a retry after a timeout, say): the first task, not a new one
            return first
        meta = {**MessageToDict(params.metadata), **MessageToDict(message.metadata)}
        queue, target = await self._target(endpoint, meta)
        inline = await self._inline_config(params)
        context_id = message.context_id or new_id("ctx")
        if not _CONTEXT_ID.fullmatch(context_id):
            raise errors.invalid("message.contextId must be 1-128 letters, digits, '.', '_', ':' or '-'")
        stored = Message()
        stored.CopyFrom(message)
        stored.context_id = context_id
        stored_json = storable(message_to_json(stored))
        intent = SendIntent(endpoint.id, context_id, stored_json, inline, message.message_id or None)
        todo = NewTodo(
            endpoint_id=target.id,
            queue=queue,
            title=_title(message, endpoint.slug),
            payload={
                "a2a": {
                    "from": endpoint.slug,
                    "context_id": context_id,
                    "message": json.loads(stored_json),
                }
            },
            kind=A2A_KIND,
            source=A2A_SOURCE,
            verified=True,  # an authenticated endpoint sent it: the worker's doorbell may ring
        )
        try:
            created = await self.services.todos.create(
                [todo], in_transaction=writes_task(self.configs, intent)
            )
        except Conflict:
            # The same messageId sent twice at once: the other call's task committed first (the
            # unique (owner, messageId) index refused this one; nothing of it is stored).
            again = await self._resent(endpoint, message.message_id)
            if again is None:
                raise
            return again
        return await self._own(endpoint, created.created[0])

    async def _follow_up(self, endpoint: Endpoint, message: Message) -> TaskRecord:
        """A follow-up turn: appended to the caller's task (history and the todo's payload)."""
        record = await self._own(endpoint, message.task_id)
        if message.context_id and message.context_id != record.context_id:
            raise errors.invalid("message.contextId must be the task's contextId")
        stored = Message()
        stored.CopyFrom(message)
        stored.context_id = record.context_id
        outcome = await self.tasks.append_followup(
            endpoint.id,
            record.id,
            json.loads(storable(message_to_json(stored))),
            TERMINAL_STATUSES,
            on_answer=self.turns.answered(record.id) if self.turns is not None else None,
        )
        if outcome == "appended" and self.turns is not None:
            self.turns.committed(record.id)
        if outcome == "missing":
            raise errors.task_not_found()
        if outcome == "terminal":
            raise errors.unsupported(
                f"the task is {state_name(record.status)} and accepts no more messages: send a new "
                "message (with the same contextId to continue the conversation)"
            )
        return await self._own(endpoint, record.id)

    async def _resent(self, endpoint: Endpoint, message_id: str) -> TaskRecord | None:
        return await self.tasks.by_message_id(endpoint.id, message_id) if message_id else None

    async def _answer(self, endpoint: Endpoint, record: TaskRecord, params: SendMessageRequest) -> Task:
        if not params.configuration.return_immediately and self.waiter is not None and self.send_wait > 0:
            # v1.0: wait until the task is terminal or interrupted, at most send_wait (waiter.py). The
            # task exists now: a database outage while waiting answers with it as created, never with
            # an error that would make the caller send it again.
            with contextlib.suppress(StoreUnavailable):
                record = await self.waiter.wait(endpoint.id, record.id, self.send_wait) or record
        return task_view(
            record,
            history=_history(
                params.configuration.history_length, params.configuration.HasField("history_length")
            ),
        )

    async def _target(self, sender: Endpoint, meta: dict[str, Any]) -> tuple[str, Endpoint]:
        """The queue the message names and the endpoint that will work it (docs/a2a.md, "Sending")."""
        queue = meta.get("queue")
        if queue is None:  # a generic A2A client: the sender's default A2A queue (settings.py)
            queue = await default_queue(self.services, sender)
            if queue is None:
                raise errors.invalid(
                    "message.metadata.queue is missing and this endpoint has no default A2A queue"
                )
        if not isinstance(queue, str) or not QUEUE.fullmatch(queue):
            raise errors.invalid(
                "message.metadata.queue must name a queue (lower-case letters, digits, '.', '_' or '-')"
            )
        slug = meta.get("endpoint")
        if slug is not None:
            if not isinstance(slug, str) or not SLUG.fullmatch(slug):
                raise errors.invalid("message.metadata.endpoint must be an endpoint slug")
            target = await self.services.accounts.endpoint_by_slug(slug)
            if target is None or target.human_id != sender.human_id:
                raise errors.invalid("no endpoint of yours by that name")
            if queue not in target.queues:
                raise errors.invalid("that endpoint does not drain that queue")
            return queue, target
        drains = [
            e for e in await self.services.accounts.list_endpoints(sender.human_id) if queue in e.queues
        ]
        if not drains:
            raise errors.invalid("none of your endpoints drains that queue")
        if len(drains) > 1:
            raise errors.invalid(
                "several of your endpoints drain that queue: name one in message.metadata.endpoint"
            )
        return queue, drains[0]

    async def _inline_config(self, params: SendMessageRequest) -> ConfigInput | None:
        if not params.configuration.HasField("task_push_notification_config"):
            return None
        if not self.push_enabled:
            raise errors.push_not_supported()
        if self.ceiling < 1:
            raise errors.ceiling_exceeded(self.ceiling)
        item = await _parse(
            self.validator, params.configuration.task_push_notification_config, allow_mint=False
        )
        if item.keeps:
            raise errors.invalid(
                "an inline config cannot carry the '[redacted]' placeholder: there is no stored config "
                "to keep a value of; send the real value"
            )
        return item

    @surface
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        if params.HasField("history_length") and params.history_length < 0:
            raise errors.invalid("historyLength must not be negative")
        record = await self._own(caller(context), params.id)
        return task_view(record, history=_history(params.history_length, params.HasField("history_length")))

    @surface
    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        endpoint = caller(context)
        size = params.page_size if params.HasField("page_size") else DEFAULT_PAGE
        if not 1 <= size <= MAX_PAGE:
            raise errors.invalid(f"pageSize must be between 1 and {MAX_PAGE}")
        if params.page_token and not looks_like("td", params.page_token):
            raise errors.invalid("pageToken must be a nextPageToken from a previous ListTasks")
        if params.HasField("history_length") and params.history_length < 0:
            raise errors.invalid("historyLength must not be negative")
        statuses = None
        asking: bool | None = None
        if params.status:
            if params.status not in STATUSES_OF_STATE and params.status not in INTERRUPTED_STATES:
                raise errors.invalid("status must be a task state")
            statuses = STATUSES_OF_STATE.get(params.status, ())
            if params.status == TaskState.TASK_STATE_INPUT_REQUIRED:
                statuses, asking = ("claimed",), True  # held, and the worker asked (MCP ask)
            elif params.status == TaskState.TASK_STATE_WORKING:
                asking = False
        after = None
        if params.HasField("status_timestamp_after"):
            after = params.status_timestamp_after.ToMilliseconds()
        records, total = await self.tasks.page(
            endpoint.id,
            context_id=params.context_id or None,
            statuses=statuses,
            updated_after_ms=after,
            before=params.page_token or None,
            limit=size,
            input_required=asking,
        )
        history = _history(params.history_length, params.HasField("history_length"))
        return ListTasksResponse(
            tasks=[task_view(r, history=history) for r in records],
            next_page_token=records[-1].id if len(records) == size else "",
            page_size=size,
            total_size=total,
        )

    @surface
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        endpoint = caller(context)
        record = await self._own(endpoint, params.id)
        if record.status in TERMINAL_STATUSES or record.endpoint_id is None:
            raise errors.not_cancelable(state_name(record.status))
        moved = await self.services.todos.cancel(record.endpoint_id, record.id)
        record = await self._own(endpoint, params.id)
        if moved is None:
            raise errors.not_cancelable(state_name(record.status))
        return task_view(record)

    # -- streaming (stream.py) ---------------------------------------------------------------------

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task (created, or found again by messageId), then its transitions until terminal."""
        record = await self._open_send(params, context)
        async for event in self._follow(context, record, None):
            yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task as it stands, then its transitions; with ``Last-Event-ID``, the transitions after
        that sequence number instead (a resumed stream)."""
        record, after = await self._open_subscribe(params, context)
        async for event in self._follow(context, record, after):
            yield event

    @surface
    async def _open_send(self, params: SendMessageRequest, context: ServerCallContext) -> TaskRecord:
        return await self._send(caller(context), params)

    @surface
    async def _open_subscribe(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> tuple[TaskRecord, int | None]:
        record = await self._own(caller(context), params.id)
        after = last_event_id(context.state.get("headers"))
        if after is None and record.status in TERMINAL_STATUSES:
            # A2A §3.1.6: subscribing to a task in a terminal state is an error. A resumed stream
            # (Last-Event-ID) still gets the tail it missed.
            raise errors.unsupported(f"the task is {state_name(record.status)}: nothing left to stream")
        return record, after

    async def _follow(
        self, context: ServerCallContext, record: TaskRecord, after: int | None
    ) -> AsyncGenerator[Event]:
        ids = context.state.get(SSE_IDS_KEY)
        ids = ids if isinstance(ids, EventIds) else EventIds()
        if after is None:
            ids.add(record.last_seq)
            yield task_view(record)
            if record.status in TERMINAL_STATUSES:
                return
            after = record.last_seq
        assert self.waiter is not None
        with self.waiter.watching(record.id) as changed:
            while True:
                changed.clear()  # before the read: a commit after it sets the event again
                rows = await self.tasks.events_after(record.id, after)
                for seq, body in rows:
                    events = events_of(body)
                    for index, event in enumerate(events):
                        ids.add(seq if index == len(events) - 1 else None)
                        yield event
                        if is_terminal(event):
                            return
                    after = seq
                if rows:
                    continue
                if self.waiter.closed:
                    return
                await self.waiter.until(changed)

    @surface
    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError("there is no extended agent card")

    # -- push notification configs -----------------------------------------------------------------

    async def _config_task(self, context: ServerCallContext, task_id: str) -> Endpoint:
        """Push must be on (-32003 otherwise, A2A §3.3.4), and the task must be the caller's, checked
        before any config is read (§13.1)."""
        if not self.push_enabled:
            raise errors.push_not_supported()
        endpoint = caller(context)
        await self._own(endpoint, task_id)
        return endpoint

    @surface
    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        endpoint = await self._config_task(context, params.task_id)
        if self.ceiling < 1:
            raise errors.ceiling_exceeded(self.ceiling)
        item = await _parse(self.validator, params, allow_mint=True)
        view = await self.configs.upsert(endpoint.id, params.task_id, item, self.ceiling)
        if view is None:
            raise errors.task_not_found()
        log.info(
            "a2a push config stored",
            endpoint_id=endpoint.id,
            task_id=params.task_id,
            config=view.config_id,
            host=item.host,
        )
        return config_view(view, reveal=item.credentials if item.minted else None)

    @surface
    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        endpoint = await self._config_task(context, params.task_id)
        view = await self.configs.get(endpoint.id, params.task_id, params.id)
        if view is None:
            raise errors.task_not_found(errors.CONFIG_NOT_FOUND)
        return config_view(view)

    @surface
    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        endpoint = await self._config_task(context, params.task_id)
        if params.page_size < 0 or params.page_size > MAX_PAGE:
            raise errors.invalid(f"pageSize must be between 1 and {MAX_PAGE} (0 or unset: all)")
        views = await self.configs.list_for_task(endpoint.id, params.task_id)
        start = 0
        if params.page_token:
            ids = [v.config_id for v in views]
            if params.page_token not in ids:
                raise errors.invalid(
                    "pageToken must be a nextPageToken from a previous ListTaskPushNotificationConfigs"
                )
            start = ids.index(params.page_token) + 1
        size = params.page_size or len(views)
        page = views[start : start + size]
        more = start + size < len(views)
        return ListTaskPushNotificationConfigsResponse(
            configs=[config_view(v) for v in page],
            next_page_token=page[-1].config_id if more and page else "",
        )

    @surface
    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        endpoint = await self._config_task(context, params.task_id)
        if await self.configs.delete(endpoint.id, params.task_id, params.id):
            log.info(
                "a2a push config deleted", endpoint_id=endpoint.id, task_id=params.task_id, config=params.id
            )


async def _parse(
    validator: Validator, params: TaskPushNotificationConfig, *, allow_mint: bool
) -> ConfigInput:
    auth = params.authentication if params.HasField("authentication") else None
    return await parse_config(
        validator,
        config_id=params.id,
        url=params.url,
        token=params.token,
        scheme=auth.scheme if auth is not None else None,
        credentials=auth.credentials if auth is not None else "",
        allow_mint=allow_mint,
    )


def _history(length: int, present: bool) -> int | None:
    """``historyLength``: the most recent N messages (0: none); unset: all."""
    if present and length < 0:
        raise errors.invalid("historyLength must not be negative")
    return length if present else None


def _title(message: Message, sender_slug: str) -> str:
    text = " ".join(part.text for part in message.parts if part.text)
    title = summary(text) if text else ""
    return title or f"A2A message from {sender_slug}"
