"""Audit events: one structured log line per security-relevant act, on the ``switchboard.audit`` logger
(``"event": "audit"``), with who did it, what, and the ids of what it touched. Never a secret: tokens,
passwords and hook secrets are not arguments here, and the log formatter scrubs them as well.

Actions: ``login``, ``login_failed``, ``human.create``, ``token.vend``, ``token.revend``,
``token.revoke``, ``endpoint.scope``, ``hook.create``, ``hook.rotate``, ``hook.delete``. The logger
stays at INFO whatever SWITCHBOARD_LOG_LEVEL says: an audit trail is not verbosity.
"""

from __future__ import annotations

import logging
from typing import Any

from switchboard.obs.logs import BoundLogger

AUDIT_LOGGER = "switchboard.audit"
_log = BoundLogger(logging.getLogger(AUDIT_LOGGER))


def audit(action: str, *, actor: str | None, **ids: Any) -> None:
    """``actor``: the human or endpoint id that acted, ``cli`` for the admin CLI, None when unknown."""
    _log.info("audit", action=action, actor=actor or "unknown", **ids)
