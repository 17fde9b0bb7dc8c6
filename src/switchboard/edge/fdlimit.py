"""The process's open-file limit, raised to what the connection cap needs (docs/self-hosting.md).

Every connection is a descriptor, and the connection guard (conn.py) may hold up to twice
``SWITCHBOARD_MAX_CONNECTIONS`` for the moment a burst takes to sweep. Many systems start a service with a
soft limit of 1,024 and a much higher hard limit (systemd: 524,288); a process may raise its own soft
limit up to the hard one, as Go's runtime and nginx's ``worker_rlimit_nofile`` do. When the hard limit is
lower than what is needed, ``serve`` still starts and says so once.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from switchboard.edge.conn import HARD_FACTOR

# Descriptors beside the client connections: database connections, worker pipes, log files, outbound
# HTTPS to receivers from the server process (the worker processes inherit the same limit).
SPARE = 1024


@dataclass(frozen=True)
class FdLimit:
    needed: int
    after: int  # the soft limit now

    @property
    def short(self) -> bool:
        return self.after < self.needed


def needed_for(max_connections: int) -> int:
    return HARD_FACTOR * max_connections + SPARE


def raise_soft_limit(needed: int) -> FdLimit:
    """Raise the soft ``RLIMIT_NOFILE`` to ``needed`` (at most the hard limit); never lowers it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= needed:
        return FdLimit(needed=needed, after=needed if soft == unlimited else soft)
    target = needed if hard == unlimited else min(needed, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return FdLimit(needed=needed, after=max(target, soft))
