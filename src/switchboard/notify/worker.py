"""The notify worker process: the dispatcher on its own core (``SWITCHBOARD_NOTIFY_PROCESS``).

Started by the server (:mod:`switchboard.notify.process`), never by hand: the first line on stdin
carries the settings. It builds the same stores and outbound stack as the server, runs the in-process
:class:`~switchboard.notify.dispatcher.Dispatcher`, and feeds it the transitions and presence returns
the server writes (:mod:`switchboard.notify.wire`). SIGINT is ignored (a terminal's Ctrl-C reaches the
whole process group; the server then closes stdin); SIGTERM or the end of stdin drains and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import ssl
import sys
from typing import IO, Any

from switchboard.notify.build import build_dispatcher, hook_store
from switchboard.notify.wire import MetricDeltas, line, presence_of, transitions_of
from switchboard.obs import configure_logging
from switchboard.obs.logs import get_logger
from switchboard.operator.sink import PendingEvents
from switchboard.process.heap import freeze_startup_heap
from switchboard.process.tasks import cancel_and_wait
from switchboard.services import build_services
from switchboard.settings import Settings

log = get_logger("switchboard.notify")

# The longest line it reads (a line of transitions is about 64 KiB at most: switchboard.notify.wire). The
# stream stops reading the pipe once it holds twice this, so what the server wrote and this process has
# not handled waits in the server, under its pipe allowance, not here: at 8 MiB, this process read up to
# 16 MiB of transitions ahead of its dispatcher whenever it fell behind, and at 1 MiB it held 2 MiB of
# them under scenario 3's overflow. The longest lines (the settings, a batch's) are far below this.
READ_LIMIT = 256 * 1024
METRICS_INTERVAL = 0.5
NICENESS = 10  # added to the server's: under contention the server gets about 9 parts in 10 of a core
# SQLite pages kept per connection. The worker reads hooks and appends health and delivery-log rows; at
# SQLite's default (2,000 KiB per connection) a flood of dropped notifications, each one a delivery-log
# row, filled every pooled connection's cache: about 5 MiB more per worker under scenario 3's 100k.
PAGE_CACHE_KIB = 256


async def run(
    *, resolver: Any = None, ssl_context: ssl.SSLContext | None = None, out: IO[bytes] | None = None
) -> int:
    """Serve until stdin ends. ``resolver`` and ``ssl_context`` are the same seams as ``build_services``'s."""
    out = out or sys.stdout.buffer
    with contextlib.suppress(OSError):
        # REQ-7: delivery is best effort and must not slow ingest. When both want the CPU, the kernel
        # serves the server's process first; an idle server leaves the worker every core it has.
        os.nice(NICENESS)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    loop.add_signal_handler(signal.SIGTERM, reader.feed_eof)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    first = await reader.readline()
    if not first:
        return 0
    hello = json.loads(first)["hello"]
    settings = Settings.model_validate(hello["settings"])
    services = build_services(settings, resolver=resolver, ssl_context=ssl_context)
    services.db.cap_page_cache(PAGE_CACHE_KIB)
    hooks = hook_store(services)
    # Operator events happen here but are sent by the server: gathered, and carried on the relay's lines.
    pending = PendingEvents()
    services.operator = pending
    dispatcher = build_dispatcher(
        services,
        hooks,
        retry_delays=[float(d) for d in hello["retry_delays"]],
        drain_timeout=float(hello.get("drain_timeout", 5.0)),
        # this child's share of the instance's queue bound (switchboard.notify.process.queue_shares)
        queue_size=int(hello.get("queue_size", settings.notify_queue_size)),
        workers=int(hello.get("workers", settings.notify_workers)),  # and of its concurrent attempts
    )
    deltas = MetricDeltas(services.metrics)

    parent_gone = False

    def send(message: dict[str, Any]) -> None:
        nonlocal parent_gone
        if parent_gone:
            return
        try:
            out.write(line(message))
            out.flush()
        except OSError:  # the server is gone: its stdin's end follows, and this worker drains and exits
            parent_gone = True

    def relay() -> None:
        changes = deltas.take()
        if changes:
            send({"m": changes})
        events = pending.take()
        if events is not None:
            send({"o": events})

    async def relay_loop() -> None:
        while True:
            await asyncio.sleep(METRICS_INTERVAL)
            relay()

    tests: set[asyncio.Task[None]] = set()

    async def test(request: dict[str, Any]) -> None:
        try:
            result = await dispatcher.send_test(
                str(request["hook_id"]), str(request["endpoint_id"]), str(request["slug"])
            )
        except Exception as exc:  # the server's card shows an error; this worker carries on
            log.error("notify test failed", stage="test", error_type=type(exc).__name__)
            result = {"outcome": "failed", "error": "internal_error"}
        send({"tested": request["seq"], "result": result})

    async def replay(request: dict[str, Any]) -> None:
        try:
            result = await dispatcher.replay(request)
        except Exception as exc:  # the caller sees an error; this worker carries on
            log.error("notify replay failed", stage="replay", error_type=type(exc).__name__)
            result = {"notification_id": request.get("delivery_id"), "error": "internal_error"}
        send({"tested": request["seq"], "result": result})

    async def prepare() -> None:
        try:
            await hooks.prepare()
        except Exception:  # then each health statement is compiled at its first use
            log.warning("hook health statements not prepared", stage="store", exc_info=True)
        # As the server does once it listens (switchboard/process/heap.py): what start-up made (imports, the
        # stores, the compiled statements) is frozen, so a full collection under load walks only what was
        # made since, instead of pausing this worker's attempts for tens of milliseconds each time.
        freeze_startup_heap()

    await dispatcher.start()
    relaying = asyncio.create_task(relay_loop(), name="notify-worker-metrics")
    # At start, not at a flush under load: compiling the health statements takes half a second of CPU.
    preparing = asyncio.create_task(prepare(), name="notify-worker-prepare")
    log.info("notify worker ready", instance=settings.instance_id)
    try:
        while raw := await reader.readline():
            try:
                message = json.loads(raw)
                if "t" in message:
                    await dispatcher.on_transitions(transitions_of(message["t"]))
                elif "p" in message:
                    await dispatcher.on_presence_return(presence_of(message["p"]))
                elif "test" in message:  # a task: one slow receiver never holds up the pipe
                    task = asyncio.create_task(test(message["test"]), name="notify-test")
                    tests.add(task)
                    task.add_done_callback(tests.discard)
                elif "replay" in message:  # a task too: its hook read and todo read wait on the database
                    task = asyncio.create_task(replay(message["replay"]), name="notify-replay")
                    tests.add(task)
                    task.add_done_callback(tests.discard)
                elif "idle" in message:
                    await dispatcher.idle()
                    relay()
                    send({"idle": message["idle"]})
            except Exception:  # REQ-12: one bad batch is logged; the worker carries on
                log.error("notify worker could not handle a message", stage="match", exc_info=True)
    finally:
        preparing.cancel()
        await cancel_and_wait(relaying)
        await dispatcher.stop()
        relay()
        await services.close()
    return 0


def main() -> int:
    configure_logging()
    return asyncio.run(run())


if __name__ == "__main__":
    from switchboard.process.quickexit import leave

    leave(main())
