"""The grant list as the vend wizard, quick-vend, the scope editor and the OAuth consent screen show it.

One view model and one template partial (``templates/_grants.html``) for all four, so the groups and
their labels cannot drift apart (SPEC-0024 REQ-2). A group whose verbs make Switchboard call URLs the
caller chooses (``VerbGroup.outbound_http``) is never pre-checked: its boxes are checked only when they
show what an existing endpoint already holds.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from switchboard.core.verbs import DEFAULT_GRANT, GROUPS, unknown_verbs
from switchboard.store.accounts import QUEUE

_SPLIT = re.compile(r"[\s,]+")


@dataclass(frozen=True, slots=True)
class VerbChoice:
    name: str
    checked: bool
    available: bool = True  # False: the chosen endpoint does not hold it (consent screen)


@dataclass(frozen=True, slots=True)
class GroupChoice:
    key: str
    label: str
    description: str
    outbound_http: bool
    in_default: bool
    verbs: tuple[VerbChoice, ...]


def grant_groups(
    checked: Collection[str] = DEFAULT_GRANT, *, current_scope: bool = False
) -> list[GroupChoice]:
    """``checked`` pre-checks verbs, except outbound-HTTP ones unless ``current_scope`` says the boxes
    mirror an endpoint's existing scope (the scope editor)."""
    wanted = set(checked)
    default = set(DEFAULT_GRANT)
    return [
        GroupChoice(
            key=group.key,
            label=group.label,
            description=group.description,
            outbound_http=group.outbound_http,
            in_default=all(v in default for v in group.verbs),
            verbs=tuple(
                VerbChoice(v, v in wanted and (current_scope or not group.outbound_http)) for v in group.verbs
            ),
        )
        for group in GROUPS
    ]


def parse_verbs(values: list[str]) -> tuple[list[str], str | None]:
    """The checked verbs, or an error message naming unknown ones."""
    verbs = sorted(set(values))
    bad = unknown_verbs(verbs)
    if bad:
        return [], f"Unknown verbs: {', '.join(v[:40] for v in bad[:5])}."
    return verbs, None


def parse_queues(text: str) -> tuple[list[str], str | None]:
    """Queue names separated by commas or spaces, or an error message."""
    names = [q for q in _SPLIT.split(text.strip().lower()) if q]
    if not names:
        return [], "Name at least one queue the endpoint may drain (for example inbox)."
    bad = [q for q in names if not QUEUE.match(q)]
    if bad:
        return [], (
            f"Not a queue name: {bad[0][:64]!r}. Use lower-case letters, digits, '.', '_' or '-' (up to 64)."
        )
    if len(names) > 50:
        return [], "At most 50 queues per endpoint."
    return sorted(set(names)), None
