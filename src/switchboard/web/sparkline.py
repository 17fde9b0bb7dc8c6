"""The 24-hour backlog sparkline: a small SVG drawn on the server (no script, no framework)."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup

WIDTH, HEIGHT, PAD = 240, 40, 2


def sparkline(samples: Sequence[tuple[int, int]], *, now_ms: int, hours: int = 24) -> Markup:
    """``samples`` are (bucket epoch ms, pending). The x axis is the last ``hours``; the y axis runs
    from zero to the largest sample. An hour without samples (the server was down) is a gap."""
    start = now_ms - hours * 3_600_000
    points = [(t, n) for t, n in samples if t >= start]
    peak = max((n for _, n in points), default=0)
    latest = points[-1][1] if points else 0
    label = (
        f"Backlog over the last {hours} hours: no samples yet"
        if not points
        else f"Backlog over the last {hours} hours: now {latest}, peak {peak}"
    )
    span = max(1, now_ms - start)
    scale = (HEIGHT - 2 * PAD) / peak if peak else 0.0

    def xy(t: int, n: int) -> str:
        x = PAD + (WIDTH - 2 * PAD) * (t - start) / span
        y = HEIGHT - PAD - n * scale
        return f"{x:.1f},{y:.1f}"

    runs: list[list[str]] = []
    last_t: int | None = None
    for t, n in points:
        if last_t is None or t - last_t > 3_600_000:
            runs.append([])
        runs[-1].append(xy(t, n))
        last_t = t
    lines = Markup("").join(
        Markup('<polyline class="spark-line" points="{}"/>').format(" ".join(run))
        if len(run) > 1
        else Markup('<circle class="spark-dot" cx="{}" cy="{}" r="2"/>').format(*run[0].split(","))
        for run in runs
    )
    return Markup(
        '<svg class="sparkline" viewBox="0 0 {w} {h}" preserveAspectRatio="none" role="img" '
        'aria-label="{label}"><title>{label}</title>'
        '<line class="spark-base" x1="0" y1="{base}" x2="{w}" y2="{base}"/>{lines}</svg>'
    ).format(w=WIDTH, h=HEIGHT, base=HEIGHT - PAD, label=label, lines=lines)


__all__ = ["sparkline"]
