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


def test_the_timestamp_is_each_records_own_across_seconds() -> None:
    """The formatter keeps the formatted second between records: a record of another second (later or
    earlier, as records from two threads can arrive) gets its own, to the millisecond."""
    formatter = JsonFormatter()
    stamps = []
    for second, msecs in (
        (1_700_000_000, 123),
        (1_700_000_000, 999),
        (1_700_000_001, 4),
        (1_699_999_999, 500),
    ):
        record = logging.LogRecord("switchboard.x", logging.INFO, __file__, 1, "event", None, None)
        record.created, record.msecs = second + msecs / 1000, float(msecs)
        stamps.append(json.loads(formatter.format(record))["ts"])
    assert stamps == [
        "2023-11-14T22:13:20.123Z",
        "2023-11-14T22:13:20.999Z",
        "2023-11-14T22:13:21.004Z",
        "2023-11-14T22:13:19.500Z",
    ]


def test_a_field_named_like_a_secret_is_redacted_every_time() -> None:
    """The field-name check is kept per name: the second line with the same names is redacted too."""
    formatter = JsonFormatter()
    for _ in range(2):
        record = logging.LogRecord("switchboard.x", logging.INFO, __file__, 1, "event", None, None)
        record.fields = {"api_token": "abc", "hook_id": "nh_1"}
        line = json.loads(formatter.format(record))
        assert line["api_token"] == "[redacted]" and line["hook_id"] == "nh_1"
