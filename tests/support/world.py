"""Set up a tenant (human, endpoint, source, route) on a running instance, and sign deliveries the way
Gitea, GitHub and Standard Webhooks senders do."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from standardwebhooks import Webhook

from switchboard.core.verbs import DEFAULT_GRANT
from switchboard.ingest.verify import mint_path_token, mint_source_secret
from switchboard.store.accounts import Endpoint
from switchboard.store.sources import Source
from tests.support.secrets import reveal
from tests.support.server import Instance


@dataclass
class World:
    human_id: str
    endpoint: Endpoint
    token: str
    source: Source
    secret: str
    inbound_path: str


async def make_world(
    inst: Instance,
    *,
    email: str | None = None,
    slug: str = "agent",
    source_slug: str | None = None,
    kind: str = "gitea",
    trust: str = "signature",
    queues: Sequence[str] = ("inbox",),
    route_queue: str = "inbox",
    verbs: Sequence[str] = DEFAULT_GRANT,
    human_id: str | None = None,
) -> World:
    s = inst.services
    if human_id is None:
        human_id = await s.accounts.create_human(email or f"{slug}@example.com", "correct horse battery")
    endpoint, token = await s.accounts.vend_endpoint(human_id, slug, list(queues), list(verbs))
    secret = mint_path_token() if trust == "token" else mint_source_secret(kind)
    source = await s.sources.create(human_id, source_slug or f"{slug}-src", kind, trust, secret)
    await s.sources.add_route(source.slug, route_queue, endpoint.slug, None)
    path = f"/in/{source.slug}/{secret}" if trust == "token" else f"/in/{source.slug}"
    reveal(token, secret)
    return World(human_id, endpoint, token, source, secret, path)


def gitea_delivery(
    secret: str, payload: Any, event: str = "pull_request", delivery: str | None = None
) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    sig = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return body, {
        "content-type": "application/json",
        "x-gitea-event": event,
        "x-gitea-delivery": delivery or str(uuid.uuid4()),
        "x-gitea-signature": sig,
    }


def github_delivery(
    secret: str, payload: Any, event: str = "issues", delivery: str | None = None
) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    sig = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return body, {
        "content-type": "application/json",
        "x-github-event": event,
        "x-github-delivery": delivery or str(uuid.uuid4()),
        "x-hub-signature-256": f"sha256={sig}",
    }


def standard_delivery(
    secret: str, payload: Any, msg_id: str | None = None, when: datetime | None = None
) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload)
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    when = when or datetime.now(UTC)
    return body.encode(), {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, when, body),
    }


def pr_payload(number: int = 482, title: str = "Add the thing", repo: str = "acme/widgets") -> dict[str, Any]:
    return {
        "action": "opened",
        "number": number,
        "pull_request": {
            "number": number,
            "title": title,
            "body": "secret body text",
            "html_url": f"https://git.example.com/{repo}/pulls/{number}",
        },
        "repository": {"full_name": repo},
        "sender": {"login": "alice", "email": "alice@example.com"},
    }
