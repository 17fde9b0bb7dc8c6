"""POST /in/<source>[/<token>]: verify by trust mode, derive the event, route it to todos.

Order matters for "bad input stores nothing": size, source, trust, JSON and routing are all decided
before the one transaction that inserts the todos.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from switchboard.core.ratelimit import WindowLimiter
from switchboard.core.text import Unstorable, loads_strict
from switchboard.ingest.derive import derive
from switchboard.ingest.verify import delivery_id, verify_signature
from switchboard.obs.logs import get_logger
from switchboard.services import Services
from switchboard.store.errors import StoreUnavailable
from switchboard.store.sources import routes_for
from switchboard.store.todos import NewTodo

log = get_logger("switchboard.ingest")

NO_TIMESTAMP_KINDS = frozenset({"gitea", "github"})


class BodyTooLarge(Exception):
    pass


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


async def read_capped(request: Request, cap: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


class Ingest:
    def __init__(self, services: Services, *, per_source_per_minute: float = 600) -> None:
        self.s = services
        self.limiter = WindowLimiter.per_minute(services.clock, per_source_per_minute)

    def routes(self) -> list[Route]:
        return [
            Route("/in/{slug}", self.handle, methods=["POST"]),
            Route("/in/{slug}/{token}", self.handle, methods=["POST"]),
        ]

    def _invalid_json(self, reason: str) -> JSONResponse:
        self._count("invalid_json")
        return error(400, "invalid_json", f"the body is not valid JSON: {reason}")

    def _count(self, outcome: str) -> None:
        self.s.metrics.ingest.labels(outcome).inc()

    async def handle(self, request: Request) -> JSONResponse:
        with self.s.metrics.ingest_seconds.time():
            try:
                return await self._handle(request)
            except StoreUnavailable:
                self._count("unavailable")
                return error(503, "unavailable", "the database is unavailable; retry later")
            except ClientDisconnect:
                self._count("client_disconnect")
                return error(400, "client_disconnect", "the request body did not arrive")

    async def _handle(self, request: Request) -> JSONResponse:
        slug = request.path_params["slug"]
        path_token = request.path_params.get("token")
        try:
            body = await read_capped(request, self.s.settings.max_body_bytes)
        except BodyTooLarge:
            self._count("too_large")
            return error(413, "too_large", f"bodies are capped at {self.s.settings.max_body_bytes} bytes")

        found = await self.s.sources.for_delivery(slug)  # the source and all its routes: one read
        if found is None:
            self._count("unknown_source")
            return error(404, "not_found", "no such source")
        source, secret = found.source, found.secret

        wait = self.limiter.take(source.id)
        if wait:
            self._count("rate_limited")
            return JSONResponse(
                {"error": "rate_limited", "message": "too many deliveries for this source"},
                status_code=429,
                headers={"retry-after": str(max(1, math.ceil(wait)))},  # when the window has room
            )

        verified = False
        via_token = False
        if source.trust == "token":
            if path_token is None or not hmac.compare_digest(path_token.encode(), secret.encode()):
                self._count("bad_token")
                return error(404, "not_found", "no such source")
            verified = via_token = True
        elif path_token is not None:
            self._count("unknown_source")
            return error(404, "not_found", "no such source")
        elif source.trust == "signature":
            if not verify_signature(source.kind, secret, body, request.headers, now=self.s.clock.now()):
                self._count("bad_signature")
                log.info("delivery refused: signature did not verify", source=source.slug)
                return error(401, "bad_signature", "the delivery's signature did not verify")
            verified = True
        else:  # trust "none": accepted; verified only if it carries a signature that checks out
            verified = source.kind != "generic" and verify_signature(
                source.kind, secret, body, request.headers, now=self.s.clock.now()
            )

        try:
            payload: Any = loads_strict(body)
        except Unstorable as exc:
            return self._invalid_json(str(exc))

        event = derive(source.kind, request.headers, payload)
        did = delivery_id(source.kind, request.headers)
        if did is None and source.kind in NO_TIMESTAMP_KINDS:
            # A captured Gitea/GitHub body stays valid for ever (no timestamp in the scheme): while its
            # todo is live, a resend without the delivery header dedupes on the body (docs/ingest.md).
            did = "sha256:" + hashlib.sha256(body).hexdigest()
        targets = routes_for(found.routes, event.kind)
        if not targets:
            self._count("unrouted")
            log.info("delivery has no route", source=source.slug, kind=event.kind)
            return JSONResponse({"todos": [], "deduplicated": 0, "routed": False}, status_code=202)

        result = await self.s.todos.create(
            [
                NewTodo(
                    endpoint_id=t.endpoint_id,
                    queue=t.queue,
                    title=event.title,
                    payload=payload,
                    kind=event.kind,
                    source=source.slug,
                    source_id=source.id,
                    delivery_id=did,
                    verified=verified,
                    via_token=via_token,
                    quarantined=source.quarantined,
                )
                for t in targets
            ]
        )
        self._count("accepted" if result.created else "deduplicated")
        log.info(
            "delivery accepted",
            source=source.slug,
            kind=event.kind,
            todos=len(result.created),
            deduplicated=result.deduplicated,
            verified=verified,
        )
        return JSONResponse(
            {
                "todos": result.created,
                "deduplicated": result.deduplicated,
                "routed": True,
                "verified": verified,
            },
            status_code=202,
        )
