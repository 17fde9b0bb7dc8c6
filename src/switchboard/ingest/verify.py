"""Signature checks, delivery ids and secrets for inbound webhook sources (SPEC-0003).

Everything here is pure: the caller passes the raw body, the request headers
and the clock, and gets a yes or no. Sender-controlled input never raises;
only a source kind that the code does not know (a programming error) does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping

__all__ = [
    "SOURCE_KINDS",
    "STANDARD_TOLERANCE_SECONDS",
    "check_kind",
    "delivery_id",
    "mint_path_token",
    "mint_source_secret",
    "new_source_secret",
    "verify_signature",
]

SOURCE_KINDS: tuple[str, ...] = ("gitea", "github", "standard", "generic")

# Standard Webhooks: reject a timestamp more than five minutes from our clock,
# in either direction, so a captured delivery cannot be replayed later.
STANDARD_TOLERANCE_SECONDS = 300

_MAX_DELIVERY_ID = 200
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}", re.ASCII)
_DIGITS = re.compile(r"[0-9]{1,15}", re.ASCII)
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+", re.ASCII)
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]+", re.ASCII)
_WHSEC_PREFIX = "whsec_"

_DELIVERY_HEADERS: dict[str, tuple[str, ...]] = {
    "gitea": ("x-gitea-delivery",),
    "github": ("x-github-delivery",),
    "standard": ("webhook-id",),
    # Most specific first: a reverse proxy in front of us may add its own
    # X-Request-Id to every request, which must not mask the sender's key.
    "generic": ("idempotency-key", "x-delivery-id", "x-request-id"),
}


def check_kind(kind: str) -> str:
    """Return `kind` if it is a known source kind, else raise ValueError."""
    if kind not in SOURCE_KINDS:
        raise ValueError(f"unknown source kind: {kind!r}")
    return kind


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """The one value of header `name` (any case), stripped; None if absent or ambiguous.

    Accepts a plain dict or a Starlette ``Headers`` (whose ``items()`` lists
    repeated headers). A header sent twice with different values is treated
    as absent, so a forged copy cannot shadow the real one.
    """
    wanted = name.lower()
    found: str | None = None
    for key, value in headers.items():
        if key.lower() != wanted:
            continue
        stripped = value.strip()
        if found is not None and found != stripped:
            return None
        found = stripped
    return found


def _hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def _hex_digest(value: str | None) -> bytes | None:
    if value is None or not _HEX_SHA256.fullmatch(value):
        return None
    return bytes.fromhex(value)


def _verify_gitea(secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    given = _hex_digest(header_value(headers, "X-Gitea-Signature"))
    if given is None:
        return False
    return hmac.compare_digest(_hmac_sha256(secret.encode(), body), given)


def _verify_github(secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    value = header_value(headers, "X-Hub-Signature-256")
    if value is None or not value.startswith("sha256="):
        return False
    given = _hex_digest(value.removeprefix("sha256="))
    if given is None:
        return False
    return hmac.compare_digest(_hmac_sha256(secret.encode(), body), given)


def _standard_key(secret: str) -> bytes | None:
    """Decode a ``whsec_`` secret the way stock Standard Webhooks libraries do.

    Padding and surrounding whitespace are optional (some providers omit
    padding, pasted secrets carry newlines), but any other character outside
    the base64 alphabet is refused where stock libraries silently skip it: a
    mangled secret should fail loudly at the first delivery.
    """
    encoded = secret.strip().removeprefix(_WHSEC_PREFIX).rstrip("=")
    encoded += "=" * (-len(encoded) % 4)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
    return key or None


def _b64_signature(value: str) -> bytes | None:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _verify_standard(secret: str, body: bytes, headers: Mapping[str, str], now: float) -> bool:
    key = _standard_key(secret)
    msg_id = header_value(headers, "webhook-id")
    timestamp = header_value(headers, "webhook-timestamp")
    signatures = header_value(headers, "webhook-signature")
    if key is None or msg_id is None or timestamp is None or signatures is None:
        return False
    if not _VISIBLE_ASCII.fullmatch(msg_id) or not _DIGITS.fullmatch(timestamp):
        return False
    if abs(now - int(timestamp)) > STANDARD_TOLERANCE_SECONDS:
        return False
    expected = _hmac_sha256(key, f"{msg_id}.{timestamp}.".encode() + body)
    # Several entries appear while the sender rotates secrets; any v1 match
    # is enough, and entries of other versions or shapes are skipped.
    for entry in signatures.split():
        version, sep, encoded = entry.partition(",")
        if not sep or version != "v1":
            continue
        given = _b64_signature(encoded)
        if given is not None and hmac.compare_digest(expected, given):
            return True
    return False


def verify_signature(kind: str, secret: str, body: bytes, headers: Mapping[str, str], *, now: float) -> bool:
    """True if `body` carries a valid signature for a source of `kind` keyed by `secret`.

    `now` is the current Unix time in seconds (only Standard Webhooks checks
    it). Missing or malformed headers, an empty secret, and the ``generic``
    kind (which has no signature scheme) all give False; a kind outside
    :data:`SOURCE_KINDS` raises ValueError.
    """
    check_kind(kind)
    if not secret:
        # An empty HMAC key is a key anyone can use.
        return False
    if kind == "gitea":
        return _verify_gitea(secret, body, headers)
    if kind == "github":
        return _verify_github(secret, body, headers)
    if kind == "standard":
        return _verify_standard(secret, body, headers, now)
    return False


def delivery_id(kind: str, headers: Mapping[str, str]) -> str | None:
    """The sender's id for this delivery, which a redelivery repeats; None if there is none.

    Only printable ASCII up to 200 characters is accepted: anything else is
    not an id a sender would mint, and is not worth deduplicating on.
    """
    for name in _DELIVERY_HEADERS[check_kind(kind)]:
        value = header_value(headers, name)
        if value and len(value) <= _MAX_DELIVERY_ID and _PRINTABLE_ASCII.fullmatch(value):
            return value
    return None


def mint_source_secret(kind: str) -> str:
    """A fresh signing secret in the form the sender's own tooling expects.

    Standard Webhooks signers take ``whsec_`` plus base64 key bytes; Gitea and
    GitHub use the secret string itself as the HMAC key, so hex is safest to
    paste into their forms.
    """
    if check_kind(kind) == "standard":
        return _WHSEC_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")
    return secrets.token_hex(32)


def mint_path_token() -> str:
    """An unguessable URL path token (256 bits) for a token-trust source."""
    return secrets.token_urlsafe(32)


def new_source_secret(kind: str, trust: str) -> str:
    """The one place a source's secret is minted (web, CLI create, CLI rotate-secret): a token-trust
    source is authenticated by its URL path, so its secret is the path token."""
    return mint_path_token() if trust == "token" else mint_source_secret(kind)
