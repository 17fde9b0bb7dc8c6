"""SWITCHBOARD_NOTIFY_PROCESS: the dispatcher in its own process (src/switchboard/notify/process.py).

A real child process (tests/support/notify_worker.py: the real worker with the harness's resolver and
CA), a real HTTPS receiver, the stock Standard Webhooks verifier, and the server's own /metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook

from switchboard.notify.component import NotifyComponent
from switchboard.notify.dispatcher import Dispatcher
from switchboard.notify.process import WORKER_COMMAND, RemoteDispatcher, child_of, queue_shares
from switchboard.notify.wire import line, transitions_lines, transitions_of
from switchboard.notify.worker import NICENESS, READ_LIMIT
from switchboard.services import build_services
from switchboard.settings import MAX_AUTO_NOTIFY_PROCESSES
from switchboard.store.transitions import Transition
from tests.integration.notify.conftest import Env, notify_env
from tests.support.receivers import Respond
from tests.support.server import TEST_CRED_KEY, make_settings

# A worker child imports the delivery stack before it answers; on a loaded 2-core box that alone
# has taken over 5 s, so the first request is awaited with the bound the server's own start uses.
WORKER_START = 30.0


@pytest.fixture
async def penv(tmp_path: Path) -> AsyncIterator[Env]:
    async with notify_env(tmp_path, notify_process=True) as e:
        yield e


def remote(env: Env) -> RemoteDispatcher:
    dispatcher = env.notify.dispatcher
    assert isinstance(dispatcher, RemoteDispatcher)
    return dispatcher


def child_pid(env: Env) -> int:
    proc = remote(env).workers[0].proc
    assert proc is not None and proc.returncode is None
    return proc.pid


async def test_the_worker_process_delivers_a_signed_notification(penv: Env) -> None:
    assert child_pid(penv) != os.getpid()
    world, a = await penv.tenant("ep-a")
    secret = (await a.ok("create_notify_hook", {"url": penv.hook_url()}))["signing_secret"]
    (todo_id,) = await penv.deliver(world)
    request = await penv.receiver.next_request(timeout=WORKER_START)
    payload = Webhook(secret).verify(request.body, {k: v for k, v in request.headers})
    assert payload["type"] == "todo.ready" and payload["todo_id"] == todo_id
    await penv.settle()
    # the child's counters are in this process's registry, and its health write is in the database
    assert (
        penv.metric("switchboard_notify_hook_notifications_total", type="todo.ready", outcome="delivered")
        == 1
    )
    assert penv.metric("switchboard_notify_hook_attempts_total", result="2xx") == 1
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["last_status"] == 204 and hook["consecutive_failures"] == 0


async def test_the_worker_process_disables_a_dead_hook(penv: Env) -> None:
    penv.receiver.behaviour = Respond(500)
    world, a = await penv.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": penv.hook_url()})
    for i in range(10):
        await penv.deliver(world, title=f"t{i}")
        await penv.settle()
    (hook,) = (await a.ok("list_notify_hooks"))["hooks"]
    assert hook["enabled"] is False and hook["consecutive_failures"] == 10
    assert penv.metric("switchboard_notify_hooks_disabled_total", reason="consecutive_failures") == 1
    assert penv.metric("switchboard_notify_hook_attempts_total", result="5xx") == 30
    seen = len(penv.receiver.requests)
    await penv.deliver(world, title="the 11th")
    await penv.settle()
    assert len(penv.receiver.requests) == seen


async def test_a_killed_worker_loses_only_notifications_and_is_started_again(penv: Env) -> None:
    world, a = await penv.tenant("ep-a")
    await a.ok("create_notify_hook", {"url": penv.hook_url()})
    r = remote(penv)
    r.restart_delays = (3.0,)  # long enough to deliver while no worker runs
    proc = r.workers[0].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    await r.down()
    (lost,) = await penv.deliver(world, title="while down")
    await penv.services.hub.idle()
    assert (
        penv.metric("switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped") == 1
    )
    assert penv.logs.events("notify worker exited; starting it again")
    await r.running()
    assert r.starts == 2 and child_pid(penv) != proc.pid
    (todo_id,) = await penv.deliver(world, title="after the restart")
    request = await penv.receiver.next_request(timeout=WORKER_START)
    assert todo_id.encode() in request.body and lost.encode() not in request.body
    # the todo whose notification was lost is untouched: pending and claimable (ADR-0013)
    claimed = {(await a.ok("claim_next"))["todo"]["id"] for _ in range(2)}
    assert claimed == {lost, todo_id}


async def test_stopping_the_server_stops_the_worker(tmp_path: Path) -> None:
    async with notify_env(tmp_path, notify_process=True) as env:
        await remote(env).idle()  # a line beyond the hello: from here on it may hold work
        proc = remote(env).workers[0].proc
        assert proc is not None and proc.returncode is None
    assert proc.returncode == 0  # it drained and exited on its own, not killed


async def test_a_worker_handed_nothing_is_not_waited_for_at_stop(tmp_path: Path) -> None:
    """A child still starting (here: one that never gets past its imports) holds no work: the stop
    ends it at once instead of waiting out the drain timeout and grace for it."""
    settings = make_settings(tmp_path, notify_process=True)
    services = build_services(settings)
    never_ready = [sys.executable, "-c", "import time; time.sleep(3600)"]
    dispatcher = RemoteDispatcher(services, retry_delays=[1.0], command=never_ready, drain_timeout=60.0)
    await dispatcher.start()
    proc = dispatcher.workers[0].proc
    assert proc is not None and proc.returncode is None
    async with asyncio.timeout(30):  # not the 60 s drain plus grace
        await dispatcher.stop()
    assert proc.returncode == -signal.SIGKILL
    await services.close()


def test_a_memory_database_is_refused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "sqlite+aiosqlite:///:memory:", notify_process=True)
    with pytest.raises(ValueError, match="NOTIFY_PROCESS"):
        NotifyComponent(build_services(settings))


async def test_the_worker_module_answers_and_exits_at_the_end_of_its_input(tmp_path: Path) -> None:
    """``python -m switchboard.notify.worker`` itself, as the server starts it by default."""
    settings = make_settings(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        *WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    hello = {"settings": settings.model_dump(mode="json"), "retry_delays": [1.0, 5.0]}
    assert len(line({"hello": hello})) * 8 < READ_LIMIT  # the settings' line fits the worker's reads
    proc.stdin.write(line({"hello": hello}) + line({"idle": 7}))
    async with asyncio.timeout(30):
        answer = json.loads(await proc.stdout.readline())
        assert answer == {"idle": 7}
        proc.stdin.close()
        _, err = await proc.communicate()
    assert proc.returncode == 0
    assert TEST_CRED_KEY not in err.decode()  # the key came on the pipe and is never logged


def test_by_default_the_worker_process_delivers_unless_the_database_is_in_memory(tmp_path: Path) -> None:
    on_file = make_settings(tmp_path / "a", notify_process=None)
    in_memory = make_settings(tmp_path / "b", "sqlite+aiosqlite:///:memory:", notify_process=None)
    assert on_file.notify_in_worker_process() and not in_memory.notify_in_worker_process()
    assert isinstance(NotifyComponent(build_services(on_file)).dispatcher, RemoteDispatcher)
    assert isinstance(NotifyComponent(build_services(in_memory)).dispatcher, Dispatcher)


async def test_a_stop_while_waiting_to_restart_does_not_wait_for_the_restart(tmp_path: Path) -> None:
    async with notify_env(tmp_path, notify_process=True) as env:
        r = remote(env)
        r.restart_delays = (3600.0,)
        proc = r.workers[0].proc
        assert proc is not None
        proc.kill()
        await r.down()
        async with asyncio.timeout(10):  # not the hour: the stop ends the backoff at once
            await r.stop()
        assert r.starts == 1


async def test_the_worker_yields_the_cpu_to_the_server(penv: Env) -> None:
    """REQ-7: under CPU contention the kernel serves ingest's process first (niceness +10)."""
    await remote(penv).idle()  # it answered: it is past its start-up
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, child_pid(penv)) == min(mine + NICENESS, 19)


async def test_two_worker_processes_each_deliver_for_their_own_endpoints(tmp_path: Path) -> None:
    async with notify_env(tmp_path, notify_process=True, notify_processes=2) as env:
        r = remote(env)
        assert len(r.workers) == 2
        pids = [w.proc.pid for w in r.workers if w.proc is not None]
        assert len(set(pids)) == 2
        # endpoints until each child owns one (ids are random; 20 tries miss one child with p = 2**-19)
        owned: dict[int, tuple[Any, str]] = {}
        for i in range(20):
            world, _ = await env.tenant(f"ep-{i}")
            owned.setdefault(child_of(world.endpoint.id, 2), (world, world.endpoint.id))
            if len(owned) == 2:
                break
        assert len(owned) == 2
        secrets = {}
        for world, endpoint_id in owned.values():
            agent = env.agents[world.endpoint.slug]
            secrets[endpoint_id] = (await agent.ok("create_notify_hook", {"url": env.hook_url()}))[
                "signing_secret"
            ]
        delivered: dict[str, str] = {}
        for world, endpoint_id in owned.values():
            (todo_id,) = await env.deliver(world)
            delivered[todo_id] = endpoint_id
        for _ in delivered:
            request = await env.receiver.next_request(timeout=WORKER_START)
            payload = json.loads(request.body)
            Webhook(secrets[delivered[payload["todo_id"]]]).verify(request.body, dict(request.headers))
        await env.settle()
        assert (
            env.metric("switchboard_notify_hook_notifications_total", type="todo.ready", outcome="delivered")
            == 2
        )

        # child 0 dies: its endpoints' notifications are dropped and counted, child 1's still arrive
        r.restart_delays = (3600.0,)
        dead = r.workers[0].proc
        assert dead is not None
        dead.kill()
        await r.workers[0].down()
        (lost,) = await env.deliver(owned[0][0], title="while child 0 is down")
        (kept,) = await env.deliver(owned[1][0], title="child 1 is fine")
        request = await env.receiver.next_request(timeout=WORKER_START)
        assert kept.encode() in request.body
        await env.services.hub.idle()
        await r.workers[1].idle()
        assert (
            env.metric("switchboard_notify_hook_notifications_total", type="todo.ready", outcome="dropped")
            == 1
        )
        assert r.workers[1].proc is not None and r.workers[1].proc.pid == pids[1]
        assert lost not in {json.loads(q.body)["todo_id"] for q in env.receiver.requests}


async def test_queue_depth_is_the_sum_of_the_children_and_a_dead_childs_share_is_zero(tmp_path: Path) -> None:
    services = build_services(make_settings(tmp_path, notify_process=True))
    r = RemoteDispatcher(services, retry_delays=[1.0], processes=3)

    def depth() -> float:
        return float(services.metrics.registry.get_sample_value("switchboard_notify_hook_queue_depth") or 0)

    r.apply_metrics(0, [["notify_queue_depth", "set", {}, 3]])
    r.apply_metrics(2, [["notify_queue_depth", "set", {}, 4]])
    assert depth() == 7
    r.apply_metrics(0, [["notify_queue_depth", "set", {}, 1]])
    assert depth() == 5
    r._forget_gauges(2)
    assert depth() == 1
    # counters add up whichever child reports them; unknown series are ignored
    r.apply_metrics(1, [["notify_attempts", "inc", {"result": "2xx"}, 2], ["not_relayed", "inc", {}, 9]])
    r.apply_metrics(0, [["notify_attempts", "inc", {"result": "2xx"}, 1]])
    assert (
        services.metrics.registry.get_sample_value(
            "switchboard_notify_hook_attempts_total", {"result": "2xx"}
        )
        == 3
    )
    await services.close()


def test_by_default_one_worker_process_per_core_at_most_four(tmp_path: Path) -> None:
    default = make_settings(tmp_path, notify_process=None)
    assert default.notify_worker_processes() == max(1, min(os.cpu_count() or 1, MAX_AUTO_NOTIFY_PROCESSES))
    assert make_settings(tmp_path, notify_processes=3).notify_worker_processes() == 3
    dispatcher = NotifyComponent(
        build_services(make_settings(tmp_path, notify_process=True, notify_processes=2))
    ).dispatcher
    assert isinstance(dispatcher, RemoteDispatcher) and len(dispatcher.workers) == 2
    with pytest.raises(ValueError):
        make_settings(tmp_path, notify_processes=0)


def test_the_instances_queue_bound_is_split_between_the_children(tmp_path: Path) -> None:
    """REQ-7's queue is the instance's: the children's shares sum to the setting, never more."""
    assert queue_shares(10_000, 2) == [5_000, 5_000]
    assert queue_shares(10, 4) == [3, 3, 2, 2]
    assert queue_shares(3, 3) == [1, 1, 1]
    for size in (1, 2, 7, 10_000, 10_001):
        for children in (1, 2, 3, 4):
            if children <= size:
                assert sum(queue_shares(size, children)) == size
                assert min(queue_shares(size, children)) >= 1
    # never more children than queue slots (a child with no slot could only drop)
    assert make_settings(tmp_path, notify_processes=4, notify_queue_size=2).notify_worker_processes() == 2
    services = build_services(make_settings(tmp_path, notify_process=True, notify_queue_size=7))
    r = RemoteDispatcher(services, retry_delays=[1.0], processes=3)
    assert [w.queue_size for w in r.workers] == [3, 2, 2]
    assert [w.attempts for w in r.workers] == [11, 11, 10]  # SWITCHBOARD_NOTIFY_WORKERS (32), split too
    assert len(RemoteDispatcher(services, retry_delays=[1.0], processes=9).workers) == 7
    # never more children than concurrent attempts either (a child with none could only queue)
    assert make_settings(tmp_path, notify_processes=4, notify_workers=3).notify_worker_processes() == 3
    few = build_services(make_settings(tmp_path, notify_process=True, notify_workers=2))
    assert [w.attempts for w in RemoteDispatcher(few, retry_delays=[1.0], processes=4).workers] == [1, 1]
    with pytest.raises(ValueError):  # 0 would make an unbounded asyncio queue
        make_settings(tmp_path, notify_queue_size=0)


def test_a_batch_goes_to_the_worker_in_lines_its_small_read_buffer_takes() -> None:
    """The worker reads a line at a time with a small buffer (worker.READ_LIMIT): a batch is split into
    lines of about 64 KiB, in order, each carrying exactly the transitions it encodes."""
    batch = [
        Transition(
            todo_id=f"td_{i:04d}",
            endpoint_id="ep_1",
            queue="inbox",
            kind=None,
            source="src",
            title="\U0001f600" * 500 if i % 7 == 0 else f"title {i}",  # the longest row a title makes
            attempt=1,
            transition="created",
            reason=None,
            push_eligible=True,
            push_excluded=False,
            at=1.5,
        )
        for i in range(256)
    ]
    lines = transitions_lines(batch)
    assert len(lines) > 1
    assert [t for _, carried in lines for t in carried] == batch
    for data, carried in lines:
        assert data.endswith(b"\n") and len(data) <= 64 * 1024 + 8 * 1024
        assert transitions_of(json.loads(data)["t"]) == carried
    # the worker's read limit holds the longest line with room to spare (a longer one would end it)
    assert max(len(data) for data, _ in lines) * 2 < READ_LIMIT
    ((small, carried),) = transitions_lines(batch[1:4])  # a small batch is one line, as before
    assert carried == batch[1:4] and transitions_of(json.loads(small)["t"]) == batch[1:4]
