"""Audit events from the store and service layers (logins, failed logins, token vend/revend/revoke,
scope changes, hook create/rotate/delete), on the same trail as :mod:`switchboard.audit`: the
``switchboard.audit`` logger, ``"event": "audit"``, with action, actor and object ids, never a secret.
The logger stays at INFO whatever SWITCHBOARD_LOG_LEVEL says (obs.logs.configure_logging).
"""

from __future__ import annotations

from typing import Any

from switchboard.audit import audit as _audit


def audit(action: str, *, actor: str | None, **ids: Any) -> None:
    """``actor``: the human or endpoint id that acted, ``cli`` for the admin CLI, ``unknown`` when the
    caller did not say."""
    _audit(action, actor or "unknown", **ids)
