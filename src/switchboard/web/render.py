"""HTML rendering: the one module that imports Jinja2.

Autoescaping is on for every template and undefined names fail loudly, so a typo cannot render an
empty string where a value belongs. Times go out as ISO-8601 UTC inside ``<time datetime=...>``;
``static/app.js`` rewrites them into the viewer's zone (the UTC text stays when scripts are off).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from switchboard import __version__
from switchboard.core.text import neutralize
from switchboard.core.verbs import GROUPS

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


def iso(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return ""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def when(epoch_ms: int | None, empty: str = "never") -> Markup:
    """``<time>`` for an epoch-ms value; the readable UTC text is the no-script fallback."""
    if epoch_ms is None:
        return Markup('<span class="muted">{}</span>').format(empty)
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    text = moment.strftime("%Y-%m-%d %H:%M UTC")
    return Markup('<time datetime="{}">{}</time>').format(iso(epoch_ms), text)


def shown(value: Any) -> Any:
    """Jinja ``finalize``: every ``{{ ... }}`` that yields plain text passes through the doorbell's
    :func:`switchboard.core.text.neutralize` (bidi overrides, control and zero-width characters become
    spaces), so no template can forget it. Markup (already-rendered HTML: macros, ``<time>``) and
    non-text values pass unchanged; their text parts went through here when they were rendered."""
    if isinstance(value, str) and not isinstance(value, Markup) and not value.isprintable():
        # isprintable() is False for every Cc, Cf, Zl, Zp (and Zs but the ASCII space) character:
        # clean text, like a template's own ``' checked'``, keeps its spaces as written.
        return neutralize(value)
    return value


class Renderer:
    def __init__(self) -> None:
        self.env = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(default=True, default_for_string=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=shown,
        )
        self.env.filters["when"] = when
        self.env.filters["iso"] = iso
        self.env.globals["version"] = __version__
        self.env.globals["OUTBOUND"] = frozenset(v for g in GROUPS if g.outbound_http for v in g.verbs)

    def render(self, template: str, context: dict[str, Any]) -> str:
        return self.env.get_template(template).render(context)


__all__ = ["STATIC", "Markup", "Renderer", "escape", "iso", "shown", "when"]
