"""Sender text made safe to show or store.

Webhook titles are written by whoever sends the webhook. The doorbell
(SPEC-0011) may put them in front of an agent, so :func:`neutralize` strips
what can hide or reorder text (control and format characters, bidi overrides,
zero-width marks, line breaks) and leaves readable words. It does not try to
judge meaning: "ignore previous instructions" stays, on one inert line.
"""

from __future__ import annotations

import unicodedata

__all__ = ["neutralize", "storable", "summary", "truncate"]

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
    return " ".join("".join(map(_neutral_char, text)).split())


def storable(text: str) -> str:
    """Replace what no text column accepts (NUL, lone surrogates) with U+FFFD.

    PostgreSQL rejects NUL in text, and UTF-8 cannot encode a lone surrogate;
    everything else is left exactly as the sender wrote it.
    """
    if "\x00" not in text and text.isascii():
        return text
    return "".join(_REPLACEMENT if ch == "\x00" or unicodedata.category(ch) == "Cs" else ch for ch in text)


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
    if cut == 0:
        return text[:n]
    # Either cut == n (text[n] starts a new cluster) or text[cut] is the base
    # whose marks straddled n; text[:cut] excludes it in both cases.
    return text[:cut]


def summary(title: str, limit: int = 200) -> str:
    """Neutralize `title` and cut it to at most `limit` characters."""
    return truncate(neutralize(title), limit).rstrip(" ")
