"""Sender text made safe to show or store.

Webhook titles are written by whoever sends the webhook. The doorbell
(SPEC-0011) may put them in front of an agent, so :func:`neutralize` strips
what can hide or reorder text (control and format characters, bidi overrides,
zero-width marks, line breaks) and leaves readable words. It does not try to
judge meaning: "ignore previous instructions" stays, on one inert line.
"""

from __future__ import annotations

import json
import math
import unicodedata
from typing import Any

__all__ = [
    "MAX_JSON_DEPTH",
    "Unstorable",
    "admit",
    "admit_label",
    "loads_strict",
    "neutralize",
    "storable",
    "summary",
    "truncate",
]

# Deeper than any real webhook or JSON-RPC message (GitHub's payloads nest about ten levels), and far
# below where a recursive encoder (json, pydantic-core) gives up: a value admitted here can always be
# serialized back into an answer.
MAX_JSON_DEPTH = 64

# Cc and Cf are the SPEC-0011 set. Zl and Zp (U+2028, U+2029) are line breaks
# as well; naming them keeps the rule independent of what a whitespace split does.
_SPACE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
_REPLACEMENT = "\ufffd"


def _neutral_char(ch: str) -> str:
    category = unicodedata.category(ch)
    if category in _SPACE_CATEGORIES:
        return " "
    if category == "Cs":
        # A lone surrogate (JSON allows "\ud800") cannot be encoded as UTF-8.
        return _REPLACEMENT
    return ch


def neutralize(text: str) -> str:
    """Return `text` as one line of visible words (SPEC-0011 sender gate).

    Every Cc, Cf, Zl and Zp character becomes a space, lone surrogates become
    U+FFFD, runs of whitespace collapse to one ASCII space, and the ends are
    trimmed.
    """
    # str.split() with no argument splits on every Unicode whitespace run
    # (NBSP, ideographic space, ...), so the join leaves single spaces only.
    if text.isprintable():
        # No Cc, Cf, Cs, Zl or Zp character in it (isprintable is False for each), so the per-character
        # pass would change nothing: most titles take this path, at C speed (issue 18's claim path).
        return " ".join(text.split())
    return " ".join("".join(map(_neutral_char, text)).split())


def storable(text: str) -> str:
    """Replace what no text column accepts (NUL, lone surrogates) with U+FFFD.

    PostgreSQL rejects NUL in text, and UTF-8 cannot encode a lone surrogate;
    everything else is left exactly as the sender wrote it.
    """
    if "\x00" not in text and text.isascii():
        return text
    return "".join(_REPLACEMENT if ch == "\x00" or unicodedata.category(ch) == "Cs" else ch for ch in text)


class Unstorable(ValueError):
    """Input the server will not store. ``str(exc)`` is written for the sender: it never quotes the
    input or a parser's message."""


def _refuse_constant(name: str) -> Any:
    raise Unstorable("NaN and Infinity are not JSON")


def loads_strict(body: bytes) -> Any:
    """The one JSON parser for sender bodies (webhooks at /in, JSON-RPC on /mcp and /a2a, /register).

    Strict UTF-8, standard JSON only (no NaN or Infinity), and then :func:`admit`: what it returns can
    be stored, and answered back as UTF-8 JSON, without an error later.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Unstorable("it is not UTF-8") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError:
        raise Unstorable("a syntax error") from None
    except RecursionError:
        raise Unstorable(f"it nests deeper than {MAX_JSON_DEPTH} levels") from None
    except Unstorable:
        raise
    except ValueError:  # e.g. an integer literal past Python's digit limit
        raise Unstorable("a number is too large") from None
    # What else admit() refuses cannot be in a text without a \u escape (strict UTF-8 cannot carry a
    # surrogate) and with no more brackets than the depth allowed, and floats were checked as parsed:
    # most bodies skip the walk (a tenth of an MCP call's own work in the server, issue 18).
    if "\\u" not in text and text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return value
    return admit(value)


def _finite_float(literal: str) -> float:
    """The parser's float: a literal past the float range (``1e400``) would come out as infinity."""
    value = float(literal)
    if not math.isfinite(value):
        raise Unstorable("NaN and Infinity are not JSON")
    return value


def _unencodable(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # only a lone surrogate (U+D800-U+DFFF) cannot be encoded
        return True
    return False


def admit(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Return a parsed JSON ``value`` unchanged if it is storable, else raise :class:`Unstorable`.

    Refused: a string or key holding a lone UTF-16 surrogate (valid as a JSON escape, not as Unicode:
    it cannot be written as UTF-8, so every answer that carried it would fail), a non-finite float,
    and nesting deeper than ``max_depth``. Iterative, so no input can exhaust the stack.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _unencodable(item):
                raise Unstorable("a string holds a lone UTF-16 surrogate (not Unicode text)")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise Unstorable("NaN and Infinity are not JSON")
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise Unstorable(f"it nests deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key, inner in item.items():
                    if not isinstance(key, str) or _unencodable(key):
                        raise Unstorable("a string holds a lone UTF-16 surrogate (not Unicode text)")
                    stack.append((inner, depth + 1))
            else:
                stack.extend((inner, depth + 1) for inner in item)
        elif item is not None and not isinstance(item, bool | int):
            raise Unstorable("the value is not JSON")
    return value


def admit_label(text: str, what: str) -> str:
    """A short identifier (a route kind): refused if it holds a control, format (bidi, zero-width),
    line-separator or surrogate character, since it is shown and compared verbatim."""
    if any(unicodedata.category(ch) in _LABEL_REFUSED for ch in text):
        raise Unstorable(f"{what} may not hold control, bidi, zero-width or line-break characters")
    return text


_LABEL_REFUSED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch).startswith("M")


def truncate(text: str, n: int) -> str:
    """Cut `text` to at most `n` characters without orphaning combining marks.

    If the cut would fall inside a base character plus its marks (an accent,
    a variation selector), the whole cluster is dropped instead, so the result
    never ends with a base that lost its marks. Python strings hold code
    points, so no surrogate pair can be split. Text made only of marks is cut
    hard: there is no better boundary.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if len(text) <= n:
        return text
    cut = n
    while cut > 0 and _is_mark(text[cut]):
        cut -= 1
    if cut == 0 and _is_mark(text[0]):
        return text[:n]
    # Either cut == n (text[n] starts a new cluster) or text[cut] is the base
    # whose marks straddled n (the first character included: then nothing is
    # left); text[:cut] excludes it in both cases.
    return text[:cut]


def summary(title: str, limit: int = 200) -> str:
    """Neutralize `title` and cut it to at most `limit` characters."""
    return truncate(neutralize(title), limit).rstrip(" ")
