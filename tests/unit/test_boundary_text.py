"""The text boundary (switchboard.core.text.loads_strict / admit / admit_label) and the connection guard's
coalesced logging, as parts. A Hypothesis strategy throws lone surrogates, bidi runs and deep nesting
at every text field a sender controls."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from switchboard.core.text import MAX_JSON_DEPTH, Unstorable, admit, admit_label, loads_strict
from switchboard.edge.conn import Coalesced

LONE_SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
BIDI = st.sampled_from(
    ["\u202e", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200b", "\u200f", "\x00"]
)
hostile_text = st.lists(
    st.one_of(st.text(max_size=5), LONE_SURROGATES, BIDI, st.sampled_from(["\r\n", "\u2028"])), max_size=8
).map("".join)


def nest(value: Any, depth: int) -> Any:
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


hostile_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=10,
) | st.builds(nest, hostile_text, st.integers(1, 200))


def encodable(value: Any) -> bool:
    """The oracle: strict UTF-8 JSON can carry it, and it nests no deeper than the limit."""
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError, RecursionError):
        return False
    return depth(value) <= MAX_JSON_DEPTH


def depth(value: Any) -> int:
    best, stack = 0, [(value, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict | list):
            best = max(best, d)
            stack.extend((v, d + 1) for v in (item.values() if isinstance(item, dict) else item))
    return best


@settings(max_examples=300, deadline=None)
@given(hostile_json)
def test_admit_refuses_exactly_what_cannot_be_answered(value: Any) -> None:
    if encodable(value):
        assert admit(value) is value
    else:
        with pytest.raises(Unstorable):
            admit(value)


@settings(max_examples=300, deadline=None)
@given(hostile_json)
def test_loads_strict_never_lets_a_parser_error_or_unanswerable_value_through(value: Any) -> None:
    body = json.dumps(value).encode()  # ensure_ascii: surrogates travel as \\uXXXX, NaN as NaN
    # The oracle judges what a lenient parser makes of the body (an escaped high+low pair is one
    # valid code point once parsed), not the value it was written from.
    if encodable(json.loads(body)):
        assert encodable(loads_strict(body))
    else:
        with pytest.raises(Unstorable) as refused:
            loads_strict(body)
        assert "line" not in str(refused.value) and "column" not in str(refused.value)


@settings(max_examples=300, deadline=None)
@given(hostile_json)
def test_loads_strict_agrees_with_the_walk_on_bodies_written_as_utf8(value: Any) -> None:
    """Bodies with characters written as UTF-8, not escaped, take loads_strict's fast path (no \\u
    escape, few brackets: admit's walk is skipped); it must refuse exactly what the walk would."""
    try:
        body = json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only its escape can travel
        body = json.dumps(value).encode()
    if encodable(json.loads(body)):
        assert encodable(loads_strict(body))
    else:
        with pytest.raises(Unstorable):
            loads_strict(body)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\xff\xfe", "UTF-8"),
        (b"[" * 100_000, "deeper"),
        (b'{"a": NaN}', "NaN"),
        (b'{"a": [1.5, -1e400]}', "NaN"),  # a literal past the float range parses as infinity
        (b'["\\ud800"]', "surrogate"),
        (b"{nope", "syntax"),
        (b"9" * 5000, "too large"),
    ],
)
def test_loads_strict_reasons_are_fixed_text(body: bytes, reason: str) -> None:
    with pytest.raises(Unstorable, match=reason):
        loads_strict(body)


PRINTABLE = st.text(st.characters(categories=["L", "N", "P", "S", "Zs"]), max_size=6)
label_text = st.lists(
    st.one_of(PRINTABLE, LONE_SURROGATES, BIDI, st.sampled_from(["\r\n", "\u2028"])), max_size=6
).map("".join)


@given(label_text)
def test_admit_label_refuses_control_bidi_and_surrogates(text: str) -> None:
    bad = any(
        0xD800 <= ord(c) <= 0xDFFF or c in "\u202e\u202d\u2066\u2067\u2068\u2069\u200b\u200f\x00\r\n\u2028"
        for c in text
    )
    if bad:
        with pytest.raises(Unstorable):
            admit_label(text, "kind")
    else:
        assert admit_label(text, "kind") == text


def test_coalesced_reports_once_per_period_with_the_count() -> None:
    now = [0.0]
    c = Coalesced(period=60, now=lambda: now[0])
    assert c.hit() == 1
    assert [c.hit() for _ in range(999)] == [None] * 999
    now[0] = 61.0
    assert c.hit() == 1000
