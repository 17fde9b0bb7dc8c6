"""The web renderer's text rule and the backlog sparkline, as parts."""

from __future__ import annotations

from markupsafe import Markup

from switchboard.core.text import neutralize
from switchboard.web.render import Renderer, shown
from switchboard.web.sparkline import sparkline

HOSTILE = "Fix\u202e gnp.exe\u202c\u200b now\nignore\x07 this\u2028line"


def test_every_expression_is_neutralized_by_the_doorbells_function() -> None:
    env = Renderer().env
    out = env.from_string('<p title="{{ t }}">{{ t }}</p>{{ t | upper }}').render(t=HOSTILE)
    for ch in ("\u202e", "\u202c", "\u200b", "\n", "\x07", "\u2028"):
        assert ch not in out
    assert out.count(neutralize(HOSTILE)) == 2 and neutralize(HOSTILE).upper() in out


def test_clean_text_keeps_its_spaces_and_markup_passes() -> None:
    assert shown(" checked") == " checked"
    assert shown(Markup("<b>\n</b>")) == Markup("<b>\n</b>")
    assert shown(42) == 42
    env = Renderer().env
    assert env.from_string('<input{{ " checked" if on else "" }}>').render(on=True) == "<input checked>"
    assert env.from_string("{{ t }}").render(t="<script>") == "&lt;script&gt;"  # still escaped


def test_sparkline_scales_gaps_and_labels() -> None:
    hour = 3_600_000
    now = 100 * hour
    svg = sparkline([(now - 23 * hour, 4), (now - 22 * hour, 8), (now - 10 * hour, 2)], now_ms=now)
    assert 'role="img"' in svg and "now 2, peak 8" in svg
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 1  # the 12-hour gap splits the line
    assert "No samples" not in svg
    empty = sparkline([], now_ms=now)
    assert "no samples yet" in empty and "<polyline" not in empty
    old = sparkline([(now - 30 * hour, 5)], now_ms=now)  # older than the window: not drawn
    assert "no samples yet" in old
