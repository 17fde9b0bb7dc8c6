"""The one confirmation page before a delete (endpoint, source, human): it names what goes with it."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.responses import Response

from switchboard.web.page import Visit


def confirm_delete(
    v: Visit,
    *,
    what: str,
    name: str,
    nav: str,
    action: str,
    cancel: str,
    goes: Sequence[tuple[int, str]],
    note: str,
    verb: str = "Delete",
) -> Response:
    """GET of a delete route: ``goes`` lists (count, label) of what is deleted along; POST to ``action``
    deletes, ``cancel`` goes back."""
    return v.render(
        "confirm_delete.html",
        title=f"{verb} {name}",
        nav=nav,
        what=what,
        name=name,
        action=action,
        cancel=cancel,
        goes=list(goes),
        note=note,
    )
