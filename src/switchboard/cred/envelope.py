"""AES-256-GCM sealing with the row identity as associated data.

Binding the row identity (for example ``notify_hooks:nh_...:secret``) means a sealed value copied
onto another row fails to open, so a database-level swap cannot move a secret between tenants.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_VERSION = b"\x01"
_NONCE = 12


class EnvelopeError(Exception):
    """A sealed value could not be opened (wrong key, wrong row, or tampered)."""


class Envelope:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("the credential key must be 32 bytes")
        self._aead = AESGCM(key)

    def seal(self, plaintext: str, aad: str) -> bytes:
        nonce = os.urandom(_NONCE)
        return _VERSION + nonce + self._aead.encrypt(nonce, plaintext.encode(), aad.encode())

    def open(self, blob: bytes, aad: str) -> str:
        if len(blob) < 1 + _NONCE + 16 or blob[:1] != _VERSION:
            raise EnvelopeError("sealed value has an unknown format")
        try:
            return self._aead.decrypt(blob[1 : 1 + _NONCE], blob[1 + _NONCE :], aad.encode()).decode()
        except InvalidTag:
            raise EnvelopeError("sealed value did not open for this row") from None


def _decode_key(text: str) -> bytes:
    text = text.strip()
    try:
        raw = bytes.fromhex(text) if len(text) == 64 else base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError("SWITCHBOARD_CRED_KEY must be 32 bytes as hex or base64") from None
    if len(raw) != 32:
        raise ValueError("SWITCHBOARD_CRED_KEY must be 32 bytes as hex or base64")
    return raw


def load_or_create_key(configured: str | None, data_dir: Path) -> bytes:
    """The operator's key if set, else ``<data>/cred.key``, created (mode 0600) on first start."""
    if configured:
        return _decode_key(configured)
    path = data_dir / "cred.key"
    if path.exists():
        return _decode_key(path.read_text())
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(base64.b64encode(key).decode() + "\n")
    return key
