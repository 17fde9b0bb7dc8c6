"""The A2A surface as a server component: routes, the transition-hook stages, and the delivery worker.

Wiring, and why:

* ``POST /a2a``: the SDK's JSON-RPC route (``create_jsonrpc_routes``, v1.0 and v0.3 method names) behind
  :class:`~switchboard.a2a.gate.Gate`; ``GET /.well-known/agent-card.json``: the SDK's card route.
* In-transaction stage of the transition hook: :class:`~switchboard.a2a.fanout.Fanout` (task rows,
  sequence numbers, outbox rows). Post-commit stage: wake the worker.
* A2A push has its own allowlist (``SWITCHBOARD_A2A_PUSH_ALLOW_CIDRS``) so exempting a private range for
  notify hooks does not open it to every A2A client; hence its own ``Validator`` and ``Sender``, built
  from ``switchboard.push`` with the same listen addresses, resolver and TLS context as
  ``switchboard.push.from_settings``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from starlette.routing import BaseRoute, Route

from switchboard.a2a.ask import ask_registrar
from switchboard.a2a.card import A2A_PATH, CARD_PATH, INTERFACE_CARD_PATH, build_card
from switchboard.a2a.configs import ConfigStore, config_owner
from switchboard.a2a.fanout import Fanout
from switchboard.a2a.gate import EndpointContextBuilder, Gate
from switchboard.a2a.handler import Handler
from switchboard.a2a.limits import HostLimits
from switchboard.a2a.mcp_tasks import TasksExtension
from switchboard.a2a.outbox import OutboxStore
from switchboard.a2a.replay import PushReplay
from switchboard.a2a.replay_mcp import replay_registrar
from switchboard.a2a.submit import submit_registrar
from switchboard.a2a.tasks import A2A_SOURCE, TaskStore, may_be_task
from switchboard.a2a.turns import Turns
from switchboard.a2a.waiter import TaskWaiter
from switchboard.a2a.worker import DeliveryWorker, Policy
from switchboard.obs.logs import get_logger
from switchboard.operator.sink import PUSH_GAVE_UP
from switchboard.push import Sender, Validator
from switchboard.push.from_settings import a2a_outbound, outbound_proxy
from switchboard.services import Services
from switchboard.store.notify_deliveries import DeliveryLog
from switchboard.store.transitions import Transition

if TYPE_CHECKING:
    from mcp.server.extension import Extension

    from switchboard.mcp.tools import ToolRegistrar

log = get_logger("switchboard.a2a")

# SDK loggers that may render request bodies or parse errors quoting the caller's values (a push
# config's token, say): their records keep the fixed text and lose the arguments and tracebacks.
_SDK_LOGGERS = (
    "a2a.server.routes.jsonrpc_dispatcher",
    "a2a.compat.v0_3.jsonrpc_adapter",
    "a2a.server.request_handlers.response_helpers",
    "a2a.utils.version_validator",
    "a2a.utils.proto_utils",
)


class _WithoutValues(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO:
            return False
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


_GUARD = _WithoutValues()


def guard_sdk_logs() -> None:
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        if _GUARD not in logger.filters:
            logger.addFilter(_GUARD)


class A2AComponent:
    def __init__(self, services: Services, *, policy: Policy | None = None) -> None:
        s = services.settings
        self.services = services
        self.push_enabled = s.a2a_push_enabled
        validator, _ = a2a_outbound(services)
        self.tasks = TaskStore(services.db)
        self.configs = ConfigStore(services.db, services.envelope, services.clock)
        self.outbox = OutboxStore(services.db)
        self.policy = policy or Policy(
            workers=s.a2a_push_workers,
            max_attempts=s.a2a_push_max_attempts,
            retry_base=s.a2a_push_retry_base_seconds,
            retry_cap=s.a2a_push_retry_cap_seconds,
            poll_seconds=s.a2a_push_poll_seconds,
            retention_seconds=s.a2a_push_retention_hours * 3600,
            # The sweep runs every 5 minutes, or every quarter of a shorter retention (docs/a2a.md).
            cleanup_seconds=min(300.0, max(1.0, s.a2a_push_retention_hours * 3600 / 4)),
            slow_timeout=s.a2a_push_slow_timeout_seconds,
            order_wait_seconds=s.a2a_push_order_wait_seconds,
            lease_seconds=max(60.0, 2 * s.a2a_push_slow_timeout_seconds + 10),
        )
        # A2A's own Senders (the shared validator): the normal timeout, and the one for receivers
        # known to answer slowly (worker.py).
        sender = self._sender(validator, self.policy.timeout)
        slow_sender = self._sender(validator, self.policy.slow_timeout)
        self.worker = DeliveryWorker(
            outbox=self.outbox,
            configs=self.configs,
            sender=sender,
            slow_sender=slow_sender,
            validator=validator,
            limits=HostLimits(
                services.clock,
                per_minute=s.a2a_push_host_rate_per_minute,
                burst=s.a2a_push_host_burst,
                inflight=s.a2a_push_host_inflight,
            ),
            metrics=services.metrics,
            clock=services.clock,
            policy=self.policy,
            deliveries=DeliveryLog(services.db),
        )
        self.worker.attempts.operator = services.operator  # a push that gives up tells the operator
        services.operator.describe(PUSH_GAVE_UP, functools.partial(config_owner, services.db))
        self.handler = Handler(
            services,
            tasks=self.tasks,
            configs=self.configs,
            validator=validator,
            push_enabled=self.push_enabled,
            ceiling=s.a2a_push_configs_per_task,
        )
        self.card = build_card(s, push_enabled=self.push_enabled)
        # Every instance writes outbox rows (fanout.py); only push-enabled ones deliver them.
        services.hub.add_in_transaction(
            Fanout(self.configs), wants=may_be_task, sources=frozenset({A2A_SOURCE})
        )
        self.waiter = TaskWaiter(
            self.tasks, fallback_seconds=1.0 if services.db.dialect == "postgresql" else None
        )
        self.handler.waiter = self.waiter
        self.turns = Turns(
            self.tasks,
            self.configs,
            self.waiter,
            services.clock,
            self.worker.wake if self.push_enabled else None,
        )
        self.handler.turns = self.turns
        # Issue 29: a finished push sent again (a2a/replay.py), from MCP and the endpoint card.
        self.replay = PushReplay(
            services.db, self.tasks, services.clock, self.worker.wake if self.push_enabled else None
        )
        # MCP: heartbeat's follow-ups since the claim (mcp/consumer.py); the worker's ``ask``: mcp_tools.
        services.followups_since_claim = self.tasks.followups_since_claim
        self.handler.send_wait = s.a2a_send_wait_seconds
        services.on_draining.append(self.waiter.close)  # cli.serve's stop
        # Only the a2a package's todos can be tasks (may_be_task): the others are never queued here.
        services.hub.subscribe("a2a_waiters", self._wake_waiters, queue_size=10_000, wants=may_be_task)
        if self.push_enabled:
            services.hub.subscribe("a2a_push", self._on_transition, queue_size=1000, wants=may_be_task)
        services.parts.add(self)
        guard_sdk_logs()

    def _sender(self, validator: Validator, timeout: float) -> Sender:
        sender = Sender(
            validator,
            timeout=timeout,
            ssl_context=self.services.ssl_context,
            proxy=outbound_proxy(self.services.settings),
        )
        self.services.on_close.append(sender.aclose)  # its kept connections
        return sender

    async def _wake_waiters(self, t: Transition) -> None:
        """Post-commit: a SendMessage waiting on this task re-reads it (handler.py). A todo nobody
        waits on costs one dictionary lookup."""
        self.waiter.notify(t.todo_id)

    async def _on_transition(self, t: Transition) -> None:
        """Post-commit: the outbox rows are durable by now; just tell the worker. A dropped wake loses
        nothing (the worker polls anyway)."""
        if may_be_task(t):
            self.worker.wake()

    def mcp_tools(self) -> Sequence[ToolRegistrar]:
        return (ask_registrar(self.turns), submit_registrar(self.handler), replay_registrar(self.replay))

    def mcp_extensions(self) -> Sequence[Extension]:
        """The MCP Tasks extension: a submitted todo is an MCP task too (a2a/mcp_tasks.py)."""
        return (TasksExtension(self.handler),)

    def routes(self) -> Sequence[BaseRoute]:
        (rpc,) = create_jsonrpc_routes(
            self.handler, A2A_PATH, context_builder=EndpointContextBuilder(), enable_v0_3_compat=True
        )
        assert isinstance(rpc, Route)
        gate = Gate(self.services, rpc.endpoint, self.services.settings.a2a_rate_per_minute)
        return [
            Route(A2A_PATH, gate.handle, methods=["POST"]),
            *create_agent_card_routes(self.card, card_url=CARD_PATH),
            *create_agent_card_routes(self.card, card_url=INTERFACE_CARD_PATH),
        ]

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        try:
            if not self.push_enabled:
                log.warning("A2A push notifications are disabled: SWITCHBOARD_A2A_PUSH_ENABLED is false")
                yield
                return
            await self.worker.start()
            try:
                yield
            finally:
                await self.worker.stop()
        finally:
            self.waiter.close()
