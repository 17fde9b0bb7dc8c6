"""What the edge's guards send instead of the app, and how they hand a body they read on to it.

The guards in front of the SDKs (boundary.py, authorization.py, sessioncap.py, web/cimd_gate.py) answer
a refusal themselves, as JSON that no cache keeps, and a guard that had to read a body replays it to
the app byte for byte. One place for both, so every refusal carries the same headers.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import Message, Receive, Send


async def send_json(
    send: Send, status: int, payload: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """A whole JSON answer: ``payload`` is already encoded; ``headers`` come after the standard ones."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"x-content-type-options", b"nosniff"),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` whole once, then whatever the client sends next (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
