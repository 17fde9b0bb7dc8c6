"""Standard Webhooks signing, checked against the stock ``standardwebhooks`` verifier."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from switchboard.push import mint_secret, new_message_id, sign, standard_headers

BODY = json.dumps({"type": "todo.ready", "reason": "created", "todo_id": "td_01"}).encode()


def test_minted_secret_shape() -> None:
    secret = mint_secret()
    assert secret.startswith("whsec_")
    encoded = secret.removeprefix("whsec_")
    assert re.fullmatch(r"[A-Za-z0-9+/]{43}=", encoded)  # padded standard base64 of 32 bytes
    assert len(base64.b64decode(encoded, validate=True)) == 32
    assert len({mint_secret() for _ in range(100)}) == 100


def test_message_id_is_msg_and_a_ulid() -> None:
    assert re.fullmatch(r"msg_[0-9A-HJKMNP-TV-Z]{26}", new_message_id())
    assert new_message_id() != new_message_id()


def test_signature_is_hmac_of_id_timestamp_body_with_decoded_key() -> None:
    secret = mint_secret()
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = hmac.new(key, b"msg_1.1700000000." + BODY, hashlib.sha256).digest()
    assert sign([secret], "msg_1", 1700000000, BODY) == "v1," + base64.b64encode(expected).decode()


def test_matches_the_reference_signer() -> None:
    secret = mint_secret()
    now = datetime.now(UTC).replace(microsecond=0)
    reference = Webhook(secret).sign("msg_1", now, BODY.decode())
    assert sign([secret], "msg_1", int(now.timestamp()), BODY) == reference


def test_stock_verifier_accepts_a_signed_notification() -> None:
    secret = mint_secret()
    headers = standard_headers([secret], new_message_id(), int(time.time()), BODY)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature", "content-type"}
    assert headers["content-type"] == "application/json"
    assert Webhook(secret).verify(BODY, headers) == json.loads(BODY)


def test_rotation_grace_signs_with_both_secrets_newest_first() -> None:
    old, new = mint_secret(), mint_secret()
    msg_id, now = new_message_id(), int(time.time())
    headers = standard_headers([new, old], msg_id, now, BODY)
    entries = headers["webhook-signature"].split(" ")
    assert len(entries) == 2 and all(entry.startswith("v1,") for entry in entries)
    assert entries[0] == sign([new], msg_id, now, BODY)
    assert entries[1] == sign([old], msg_id, now, BODY)
    Webhook(new).verify(BODY, headers)
    Webhook(old).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(mint_secret()).verify(BODY, headers)


def test_retries_keep_the_id_and_refresh_timestamp_and_signature() -> None:
    secret = mint_secret()
    msg_id, now = new_message_id(), int(time.time())
    first = standard_headers([secret], msg_id, now - 6, BODY)
    second = standard_headers([secret], msg_id, now, BODY)
    assert first["webhook-id"] == second["webhook-id"] == msg_id
    assert first["webhook-timestamp"] != second["webhook-timestamp"]
    assert first["webhook-signature"] != second["webhook-signature"]
    Webhook(secret).verify(BODY, first)
    Webhook(secret).verify(BODY, second)


def test_a_hex_secret_fails_the_stock_verifier_and_is_refused() -> None:
    """REQ-4: ``whsec_`` + hex is valid base64, so a verifier decodes it to the wrong
    key. A sender that keyed HMAC with the hex digits' bytes is rejected every time."""
    raw = os.urandom(32)
    hex_secret = "whsec_" + raw.hex()
    assert len(base64.b64decode(hex_secret.removeprefix("whsec_"))) == 48  # decodes "fine", to the wrong key
    msg_id, now = "msg_1", int(time.time())
    for key in (raw, raw.hex().encode()):  # hex-decoded key, or the literal digits
        digest = hmac.new(key, f"{msg_id}.{now}.".encode() + BODY, hashlib.sha256).digest()
        headers = {
            "webhook-id": msg_id,
            "webhook-timestamp": str(now),
            "webhook-signature": "v1," + base64.b64encode(digest).decode(),
        }
        with pytest.raises(WebhookVerificationError):
            Webhook(hex_secret).verify(BODY, headers)
    with pytest.raises(ValueError, match="hex secrets are refused") as info:
        sign([hex_secret], msg_id, now, BODY)
    assert raw.hex() not in str(info.value)


@pytest.mark.parametrize(
    "secret",
    [
        "not-a-secret",
        "whsec_",
        "whsec_!!!!",
        "whsec_" + base64.b64encode(os.urandom(24)).decode(),  # valid per spec, but not ours
        "whsec_" + base64.b64encode(os.urandom(32)).decode().rstrip("="),  # unpadded
        "whsk_" + base64.b64encode(os.urandom(32)).decode(),
    ],
    # fixed ids: random ones differ between pytest-xdist workers, which must collect the same tests
    ids=["plain", "empty", "not-base64", "foreign-24-bytes", "unpadded", "key-prefix"],
)
def test_only_minted_secrets_are_accepted(secret: str) -> None:
    with pytest.raises(ValueError) as info:
        sign([secret], "msg_1", 1, BODY)
    if len(secret) > 8:
        assert secret.removeprefix("whsec_") not in str(info.value)


@pytest.mark.parametrize(
    ("secrets", "msg_id", "timestamp", "error"),
    [
        ([], "msg_1", 1, ValueError),
        ("whsec_x", "msg_1", 1, TypeError),
        (["S"], "msg.1", 1, ValueError),
        (["S"], "", 1, ValueError),
        (["S"], "msg_1", True, ValueError),
        (["S"], "msg_1", 1.5, ValueError),
        (["S"], "msg_1", -1, ValueError),
    ],
)
def test_arguments_are_checked(
    secrets: object, msg_id: str, timestamp: object, error: type[Exception]
) -> None:
    real = [mint_secret()] if secrets == ["S"] else secrets
    with pytest.raises(error):
        sign(real or [], msg_id, timestamp, BODY)  # type: ignore[arg-type]
