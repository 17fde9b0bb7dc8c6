"""The ``notification dropped`` warnings (SPEC-0024 REQ-7, REQ-11): every drop reaches a log line.

A sustained overflow may coalesce its warnings, one line per reason per ``window`` seconds, provided
each line says how many drops it stands for. So: the first drop of a reason after a quiet window is
written at once (``drops: 1``); the drops that follow within the window are gathered and written as
one line when the window ends, by a timer, never by waiting for a later drop; :meth:`DropLog.close`
writes whatever is gathered (at shutdown). The sum of ``drops`` over the lines equals the number of
drops, which is what the dropped counter counts.

A line names what was dropped by id, never by URL: ``hook_ids`` (and ``notification_ids``) once a hook
was matched, else ``endpoint_ids`` and ``todo_ids``. Each list holds at most ``MAX_IDS`` distinct ids;
``<name>_omitted`` says how many more distinct ones the line stands for, so a line stays bounded under
any flood. A line for one drop carries its ids as single fields too (``hook_id``, ``todo_id``, ...).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from switchboard.obs.logs import get_logger
from switchboard.operator.sink import NullSink, OperatorSink

log = get_logger("switchboard.notify")

WINDOW = 5.0
MAX_IDS = 50


@dataclass
class _Gathered:
    drops: int = 0
    ids: dict[str, dict[str, None]] = field(default_factory=dict)  # id name -> distinct ids, in order
    omitted: dict[str, int] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)  # facts shared by every drop (kind, ...)

    def add(self, ids: dict[str, str | None]) -> None:
        self.drops += 1
        for name, value in ids.items():
            if value is None:
                continue
            seen = self.ids.setdefault(name, {})
            if value in seen:
                continue
            if len(seen) < MAX_IDS:
                seen[value] = None
            else:
                self.omitted[name] = self.omitted.get(name, 0) + 1  # may count a repeat past the cap


class DropLog:
    """One warning per reason per ``window``, each saying how many drops it stands for."""

    def __init__(
        self,
        window: float = WINDOW,
        *,
        clock: Callable[[], float] = time.monotonic,
        operator: OperatorSink | None = None,
    ) -> None:
        self.window = window
        self.operator = operator or NullSink()  # told of every drop (it keeps the delivery queue's)
        self._clock = clock
        self._last: dict[str, float] = {}  # reason -> when its last line was written
        self._gathered: dict[str, _Gathered] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.logged = 0  # drops written so far (the sum of ``drops`` over the lines)

    def drop(self, reason: str, **ids: str | None) -> None:
        """One drop. ``ids``: ``hook_id``/``notification_id``/``todo_id`` or ``endpoint_id``/``todo_id``
        (``None`` values are left out); any other keyword is a fact about the drop, like ``kind``."""
        self.operator.dropped(reason)
        now = self._clock()
        quiet = reason not in self._gathered and now - self._last.get(reason, -self.window) >= self.window
        if quiet:
            self._last[reason] = now
            self.logged += 1
            log.warning(
                "notification dropped",
                reason=reason,
                drops=1,
                **{k: v for k, v in ids.items() if v is not None},
                **{f"{k}s": [v] for k, v in ids.items() if v is not None and k.endswith("_id")},
            )
            return
        gathered = self._gathered.get(reason)
        if gathered is None:
            gathered = self._gathered[reason] = _Gathered()
        gathered.add({k: v for k, v in ids.items() if k.endswith("_id")})
        gathered.extra.update({k: v for k, v in ids.items() if not k.endswith("_id") and v is not None})
        if reason not in self._timers:
            self._schedule(reason, max(0.0, self._last.get(reason, now) + self.window - now))

    def _schedule(self, reason: str, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to time it: write it now rather than risk losing it
            self.flush(reason)
            return
        self._timers[reason] = loop.call_later(delay, self.flush, reason)

    def flush(self, reason: str) -> None:
        """Write the line for what ``reason`` gathered (the timer calls this at the window's end)."""
        timer = self._timers.pop(reason, None)
        if timer is not None:
            timer.cancel()
        gathered = self._gathered.pop(reason, None)
        if gathered is None or gathered.drops == 0:
            return
        self._last[reason] = self._clock()
        self.logged += gathered.drops
        fields: dict[str, object] = {f"{name}s": list(values) for name, values in gathered.ids.items()}
        fields.update({f"{name}s_omitted": n for name, n in gathered.omitted.items()})
        log.warning(
            "notification dropped",
            reason=reason,
            drops=gathered.drops,
            window_seconds=self.window,
            **gathered.extra,
            **fields,
        )

    def close(self) -> None:
        """Write everything gathered, now (shutdown): no drop is left unlogged."""
        for reason in list(self._gathered):
            self.flush(reason)
