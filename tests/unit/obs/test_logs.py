"""The JSON formatter's second line of defence: secrets never survive into a log line."""

from __future__ import annotations

import json
import logging

from switchboard.obs.logs import JsonFormatter, scrub


def test_scrub_removes_what_must_never_be_logged() -> None:
    text = (
        "POST https://hooks.example.com/h?api_key=abc123&x=1 failed; "
        "signature v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw "
        "Authorization: Bearer abc.def.ghi token sbt_Zx81kq-Lm2nP9 oauth sboa_Qw3rTy_uIoP12 code sboc_aaaaaaaaaaaa"
    )
    out = scrub(text)
    for needle in (
        "api_key",
        "abc123",
        "K5oZfzN95Z9U",
        "MfKQ9r8GKY",
        "abc.def.ghi",
        "Zx81kq",
        "Qw3rTy",
        "aaaaaaaaaaaa",
    ):
        assert needle not in out
    assert "https://hooks.example.com/h?[redacted]" in out


def test_secret_named_fields_are_redacted_and_others_kept() -> None:
    record = logging.LogRecord("switchboard.x", logging.INFO, __file__, 1, "event", None, None)
    record.fields = {"hook_id": "nh_1", "signing_secret": "whsec_x", "token": "t", "url": "https://h/p?q=1"}
    line = json.loads(JsonFormatter().format(record))
    assert line["hook_id"] == "nh_1"
    assert line["signing_secret"] == "[redacted]" and line["token"] == "[redacted]"
    assert line["url"] == "https://h/p?[redacted]"
