"""Capture log lines exactly as production renders them (the JSON formatter), for assertions on
log content: the per-attempt lines and the secrecy checks of the notify-hook and A2A harnesses."""

from __future__ import annotations

import json
import logging
from typing import Any

from switchboard.obs.logs import JsonFormatter


class LogCapture(logging.Handler):
    """Every log line as the JSON formatter renders it, for the secrecy assertions."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in map(json.loads, self.lines) if e["event"] == name]
