"""The soak's curves as one SVG (three panels: database size, claim p99, ingest p99, against time; one
line per backend). Hand-written SVG: a plotting library for three polylines is not worth a dependency."""

from __future__ import annotations

import math
from typing import Any
from xml.sax.saxutils import escape

WIDTH, PANEL_H, PAD_L, PAD_R, PAD_T, GAP = 760, 170, 64, 20, 28, 36
COLOURS = {"sqlite": "#1f77b4", "postgres": "#d62728"}
PANELS = (
    ("database size (MiB)", "samples", "mib"),
    ("claim_many p99 per 10 s (ms)", "claim", "p99"),
    ("ingest p99 per 10 s (ms)", "ingest", "p99"),
)


def _points(series: list[dict[str, float]], key: str) -> list[tuple[float, float]]:
    return [(s["t"], s[key]) for s in series if not math.isnan(s.get(key, math.nan))]


def svg(results: dict[str, Any]) -> str:
    height = PAD_T + len(PANELS) * (PANEL_H + GAP)
    plot_w = WIDTH - PAD_L - PAD_R
    t_max = max(
        (t for r in results.values() for _, series, key in PANELS for t, _ in _points(r[series], key)),
        default=1.0,
    )
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    legend = " ".join(
        f'<tspan fill="{COLOURS.get(name, "#333")}">&#9632; {escape(name)}</tspan>' for name in results
    )
    out.append(f'<text x="{PAD_L}" y="16">{legend}   (x: seconds since the start)</text>')
    for n, (title, series, key) in enumerate(PANELS):
        top = PAD_T + n * (PANEL_H + GAP) + 14
        y_max = max((v for r in results.values() for _, v in _points(r[series], key)), default=1.0) or 1.0
        out.append(f'<text x="{PAD_L}" y="{top - 4}" font-weight="bold">{escape(title)}</text>')
        out.append(
            f'<rect x="{PAD_L}" y="{top}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#999"/>'
        )
        for frac in (0.0, 0.5, 1.0):
            y = top + PANEL_H * (1 - frac)
            out.append(f'<text x="{PAD_L - 6}" y="{y + 4:.0f}" text-anchor="end">{y_max * frac:.0f}</text>')
        for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
            x = PAD_L + plot_w * frac
            out.append(
                f'<text x="{x:.0f}" y="{top + PANEL_H + 13}" text-anchor="middle">{t_max * frac:.0f}</text>'
            )
        for name, r in results.items():
            pts = " ".join(
                f"{PAD_L + plot_w * t / t_max:.1f},{top + PANEL_H * (1 - v / y_max):.1f}"
                for t, v in _points(r[series], key)
            )
            colour = COLOURS.get(name, "#333")
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
