"""Notify hooks as a server component: built from Services, started and stopped by the app lifespan."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from starlette.routing import BaseRoute

from switchboard.core.clock import ms
from switchboard.notify.build import build_dispatcher
from switchboard.notify.dispatcher import Dispatcher
from switchboard.notify.mcp import registrar
from switchboard.notify.process import WORKER_COMMAND, RemoteDispatcher
from switchboard.notify.service import hook_service
from switchboard.obs.logs import get_logger
from switchboard.operator.sink import HOOK_DISABLED
from switchboard.process.tasks import cancel_and_wait
from switchboard.services import Services
from switchboard.store.notify_deliveries import DeliveryLog
from switchboard.store.notify_hook_counts import hook_owner
from switchboard.store.transitions import is_pushable

if TYPE_CHECKING:
    from switchboard.mcp.tools import ToolRegistrar

log = get_logger("switchboard.notify")

SECRET_SWEEP_SECONDS = 60.0


class NotifyComponent:
    def __init__(self, services: Services, *, retry_delays: Sequence[float] = (1.0, 5.0)) -> None:
        s = services.settings
        self.services = services
        self.verbs = hook_service(services)  # the CLI builds the same
        self.store = self.verbs.store
        self.deliveries = DeliveryLog(services.db)
        self.dispatcher: Dispatcher | RemoteDispatcher
        # By default the dispatcher runs in a child process (switchboard.notify.process).
        if s.notify_in_worker_process():
            command = services.notify_worker_command or WORKER_COMMAND  # tests and bench: a seam
            self.dispatcher = RemoteDispatcher(
                services,
                retry_delays=retry_delays,
                command=command,
                processes=s.notify_worker_processes(),
            )
        else:
            self.dispatcher = build_dispatcher(services, self.store, retry_delays=retry_delays)
        self.verbs.tester = self.dispatcher
        # an operator event about a hook names its endpoint (read here, in the hooks' SQL home)
        services.operator.describe(HOOK_DISABLED, functools.partial(hook_owner, services.db))
        self.enabled = s.notify_hook_ceiling > 0
        services.parts.add(self)
        if self.enabled:
            services.hub.subscribe_batch(
                "notify_hooks",
                self.dispatcher.on_transitions,  # one matching read per batch of queued transitions
                queue_size=s.notify_queue_size,
                on_drop=self.dispatcher.on_unmatched_drop,  # REQ-11: hub overflow counts as dropped
                wants=is_pushable,  # what both dispatchers match; a claim or an ack is never queued
            )
            services.presence.on_return(self.dispatcher.on_presence_return)

    def routes(self) -> Sequence[BaseRoute]:
        return ()

    def mcp_tools(self) -> Sequence[ToolRegistrar]:
        return (registrar(self.verbs),)

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        if not self.enabled:
            log.warning("notify hooks are disabled: SWITCHBOARD_NOTIFY_HOOK_CEILING is 0")
            yield
            return
        await self.dispatcher.start()
        sweeper = asyncio.create_task(self._destroy_expired_secrets(), name="notify-secret-sweeper")
        try:
            yield
        finally:
            await cancel_and_wait(sweeper)
            await self.dispatcher.stop()

    async def _destroy_expired_secrets(self) -> None:
        while True:
            try:
                await self.store.destroy_expired_secrets()
            except Exception:
                log.error("expired secret sweep failed", exc_info=True)
            await self.prune_deliveries()
            await asyncio.sleep(SECRET_SWEEP_SECONDS)

    async def prune_deliveries(self) -> int:
        """The delivery log's bounds (count and age), applied in the background with the secret sweep."""
        s = self.services.settings
        try:
            return await self.deliveries.prune(
                max_rows=s.delivery_log_max_rows,
                older_than_ms=ms(self.services.clock.now() - s.delivery_log_max_age_hours * 3600),
            )
        except Exception:
            log.error("delivery log prune failed", exc_info=True)
            return 0
