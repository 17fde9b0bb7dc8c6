"""Signature checks, delivery ids and minted secrets for inbound sources (SPEC-0003)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook
from starlette.datastructures import Headers

from switchboard.ingest.verify import (
    SOURCE_KINDS,
    delivery_id,
    header_value,
    mint_path_token,
    mint_source_secret,
    verify_signature,
)

FIXTURES = Path(__file__).parent / "fixtures"
NOW = 1_741_000_000.0  # 2025-03-03, an arbitrary fixed clock
SECRET = "d6f1b0c9e8a7f6e5d4c3b2a1908f7e6d5c4b3a2918f7e6d5c4b3a29180f7e6d5"


def _hex_hmac(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _raw(*pairs: tuple[str, str]) -> Headers:
    """Starlette headers as a server would build them, repeats included."""
    return Headers(raw=[(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in pairs])


@pytest.fixture
def gitea_body() -> bytes:
    return (FIXTURES / "gitea_push.json").read_bytes()


@pytest.fixture
def github_body() -> bytes:
    return (FIXTURES / "github_pull_request.json").read_bytes()


# --- GitHub ---------------------------------------------------------------


def test_github_documented_test_vector() -> None:
    # The example from GitHub's "validating webhook deliveries" documentation.
    headers = {
        "X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    }
    assert verify_signature("github", "It's a Secret to Everybody", b"Hello, World!", headers, now=NOW)


def test_github_valid_fixture_signature(github_body: bytes) -> None:
    headers = {"X-Hub-Signature-256": "sha256=" + _hex_hmac(SECRET, github_body)}
    assert verify_signature("github", SECRET, github_body, headers, now=NOW)


def test_github_wrong_secret(github_body: bytes) -> None:
    headers = {"X-Hub-Signature-256": "sha256=" + _hex_hmac("another secret", github_body)}
    assert not verify_signature("github", SECRET, github_body, headers, now=NOW)


def test_github_truncated_body(github_body: bytes) -> None:
    headers = {"X-Hub-Signature-256": "sha256=" + _hex_hmac(SECRET, github_body)}
    assert not verify_signature("github", SECRET, github_body[:-1], headers, now=NOW)


def test_github_one_flipped_hex_digit(github_body: bytes) -> None:
    good = _hex_hmac(SECRET, github_body)
    bad = good[:10] + ("0" if good[10] != "0" else "1") + good[11:]
    assert not verify_signature(
        "github", SECRET, github_body, {"X-Hub-Signature-256": "sha256=" + bad}, now=NOW
    )


def test_github_header_names_are_case_insensitive(github_body: bytes) -> None:
    value = "sha256=" + _hex_hmac(SECRET, github_body)
    for name in ("x-hub-signature-256", "X-HUB-SIGNATURE-256", "X-Hub-Signature-256"):
        assert verify_signature("github", SECRET, github_body, {name: value}, now=NOW)


def test_github_accepts_starlette_headers(github_body: bytes) -> None:
    headers = _raw(("X-Hub-Signature-256", "sha256=" + _hex_hmac(SECRET, github_body)))
    assert verify_signature("github", SECRET, github_body, headers, now=NOW)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "sha256=",
        "sha256",
        "sha1=" + "0" * 40,
        "SHA256={sig}",  # the algorithm name GitHub sends is lower case
        "{sig}",  # the prefix is required
        "sha256={sig}00",  # too long
        "sha256={short}",  # too short
        "sha256= {sig}",
        "sha256={sig} extra",
        "sha256=" + "g" * 64,  # right length, not hex
        "sha256=" + "é" * 64,  # non-ASCII must not reach compare_digest as str
    ],
)
def test_github_malformed_header_is_refused(github_body: bytes, value: str) -> None:
    sig = _hex_hmac(SECRET, github_body)
    headers = {"X-Hub-Signature-256": value.format(sig=sig, short=sig[:-2])}
    assert not verify_signature("github", SECRET, github_body, headers, now=NOW)


def test_github_missing_header(github_body: bytes) -> None:
    # The legacy SHA-1 header alone is not enough.
    headers = {"X-Hub-Signature": "sha1=" + hmac.new(SECRET.encode(), github_body, "sha1").hexdigest()}
    assert not verify_signature("github", SECRET, github_body, headers, now=NOW)
    assert not verify_signature("github", SECRET, github_body, {}, now=NOW)


def test_github_does_not_accept_a_gitea_header(github_body: bytes) -> None:
    headers = {"X-Gitea-Signature": _hex_hmac(SECRET, github_body)}
    assert not verify_signature("github", SECRET, github_body, headers, now=NOW)


def test_conflicting_repeated_signature_headers_are_refused(github_body: bytes) -> None:
    good = "sha256=" + _hex_hmac(SECRET, github_body)
    forged = "sha256=" + "0" * 64
    assert not verify_signature(
        "github",
        SECRET,
        github_body,
        _raw(("X-Hub-Signature-256", good), ("X-Hub-Signature-256", forged)),
        now=NOW,
    )
    assert not verify_signature(
        "github",
        SECRET,
        github_body,
        _raw(("X-Hub-Signature-256", forged), ("X-Hub-Signature-256", good)),
        now=NOW,
    )


def test_identical_repeated_signature_headers_are_accepted(github_body: bytes) -> None:
    good = "sha256=" + _hex_hmac(SECRET, github_body)
    headers = _raw(("X-Hub-Signature-256", good), ("x-hub-signature-256", good))
    assert verify_signature("github", SECRET, github_body, headers, now=NOW)


# --- Gitea ----------------------------------------------------------------


def test_gitea_documented_vector_without_prefix() -> None:
    # Gitea signs exactly like GitHub's sha256 header, minus the "sha256=" prefix.
    headers = {"X-Gitea-Signature": "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}
    assert verify_signature("gitea", "It's a Secret to Everybody", b"Hello, World!", headers, now=NOW)


def test_gitea_valid_fixture_signature(gitea_body: bytes) -> None:
    headers = _raw(("X-Gitea-Signature", _hex_hmac(SECRET, gitea_body)), ("X-Gitea-Event", "push"))
    assert verify_signature("gitea", SECRET, gitea_body, headers, now=NOW)


def test_gitea_uppercase_hex_is_accepted(gitea_body: bytes) -> None:
    headers = {"X-Gitea-Signature": _hex_hmac(SECRET, gitea_body).upper()}
    assert verify_signature("gitea", SECRET, gitea_body, headers, now=NOW)


def test_gitea_wrong_secret(gitea_body: bytes) -> None:
    headers = {"X-Gitea-Signature": _hex_hmac(SECRET + "x", gitea_body)}
    assert not verify_signature("gitea", SECRET, gitea_body, headers, now=NOW)


def test_gitea_truncated_body(gitea_body: bytes) -> None:
    headers = {"X-Gitea-Signature": _hex_hmac(SECRET, gitea_body)}
    assert not verify_signature("gitea", SECRET, gitea_body[: len(gitea_body) // 2], headers, now=NOW)


def test_gitea_body_with_appended_bytes(gitea_body: bytes) -> None:
    headers = {"X-Gitea-Signature": _hex_hmac(SECRET, gitea_body)}
    assert not verify_signature("gitea", SECRET, gitea_body + b"\n", headers, now=NOW)


def test_gitea_prefixed_value_is_refused(gitea_body: bytes) -> None:
    headers = {"X-Gitea-Signature": "sha256=" + _hex_hmac(SECRET, gitea_body)}
    assert not verify_signature("gitea", SECRET, gitea_body, headers, now=NOW)


def test_gitea_only_reads_its_own_header(gitea_body: bytes) -> None:
    # Gitea also sends X-Hub-Signature-256, but a gitea source checks X-Gitea-Signature.
    headers = {"X-Hub-Signature-256": "sha256=" + _hex_hmac(SECRET, gitea_body)}
    assert not verify_signature("gitea", SECRET, gitea_body, headers, now=NOW)


def test_gitea_secret_is_used_as_utf8_text() -> None:
    secret = "pässwörd-🔑"
    body = b'{"ok":true}'
    headers = {"X-Gitea-Signature": hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()}
    assert verify_signature("gitea", secret, body, headers, now=NOW)


# --- Both HMAC-hex kinds ----------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "name", "prefix"),
    [("gitea", "X-Gitea-Signature", ""), ("github", "X-Hub-Signature-256", "sha256=")],
)
def test_empty_secret_never_verifies(kind: str, name: str, prefix: str) -> None:
    # Anyone can compute an HMAC under an empty key.
    body = b"{}"
    headers = {name: prefix + _hex_hmac("", body)}
    assert not verify_signature(kind, "", body, headers, now=NOW)


def test_generic_has_no_signature_scheme(github_body: bytes) -> None:
    headers = {
        "X-Hub-Signature-256": "sha256=" + _hex_hmac(SECRET, github_body),
        "X-Gitea-Signature": _hex_hmac(SECRET, github_body),
    }
    assert not verify_signature("generic", SECRET, github_body, headers, now=NOW)


def test_unknown_kind_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown source kind"):
        verify_signature("gitlab", SECRET, b"", {}, now=NOW)


# --- Standard Webhooks --------------------------------------------------------

STD_SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
MSG_ID = "msg_2mS0hWkP6rGSuZ3h1WJxQm2Vt4f"
BODY = b'{"type":"invoice.paid","timestamp":"2025-03-03T11:06:40Z","data":{"id":"inv_42","amount":1200}}'


def _stock_headers(
    secret: str = STD_SECRET, msg_id: str = MSG_ID, ts: float = NOW, body: bytes = BODY
) -> dict[str, str]:
    """Headers exactly as the stock `standardwebhooks` signer produces them."""
    when = datetime.fromtimestamp(ts, tz=UTC)
    signature = Webhook(secret).sign(msg_id, when, body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(ts)), "webhook-signature": signature}


def test_standard_agrees_with_the_stock_signer() -> None:
    assert verify_signature("standard", STD_SECRET, BODY, _stock_headers(), now=NOW)


def test_standard_published_test_vector() -> None:
    # The reference vector used by the Standard Webhooks / Svix libraries.
    headers = {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }
    body = b'{"test": 2432232314}'
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    assert verify_signature("standard", secret, body, headers, now=1614265330)
    assert not verify_signature("standard", secret, body, headers, now=NOW)  # long expired


def test_standard_agrees_with_stock_signer_on_a_fixture_body() -> None:
    body = (FIXTURES / "github_issues.json").read_bytes()
    assert verify_signature("standard", STD_SECRET, body, _stock_headers(body=body), now=NOW)


def test_standard_secret_without_prefix_or_padding() -> None:
    # Stock signers accept a bare or unpadded base64 key; so must we.
    raw_key = bytes(range(24))  # 24 bytes: base64 without padding
    bare = base64.b64encode(raw_key).decode()
    assert "=" not in bare
    headers = _stock_headers(secret="whsec_" + bare)
    assert verify_signature("standard", "whsec_" + bare, BODY, headers, now=NOW)
    assert verify_signature("standard", bare, BODY, headers, now=NOW)
    key_33 = base64.b64encode(bytes(range(33, 66))).decode().rstrip("=")  # padding stripped
    assert verify_signature(
        "standard", "whsec_" + key_33, BODY, _stock_headers(secret="whsec_" + key_33), now=NOW
    )


def test_standard_header_names_are_case_insensitive() -> None:
    headers = {k.upper(): v for k, v in _stock_headers().items()}
    assert verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)
    assert verify_signature("standard", STD_SECRET, BODY, _raw(*_stock_headers().items()), now=NOW)


def test_standard_wrong_secret() -> None:
    other = "whsec_" + base64.b64encode(b"\x01" * 32).decode()
    assert not verify_signature("standard", other, BODY, _stock_headers(), now=NOW)


def test_standard_truncated_body() -> None:
    assert not verify_signature("standard", STD_SECRET, BODY[:-1], _stock_headers(), now=NOW)


def test_standard_id_is_signed() -> None:
    headers = _stock_headers() | {"webhook-id": "msg_other"}
    assert not verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)


def test_standard_timestamp_is_signed() -> None:
    headers = _stock_headers() | {"webhook-timestamp": str(int(NOW) + 1)}
    assert not verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)


@pytest.mark.parametrize(
    ("offset", "ok"),
    [(0, True), (-300, True), (300, True), (-301, False), (301, False), (-86_400, False), (86_400, False)],
)
def test_standard_timestamp_tolerance_is_five_minutes_both_ways(offset: int, ok: bool) -> None:
    # The sender signed at NOW + offset; our clock reads NOW.
    headers = _stock_headers(ts=NOW + offset)
    assert verify_signature("standard", STD_SECRET, BODY, headers, now=NOW) is ok


def test_standard_rotation_any_v1_entry_may_match() -> None:
    good = _stock_headers()["webhook-signature"]
    old = Webhook("whsec_" + base64.b64encode(b"\x02" * 32).decode()).sign(
        MSG_ID, datetime.fromtimestamp(NOW, tz=UTC), BODY.decode()
    )
    for value in (f"{old} {good}", f"{good} {old}", f"{old}  {good}"):
        headers = _stock_headers() | {"webhook-signature": value}
        assert verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)
    headers = _stock_headers() | {"webhook-signature": f"{old} {old}"}
    assert not verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)


def test_standard_other_versions_are_ignored() -> None:
    sig = _stock_headers()["webhook-signature"].removeprefix("v1,")
    for value in (f"v1a,{sig}", f"v2,{sig}", f"V1,{sig}", sig):
        headers = _stock_headers() | {"webhook-signature": value}
        assert not verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)


def test_standard_malformed_entry_does_not_hide_a_valid_one() -> None:
    good = _stock_headers()["webhook-signature"]
    headers = _stock_headers() | {"webhook-signature": f"v1,%%%notbase64%%% {good}"}
    assert verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "v1",
        "v1,",
        ",",
        "v1,%%%notbase64%%%",
        "v1,abc",  # bad padding
        "v1,YWJj",  # valid base64, wrong length
        "v1," + "A" * 43 + "=" + "A",  # junk after padding
        "v1,é",
    ],
)
def test_standard_malformed_signature_header(value: str) -> None:
    headers = _stock_headers() | {"webhook-signature": value}
    assert not verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)


@pytest.mark.parametrize(
    "value",
    ["", "abc", "1.5e9", "1741000000.0", "-1741000000", "+1741000000", "0x67c58f00", "１７４１００００００"],
)
def test_standard_malformed_timestamp(value: str) -> None:
    headers = _stock_headers() | {"webhook-timestamp": value}
    assert not verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_standard_missing_header(missing: str) -> None:
    headers = {k: v for k, v in _stock_headers().items() if k != missing}
    assert not verify_signature("standard", STD_SECRET, BODY, headers, now=NOW)


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_%%%%", "whsec_abc$def", "whsec_Zm9v!"])
def test_standard_unusable_secret(secret: str) -> None:
    assert not verify_signature("standard", secret, BODY, _stock_headers(), now=NOW)


def test_standard_secret_with_stray_characters_is_refused_not_guessed() -> None:
    # The stock library silently drops the "$" and would verify; we refuse a
    # mangled secret instead of guessing what the operator meant.
    clean = "whsec_" + base64.b64encode(bytes(range(24))).decode()  # no padding
    mangled = clean[:12] + "$" + clean[12:]
    headers = _stock_headers(secret=mangled)
    assert verify_signature("standard", clean, BODY, headers, now=NOW)
    assert not verify_signature("standard", mangled, BODY, headers, now=NOW)


def test_standard_secret_surrounding_whitespace_is_ignored() -> None:
    assert verify_signature("standard", f"  {STD_SECRET}\n", BODY, _stock_headers(), now=NOW)


def _manual_standard_headers(key: bytes, msg_id: str = MSG_ID, body: bytes = BODY) -> dict[str, str]:
    ts = str(int(NOW))
    digest = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": ts,
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }


def test_standard_empty_key_never_verifies() -> None:
    # The stock library refuses an empty key; a hand-made signature under one must not pass either.
    assert not verify_signature("standard", "whsec_", BODY, _manual_standard_headers(b""), now=NOW)
    assert not verify_signature("standard", "whsec_====", BODY, _manual_standard_headers(b""), now=NOW)


@pytest.mark.parametrize("msg_id", ["msg 1", "msg_\u00e9", "msg\t1"])
def test_standard_message_id_must_be_visible_ascii(msg_id: str) -> None:
    # Even correctly signed: ids are ASCII tokens, and anything else would be
    # re-encoded differently by a server's latin-1 header decoding.
    key = base64.b64decode(STD_SECRET.removeprefix("whsec_"))
    assert verify_signature("standard", STD_SECRET, BODY, _manual_standard_headers(key, "msg_1"), now=NOW)
    assert not verify_signature("standard", STD_SECRET, BODY, _manual_standard_headers(key, msg_id), now=NOW)


def test_standard_non_utf8_body_is_checked_bytewise() -> None:
    body = b"\xff\xfe binary \x00"
    key = base64.b64decode(STD_SECRET.removeprefix("whsec_"))
    ts = str(int(NOW))
    sig = base64.b64encode(hmac.new(key, f"{MSG_ID}.{ts}.".encode() + body, hashlib.sha256).digest()).decode()
    headers = {"webhook-id": MSG_ID, "webhook-timestamp": ts, "webhook-signature": f"v1,{sig}"}
    assert verify_signature("standard", STD_SECRET, body, headers, now=NOW)
    assert not verify_signature("standard", STD_SECRET, body[:-1], headers, now=NOW)


_header_text = st.text(st.characters(min_codepoint=0, max_codepoint=0xFF), max_size=120)


@given(
    kind=st.sampled_from(SOURCE_KINDS),
    secret=st.text(max_size=60),
    body=st.binary(max_size=200),
    headers=st.dictionaries(
        st.sampled_from(
            [
                "X-Gitea-Signature",
                "X-Hub-Signature-256",
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "X-Other",
            ]
        ),
        _header_text,
    ),
    now=st.floats(min_value=0, max_value=4e9),
)
def test_verify_never_raises_and_random_input_never_verifies(
    kind: str, secret: str, body: bytes, headers: Mapping[str, str], now: float
) -> None:
    assert verify_signature(kind, secret, body, headers, now=now) is False


# --- header_value -----------------------------------------------------------


def test_header_value_is_case_insensitive_and_stripped() -> None:
    assert header_value({"X-Thing": "  v  "}, "x-thing") == "v"
    assert header_value(_raw(("X-Thing", "v")), "X-THING") == "v"
    assert header_value({}, "x-thing") is None


def test_header_value_refuses_conflicting_repeats() -> None:
    assert header_value(_raw(("a", "1"), ("a", "2")), "a") is None
    assert header_value({"A": "1", "a": "2"}, "a") is None
    assert header_value(_raw(("a", "1"), ("a", "1")), "a") == "1"


# --- delivery ids -------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "name"),
    [("gitea", "X-Gitea-Delivery"), ("github", "X-GitHub-Delivery"), ("standard", "webhook-id")],
)
def test_delivery_id_per_kind(kind: str, name: str) -> None:
    value = "8e0dece0-cfbd-11e9-8e4c-f48db7a5cca7"
    assert delivery_id(kind, {name: value}) == value
    assert delivery_id(kind, _raw((name.lower(), value))) == value
    assert delivery_id(kind, {"X-Request-Id": value}) is None


def test_delivery_id_each_kind_reads_only_its_own_header() -> None:
    headers = {"X-Gitea-Delivery": "gitea-1", "X-GitHub-Delivery": "github-1", "webhook-id": "msg_1"}
    assert delivery_id("gitea", headers) == "gitea-1"
    assert delivery_id("github", headers) == "github-1"
    assert delivery_id("standard", headers) == "msg_1"
    assert delivery_id("generic", headers) is None


@pytest.mark.parametrize("name", ["X-Request-Id", "X-Delivery-Id", "Idempotency-Key"])
def test_delivery_id_generic_headers(name: str) -> None:
    assert delivery_id("generic", {name: "job-77"}) == "job-77"


def test_delivery_id_generic_prefers_the_senders_key_over_a_proxy_request_id() -> None:
    headers = {"X-Request-Id": "proxy-abc", "X-Delivery-Id": "delivery-1", "Idempotency-Key": "key-1"}
    assert delivery_id("generic", headers) == "key-1"
    del headers["Idempotency-Key"]
    assert delivery_id("generic", headers) == "delivery-1"
    del headers["X-Delivery-Id"]
    assert delivery_id("generic", headers) == "proxy-abc"


def test_delivery_id_generic_skips_an_unusable_header_for_the_next() -> None:
    headers = {"Idempotency-Key": "x" * 201, "X-Request-Id": "req-9"}
    assert delivery_id("generic", headers) == "req-9"


def test_delivery_id_length_limit() -> None:
    assert delivery_id("github", {"X-GitHub-Delivery": "a" * 200}) == "a" * 200
    assert delivery_id("github", {"X-GitHub-Delivery": "a" * 201}) is None


@pytest.mark.parametrize("value", ["", "   ", "id\x00x", "id\nx", "id\x7f", "ïd", "id\u202e"])
def test_delivery_id_refuses_junk(value: str) -> None:
    assert delivery_id("standard", {"webhook-id": value}) is None


def test_delivery_id_is_stripped() -> None:
    assert delivery_id("gitea", {"X-Gitea-Delivery": "  abc-1  "}) == "abc-1"


def test_delivery_id_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown source kind"):
        delivery_id("bitbucket", {})


# --- minted secrets -----------------------------------------------------------


def test_mint_standard_secret_is_whsec_padded_base64_of_32_bytes() -> None:
    secret = mint_source_secret("standard")
    assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", secret)
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32


def test_mint_standard_secret_works_with_the_stock_library_both_ways() -> None:
    secret = mint_source_secret("standard")
    now = datetime.now(tz=UTC)
    signature = Webhook(secret).sign(MSG_ID, now, BODY.decode())
    headers = {
        "webhook-id": MSG_ID,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    Webhook(secret).verify(BODY, headers)  # the stock verifier accepts its own output
    assert verify_signature("standard", secret, BODY, headers, now=now.timestamp())


@pytest.mark.parametrize("kind", ["gitea", "github", "generic"])
def test_mint_hmac_secret_is_64_hex(kind: str) -> None:
    secret = mint_source_secret(kind)
    assert re.fullmatch(r"[0-9a-f]{64}", secret)
    body = b"{}"
    if kind == "github":
        assert verify_signature(
            kind, secret, body, {"X-Hub-Signature-256": "sha256=" + _hex_hmac(secret, body)}, now=NOW
        )
    elif kind == "gitea":
        assert verify_signature(kind, secret, body, {"X-Gitea-Signature": _hex_hmac(secret, body)}, now=NOW)


@pytest.mark.parametrize("kind", SOURCE_KINDS)
def test_mint_secrets_are_fresh(kind: str) -> None:
    assert len({mint_source_secret(kind) for _ in range(20)}) == 20


def test_mint_secret_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown source kind"):
        mint_source_secret("svix")


def test_mint_path_token_is_urlsafe_256_bits() -> None:
    token = mint_path_token()
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)
    assert len(base64.urlsafe_b64decode(token + "=")) == 32
    assert len({mint_path_token() for _ in range(20)}) == 20
