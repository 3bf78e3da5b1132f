"""Sparklines: one series as a small SVG, the incident's onset marked, drawn server-side."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT, PAD = 320, 64, 4


def sparkline(points: Sequence[tuple[float, float]], onset: float | None = None, label: str = "") -> str:
    """`points` (time s, value), in any order; non-finite values are gaps. An empty series is
    said as such rather than drawn flat."""
    pts = sorted((t, v) for t, v in points if math.isfinite(v))
    if not pts:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="spark empty" width="{WIDTH}" height="{HEIGHT}" '
            f'data-points="0"><text x="8" y="{HEIGHT / 2:.0f}" font-size="11">no samples</text></svg>'
        )
    t0, t1 = pts[0][0], pts[-1][0]
    if onset is not None:
        t0, t1 = min(t0, onset), max(t1, onset)
    lo, hi = min(v for _, v in pts), max(v for _, v in pts)
    span_t = (t1 - t0) or 1.0
    span_v = (hi - lo) or (abs(hi) or 1.0)

    def xy(t: float, v: float) -> str:
        x = PAD + (t - t0) / span_t * (WIDTH - 2 * PAD)
        y = HEIGHT - PAD - (v - lo) / span_v * (HEIGHT - 2 * PAD - 12)
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(t, v) for t, v in pts)
    marker = ""
    if onset is not None:
        x = PAD + (onset - t0) / span_t * (WIDTH - 2 * PAD)
        marker = (
            f'<line class="onset" x1="{x:.1f}" y1="10" x2="{x:.1f}" y2="{HEIGHT}" '
            'stroke="#d93025" stroke-dasharray="3,2"/>'
        )
    text = f"{escape(label)} {lo:.4g} … {hi:.4g}" if label else f"{lo:.4g} … {hi:.4g}"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="spark" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" data-points="{len(pts)}">'
        f'<text x="{PAD}" y="10" font-size="10" fill="#5f6368">{text}</text>{marker}'
        f'<polyline fill="none" stroke="#1a73e8" stroke-width="1.5" points="{line}"/></svg>'
    )


__all__ = ["sparkline"]
