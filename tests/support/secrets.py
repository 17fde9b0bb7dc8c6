"""Suite-wide secrecy check (issue 8, item 6).

Every secret a test is shown once (bearer tokens, source secrets, hook signing secrets, OAuth tokens)
is registered here by the helpers that receive it. A root log handler formats every record the way
production does (JSON, INFO and up) for the whole session; at the end of the session, and whenever an
instance stops (its metrics page), nothing registered may appear.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from switchboard.obs.logs import JsonFormatter

# Query-string canaries tests put in URLs; they must never be logged either.
CANARIES = ("QUERYCANARY",)
SECRET_KEYS = frozenset(
    {"signing_secret", "token", "secret", "access_token", "refresh_token", "client_secret", "credentials"}
)
MIN_LEN = 12  # shorter values would match by accident

REVEALED: set[str] = set()


def reveal(*values: object) -> None:
    for value in values:
        if isinstance(value, str) and len(value) >= MIN_LEN:
            REVEALED.add(value)
            if value.startswith("whsec_"):
                REVEALED.add(value.removeprefix("whsec_"))


def harvest(obj: Any) -> None:
    """Register every secret-looking field of an API result."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in SECRET_KEYS:
                reveal(value)
            harvest(value)
    elif isinstance(obj, list | tuple):
        for item in obj:
            harvest(item)


def leaks(texts: Iterable[str]) -> list[tuple[str, str]]:
    needles = [*REVEALED, *CANARIES]
    found: list[tuple[str, str]] = []
    for text in texts:
        for needle in needles:
            if needle in text:
                found.append((needle[:6] + "…", text[:300]))
    return found


class SessionLogScanner(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a formatting bug must not hide the line
            self.lines.append(repr(record.__dict__))


SCANNER = SessionLogScanner()
