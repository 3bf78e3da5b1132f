"""Sparklines: one series as a small SVG, drawn by what the metric is (vocab/catalog.py), the
incident's onset marked, a time axis below, drawn server-side.

- a gauge: a line, its range with its unit;
- a counter (given as its per-second rate, show/series.py): a line, its unit per second;
- a state (an enumeration, a flag): a step line, each level named from the catalog's meaning
  (link state 1 = active, 0 = down; the fabric manager's dcgmFabricManagerStatus_t);
- a bitmask (clock event reasons): one band per reason set, named from vocab/faults.toml
  [clock_event_reasons];
- an Xid: a mark where each Xid was reported, with the catalog's meaning (vocab/xid_catalog.tsv);
  a code is not a magnitude, so it is never drawn as a line.

Where the entity sent nothing the picture says so: a line is not drawn across a gap in its samples
(one longer than three of its usual steps), and the gap, like the time since an entity that is
still silent last reported (the incident's `no_data_since`), is shaded "no data".
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Sequence
from functools import cache
from html import escape

from vocab.catalog import MEASUREMENTS, Metric, MetricKind

WIDTH, HEIGHT, PAD, AXIS = 320, 64, 4, 12
PLOT_TOP = 14  # below the label


@cache
def metric_info(name: str, measurement: str | None = None) -> Metric | None:
    """The catalog's entry for a field name, the measurement's own where it is known (a switch
    port's symbol_error is described as a switch port's, not as the NIC port's that the catalog
    lists first: issue 66), else the first measurement that carries it."""
    if measurement:
        own = next((x for m in MEASUREMENTS if m.name == measurement for x in m.metrics if x.name == name), None)
        if own is not None:
            return own
    return next((x for m in MEASUREMENTS for x in m.metrics if x.name == name), None)


@cache
def _xid_meanings() -> dict[int, str]:
    from vocab.xid_catalog import meaning, rows

    return {code: meaning(row) for code, row in rows().items()}


def xid_meaning(code: int) -> str:
    return _xid_meanings().get(code, "not in NVIDIA's Xid catalog")


def state_legend(metric: Metric) -> dict[int, str]:
    """Each level of a state metric named, from the catalog's own description ("1 = active, 0 =
    down"; "0 not supported, 1 not started, ..."); a flag is yes/no."""
    if metric.unit == "bool":
        return {0: "no", 1: "yes"}
    text = metric.description
    inner = text[text.index("(") + 1 : text.rindex(")")] if "(" in text and ")" in text else text
    inner = inner.split(":", 1)[-1]
    return {int(n): word.strip() for n, word in re.findall(r"(\d+)\s*=?\s*([A-Za-z][^,;]*)", inner)}


def clock_reasons() -> dict[str, int]:
    from vocab.registry import CLOCK_EVENT_REASONS

    return dict(CLOCK_EVENT_REASONS)


def _hhmm(t: float) -> str:
    return time.strftime("%H:%M", time.gmtime(t))


def _empty() -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="spark empty" width="{WIDTH}" height="{HEIGHT}" '
        f'data-points="0"><text x="8" y="{HEIGHT / 2:.0f}" font-size="11">no samples</text></svg>'
    )


def _usual_step(pts: Sequence[tuple[float, float]]) -> float:
    """The series' usual time between samples (the median); 0 when it has too few to say."""
    steps = sorted(b[0] - a[0] for a, b in itertools.pairwise(pts))
    return steps[len(steps) // 2] if len(steps) >= 2 else 0.0


def _gaps(pts: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Where a series has no samples: between two further apart than three of its usual steps."""
    usual = _usual_step(pts)
    if usual <= 0:
        return []
    return [(a[0], b[0]) for a, b in itertools.pairwise(pts) if b[0] - a[0] > 3 * usual]


def sparkline(
    points: Sequence[tuple[float, float]],
    onset: float | None = None,
    label: str = "",
    metric: str | None = None,
    rate: bool = False,
    no_data_since: float | None = None,
    until: float | None = None,
    samples: bool = True,
) -> str:
    """`points` (time s, value), in any order; non-finite values are gaps. `metric` names the
    catalog field, which chooses the drawing; `rate`: the points are a counter's per-second rate.
    `until`: the end of the window drawn (a series that stops short of it ends in a gap);
    `no_data_since`: the entity has sent nothing since then (an open incident's), shaded up to
    `until`; `samples`: the points are the entity's samples, so a gap
    between them is a gap in its data (not so for points taken from an incident's evidence). An
    empty series is said as such rather than drawn flat."""
    pts = sorted((t, v) for t, v in points if math.isfinite(v))
    if not pts:
        return _empty()
    info = metric_info(metric) if metric else None
    t0, t1 = pts[0][0], pts[-1][0]
    if onset is not None:
        t0, t1 = min(t0, onset), max(t1, onset)
    gaps = _gaps(pts) if samples else []
    # the window drawn runs to `until`: a series that stops short of it (its entity still silent,
    # or quiet for longer than three of its usual steps before then) ends in a gap
    if until is not None and samples:
        tail = pts[-1][0] if no_data_since is None else max(no_data_since, pts[-1][0])
        usual = _usual_step(pts)
        if tail < until and (no_data_since is not None or (usual > 0 and until - tail > 3 * usual)):
            gaps.append((tail, until))
            t1 = max(t1, until)
    span_t = (t1 - t0) or 1.0
    bottom = HEIGHT - AXIS

    def x_of(t: float) -> float:
        return PAD + (t - t0) / span_t * (WIDTH - 2 * PAD)

    body: list[str] = []
    for a, b in gaps:  # under the series: it is drawn over them
        body.append(
            f'<rect class="no-data" x="{x_of(a):.1f}" y="{PLOT_TOP}" width="{max(x_of(b) - x_of(a), 1.0):.1f}" '
            f'height="{bottom - PLOT_TOP}" fill="#f1f3f4"><title>no data {_hhmm(a)}-{_hhmm(b)}</title></rect>'
        )
        if x_of(b) - x_of(a) > 40:
            body.append(
                f'<text class="no-data" x="{(x_of(a) + x_of(b)) / 2:.1f}" y="{(PLOT_TOP + bottom) / 2 + 3:.1f}" '
                'font-size="9" fill="#5f6368" text-anchor="middle">no data</text>'
            )
    legend: list[tuple[int, str]] = []
    drawn = "line"
    if info is not None and info.kind is MetricKind.STATE and info.unit == "xid":
        drawn = "events"
        events = [(t, int(v)) for n, (t, v) in enumerate(pts) if v and (n == 0 or pts[n - 1][1] != v)]
        for t, code in events:
            x = x_of(t)
            body.append(
                f'<line class="xid" data-xid="{code}" x1="{x:.1f}" y1="{PLOT_TOP}" x2="{x:.1f}" y2="{bottom}" '
                f'stroke="#a50e0e" stroke-width="2"><title>Xid {code}: {escape(xid_meaning(code))}</title></line>'
            )
        codes = sorted({c for _, c in events})
        legend = [(c, f"Xid {c}: {xid_meaning(c)}") for c in codes]
        text = f"{len(events)} Xid report{'s' if len(events) != 1 else ''}" if events else "no Xid reported"
    elif info is not None and info.kind is MetricKind.STATE and info.unit == "bitmask":
        drawn = "bands"
        reasons = [(name, bit) for name, bit in clock_reasons().items() if any(int(v) & bit for _, v in pts)]
        lane = (bottom - PLOT_TOP) / max(len(reasons), 1)
        for n, (name, bit) in enumerate(reasons):
            y = PLOT_TOP + n * lane
            for (ta, va), (tb, _) in zip(pts, [*pts[1:], (pts[-1][0], 0.0)], strict=True):
                if int(va) & bit:
                    w = max(x_of(tb) - x_of(ta), 1.5)
                    body.append(
                        f'<rect class="band" data-reason="{escape(name)}" x="{x_of(ta):.1f}" y="{y:.1f}" '
                        f'width="{w:.1f}" height="{max(lane - 1, 1):.1f}" fill="#f9ab00"/>'
                    )
        # each lane named at its left, over its bands (issue 66: bands without row labels); a
        # lane too thin for a readable line keeps its name in the legend and the title only
        for n, (name, _bit) in enumerate(reasons):
            if lane >= 8:
                body.append(
                    f'<text class="band-label" data-reason="{escape(name)}" x="{PAD + 2}" '
                    f'y="{PLOT_TOP + n * lane + min(lane, 10) - 2:.1f}" font-size="{min(lane - 1, 9):.0f}" '
                    f'fill="#3c4043" stroke="#fff" stroke-width="2" paint-order="stroke">{escape(name)}</text>'
                )
        legend = [(bit, name) for name, bit in reasons]
        text = "clock event reasons set" if reasons else "no clock event reason set"
    else:
        lo, hi = min(v for _, v in pts), max(v for _, v in pts)
        is_state = info is not None and info.kind is MetricKind.STATE
        names = state_legend(info) if is_state and info is not None else {}
        if is_state:
            drawn = "steps"
            lo, hi = min([lo, *names]), max([hi, *names])
        span_v = (hi - lo) or (abs(hi) or 1.0)

        def y_of(v: float) -> float:
            return bottom - 2 - (v - lo) / span_v * (bottom - 2 - PLOT_TOP)

        if is_state:
            steps = [f"{x_of(pts[0][0]):.1f},{y_of(pts[0][1]):.1f}"]
            for (_, va), (tb, vb) in itertools.pairwise(pts):
                steps += [f"{x_of(tb):.1f},{y_of(va):.1f}", f"{x_of(tb):.1f},{y_of(vb):.1f}"]
            body.append(f'<polyline fill="none" stroke="#1a73e8" stroke-width="1.5" points="{" ".join(steps)}"/>')
            seen = sorted({int(v) for _, v in pts})
            legend = [(v, names.get(v, "not in the catalog")) for v in seen]
            text = " · ".join(f"{v} {names.get(v, '?')}" for v in seen)
        else:
            cuts = {a for a, _ in gaps}
            piece: list[tuple[float, float]] = []
            for n, (t, v) in enumerate(pts):  # one line per stretch of samples: none across a gap
                piece.append((t, v))
                if t in cuts or n == len(pts) - 1:
                    line = " ".join(f"{x_of(pt):.1f},{y_of(pv):.1f}" for pt, pv in piece)
                    if len(piece) > 1:
                        body.append(f'<polyline fill="none" stroke="#1a73e8" stroke-width="1.5" points="{line}"/>')
                    else:  # a lone sample between gaps: a dot
                        body.append(f'<circle r="1.5" fill="#1a73e8" cx="{x_of(t):.1f}" cy="{y_of(v):.1f}"/>')
                    piece = []
            unit = (info.unit if info is not None else "") + ("/s" if rate else "")
            text = f"{lo:.4g} … {hi:.4g} {unit}".rstrip()
    if label:
        text = f"{label} {text}"
    marker = ""
    if onset is not None:
        x = x_of(onset)
        marker = (
            f'<line class="onset" x1="{x:.1f}" y1="{PLOT_TOP - 4}" x2="{x:.1f}" y2="{bottom}" '
            'stroke="#d93025" stroke-dasharray="3,2"/>'
        )
    ticks = [t0, *([onset] if onset is not None and t0 < onset < t1 else []), t1]
    axis = f'<line class="axis" x1="{PAD}" y1="{bottom}" x2="{WIDTH - PAD}" y2="{bottom}" stroke="#dadce0"/>' + "".join(
        f'<text class="tick" x="{min(max(x_of(t), PAD + 14), WIDTH - PAD - 14):.1f}" y="{HEIGHT - 1}" '
        f'font-size="9" fill="#5f6368" text-anchor="middle">{_hhmm(t)}</text>'
        for t in ticks
    )
    key = "".join(f'<desc class="legend" data-value="{v}">{escape(meaning)}</desc>' for v, meaning in legend)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="spark" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" data-points="{len(pts)}" data-drawn="{drawn}" data-gaps="{len(gaps)}">'
        f'<text x="{PAD}" y="10" font-size="10" fill="#5f6368">{escape(text)}</text>{key}{marker}'
        + "".join(body)
        + axis
        + "</svg>"
    )


def legend_of(points: Sequence[tuple[float, float]], metric: str) -> list[str]:
    """The legend under a sparkline, in words (the same as the SVG carries)."""
    info = metric_info(metric)
    if info is None or info.kind is not MetricKind.STATE:
        return []
    values = sorted({int(v) for _, v in points if math.isfinite(v)})
    if info.unit == "xid":
        return [f"Xid {v}: {xid_meaning(v)}" for v in values if v]
    if info.unit == "bitmask":
        return [f"{name} (0x{bit:x})" for name, bit in clock_reasons().items() if any(v & bit for v in values)]
    names = state_legend(info)
    return [f"{v} = {names.get(v, 'not in the catalog')}" for v in values]


__all__ = ["legend_of", "metric_info", "sparkline", "state_legend", "xid_meaning"]
