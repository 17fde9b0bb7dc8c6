"""Push notification configs: input validation, sealing, and the rules of every write (the statements
are in ``store/push_configs.py``).

* The URL passes the SSRF guard before anything is stored (and again before every delivery attempt).
* URL, token and credentials are sealed by the cred envelope, bound to the row id and field; what is
  read back for the API is redacted (docs/a2a.md, "What Get and List return").
* The per-task ceiling is enforced in the inserting transaction, after locking the task row.
* ``authentication.scheme = StandardWebhooks`` asks for Standard Webhooks signing: the credentials are a
  ``whsec_`` secret, minted here when the caller sends none, and shown once, in the create result.
* The redaction placeholder sent back (the a2a-sdk get-modify-set pattern) keeps the stored value: a
  ``token`` or ``credentials`` of ``[redacted]``, or a URL ending in ``?[redacted]`` that matches the
  stored one, replace nothing. It is never stored, and is refused where there is nothing to keep.
"""

from __future__ import annotations

import re
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.a2a.config_types import SIGNING_SCHEME, ConfigInput, ConfigView, SendableConfig
from switchboard.a2a.errors import ConfigRefused
from switchboard.a2a.tasks import lock_owned
from switchboard.core.clock import Clock, ms
from switchboard.core.ids import new_id
from switchboard.cred import Envelope
from switchboard.push import TargetRejected, Validator, mint_secret, sign
from switchboard.store import push_configs
from switchboard.store.db import Database

#: The verb an endpoint must hold, at each delivery attempt, for its tasks' push configs to deliver
#: (docs/a2a.md, "Scope cut"). Without it the owner has taken push notifications away from it.
PUSH_VERB: Final = "a2a_push_config"
PLACEHOLDER: Final = "[redacted]"  # what Get and List show in place of a secret (views.REDACTED)
REDACTED_QUERY: Final = "?" + PLACEHOLDER
MAX_TOKEN = 1024
MAX_CREDENTIALS = 4096
# A2A gives config ids no grammar; the TCK sends 78-character ones. Printable, header- and path-safe.
_CONFIG_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:~-]{0,254}")
_SCHEME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}")  # an RFC 9110 token
_HEADER_SAFE = re.compile(r"[\x20-\x7e]+")  # printable ASCII: nothing that can split a header


def _text(value: str, field: str, limit: int) -> str:
    if len(value) > limit or not _HEADER_SAFE.fullmatch(value):
        raise ConfigRefused(
            f"{field} must be 1-{limit} printable ASCII characters (it is sent in an HTTP header)",
            reason="invalid_field",
        )
    return value


async def parse_config(
    validator: Validator,
    *,
    config_id: str,
    url: str,
    token: str,
    scheme: str | None,
    credentials: str,
    allow_mint: bool = True,
) -> ConfigInput:
    """Validate what the caller sent (proto strings: empty means absent). Raises ConfigRefused with a
    message that names the field and the reason, never the value."""
    if config_id and not _CONFIG_ID.fullmatch(config_id):
        raise ConfigRefused(
            "id must be 1-255 characters: letters, digits, '.', '_', ':', '~' or '-'", reason="invalid_field"
        )
    if not url:
        raise ConfigRefused("url is required", reason="invalid_field")
    keep_url = url.endswith(REDACTED_QUERY)
    keep_token = token == PLACEHOLDER
    keep_credentials = credentials == PLACEHOLDER and scheme is not None
    try:
        # With the placeholder query, the origin and path are checked here and the stored URL (whose
        # display must equal ``url``) is kept: see ConfigStore.upsert.
        target = await validator.check(url[: -len(REDACTED_QUERY)] if keep_url else url)
    except TargetRejected as err:
        raise ConfigRefused(f"url refused: {err.public_message}", reason="rejected_ssrf") from None
    minted = False
    if scheme is not None:
        if not _SCHEME.fullmatch(scheme):
            raise ConfigRefused(
                "authentication.scheme must be an HTTP auth scheme name", reason="invalid_field"
            )
        if scheme.lower() == SIGNING_SCHEME.lower():
            scheme = SIGNING_SCHEME
            if keep_credentials:
                pass
            elif credentials:
                try:
                    sign([credentials], "msg_check", 0, b"")
                except ValueError:
                    raise ConfigRefused(
                        "authentication.credentials for StandardWebhooks must be a whsec_ secret of 32 "
                        "base64-encoded bytes, or empty to have one minted",
                        reason="invalid_field",
                    ) from None
            elif allow_mint:
                credentials, minted = mint_secret(), True
            else:
                raise ConfigRefused(
                    "an inline StandardWebhooks config must bring its whsec_ secret; or leave credentials "
                    "empty in CreateTaskPushNotificationConfig to have one minted",
                    reason="invalid_field",
                )
        elif not credentials:
            raise ConfigRefused(
                "authentication.credentials is required for this scheme", reason="invalid_field"
            )
        elif not keep_credentials:
            credentials = _text(credentials, "authentication.credentials", MAX_CREDENTIALS)
    elif credentials:
        raise ConfigRefused("authentication.credentials needs authentication.scheme", reason="invalid_field")
    item = ConfigInput(
        config_id=config_id or new_id("pnc"),
        url=url,
        url_display=url if keep_url else target.redacted,
        host=target.host,
        token=None if keep_token else (_text(token, "token", MAX_TOKEN) if token else None),
        scheme=scheme,
        credentials=None if keep_credentials else (credentials or None),
        minted=minted,
        keep_url=keep_url,
        keep_token=keep_token,
        keep_credentials=keep_credentials,
    )
    if item.keeps and not config_id:
        raise _nothing_to_keep()
    return item


def _nothing_to_keep() -> ConfigRefused:
    return ConfigRefused(
        f"'{PLACEHOLDER}' is the placeholder Get and List show in place of a secret; it can only be sent "
        "back to keep the stored value of an existing config with the same id: send the real value",
        reason="placeholder",
    )


def _check_kept(item: ConfigInput, stored: push_configs.Stored) -> None:
    """A placeholder keeps the stored value only where there is one, and for the same target: the
    URL must be the stored one as Get shows it, the credentials must stay with their scheme."""
    if item.keep_url and item.url != stored.url_display:
        raise ConfigRefused(
            f"url ends in the '{REDACTED_QUERY}' placeholder but is not this config's stored URL: send the full URL",
            reason="placeholder",
        )
    if item.keep_token and stored.token_enc is None:
        raise _nothing_to_keep()
    same_scheme = (stored.auth_scheme or "").lower() == (item.scheme or "").lower()
    if item.keep_credentials and (stored.credentials_enc is None or not same_scheme):
        raise ConfigRefused(
            f"authentication.credentials is the '{PLACEHOLDER}' placeholder but this config holds no "
            "credentials for that scheme: send the real credentials",
            reason="placeholder",
        )


def _aad(row_id: str, field: str) -> str:
    return f"push_notification_configs:{row_id}:{field}"


class ConfigStore:
    def __init__(self, db: Database, envelope: Envelope, clock: Clock) -> None:
        self.db, self.envelope, self.clock = db, envelope, clock

    def _sealed(self, row_id: str, item: ConfigInput) -> dict[str, Any]:
        """The columns to write; a field kept by its placeholder is left out (its sealed value stays,
        bound to the same row id)."""

        def seal(value: str | None, field: str) -> bytes | None:
            return None if value is None else self.envelope.seal(value, _aad(row_id, field))

        values: dict[str, Any] = {"auth_scheme": item.scheme}
        if not item.keep_url:
            values.update(url_enc=seal(item.url, "url"), url_display=item.url_display, host=item.host)
        if not item.keep_token:
            values["token_enc"] = seal(item.token, "token")
        if not item.keep_credentials:
            values["credentials_enc"] = seal(item.credentials, "credentials")
        return values

    async def insert_in(
        self, conn: AsyncConnection, owner_endpoint_id: str, task_id: str, item: ConfigInput
    ) -> None:
        """Insert inside a caller's transaction (the inline config of SendMessage)."""
        if item.keeps:
            raise _nothing_to_keep()
        row_id = new_id("pc")
        await push_configs.insert_in(
            conn,
            row_id=row_id,
            task_id=task_id,
            config_id=item.config_id,
            owner_endpoint_id=owner_endpoint_id,
            now_ms=ms(self.clock.now()),
            columns=self._sealed(row_id, item),
        )

    async def upsert(
        self, owner_endpoint_id: str, task_id: str, item: ConfigInput, ceiling: int
    ) -> ConfigView | None:
        """Create, or replace the config with the same id. ``None``: the task is not the caller's."""
        now = ms(self.clock.now())
        async with self.db.begin() as conn:
            if not await lock_owned(conn, owner_endpoint_id, task_id):
                return None
            existing = await push_configs.stored_in(conn, task_id, item.config_id)
            if existing is not None:
                _check_kept(item, existing)
                await push_configs.update_in(conn, existing.id, now, self._sealed(existing.id, item))
            else:
                if await push_configs.count_in(conn, task_id) >= ceiling:
                    raise ConfigRefused(
                        f"this task already has the maximum of {ceiling} push notification configs",
                        reason="ceiling_exceeded",
                    )
                await self.insert_in(conn, owner_endpoint_id, task_id, item)
            return await push_configs.view_in(conn, task_id, item.config_id)

    async def get(self, owner_endpoint_id: str, task_id: str, config_id: str) -> ConfigView | None:
        return await push_configs.get(self.db, owner_endpoint_id, task_id, config_id)

    async def list_for_task(self, owner_endpoint_id: str, task_id: str) -> list[ConfigView]:
        return await push_configs.list_for_task(self.db, owner_endpoint_id, task_id)

    async def list_for_endpoint(self, owner_endpoint_id: str, limit: int) -> list[ConfigView]:
        """The endpoint's configs across all its tasks, newest first, for the owner's endpoint card."""
        return await push_configs.list_for_endpoint(self.db, owner_endpoint_id, limit)

    async def delete(self, owner_endpoint_id: str, task_id: str, config_id: str) -> bool:
        """Idempotent. Its pending deliveries go with it (ON DELETE CASCADE), and an attempt already
        claimed re-reads the config first (:meth:`sendable`), so nothing is sent after this returns
        except an attempt whose request was already on the wire."""
        return await push_configs.delete_owned(self.db, owner_endpoint_id, task_id, config_id)

    # -- delivery ---------------------------------------------------------------------------------

    async def targets_in(self, conn: AsyncConnection, task_id: str) -> list[tuple[str, str]]:
        """(row id, host) of every config of a task, inside the transition's transaction."""
        return await push_configs.targets_in(conn, task_id)

    async def sendable(self, row_id: str) -> SendableConfig | None:
        """Read right before each attempt, with the owning endpoint's scope in the same statement: a
        config whose endpoint lost :data:`PUSH_VERB` comes back ``granted=False`` and gets no attempt."""
        row = await push_configs.sealed(self.db, row_id)
        if row is None:
            return None

        def open_(blob: bytes | None, field: str) -> str | None:
            return None if blob is None else self.envelope.open(blob, _aad(row_id, field))

        url = open_(row.url_enc, "url")
        assert url is not None
        return SendableConfig(
            row_id,
            url,
            open_(row.token_enc, "token"),
            row.auth_scheme,
            open_(row.credentials_enc, "credentials"),
            PUSH_VERB in row.verbs,
            row.owner_endpoint_id,
        )

    async def purge_finished(self, before_ms: int) -> int:
        """Lifecycle: configs of tasks that reached a terminal state before ``before_ms`` and have no
        delivery left pending. Their outbox rows go with them, and the streams' event log goes with
        the same retention (docs/a2a.md, "Streaming")."""
        return await push_configs.purge_finished(self.db, before_ms)


async def config_owner(db: Database, data: dict[str, Any]) -> dict[str, Any]:
    """The client's ``config_id`` and the owning endpoint (id and slug) of the config row
    ``data["push_config"]``, for an operator event (switchboard.operator); empty once it is deleted."""
    owner = await push_configs.owner_of(db, str(data["push_config"]))
    return {"config_id": owner[0], "endpoint_id": owner[1], "endpoint_slug": owner[2]} if owner else {}
