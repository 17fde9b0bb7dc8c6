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


def test_each_pattern_alone_is_still_scrubbed() -> None:
    """scrub skips text that none of its patterns could match: each one, alone in a value, still is."""
    cases = {
        "see https://h/p?k=v1": "k=v1",
        "sig v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN": "K5oZfzN95Z9U",
        "whsec_MfKQ9r8GKYqrTwjUPD8": "MfKQ9r8GKY",
        "BEARER abc.def": "abc.def",
        "sbor_Zx81kq-Lm2nP9": "Zx81kq",
    }
    for text, secret in cases.items():
        assert secret not in scrub(text), text
    assert scrub("notify attempt nh_01 msg_01 2xx") == "notify attempt nh_01 msg_01 2xx"


def test_bound_logger_hands_fields_and_exceptions_to_the_handlers() -> None:
    """BoundLogger makes its records itself: level, event, fields and the exception still arrive."""
    from switchboard.obs.logs import get_logger

    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    target = logging.getLogger("switchboard.test_bound")
    handler = Keep()
    target.addHandler(handler)
    target.setLevel(logging.INFO)
    try:
        log = get_logger("switchboard.test_bound")
        log.debug("below the level", hook_id="nh_0")
        log.info("an event", hook_id="nh_1")
        try:
            raise ValueError("boom")
        except ValueError:
            log.error("it failed", exc_info=True, hook_id="nh_2")
    finally:
        target.removeHandler(handler)
    assert [(r.levelno, r.getMessage()) for r in seen] == [
        (logging.INFO, "an event"),
        (logging.ERROR, "it failed"),
    ]
    first = json.loads(JsonFormatter().format(seen[0]))
    assert first["hook_id"] == "nh_1" and first["level"] == "info"
    second = json.loads(JsonFormatter().format(seen[1]))
    assert second["error_type"] == "ValueError" and second["hook_id"] == "nh_2"
