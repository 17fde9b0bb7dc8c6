"""The audit trail of operator actions: one structured log line per action, from every face alike.

A line names the action, who did it (an email, or ``cli``) and the ids it touched; never a secret,
token or URL. Lines go to the ``switchboard.audit`` logger, so a deployment can route them apart.
"""

from __future__ import annotations

from typing import Any

from switchboard.obs.logs import get_logger

log = get_logger("switchboard.audit")


def audit(action: str, actor: str, **fields: Any) -> None:
    log.info("audit", action=action, actor=actor, **fields)


__all__ = ["audit"]
