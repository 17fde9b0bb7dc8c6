"""What-if patches for ``python -m bench.whatif``: experiments, NOT shipped behaviour.

Each one monkeypatches the server process (the bench launcher applies them before building the
services) to estimate what a proposed change to ``src/`` would buy. They are deliberately small and
keep the guarantees the real change would have to keep; none is used by ``python -m bench``.

* ``sqlite_deferred_reads``: ``Database.read()`` transactions start with plain ``BEGIN`` (deferred)
  instead of ``BEGIN IMMEDIATE``; write transactions (``Database.begin()``) keep ``BEGIN IMMEDIATE``.
  Today every read takes SQLite's write lock, so reads queue behind writes and each other in the busy
  handler's sleep-and-retry loop.
* ``keepalive``: the Sender keeps idle connections per validated target (scheme, host, port and the
  exact tuple of validated IPs) for a few seconds, instead of a new pool, TCP connection and TLS
  handshake per attempt. Every attempt still validates first, and a connection is only reused when that
  validation produced the same addresses, so no connection outlives a validation that would refuse it.
* ``match_cache``: ``Dispatcher.on_transition`` reuses an endpoint's hook list and scope for up to
  ``MATCH_TTL`` seconds instead of reading them for every transition (``sendable`` stays a fresh read
  before every attempt, so a deleted or disabled hook still gets no attempt). A real change would
  invalidate on hook and scope writes (and a version column across instances) instead of a TTL.
* ``lazy_health``: ``record_delivered`` skips the write when the hook's recorded health would not change
  (already 0 failures, same status, no error) and ``last_attempt_at`` was written under
  ``HEALTH_REFRESH`` seconds ago (so it may lag by that much).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

PATCHES: dict[str, Callable[[], None]] = {}
MATCH_TTL = 5.0
HEALTH_REFRESH = 10.0


def patch(fn: Callable[[], None]) -> Callable[[], None]:
    PATCHES[fn.__name__] = fn
    return fn


def apply(names: list[str]) -> None:
    for name in names:
        PATCHES[name]()


@patch
def sqlite_deferred_reads() -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Connection
    from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError

    from switchboard.store import db as dbmod
    from switchboard.store.errors import Conflict, StoreUnavailable

    def pragmas(engine: Any) -> None:
        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Connection) -> None:
            immediate = conn.get_execution_options().get("switchboard_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    dbmod._sqlite_pragmas = pragmas

    @asynccontextmanager
    async def begin(self: Any) -> AsyncIterator[Any]:
        engine = self.engine.execution_options(switchboard_write=True) if self.is_sqlite else self.engine
        try:
            async with engine.begin() as conn:
                yield conn
        except IntegrityError as exc:
            raise Conflict(dbmod._short(exc)) from exc
        except (OperationalError, InterfaceError, OSError, ConnectionError) as exc:
            raise StoreUnavailable("database unavailable") from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise StoreUnavailable("database unavailable") from exc
            raise

    dbmod.Database.begin = begin  # type: ignore[method-assign]


_ATTEMPT: contextvars.ContextVar[tuple[Any, float]] = contextvars.ContextVar("bench_attempt")


@patch
def keepalive() -> None:
    import anyio
    import httpcore

    from switchboard.push import _transport as tr
    from switchboard.push._errors import AttemptTimeout, error_for_status

    class SharedBackend(tr._PinnedBackend):
        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> Any:
            self._progress, self._deadline = _ATTEMPT.get()
            return await super().connect_tcp(host, port, timeout, local_address, socket_options)

    pools: dict[tuple[str, str, int, tuple[str, ...]], httpcore.AsyncConnectionPool] = {}

    async def _attempt(
        self: Any, url: str, body: bytes, extra: list[tuple[bytes, bytes]], start: float
    ) -> Any:
        deadline = start + self._timeout
        progress = tr._Progress()
        try:
            with anyio.fail_after(self._timeout):
                target = await self._validator.check_attempt(url)
        except TimeoutError:
            raise AttemptTimeout(stage="connect", reason="dns_timeout") from None
        key = (target.scheme, target.host, target.port, target.ips)
        pool = pools.get(key)
        if pool is None:
            pool = pools[key] = httpcore.AsyncConnectionPool(
                ssl_context=self._ssl_context,
                max_connections=8,
                max_keepalive_connections=8,
                keepalive_expiry=5.0,
                retries=0,
                http1=True,
                http2=False,
                network_backend=SharedBackend(target, progress, deadline),
            )
        token = _ATTEMPT.set((progress, deadline))
        try:
            response = await self._request(pool, target, body, extra, progress, deadline)
            try:
                read = await self._drain(response, deadline)
            finally:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
        finally:
            _ATTEMPT.reset(token)
        failure = error_for_status(response.status, retry_after=tr._retry_after(response.headers))
        if failure is not None:
            raise failure
        return tr.AttemptResult(response.status, time.monotonic() - start, read)

    tr.Sender._attempt = _attempt  # type: ignore[method-assign]


class _Cached:
    """Forwards to ``inner``; the ``methods`` answer from a ``MATCH_TTL`` cache per argument."""

    def __init__(self, inner: Any, *methods: str) -> None:
        self._inner, self._methods = inner, frozenset(methods)
        self._cache: dict[tuple[str, str], tuple[float, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        if name not in self._methods:
            return getattr(self._inner, name)

        async def cached(key: str) -> Any:
            hit = self._cache.get((name, key))
            if hit is not None and time.monotonic() - hit[0] < MATCH_TTL:
                return hit[1]
            value = await getattr(self._inner, name)(key)
            self._cache[(name, key)] = (time.monotonic(), value)
            return value

        return cached


@patch
def match_cache() -> None:
    from switchboard.notify import dispatcher as disp

    init = disp.Dispatcher.__init__

    def patched(self: Any, *, hooks: Any, accounts: Any, **kwargs: Any) -> None:
        # Only the dispatcher sees the caches; MCP and the stores keep reading fresh.
        init(
            self,
            hooks=cast(Any, _Cached(hooks, "enabled_for_endpoint", "enabled_with_endpoint")),
            accounts=cast(Any, _Cached(accounts, "endpoint")),
            **kwargs,
        )

    disp.Dispatcher.__init__ = patched  # type: ignore[method-assign]


@patch
def lazy_health() -> None:
    from switchboard.notify.store import HookStore

    orig = HookStore.record_delivered
    orig_attempt = HookStore.record_attempt
    orig_failed = HookStore.record_failed
    healthy: dict[str, tuple[int, float]] = {}

    async def record_delivered(self: Any, hook_id: str, status: int, *args: Any, **kwargs: Any) -> None:
        hit = healthy.get(hook_id)
        now = time.monotonic()
        if hit is not None and hit[0] == status and now - hit[1] < HEALTH_REFRESH:
            return
        await orig(self, hook_id, status, *args, **kwargs)
        healthy[hook_id] = (status, now)

    async def record_attempt(self: Any, hook_id: str, *args: Any, **kwargs: Any) -> None:
        healthy.pop(hook_id, None)
        await orig_attempt(self, hook_id, *args, **kwargs)

    async def record_failed(self: Any, hook_id: str, *args: Any, **kwargs: Any) -> Any:
        healthy.pop(hook_id, None)
        return await orig_failed(self, hook_id, *args, **kwargs)

    HookStore.record_delivered = record_delivered  # type: ignore[method-assign]
    HookStore.record_attempt = record_attempt  # type: ignore[method-assign]
    HookStore.record_failed = record_failed  # type: ignore[method-assign]
