"""The server's startup heap, frozen once the server is up, so garbage collection skips it (issue 18).

A full collection (generation 2) walks every container object the process holds. Once the server is up
that is mostly what startup made and never frees: imported modules, classes, compiled statements, the
app and its parts (about 190,000 objects). Under claim load a full collection ran every 250 or so
claims and paused every thread of the process (the event loop and the SQLite writer) for 40-450 ms on
a busy 2-core machine: 4 pauses above 20 ms per 1,000 claims, with the 16 claims in flight waiting out
each one, which made scenario 4's claim p99 on SQLite. ``gc.freeze()`` moves every tracked object to
the permanent generation, which collections ignore; a full collection then walks only what was made
since (a few thousand objects: 2-15 ms). Objects frozen are still freed by reference counting; only a
reference cycle among them would stay, and startup's cycles are collected just before freezing.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect startup's garbage, then freeze what is left; how many objects are now frozen. Called
    once by ``switchboard serve`` when it listens (every component started)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
