"""Standard Webhooks signing (SPEC-0024 REQ-4).

Secrets are minted here and only here: 32 bytes from the OS CSPRNG, presented as
``whsec_`` + padded standard base64. The HMAC key is the decoded bytes. ``sign``
accepts nothing else: a hex secret (``whsec_`` + 64 hex digits) is also valid
base64, so a stock verifier would decode it to a different 48-byte key and reject
every delivery; refusing it here turns that silent failure into a loud one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as _secrets
from collections.abc import Sequence

from ulid import ULID

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def mint_secret() -> str:
    """A new signing secret: ``whsec_`` + base64 of 32 CSPRNG bytes."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def new_message_id() -> str:
    """A notification id, ``msg_`` + a 26-character ULID: one per notification, the
    same on every attempt, so receivers can deduplicate on ``webhook-id``."""
    return f"msg_{ULID()}"


def _key(secret: str) -> bytes:
    """The HMAC key of a minted secret. Error messages never include the secret."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ValueError("signing secret must be a minted whsec_ secret")
    encoded = secret[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("signing secret is not valid base64") from None
    if len(key) != SECRET_BYTES or base64.b64encode(key).decode("ascii") != encoded:
        raise ValueError("signing secret is not a minted 32-byte base64 secret (hex secrets are refused)")
    return key


def sign(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one ``v1,<base64>`` per secret, newest first,
    space-separated (two during a rotation grace period).

    Signs ``<msg_id>.<timestamp>.<body>`` over the exact body bytes that are sent.
    """
    if isinstance(secrets, str):
        raise TypeError("secrets must be a sequence of secrets, newest first")
    if not secrets:
        raise ValueError("at least one signing secret is required")
    if not msg_id or "." in msg_id or not msg_id.isascii():
        raise ValueError("msg_id must be non-empty ASCII without '.'")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ValueError("timestamp must be integer Unix seconds")
    signed = f"{msg_id}.{timestamp}.".encode("ascii") + bytes(body)
    entries = []
    for secret in secrets:
        digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
        entries.append("v1," + base64.b64encode(digest).decode("ascii"))
    return " ".join(entries)


def standard_headers(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt, plus ``content-type``.

    Call it per attempt with that attempt's time: ``webhook-id`` stays the same across
    retries, ``webhook-timestamp`` and the signature do not.
    """
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secrets, msg_id, timestamp, body),
        "content-type": "application/json",
    }
