"""switchboard.process.tasks.cancel_and_wait: the one way background tasks are stopped."""

from __future__ import annotations

import asyncio

import pytest

from switchboard.process.tasks import cancel_and_wait


async def forever() -> None:
    await asyncio.Event().wait()


async def test_cancels_and_waits_for_every_task_and_skips_none() -> None:
    tasks = [asyncio.create_task(forever()) for _ in range(3)]
    await asyncio.sleep(0)
    await cancel_and_wait(tasks[0], None, *tasks[1:])
    assert all(t.cancelled() for t in tasks)


async def test_an_exception_raised_while_stopping_is_raised() -> None:
    async def fails_on_stop() -> None:
        try:
            await forever()
        finally:
            raise RuntimeError("flush failed")

    task = asyncio.create_task(fails_on_stop())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="flush failed"):
        await cancel_and_wait(task)


async def test_in_a_finally_of_a_cancelled_caller_it_still_waits_and_the_cleanup_after_it_runs() -> None:
    background = asyncio.create_task(forever())
    cleaned: list[str] = []

    async def owner() -> None:
        try:
            await forever()
        finally:
            await cancel_and_wait(background)
            cleaned.append("after")

    task = asyncio.create_task(owner())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert background.cancelled() and cleaned == ["after"]


async def test_a_cancellation_of_the_caller_while_it_waits_is_raised() -> None:
    release = asyncio.Event()
    stopping = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await forever()
        finally:
            stopping.set()
            await release.wait()

    background = asyncio.create_task(slow_to_stop())
    after: list[str] = []

    async def stopper() -> None:
        await cancel_and_wait(background)
        after.append("went on")

    await asyncio.sleep(0)
    task = asyncio.create_task(stopper())
    await stopping.wait()
    task.cancel()  # the stopper is cancelled while it waits: it must not carry on as if it had not been
    with pytest.raises(asyncio.CancelledError):
        await task
    assert after == []
    release.set()
    await asyncio.wait([background])
