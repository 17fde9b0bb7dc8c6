"""The audit trail of operator actions, written once for every face (CLI, console, MCP, the store and
service layers): one structured line per action on the ``switchboard.audit`` logger, ``"event":
"audit"``, naming the action, who did it and the ids it touched; never a secret, token or URL. The
logger stays at INFO whatever SWITCHBOARD_LOG_LEVEL says (obs.logs.configure_logging), and a deployment
can route it apart.
"""

from __future__ import annotations

from typing import Any

from switchboard.obs.logs import get_logger

log = get_logger("switchboard.audit")


def audit(action: str, actor: str | None, **fields: Any) -> None:
    """``actor``: the human's email or id, or the endpoint id, that acted; ``cli`` for the admin CLI;
    None when the caller did not say (logged as ``unknown``)."""
    log.info("audit", action=action, actor=actor or "unknown", **fields)


__all__ = ["audit"]
