"""The objects one server instance is made of, built once and shared by every surface (HTTP, MCP, CLI)."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from switchboard.core.clock import Clock, SystemClock
from switchboard.core.ids import instance_id as new_instance_id
from switchboard.cred import Envelope, load_or_create_key
from switchboard.obs.metrics import Metrics
from switchboard.operator.events import operator_events
from switchboard.operator.sink import NullSink, OperatorSink
from switchboard.settings import Settings
from switchboard.store.accounts import AccountStore
from switchboard.store.admin import AdminStore
from switchboard.store.changes import EndpointChanges
from switchboard.store.console import ConsoleStore
from switchboard.store.db import Database
from switchboard.store.files import secure_data_dir
from switchboard.store.presence import PresenceStore
from switchboard.store.relay import carried, send_in_transaction
from switchboard.store.sources import SourceStore
from switchboard.store.todos import RetryPolicy, TodoStore
from switchboard.store.transitions import READY, TransitionHub

if TYPE_CHECKING:  # the MCP SDK is not imported at run time here: the notify worker process never loads it
    from mcp.server.auth.provider import AccessToken, OAuthAuthorizationServerProvider

    from switchboard.push import Sender, Validator

P = TypeVar("P")

TokenLookup = Callable[[str], Awaitable["AccessToken | None"]]
"""A second way to recognise a bearer token (the web UI's OAuth access tokens): switchboard.mcp.auth."""
FollowupsSinceClaim = Callable[[str, str], Awaitable[list[Any] | None]]
"""(worker endpoint id, todo id) to the sender's messages since the claim; None: not an A2A task."""


class Parts:
    """The instance's built parts (the notify and A2A components, the web UI, the MCP surface, the
    sweeper), found by class: ``services.parts.get(NotifyComponent)`` is ``NotifyComponent | None`` to
    the type checker, so every hand-off is checked, and this module imports none of them."""

    def __init__(self) -> None:
        self._parts: list[object] = []

    def add(self, part: object) -> None:
        if self.get(type(part)) is not None:
            raise ValueError(f"this instance already has a {type(part).__name__}")
        self._parts.append(part)

    def get(self, kind: type[P]) -> P | None:
        for part in self._parts:
            if isinstance(part, kind):
                return part
        return None

    def need(self, kind: type[P]) -> P:
        part = self.get(kind)
        if part is None:
            raise LookupError(f"this instance has no {kind.__name__}")
        return part


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
    # Tests and the bench: the command that starts a notify worker process (switchboard.notify.process).
    notify_worker_command: Sequence[str] | None = None
    # What components hand each other, typed. Components are built before the MCP surface (create_app),
    # so each of these is filled in before it is read.
    parts: Parts = field(default_factory=Parts)
    token_lookups: list[TokenLookup] = field(default_factory=list)  # web UI -> MCP and A2A auth
    oauth_provider: OAuthAuthorizationServerProvider[Any, Any, AccessToken] | None = None  # web UI -> MCP
    # web UI -> MCP: wrappers for the SDK's OAuth routes, by path (client metadata documents, docs/web.md)
    oauth_route_wrappers: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    followups_since_claim: FollowupsSinceClaim | None = None  # A2A -> the MCP heartbeat verb
    on_draining: list[Callable[[], None]] = field(default_factory=list)  # run by `serve` as it stops
    on_close: list[Callable[[], Awaitable[None]]] = field(default_factory=list)  # run by close()
    outbound: dict[tuple[str, ...], tuple[Validator, Sender]] = field(default_factory=dict)  # per allowlist
    # Operator events (switchboard.operator): the notify dispatcher and the A2A push worker report here.
    operator: OperatorSink = field(default_factory=NullSink)

    async def close(self) -> None:
        closers, self.on_close = self.on_close, []
        try:
            for aclose in closers:  # e.g. the outbound Senders' kept connections
                await aclose()
        finally:
            await self.db.dispose()


def outbound_ssl_context(ca_bundle: Path) -> ssl.SSLContext:
    """The system trust store plus the operator's private CA(s) (SWITCHBOARD_CA_BUNDLE), for every outbound
    call (notify hooks, A2A push). Unlike SSL_CERT_FILE, which replaces the system store, this adds."""
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=str(ca_bundle))
    return context


def build_services(
    settings: Settings,
    *,
    clock: Clock | None = None,
    resolver: Any = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Services:
    clock = clock or SystemClock()
    if ssl_context is None and settings.ca_bundle is not None:
        ssl_context = outbound_ssl_context(settings.ca_bundle)
    instance_id = settings.instance_id or new_instance_id()
    metrics = Metrics()
    if settings.data_dir.exists() or settings.cred_key is None or not settings.database_url:
        secure_data_dir(settings.data_dir)  # 0700: cred.key and the SQLite database live here
    db = Database(settings.resolved_database_url())
    envelope = Envelope(load_or_create_key(settings.cred_key, settings.data_dir))
    hub = TransitionHub(metrics, instance_id=instance_id)
    if not db.is_sqlite:  # the cluster relay's sending half: NOTIFY on commit (store/relay.py)
        hub.add_in_transaction(send_in_transaction, wants=carried, moves=READY)
    retry = RetryPolicy(settings.retry_base_seconds, settings.retry_cap_seconds, settings.max_attempts)
    changes = EndpointChanges()  # every endpoint write of this process; the MCP token cache reads it
    return Services(
        settings=settings,
        clock=clock,
        db=db,
        envelope=envelope,
        metrics=metrics,
        hub=hub,
        todos=TodoStore(db, hub, clock, retry),
        accounts=AccountStore(db, clock, endpoints_per_human=settings.endpoints_per_human, changes=changes),
        sources=SourceStore(db, envelope, clock),
        presence=PresenceStore(db, clock, changes),
        instance_id=instance_id,
        admin=AdminStore(db, clock, changes),
        console=ConsoleStore(db, clock),
        resolver=resolver,
        ssl_context=ssl_context,
        operator=operator_events(settings, instance_id=instance_id, metrics=metrics, clock=clock),
    )
