"""The objects one server instance is made of, built once and shared by every surface (HTTP, MCP, CLI)."""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from switchboard.clock import Clock, SystemClock
from switchboard.cred import Envelope, load_or_create_key
from switchboard.ids import new_id
from switchboard.obs.metrics import Metrics
from switchboard.settings import Settings
from switchboard.store.accounts import AccountStore
from switchboard.store.admin import AdminStore
from switchboard.store.console import ConsoleStore
from switchboard.store.db import Database
from switchboard.store.presence import PresenceStore
from switchboard.store.sources import SourceStore
from switchboard.store.todos import RetryPolicy, TodoStore
from switchboard.store.transitions import TransitionHub


@dataclass
class Services:
    settings: Settings
    clock: Clock
    db: Database
    envelope: Envelope
    metrics: Metrics
    hub: TransitionHub
    todos: TodoStore
    accounts: AccountStore
    sources: SourceStore
    presence: PresenceStore
    instance_id: str
    admin: AdminStore
    console: ConsoleStore
    # Outbound seams tests inject: a DNS resolver for switchboard.push and a TLS context trusting test CAs.
    resolver: Any = None
    ssl_context: ssl.SSLContext | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    async def close(self) -> None:
        try:
            for aclose in self.extras.pop("on_close", []):  # e.g. the outbound Senders' kept connections
                await aclose()
        finally:
            await self.db.dispose()


def build_services(
    settings: Settings,
    *,
    clock: Clock | None = None,
    resolver: Any = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Services:
    clock = clock or SystemClock()
    instance_id = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}-{new_id('i')[-6:]}"
    metrics = Metrics()
    db = Database(settings.resolved_database_url())
    envelope = Envelope(load_or_create_key(settings.cred_key, settings.data_dir))
    hub = TransitionHub(metrics, instance_id=instance_id)
    retry = RetryPolicy(settings.retry_base_seconds, settings.retry_cap_seconds, settings.max_attempts)
    return Services(
        settings=settings,
        clock=clock,
        db=db,
        envelope=envelope,
        metrics=metrics,
        hub=hub,
        todos=TodoStore(db, hub, clock, retry),
        accounts=AccountStore(db, clock),
        sources=SourceStore(db, envelope, clock),
        presence=PresenceStore(db, clock),
        instance_id=instance_id,
        admin=AdminStore(db, clock),
        console=ConsoleStore(db, clock),
        resolver=resolver,
        ssl_context=ssl_context,
    )
