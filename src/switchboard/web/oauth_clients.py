"""MCP OAuth dynamic client registration: store a registered client and look it up. The client
secret is sealed with the server's envelope key, bound to the client id (the statements are in
``store/oauth_clients.py``).

:class:`switchboard.web.oauth_store.OAuthStore` inherits this; split out to keep each part small
(issue 16).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from switchboard.core.clock import Clock, ms
from switchboard.cred import Envelope
from switchboard.store import oauth_clients
from switchboard.store.db import Database
from switchboard.store.errors import Conflict
from switchboard.web.cimd import DOCUMENT_KEY_PREFIX


def _secret_aad(client_id: str) -> str:
    return f"oauth_clients:{client_id}:secret"


class OAuthClients:
    """Registered OAuth clients; :class:`switchboard.web.oauth_store.OAuthStore` sets these fields."""

    db: Database
    envelope: Envelope
    clock: Clock

    # -- clients --------------------------------------------------------------------------------

    async def create_client(
        self, client_id: str, name: str | None, info: dict[str, Any], secret: str | None
    ) -> None:
        await oauth_clients.insert_client(
            self.db,
            client_id,
            name,
            json.dumps(info, separators=(",", ":")),
            None if secret is None else self.envelope.seal(secret, _secret_aad(client_id)),
            ms(self.clock.now()),
        )

    async def remember_document_client(self, key: str, name: str | None, info: dict[str, Any]) -> None:
        """Keep the row of a client metadata document's client (stored under ``key``, its digest), with
        what its document said at the latest approval. It has no secret."""
        info_json = json.dumps(info, separators=(",", ":"))
        if await oauth_clients.update_client(self.db, key, name, info_json):
            return
        with contextlib.suppress(Conflict):  # a second approval inserted it first: the row is there
            await oauth_clients.insert_client(self.db, key, name, info_json, None, ms(self.clock.now()))

    async def client(self, client_id: str) -> tuple[dict[str, Any], str | None] | None:
        """The registration record and its opened secret (the SDK's authenticator compares it)."""
        if not client_id or len(client_id) > 64:
            return None
        row = await oauth_clients.client_row(self.db, client_id)
        if row is None:
            return None
        secret = (
            None if row.secret_enc is None else self.envelope.open(row.secret_enc, _secret_aad(client_id))
        )
        return json.loads(row.info_json), secret

    async def presented_id(self, key: str) -> str:
        """The client id a client presents, from its stored id: a document client's URL (kept in its
        row's info) for its digest, any other id as it is."""
        if not key.startswith(DOCUMENT_KEY_PREFIX):
            return key
        found = await self.client(key)
        return str(found[0].get("client_id", key)) if found else key
