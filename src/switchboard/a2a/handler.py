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

from switchboard.a2a import errors
from switchboard.a2a.config_calls import MAX_PAGE, ConfigCalls
from switchboard.a2a.configs import ConfigStore
from switchboard.a2a.errors import ConfigRefused
from switchboard.a2a.gate import caller
from switchboard.a2a.send import Sender, history_length
from switchboard.a2a.stream import SCOPE_KEY as SSE_IDS_KEY
from switchboard.a2a.stream import EventIds, events_of, is_terminal, last_event_id
from switchboard.a2a.tasks import TaskStore
from switchboard.a2a.turns import Turns
from switchboard.a2a.views import (
    STATUSES_OF_STATE,
    TERMINAL_STATUSES,
    TaskRecord,
    state_name,
    task_view,
)
from switchboard.a2a.waiter import TaskWaiter
from switchboard.core.ids import looks_like
from switchboard.obs.logs import get_logger
from switchboard.push import Validator
from switchboard.services import Services
from switchboard.store.accounts import Endpoint
from switchboard.store.errors import StoreUnavailable

log = get_logger("switchboard.a2a")

# Interrupted states a ListTasks filter may name: input-required (a worker's MCP ask) matches the
# tasks waiting for their sender; auth-required and rejected are valid and match nothing.
INTERRUPTED_STATES: Final = frozenset(
    {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED, TaskState.TASK_STATE_REJECTED}
)
DEFAULT_PAGE: Final = 50
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
        self.tasks, self.configs = tasks, configs
        self.calls = ConfigCalls(
            configs=configs, validator=validator, push_enabled=push_enabled, ceiling=ceiling, own=self._own
        )
        self.sender = Sender(services, tasks=tasks, configs=configs, calls=self.calls, own=self._own)
        self.waiter: TaskWaiter | None = None  # set by the component
        self.send_wait = 0.0  # SWITCHBOARD_A2A_SEND_WAIT_SECONDS

    @property
    def turns(self) -> Turns | None:
        """Set by the component (input-required and back); a follow-up turn answers the worker's ask."""
        return self.sender.turns

    @turns.setter
    def turns(self, turns: Turns | None) -> None:
        self.sender.turns = turns

    def _count(self, method: str, code: str) -> None:
        from switchboard.a2a.auth import METHOD_VERBS

        label = method if method in METHOD_VERBS else "unknown"
        self.services.metrics.a2a_calls.labels(label, code).inc()

    async def _own(self, endpoint: Endpoint, task_id: str) -> TaskRecord:
        record = await self.tasks.get(endpoint.id, task_id) if looks_like("td", task_id) else None
        if record is None:
            raise errors.task_not_found()
        return record

    async def own(self, endpoint: Endpoint, task_id: str) -> TaskRecord:
        """The caller's task, or ``task_not_found`` (unknown and another endpoint's alike): the read
        every face of a task uses (GetTask, and MCP's ``tasks/*``, a2a/mcp_tasks.py)."""
        return await self._own(endpoint, task_id)

    async def cancel(self, endpoint: Endpoint, task_id: str) -> TaskRecord:
        """Cancel the caller's task: CancelTask's operation, shared with MCP's ``tasks/cancel``. The
        todo is canceled under any claim, so its holder's next heartbeat or ack answers ``canceled``.
        ``not_cancelable`` when it is already terminal."""
        record = await self._own(endpoint, task_id)
        if record.status in TERMINAL_STATUSES or record.endpoint_id is None:
            raise errors.not_cancelable(state_name(record.status))
        moved = await self.services.todos.cancel(record.endpoint_id, record.id)
        record = await self._own(endpoint, task_id)
        if moved is None:
            raise errors.not_cancelable(state_name(record.status))
        return record

    # -- tasks -------------------------------------------------------------------------------------

    @surface
    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        endpoint = caller(context)
        record = await self.sender.send(endpoint, params)
        return await self._answer(endpoint, record, params)

    async def _answer(self, endpoint: Endpoint, record: TaskRecord, params: SendMessageRequest) -> Task:
        if not params.configuration.return_immediately and self.waiter is not None and self.send_wait > 0:
            # v1.0: wait until the task is terminal or interrupted, at most send_wait (waiter.py). The
            # task exists now: a database outage while waiting answers with it as created, never with
            # an error that would make the caller send it again.
            with contextlib.suppress(StoreUnavailable):
                record = await self.waiter.wait(endpoint.id, record.id, self.send_wait) or record
        return task_view(
            record,
            history=history_length(
                params.configuration.history_length, params.configuration.HasField("history_length")
            ),
        )

    @surface
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        if params.HasField("history_length") and params.history_length < 0:
            raise errors.invalid("historyLength must not be negative")
        record = await self._own(caller(context), params.id)
        return task_view(
            record, history=history_length(params.history_length, params.HasField("history_length"))
        )

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
        history = history_length(params.history_length, params.HasField("history_length"))
        return ListTasksResponse(
            tasks=[task_view(r, history=history) for r in records],
            next_page_token=records[-1].id if len(records) == size else "",
            page_size=size,
            total_size=total,
        )

    @surface
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        return task_view(await self.cancel(caller(context), params.id))

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
        return await self.sender.send(caller(context), params)

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

    # -- push notification configs (config_calls.py) ------------------------------------------------

    @surface
    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        return await self.calls.create(params, context)

    @surface
    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        return await self.calls.get(params, context)

    @surface
    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        return await self.calls.listing(params, context)

    @surface
    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        await self.calls.delete(params, context)
