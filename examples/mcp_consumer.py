"""A reference consumer on the official MCP SDK: the claim loop docs/mcp.md recommends.

    SWITCHBOARD_TOKEN=sbp_... python examples/mcp_consumer.py --url http://127.0.0.1:8080/mcp

One ``claim_next`` per todo: it acks the previous todo (``ack={todo_id, lease, result}``) and claims
the next in the same call, long-polling (``wait_seconds``) when nothing is pending. Each claim carries
a fresh ``request_key``; a call whose answer is lost (a dropped connection) is sent again with the same
key and answers the same todo instead of claiming a second one. While a todo is worked on, a
heartbeat keeps its lease; a heartbeat answered ``canceled`` or ``lease_lost`` means stop: the todo
was canceled, or this claim ended and another worker may hold the todo now, so its result is dropped.

Replace :func:`work` with your own. ``--max`` stops after that many todos (the last one is acked with
``ack``); ``--idle-exit`` stops once a claim finds nothing for ``--wait`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

LEASE_SECONDS = 60
STOP = ("canceled", "lease_lost", "not_found")  # heartbeat errors after which the work is abandoned


class Lost(Exception):
    """The claim ended under the worker (canceled, or its lease lost): drop the work."""


async def call(client: Client, verb: str, args: dict[str, Any], *, retries: int = 3) -> dict[str, Any]:
    """One verb; the structured error of a refused call is raised as ``RuntimeError(code)``. Transport
    errors are retried with the same arguments (a claim keeps its request key, so a retry is safe)."""
    for attempt in range(retries + 1):
        try:
            result = await client.call_tool(verb, args)
        except (httpx2.TransportError, OSError):
            if attempt == retries:
                raise
            await asyncio.sleep(0.5 * (attempt + 1))
            continue
        text = "".join(getattr(c, "text", "") for c in result.content)
        data = result.structured_content if result.structured_content is not None else json.loads(text)
        if result.is_error:
            raise RuntimeError(data.get("code", "error"))
        return dict(data)
    raise AssertionError("unreachable")


async def work(todo: dict[str, Any]) -> Any:
    """Your work. This one answers with what it was given."""
    return {"handled": todo["id"], "title": todo["title"]}


async def keep_lease(client: Client, todo: dict[str, Any]) -> None:
    """Heartbeat at a third of the lease until cancelled; raise :class:`Lost` when the claim ended."""
    while True:
        await asyncio.sleep(LEASE_SECONDS / 3)
        try:
            await call(client, "heartbeat", {"todo_id": todo["id"], "lease": todo["lease"]})
        except RuntimeError as exc:
            if str(exc) in STOP:
                raise Lost(str(exc)) from None
            raise


async def run(client: Client, *, limit: int | None, wait: int, idle_exit: bool) -> int:
    done = 0
    finished: dict[str, Any] | None = None  # the previous todo's ack, sent with the next claim
    while limit is None or done < limit:
        args: dict[str, Any] = {
            "wait_seconds": wait,
            "lease_seconds": LEASE_SECONDS,
            "request_key": uuid.uuid4().hex,
        }
        if finished is not None:
            args["ack"] = finished
        answer = await call(client, "claim_next", args)
        acked, finished = answer.get("acked"), None
        if acked is not None and not acked["ok"]:
            print(f"ack of {acked['todo_id']} refused: {acked['error']['code']}", file=sys.stderr)
        todo = answer["todo"]
        if todo is None:
            if idle_exit:
                break
            continue
        heart = asyncio.create_task(keep_lease(client, todo))
        job = asyncio.create_task(work(todo))
        finished_first, _ = await asyncio.wait({heart, job}, return_when=asyncio.FIRST_COMPLETED)
        heart.cancel()
        if job in finished_first and job.exception() is None:
            finished = {"todo_id": todo["id"], "lease": todo["lease"], "result": job.result()}
            done += 1
        elif job in finished_first:
            error = str(job.exception())[:2000] or "work failed"
            await call(client, "fail", {"todo_id": todo["id"], "lease": todo["lease"], "error": error})
        else:
            job.cancel()
            print(f"abandoned {todo['id']}: {heart.exception()}", file=sys.stderr)
    if finished is not None:
        await call(client, "ack", finished)
    return done


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080/mcp")
    parser.add_argument("--max", type=int, default=None, help="stop after this many todos")
    parser.add_argument("--wait", type=int, default=20, help="long-poll seconds per claim")
    parser.add_argument("--idle-exit", action="store_true", help="stop when a claim finds nothing")
    opts = parser.parse_args()
    token = os.environ["SWITCHBOARD_TOKEN"]
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=opts.wait + 30) as http,
        Client(streamable_http_client(opts.url, http_client=http)) as client,
    ):
        done = await run(client, limit=opts.max, wait=opts.wait, idle_exit=opts.idle_exit)
    print(f"done: {done}")


if __name__ == "__main__":
    asyncio.run(main())
