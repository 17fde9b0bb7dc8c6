"""Scenario 2: dispatch throughput and commit-to-receiver latency, side by side with two peers.

One server (SQLite), ``ENDPOINTS`` endpoints with one hook each, every hook on the same HTTPS receiver
(another process). Phases, in one run:

Every endpoint belongs to its own human (a multi-tenant instance), except in the last phase.

1. warm-up (connections, caches, first TLS handshakes) and the Switchboard body size;
2. ``ROUNDS`` rounds of three bursts of ``BURST`` POSTs to the same receiver:
   * Switchboard: ``BURST`` todos created by fan-out deliveries (a source routes only to its own
     human's endpoints, so each endpoint has ``len(QUEUES)`` queues and a source of its own routed to
     all of them: one signed delivery makes ``BURST_FANOUT`` todos for one tenant, and the burst sends
     one delivery to each endpoint in turn, so ingest costs little of the burst), delivered by the
     dispatcher with its default settings (worker count included);
   * a2a-sdk: ``BasePushNotificationSender`` with its own ``httpx.AsyncClient``, one push config per
     task, ``send_notification`` driven by N concurrent tasks, Task bodies padded to the Switchboard
     body size;
   * bare httpx: one ``AsyncClient``, N concurrent POST loops, the same body size;
   with N = each of ``PEER_CONCURRENCIES`` (Switchboard's default dispatcher worker count, and 16); the
   rate of each is requests received / (last arrival - first arrival) at the receiver, and a peer's
   rate is the better of its concurrencies (mean over the rounds);
3. sustained ``LIGHT_RATE`` todos/s, one todo per signed delivery (100 sources): latency when nothing
   queues;
4. sustained ``LOW_RATE`` todos/s (the latency target's rate) and then ``HIGH_RATE`` todos/s (the
   throughput target's rate), from fan-out deliveries (each endpoint's source routed to
   ``SUSTAINED_FANOUT`` of its queues, 100 sources in turn, so ``rate/10`` deliveries/s): one todo per
   delivery at these rates would measure ingest, which saturates first on this machine (scenario 1),
   instead of dispatch;
5. the same Switchboard burst (same sources and routes) on a fresh server where one human owns all the
   endpoints: the dispatcher's fairness is per owning human, so this is what a single-owner (homelab)
   instance gets.

Latency is measured at the receiver: the load generator writes ``t=<time.time()>`` into the PR title just
before sending the delivery, and it comes back in ``summary``. So the interval covers the inbound
request, the insert and commit, the transition hub, hook matching, the dispatcher queue, the attempt
(validation, TCP connect, TLS handshake, the POST) and the receiver's parse; it is an upper bound on
commit-to-receiver. A second figure subtracts the todo's ``created_at`` (stamped in the server at the
start of the insert transaction, millisecond resolution), read from the database after the run.

The per-hook rate limit (120/min by default) would cap 100 hooks at 200/s sustained, so it is raised to
``RATE_PER_MINUTE`` for this scenario only, and the one-owner phase raises the endpoints a human may hold
(50 by default) to ``ENDPOINTS``; every other setting is the default.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench.common import RECEIVER_HOST, CpuMeter, metric, ratio, summarize_ms
from bench.context import Bench, running, sqlite_rows, wait_until
from bench.procs import ReceiverProc, ServerProc
from bench.world import World, build_world
from switchboard.settings import Settings

ENDPOINTS = 100
BURST = 2000
ROUNDS = 2
# The peers run with as many concurrent senders as Switchboard has dispatcher workers by default, and
# with 16: httpx's default pool keeps at most 20 idle connections alive, so above 20 concurrent senders
# some requests open a fresh TLS connection each time. The better of the two is the peer's rate.
PEER_CONCURRENCY = int(Settings.model_fields["notify_workers"].default)
PEER_CONCURRENCIES = tuple(sorted({16, PEER_CONCURRENCY}))
LIGHT_RATE, LIGHT_SECONDS = 50.0, 10.0
LOW_RATE, LOW_SECONDS = 300.0, 10.0
HIGH_RATE, HIGH_SECONDS = 1000.0, 10.0
WARMUP_TODOS = 500
RATE_PER_MINUTE = 60_000
# A source routes only to its own human's endpoints, so fan-out happens across one endpoint's queues.
QUEUES = tuple(f"q{i:02d}" for i in range(20))
BURST_FANOUT = len(QUEUES)  # todos per burst delivery (one endpoint's source, routed to every queue)
SUSTAINED_FANOUT = 10  # todos per delivery in the sustained fan-out phases (as many as before the rule)
# A todo counts as delivered in the steady rate if it arrived by this long after the last send: the
# latency target (commit to receiver p99 under 100 ms), so a backlog is not counted as kept up with.
ARRIVAL_SLACK = 0.1

ESTIMATE = 230.0

Record = tuple[str, float, float, str, int]


def settings_overrides() -> dict[str, Any]:
    return {"notify_rate_per_minute": RATE_PER_MINUTE}


async def setup(
    b: Bench, name: str, receiver: ReceiverProc, owners: str = "per_endpoint", **settings: Any
) -> tuple[ServerProc, World]:
    if owners == "one":
        # One human holds every endpoint: the per-human endpoint cap (50 by default) must admit them all.
        settings.setdefault("endpoints_per_human", ENDPOINTS)
    server = b.server(name, b.settings(name, **settings_overrides(), **settings))
    port = receiver.ports[0]
    world = await build_world(
        server.settings,
        endpoints=ENDPOINTS,
        queues=QUEUES,
        tenant_fanouts=(BURST_FANOUT, SUSTAINED_FANOUT),
        hook_urls=[[f"https://{RECEIVER_HOST}:{port}/sb/{i}"] for i in range(ENDPOINTS)],
        owners=owners,
    )
    return server, world


def sustained_targets(world: World) -> list[dict[str, str]]:
    """The sources of the sustained fan-out phases: one per endpoint, ``SUSTAINED_FANOUT`` todos each."""
    return [s.target() for s in world.tenant_fanouts[SUSTAINED_FANOUT]]


async def _arrived(receiver: ReceiverProc, target: int, timeout: float) -> bool:
    async def check() -> bool:
        return (await receiver.stats())["requests"] >= target

    return await wait_until(check, timeout=timeout, interval=0.1)


async def _dropped(server: ServerProc) -> float:
    return metric(await server.metrics(), "switchboard_notify_hook_notifications_total", outcome="dropped")


def _rate(records: list[Record]) -> float:
    if len(records) < 2:
        return 0.0
    arrivals = sorted(r[1] for r in records)
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])


async def switchboard_burst(
    b: Bench, server: ServerProc, world: World, receiver: ReceiverProc, todos: int
) -> dict[str, Any]:
    await receiver.collect()
    base = (await receiver.stats())["requests"]
    fans = world.tenant_fanouts[BURST_FANOUT]  # taken in turn: one delivery per endpoint
    dropped_before = await _dropped(server)
    meter = CpuMeter({"server": server.pids(), "receiver": receiver.pid, "client": b.client.pid})
    meter.start()
    ingest = await b.client.run(
        "ingest",
        {
            "port": server.port,
            "targets": [f.target() for f in fans],
            "rate": 0,
            "count": todos // BURST_FANOUT,
            "concurrency": 4,
        },
    )

    async def settled() -> bool:
        # every notification either arrived or was dropped (bounded queues: e.g. one owner's backlog)
        got = (await receiver.stats())["requests"] - base
        return got >= todos or got + await _dropped(server) - dropped_before >= todos

    complete = await wait_until(settled, timeout=180, interval=0.2)
    cpu = meter.stop()
    dropped = await _dropped(server) - dropped_before
    records = [r for r in await receiver.collect() if r[0] == "sb"]
    last = max((r[1] for r in records), default=0.0)
    return {
        "todos": todos,
        "received": len(records),
        "complete": complete,
        "dropped": dropped,
        "rate": _rate(records),
        "rate_from_first_send": len(records) / (last - ingest["first_send"]) if records else 0.0,
        "ingest_seconds": ingest["last_done"] - ingest["first_send"],
        "latency_stamp": summarize_ms(r[1] - r[2] for r in records if r[2] > 0),
        "cpu": cpu,
        "_records": records,
    }


async def peer_burst(
    b: Bench,
    kind: str,
    receiver: ReceiverProc,
    n: int,
    size: dict[str, int],
    concurrency: int = PEER_CONCURRENCY,
) -> dict[str, Any]:
    await receiver.collect()
    port = receiver.ports[0]
    meter = CpuMeter({"receiver": receiver.pid, "client": b.client.pid})
    meter.start()
    if kind == "a2a":
        result = await b.client.run(
            "a2a",
            {
                "url_base": f"https://127.0.0.1:{port}/a2a",
                "n": n,
                "concurrency": concurrency,
                "ca_pem": b.ca.ca_pem,
                "pad": size["a2a_pad"],
            },
        )
    else:
        result = await b.client.run(
            "httpx",
            {
                "url": f"https://127.0.0.1:{port}/raw",
                "n": n,
                "concurrency": concurrency,
                "ca_pem": b.ca.ca_pem,
                "body_len": size["sb"],
            },
        )
    cpu = meter.stop()
    tag = "a2a" if kind == "a2a" else "raw"
    records = [r for r in await receiver.collect() if r[0] == tag]
    return {
        "n": n,
        "concurrency": concurrency,
        "received": len(records),
        "rate": _rate(records),
        "rate_client": n / result["elapsed"] if result["elapsed"] else 0.0,
        "body_bytes": int(statistics.median(r[4] for r in records)) if records else 0,
        "cpu": cpu,
    }


async def sustained(
    b: Bench,
    server: ServerProc,
    receiver: ReceiverProc,
    targets: list[dict[str, str]],
    per_delivery: int,
    todo_rate: float,
    seconds: float,
    drain_timeout: float = 60.0,
) -> dict[str, Any]:
    await receiver.collect()
    base = (await receiver.stats())["requests"]
    m0 = await server.metrics()
    delivery_rate = todo_rate / per_delivery
    count = int(delivery_rate * seconds)
    meter = CpuMeter({"server": server.pids(), "receiver": receiver.pid, "client": b.client.pid})
    meter.start()
    ingest = await b.client.run(
        "ingest",
        {
            "port": server.port,
            "targets": targets,
            "rate": delivery_rate,
            "count": count,
            "concurrency": 64,
            "max_seconds": seconds + 30,
        },
    )
    cpu = meter.stop()
    expected = count * per_delivery
    complete = await _arrived(receiver, base + expected, timeout=drain_timeout)
    m1 = await server.metrics()
    records = [r for r in await receiver.collect() if r[0] == "sb"]
    first, last_send = ingest["first_send"], ingest["first_send"] + (count - 1) / delivery_rate
    # Steady state: the todos sent from the second second on (skipping the ramp-up), by the time stamp
    # each carries, that arrived by ARRIVAL_SLACK after the last send, over the time their deliveries
    # took to send: whole deliveries, so a run that keeps up measures the offered rate exactly (counting
    # arrivals inside a wall-clock window cut deliveries of 10 at its edges: 999.4/s with all 10,000
    # received 0.02 s after the last send), and one that falls behind leaves its backlog out.
    skipped = math.ceil(delivery_rate * 1.0)
    start = first + skipped / delivery_rate
    # (half a delivery's interval of slack: a send's stamp is its schedule plus a little lateness)
    window = [
        r
        for r in records
        if r[2] > 0 and r[2] >= start - 0.5 / delivery_rate and r[1] <= last_send + ARRIVAL_SLACK
    ]
    window_seconds = max((count - skipped) / delivery_rate, 1e-9)
    last_arrival = max((r[1] for r in records), default=0.0)
    ok = sum(n for status, n in ingest["statuses"].items() if 200 <= int(status) < 300)
    return {
        "todo_rate_offered": todo_rate,
        "todos_per_delivery": per_delivery,
        "deliveries_offered": count,
        "deliveries_accepted": ok,
        "ingest_errors": ingest["errors"],
        "ingest_latency": summarize_ms(ingest["latency_from_schedule"]),
        "ingest_late_sends": ingest["late_sends"],
        "expected": expected,
        "received": len(records),
        "complete": complete,
        "delivered_rate_steady": len(window) / window_seconds,
        "drain_seconds_after_last_send": max(last_arrival - last_send, 0.0),
        "latency_stamp": summarize_ms(r[1] - r[2] for r in records if r[2] > 0),
        "dropped": metric(m1, "switchboard_notify_hook_notifications_total", outcome="dropped")
        - metric(m0, "switchboard_notify_hook_notifications_total", outcome="dropped"),
        "hub_overflow": metric(m1, "switchboard_transition_subscriber_errors_total", error="overflow")
        - metric(m0, "switchboard_transition_subscriber_errors_total", error="overflow"),
        "cpu": cpu,
        "_records": records,
    }


def _db_latency(records: list[Record], created: dict[str, int]) -> dict[str, float]:
    return summarize_ms(r[1] - created[r[3]] / 1000.0 for r in records if r[3] in created)


async def run(b: Bench) -> dict[str, Any]:
    burst = 1000 if b.quick else BURST
    rounds = 1 if b.quick else ROUNDS
    light_seconds = 5.0 if b.quick else LIGHT_SECONDS
    low_seconds = 5.0 if b.quick else LOW_SECONDS
    high_seconds = 5.0 if b.quick else HIGH_SECONDS
    receiver = await b.ok_receiver().ready()
    out: dict[str, Any] = {
        "endpoints": ENDPOINTS,
        "burst": burst,
        "rounds": rounds,
        "peer_concurrency": list(PEER_CONCURRENCIES),
        "workers": PEER_CONCURRENCY,
        "worker_processes": Settings().notify_worker_processes(),  # the servers' default, on this machine
        "rate_per_minute": RATE_PER_MINUTE,
        "burst_todos_per_delivery": BURST_FANOUT,
    }
    try:
        b.progress.phase("s2 dispatch: setup", 8)
        server, world = await setup(b, "s2", receiver)
        async with running(server, kill=True):
            b.progress.phase("s2 dispatch: warm-up", 5)
            warm = await switchboard_burst(b, server, world, receiver, WARMUP_TODOS)
            sb_size = int(statistics.median(r[4] for r in warm["_records"])) if warm["_records"] else 300
            await receiver.collect()
            probe = await b.client.run(
                "a2a",
                {
                    "url_base": f"https://127.0.0.1:{receiver.ports[0]}/a2a",
                    "n": 20,
                    "concurrency": 4,
                    "ca_pem": b.ca.ca_pem,
                    "pad": 0,
                },
            )
            del probe
            a2a_bare = [r[4] for r in await receiver.collect() if r[0] == "a2a"]
            size = {
                "sb": sb_size,
                "a2a_pad": max(sb_size - (int(statistics.median(a2a_bare)) if a2a_bare else 100), 0),
            }
            await b.client.run(
                "httpx",
                {
                    "url": f"https://127.0.0.1:{receiver.ports[0]}/raw",
                    "n": 50,
                    "concurrency": 4,
                    "ca_pem": b.ca.ca_pem,
                    "body_len": sb_size,
                },
            )
            out["body_bytes"] = {"switchboard": sb_size}

            rounds_out: list[dict[str, Any]] = []
            for r in range(rounds):
                b.progress.phase(f"s2 dispatch: Switchboard burst (round {r + 1}/{rounds})", burst / 400 + 2)
                sb = await switchboard_burst(b, server, world, receiver, burst)
                detail: dict[str, Any] = {"switchboard": sb}
                for conc in PEER_CONCURRENCIES:
                    b.progress.phase(
                        f"s2 dispatch: a2a-sdk burst x{conc} (round {r + 1}/{rounds})", burst / 500 + 1
                    )
                    detail[f"a2a@{conc}"] = await peer_burst(b, "a2a", receiver, burst, size, conc)
                    b.progress.phase(
                        f"s2 dispatch: bare httpx burst x{conc} (round {r + 1}/{rounds})", burst / 600 + 1
                    )
                    detail[f"httpx@{conc}"] = await peer_burst(b, "httpx", receiver, burst, size, conc)
                rounds_out.append(detail)

            fan_targets = sustained_targets(world)
            b.progress.phase(f"s2 dispatch: sustained {LIGHT_RATE:.0f}/s", light_seconds + 3)
            light = await sustained(
                b, server, receiver, [s.target() for s in world.own_sources], 1, LIGHT_RATE, light_seconds
            )
            b.progress.phase(f"s2 dispatch: sustained {LOW_RATE:.0f}/s", low_seconds + 15)
            low = await sustained(
                b,
                server,
                receiver,
                fan_targets,
                SUSTAINED_FANOUT,
                LOW_RATE,
                low_seconds,
                drain_timeout=30.0,
            )
            b.progress.phase(f"s2 dispatch: sustained {HIGH_RATE:.0f}/s", high_seconds + 15)
            high = await sustained(
                b,
                server,
                receiver,
                fan_targets,
                SUSTAINED_FANOUT,
                HIGH_RATE,
                high_seconds,
                drain_timeout=15.0,
            )
            m = await server.metrics()
            out["metrics"] = {
                "delivered": metric(m, "switchboard_notify_hook_notifications_total", outcome="delivered"),
                "failed": metric(m, "switchboard_notify_hook_notifications_total", outcome="failed"),
                "dropped": metric(m, "switchboard_notify_hook_notifications_total", outcome="dropped"),
                "attempts_non_2xx": metric(m, "switchboard_notify_hook_attempts_total")
                - metric(m, "switchboard_notify_hook_attempts_total", result="2xx"),
            }
        created = {
            row[0]: int(row[1])
            for row in sqlite_rows(server.settings["data_dir"], "SELECT id, created_at FROM todos")
        }

        # The dispatcher's fairness is per owning human: one human owning every endpoint (a homelab) gets
        # at most its per-owner share of attempts in flight. Same burst, fresh server.
        b.progress.phase("s2 dispatch: burst with one human owning every endpoint", burst / 100 + 15)
        solo, solo_world = await setup(b, "s2-one-owner", receiver, owners="one")
        async with running(solo, kill=True):
            await switchboard_burst(b, solo, solo_world, receiver, WARMUP_TODOS)
            one_owner = await switchboard_burst(b, solo, solo_world, receiver, burst)
            one_owner.pop("_records")

        # The other mode, side by side: the dispatcher in the server process (SWITCHBOARD_NOTIFY_PROCESS=false).
        b.progress.phase(
            "s2 dispatch: burst and 300/s with the dispatcher in the server process", burst / 150 + 30
        )
        inline, inline_world = await setup(b, "s2-in-process", receiver, notify_process=False)
        async with running(inline, kill=True):
            await switchboard_burst(b, inline, inline_world, receiver, WARMUP_TODOS)
            inline_burst = await switchboard_burst(b, inline, inline_world, receiver, burst)
            inline_burst.pop("_records")
            inline_low = await sustained(
                b,
                inline,
                receiver,
                sustained_targets(inline_world),
                SUSTAINED_FANOUT,
                LOW_RATE,
                low_seconds,
                drain_timeout=30.0,
            )
            inline_low.pop("_records")
    finally:
        await receiver.stop()

    for rd in rounds_out:
        rd["switchboard"]["latency_db"] = _db_latency(rd["switchboard"].pop("_records"), created)
    light["latency_db"] = _db_latency(light.pop("_records"), created)
    low["latency_db"] = _db_latency(low.pop("_records"), created)
    high["latency_db"] = _db_latency(high.pop("_records"), created)
    warm.pop("_records")

    def mean(key: str) -> float:
        return float(sum(d[key]["rate"] for d in rounds_out) / len(rounds_out))

    peer_rates = {
        kind: {str(conc): mean(f"{kind}@{conc}") for conc in PEER_CONCURRENCIES} for kind in ("a2a", "httpx")
    }
    sb_rate = mean("switchboard")
    a2a_rate, raw_rate = max(peer_rates["a2a"].values()), max(peer_rates["httpx"].values())
    first = PEER_CONCURRENCIES[0]
    out["body_bytes"].update(
        {
            "a2a": rounds_out[0][f"a2a@{first}"]["body_bytes"],
            "httpx": rounds_out[0][f"httpx@{first}"]["body_bytes"],
        }
    )
    out.update(
        {
            "rounds_detail": rounds_out,
            "burst_rate": {"switchboard": sb_rate, "a2a": a2a_rate, "httpx": raw_rate},
            "peer_rates": peer_rates,
            "ratio_vs_a2a": ratio(sb_rate, a2a_rate),
            "ratio_vs_httpx": ratio(sb_rate, raw_rate),
            "one_owner_burst": one_owner,
            "in_process": {"burst": inline_burst, "sustained_low": inline_low},
            "sustained_light": light,
            "sustained_low": low,
            "sustained_high": high,
            "ratio_sustained_high_vs_a2a": ratio(high["delivered_rate_steady"], a2a_rate),
            "ratio_sustained_high_vs_httpx": ratio(high["delivered_rate_steady"], raw_rate),
        }
    )
    return out
