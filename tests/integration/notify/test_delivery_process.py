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
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from switchboard.notify.component import NotifyComponent
from switchboard.notify.process import WORKER_COMMAND, RemoteDispatcher
from switchboard.notify.wire import line
from switchboard.notify.worker import NICENESS
from switchboard.services import build_services
from tests.integration.notify.conftest import Env, notify_env
from tests.support.receivers import Respond
from tests.support.server import TEST_CRED_KEY, make_settings


@pytest.fixture
async def penv(tmp_path: Path) -> AsyncIterator[Env]:
    async with notify_env(tmp_path, notify_process=True) as e:
        yield e


def remote(env: Env) -> RemoteDispatcher:
    dispatcher = env.notify.dispatcher
    assert isinstance(dispatcher, RemoteDispatcher) and env.notify.in_process is None
    return dispatcher


def child_pid(env: Env) -> int:
    proc = remote(env)._proc
    assert proc is not None and proc.returncode is None
    return proc.pid


async def test_the_worker_process_delivers_a_signed_notification(penv: Env) -> None:
    assert child_pid(penv) != os.getpid()
    world, a = await penv.tenant("ep-a")
    secret = (await a.ok("create_notify_hook", {"url": penv.hook_url()}))["signing_secret"]
    (todo_id,) = await penv.deliver(world)
    request = await penv.receiver.next_request()
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
    proc = r._proc
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
    request = await penv.receiver.next_request()
    assert todo_id.encode() in request.body and lost.encode() not in request.body
    # the todo whose notification was lost is untouched: pending and claimable (ADR-0013)
    claimed = {(await a.ok("claim_next"))["todo"]["id"] for _ in range(2)}
    assert claimed == {lost, todo_id}


async def test_stopping_the_server_stops_the_worker(tmp_path: Path) -> None:
    async with notify_env(tmp_path, notify_process=True) as env:
        proc = remote(env)._proc
        assert proc is not None and proc.returncode is None
    assert proc.returncode == 0  # it drained and exited on its own, not killed


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
    assert NotifyComponent(build_services(in_memory)).in_process is not None


async def test_a_stop_while_waiting_to_restart_does_not_wait_for_the_restart(tmp_path: Path) -> None:
    async with notify_env(tmp_path, notify_process=True) as env:
        r = remote(env)
        r.restart_delays = (3600.0,)
        proc = r._proc
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
