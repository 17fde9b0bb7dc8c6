"""Structured JSON logs on stdlib logging.

Call sites pass facts as ``extra={"fields": {...}}`` (or through :class:`BoundLogger`). The formatter
drops any field whose name says it is secret and strips URL query strings from values, as a second line
of defence: the first is never handing a secret to a logger at all.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

_SECRET_NAMES = re.compile(r"secret|token|password|signature|authorization|cookie|credential", re.I)
_URL_QUERY = re.compile(r"(https?://[^\s?#\"']*)\?[^\s#\"']*", re.I)
_SIGNATURE_VALUE = re.compile(r"v1,[A-Za-z0-9+/=]{20,}")
_WHSEC = re.compile(r"whsec_[A-Za-z0-9+/=]+")
_BEARER = re.compile(r"(?i)bearer\s+[A-Za-z0-9._~+/=-]+")
_OWN_TOKENS = re.compile(r"\b(sbt|sboa|sbor|sboc)_[A-Za-z0-9_-]{8,}")
# What each pattern above needs to match at all: text without any of these (ids, results, event names:
# nearly every value logged) is returned as it is after one search instead of five substitutions.
_SUSPECT = re.compile(r"\?|v1,|whsec_|bearer|(?:sbt|sboa|sbor|sboc)_", re.I)


def scrub(value: str) -> str:
    """Remove what must never be logged from free text."""
    if not _SUSPECT.search(value):
        return value
    value = _URL_QUERY.sub(r"\1?[redacted]", value)
    value = _SIGNATURE_VALUE.sub("v1,[redacted]", value)
    value = _WHSEC.sub("whsec_[redacted]", value)
    value = _OWN_TOKENS.sub(r"\1_[redacted]", value)
    return _BEARER.sub("Bearer [redacted]", value)


_SECRET_KEYS: dict[str, bool] = {}  # field name -> whether it names a secret (names come from code: few)
_SECRET_KEYS_KEPT = 4096


def _secret_key(key: str) -> bool:
    found = _SECRET_KEYS.get(key)
    if found is None:
        found = _SECRET_NAMES.search(key) is not None
        if len(_SECRET_KEYS) < _SECRET_KEYS_KEPT:
            _SECRET_KEYS[key] = found
    return found


def _clean(fields: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if _secret_key(key):
            out[key] = "[redacted]"
        elif isinstance(value, str):
            out[key] = scrub(value)
        elif isinstance(value, int | float | bool) or value is None:
            out[key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str | int) for v in value):
            out[key] = [scrub(v) if isinstance(v, str) else v for v in value]  # ids stay a JSON list
        else:
            out[key] = scrub(str(value))
    return out


class JsonFormatter(logging.Formatter):
    _second: tuple[int, str] = (-1, "")  # one attribute, so a thread never sees half an update

    def _ts(self, record: logging.LogRecord) -> str:
        """The record's time; the formatted second is kept (a busy notify worker logs a thousand lines in it)."""
        second, text = self._second
        if int(record.created) != second:
            second = int(record.created)
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, text)
        return f"{text}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self._ts(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": scrub(record.getMessage()),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            entry.update(_clean(fields))
        if record.exc_info and record.exc_info[0] is not None:
            # The exception type and a scrubbed message; tracebacks can carry locals' reprs.
            exc = record.exc_info[1]
            entry["error_type"] = type(exc).__name__
            entry["error"] = scrub(str(exc))[:500]
        return json.dumps(entry, default=str)


class TextFormatter(JsonFormatter):
    """One human-readable line per event (SWITCHBOARD_LOG_FORMAT=text): the same facts, scrubbed the
    same way, as ``ts level logger event key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        entry = json.loads(super().format(record))
        head = [
            entry.pop("ts"),
            entry.pop("level").upper().ljust(7),
            entry.pop("logger") + ":",
            entry.pop("event"),
        ]
        tail = [
            f"{key}={json.dumps(value) if isinstance(value, str) and (' ' in value or not value) else value}"
            for key, value in entry.items()
        ]
        return " ".join(head + tail)


class BoundLogger:
    """A thin wrapper that passes keyword facts as structured fields."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def _log(self, level: int, event: str, exc_info: bool, fields: dict[str, Any]) -> None:
        logger = self._logger
        if logger.isEnabledFor(level):
            # The record is made here rather than by Logger.log, which first walks the stack for the
            # caller's file and line: no formatter of ours prints them, and one line per notify attempt
            # paid for that walk.
            record = logger.makeRecord(
                logger.name,
                level,
                "(unknown file)",
                0,
                event,
                (),
                sys.exc_info() if exc_info else None,
                extra={"fields": fields},
            )
            logger.handle(record)

    def debug(self, event: str, **fields: Any) -> None:
        self._log(logging.DEBUG, event, False, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, event, False, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, event, False, fields)

    def error(self, event: str, *, exc_info: bool = False, **fields: Any) -> None:
        self._log(logging.ERROR, event, exc_info, fields)


def get_logger(name: str) -> BoundLogger:
    return BoundLogger(logging.getLogger(name))


# Libraries that log whole request URLs (httpx: "HTTP Request: POST <url>") or SQL parameters at INFO or
# DEBUG. Token-trust inbound URLs carry their secret in the path, so these stay at WARNING.
NOISY_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "aiosqlite", "asyncpg", "sqlalchemy.engine")


def quiet_noisy_loggers() -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def configure_logging(level: str | None = None, fmt: str | None = None) -> None:
    """Log lines on stderr for the switchboard loggers and the servers we embed: JSON (default) or text.

    Unset arguments come from SWITCHBOARD_LOG_LEVEL and SWITCHBOARD_LOG_FORMAT (already validated by
    Settings in the server; read here so the notify worker children, which inherit the environment, log
    the same way)."""
    level = (level or os.environ.get("SWITCHBOARD_LOG_LEVEL") or "INFO").upper()
    fmt = (fmt or os.environ.get("SWITCHBOARD_LOG_FORMAT") or "json").lower()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if fmt == "text" else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if level in LOG_LEVELS else "INFO")
    logging.getLogger("switchboard.audit").setLevel(logging.INFO)  # obs.audit: not subject to the level
    quiet_noisy_loggers()
    # uvicorn's access log prints full request lines, query strings included: keep it off.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
