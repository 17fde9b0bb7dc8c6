"""Per-owner fairness: at most ``inflight`` attempts at once for one owning human, across all their
endpoints and hooks (a tenant may hold several endpoints of 5 hooks each). The rest wait in that
owner's bounded backlog, in order, and the rest of the pool keeps serving other tenants."""

from __future__ import annotations

from collections import defaultdict, deque

from switchboard.notify.notification import Notification


class OwnerFairness:
    def __init__(self, *, inflight: int, backlog: int) -> None:
        self.inflight_cap = inflight
        self.backlog_cap = backlog
        self._inflight: defaultdict[str, int] = defaultdict(int)
        self._parked: defaultdict[str, deque[Notification]] = defaultdict(deque)

    def at_cap(self, owner: str) -> bool:
        return self._inflight[owner] >= self.inflight_cap

    def park(self, n: Notification) -> bool:
        """Hold ``n`` until its owner has room; False when the owner's backlog is full (``n`` is not held)."""
        parked = self._parked[n.owner_id]
        if len(parked) >= self.backlog_cap:
            return False
        parked.append(n)
        return True

    def started(self, owner: str) -> None:
        self._inflight[owner] += 1

    def finished(self, owner: str) -> Notification | None:
        """One of ``owner``'s attempts ended: the next of their parked notifications, if any."""
        self._inflight[owner] -= 1
        if self._inflight[owner] == 0:
            del self._inflight[owner]
        waiting = self._parked.get(owner)
        if not waiting:
            return None
        n = waiting.popleft()
        if not waiting:
            del self._parked[owner]
        return n

    def any_parked(self) -> bool:
        return any(self._parked.values())

    def take_parked(self) -> list[Notification]:
        """Everything parked, handed over (a stop abandons it)."""
        parked = [n for waiting in self._parked.values() for n in waiting]
        self._parked.clear()
        return parked
