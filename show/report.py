"""`aiops report`: a recorded run as pages a reviewer would rather look at than read. One index
page (the timeline of faults, warnings and incidents; time to detect per kind; false incidents
by kind and cause; prediction lead times; detector coverage; throughput and tick time), PNGs of
its plots, and a page per incident as the daemon serves it.

Reads what `aiops run --out` writes (incidents.jsonl, predictions.jsonl, run.json, and with
`--actions` the audit log actions.sqlite: each incident's plans, their decision, who approved
them), the input the run read (topology.json and telemetry.lp, for the pictures and the series),
and, when given, the generator's truth.jsonl.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from act.audit import Row, read_plans
from context.watch import file_digest
from rca.evaluate import RunEvaluation, evaluate_paths, latest_states
from rca.graph import TopologyGraph
from show.incident_page import PageSources, RecordedSeries, history_of, incident_page, series_keys
from show.page import STYLE, PageFacts, PageLook, _when, render_list
from show.series import WINDOW_S, from_telemetry, window_of
from vocab.ids import record_id_refusal, shown
from vocab.schedule import Schedule, event_problem
from vocab.thresholds import MIN_USEFUL_LEAD_S

TIMELINE_W, ROW = 1100, 18
AUDIT_LOG = "actions.sqlite"  # aiops/pipeline.py `run_folder`: the plans of a run with --actions


@dataclass
class RunFiles:
    run: Path
    input: Path | None
    truth: Path | None
    incidents: list[dict[str, Any]] = field(default_factory=list)  # every state, in order
    predictions: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    # the audit log's plans by incident (act/audit.py `read_plans`); None: the run did not act
    plans: dict[str, list[Row]] | None = None


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load(run: Path, truth: Path | None, input_dir: Path | None) -> RunFiles:
    if not (run / "incidents.jsonl").is_file():
        raise FileNotFoundError(f"{run} holds no incidents.jsonl: give the folder `aiops run --out` wrote")
    if input_dir is None:  # the run's input: beside the truth, as the evaluation finds it
        candidates = [truth.parent] if truth is not None else []
        input_dir = next((c for c in candidates if (c / "topology.json").is_file()), None)
    files = RunFiles(run, input_dir, truth)
    files.incidents = _jsonl(run / "incidents.jsonl")
    files.predictions = _jsonl(run / "predictions.jsonl")
    stats_path = run / "run.json"
    files.stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    files.faults = _jsonl(truth) if truth is not None else []
    files.plans = read_plans(run / AUDIT_LOG)
    return files


def read_events(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The scheduler's events file: the usable events and how many lines were not (the pages run
    no detection stage, so they read the file with the vocabulary's own check, as
    detectors/detect_loop.py `read_events` does for the run)."""
    events: list[dict[str, Any]] = []
    bad = 0
    if not path.is_file():
        return events, bad
    for raw in path.read_bytes().splitlines():
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            bad += 1
            continue
        if event_problem(event) is None:
            events.append(event)
        else:
            bad += 1
    return events, bad


# ------------------------------------------------------------------ the truth matches the run


class TruthMismatchError(ValueError):
    """The truth file is not of the run's input: scoring against it would print nonsense."""


def _check_input(files: RunFiles, where: str) -> list[str]:
    """The truth's own input (the folder it lies in, as `aiops gen` writes them together) and the
    input the pages draw from against what the run recorded of the input it read (run.json
    `input`): a topology or scheduler events of other content is another run's, whatever its
    times. Returns notes on what could not be compared."""
    recorded = files.stats.get("input")
    if not isinstance(recorded, dict) or not recorded.get("topology"):
        return [
            f"{files.run / 'run.json'} records no digest of the input it read (written before runs did): "
            "the truth is checked by its times, entities and jobs only"
        ]
    read_from = recorded.get("path") or "its input"
    folders = [f for f in dict.fromkeys([files.truth.parent if files.truth else None, files.input]) if f is not None]
    compared = False
    for folder in folders:
        for name, key in (("topology.json", "topology"), ("events.jsonl", "events")):
            ours = file_digest(folder / name)
            theirs = recorded.get(key)
            if ours is None or theirs is None:
                continue
            compared = compared or key == "topology"
            if ours != theirs:
                raise TruthMismatchError(
                    f"{where}: {folder / name} (digest {ours}) is not the {name} the run read "
                    f"({read_from}, digest {theirs}): the truth is of another generated run "
                    f"({'another cluster' if key == 'topology' else 'another schedule, e.g. another seed'})"
                )
    if not compared:
        return [f"no topology.json beside {files.truth}: its input could not be compared with the run's ({read_from})"]
    return []


def check_truth(files: RunFiles) -> list[str]:
    """Refuse a truth file that is not of this run, with the reason: its input's topology or
    scheduler events differ from those the run read (run.json `input`), a fault whose root or
    affected entity is not in the run's topology, an onset outside the run's ticks (one interval
    of slack), or a fault naming a job the run's scheduler events never mention. Returns notes
    on what could not be checked (a run.json written before runs recorded their input)."""
    where = f"{files.truth} does not match the run {files.run}"
    notes = _check_input(files, where) if files.truth is not None else []
    faults = files.faults
    if not faults:
        return notes
    lo, hi = files.stats.get("first_tick"), files.stats.get("last_tick")
    if lo is not None and hi is not None:
        slack = float(files.stats.get("interval_s") or 60.0)
        outside = [f for f in faults if not float(lo) - slack <= float(f["onset"]) <= float(hi) + slack]
        if outside:
            f = outside[0]
            raise TruthMismatchError(
                f"{where}: {len(outside)} of {len(faults)} faults begin outside the run's ticks "
                f"({_when(float(lo))} to {_when(float(hi))}), e.g. {f['fault_id']} at {_when(float(f['onset']))}"
            )
    if files.input is None or not (files.input / "topology.json").is_file():
        return notes
    graph = TopologyGraph.load(files.input / "topology.json")
    for f in faults:
        missing = [e for e in [f["root"], *f.get("affected", [])] if e not in graph]
        if missing:
            raise TruthMismatchError(
                f"{where}: fault {f['fault_id']} names {missing[0]}, which the run's topology "
                f"({files.input / 'topology.json'}) does not hold"
            )
    events_path = files.input / "events.jsonl"
    if not events_path.is_file():
        return notes
    events, _ = read_events(events_path)
    schedule = Schedule.from_events(events)
    # a fault's jobs are those it touched, on its root's node or not (a job stalled with a node it
    # took down, telemetry_gen/simulate.py `_fail_jobs_on`): the run's scheduler must know them
    wrong = [f for f in faults if any(str(j) not in schedule.jobs for j in f.get("jobs", []))]
    if wrong:
        f = wrong[0]
        unknown = [str(j) for j in f["jobs"] if str(j) not in schedule.jobs]
        raise TruthMismatchError(
            f"{where}: {len(wrong)} faults name jobs the run's scheduler events never mention, "
            f"e.g. {f['fault_id']}: {', '.join(unknown[:5])}"
        )
    return notes


# ------------------------------------------------------------------ the timeline


def _span(files: RunFiles, latest: list[dict[str, Any]]) -> tuple[float, float]:
    """The run's own span (its first and last tick) where run.json says it; else what the faults
    and incidents cover. Nothing is drawn past the data: an open incident ends at the last tick."""
    ticks = [float(files.stats[k]) for k in ("first_tick", "last_tick") if files.stats.get(k) is not None]
    if len(ticks) == 2 and ticks[1] > ticks[0]:
        return ticks[0], ticks[1]
    times = [float(f["onset"]) for f in files.faults] + [float(i["opened"]) for i in latest]
    times += [float(i["updated"]) for i in latest]
    if not times:
        return 0.0, 1.0
    lo, hi = min(times), max(times)
    return lo, hi if hi > lo else lo + 1.0


def timeline_svg(
    files: RunFiles, latest: list[dict[str, Any]], false_ids: set[str], pages: dict[str, str] | None = None
) -> str:
    """Three bands over the run's event time: the injected faults (one mark each, onset to end),
    the warnings and the incidents (opened to resolved, or to the run's end while open; false
    ones drawn apart), each incident's bar a link to its page."""
    lo, hi = _span(files, latest)
    left = 150
    width = TIMELINE_W - left - 10

    def x(t: float) -> float:
        return left + (min(max(t, lo), hi) - lo) / (hi - lo) * width

    marks: list[str] = []
    rows = {"faults": files.faults, "warnings": warnings_shown(latest, hi)}
    rows["incidents"] = [i for i in latest if i["status"] != "warning"]
    y = 24
    bands = []
    for band, items in rows.items():
        bands.append(f'<text x="8" y="{y + 12}" class="band">{band} ({len(items)})</text>')
        for n, item in enumerate(items):
            row_y = y + (n % 6) * (ROW // 2 + 2)
            if band == "faults":
                start, end = float(item["onset"]), float(item.get("end") or item["onset"])
                cls, label = "fault", f"{item['kind']} at {item['root']}"
                ident = str(item.get("fault_id", ""))
            else:
                if band == "warnings":
                    start, end, cls = item["warned_from"], item["warned_until"], "warning"
                else:
                    start = float(item["opened"])
                    end = float(item.get("resolved") or (hi if item["status"] != "resolved" else item["updated"]))
                    cls = "incident false" if item["incident_id"] in false_ids else "incident"
                label = f"{item['root_cause']['kind']} at {item['root_cause']['entity']}"
                ident = str(item["incident_id"])
            w = max(x(end) - x(start), 3.0)
            bar = (
                f'<rect class="{cls}" data-id="{escape(ident)}" data-kind="{escape(label.split(" at ")[0])}" '
                f'x="{x(start):.1f}" y="{row_y}" width="{w:.1f}" height="{ROW // 2}"><title>{escape(label)} '
                f"{escape(_when(start))}</title></rect>"
            )
            href = (pages or {}).get(ident) if band != "faults" else None
            marks.append(f'<a href="{escape(href)}">{bar}</a>' if href else bar)
        y += 6 * (ROW // 2 + 2) + 18
    height = y + 20
    ticks = [lo + (hi - lo) * k / 4 for k in range(5)]
    anchors = ["start", "middle", "middle", "middle", "end"]  # the last label inside the picture
    axis = "".join(
        f'<text x="{x(t):.0f}" y="{height - 4}" class="tick" text-anchor="{a}">{escape(_when(t)[11:16])}</text>'
        for t, a in zip(ticks, anchors, strict=True)
    )
    style = (
        ".fault{fill:#9334e6}.warning{fill:#f9ab00}.incident{fill:#1a73e8}.incident.false{fill:#d93025}"
        ".band{font:12px sans-serif;fill:#3c4043}.tick{font:11px sans-serif;fill:#5f6368}"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{TIMELINE_W}" height="{height}" '
        f'viewBox="0 0 {TIMELINE_W} {height}"><style>{style}</style>' + "".join(bands + marks) + axis + "</svg>"
    )


# ------------------------------------------------------------------ the tables


# a warning counts when it leaves time to act: the one rule every view reads (vocab/thresholds.py)


def lead_times(files: RunFiles, min_lead_s: float = MIN_USEFUL_LEAD_S) -> list[dict[str, Any]]:
    """For each fault the predictor could have seen coming: its first prediction of the same
    kind on the root (or something the root contains) before onset, the lead, and whether the
    lead is long enough to count (`min_lead_s`)."""
    out = []
    for f in files.faults:
        before = [
            p
            for p in files.predictions
            if p["kind"] == f["kind"]
            and float(p["at"]) < float(f["onset"])
            and (p["entity"] == f["root"] or str(p["entity"]).startswith(str(f["root"]) + "-"))
        ]
        if before:
            first = min(before, key=lambda p: float(p["at"]))
            lead = float(f["onset"]) - float(first["at"])
            out.append(
                {"fault": f, "prediction": first, "lead_h": lead / 3600, "lead_s": lead, "counted": lead >= min_lead_s}
            )
    return out


def warnings_shown(latest: list[dict[str, Any]], hi: float) -> list[dict[str, Any]]:
    """Every warning the run raised, as the timeline draws it: a warning still standing (opened to
    its end, or the run's), and a warning that became the failure's incident (`warned` to the
    incident's opening). The band counted only the first, and said "warnings (0)" above a lead
    table of 3 (issue 66)."""
    out = []
    for i in latest:
        if i["status"] == "warning":
            end = float(i.get("resolved") or hi)
            out.append({**i, "warned_from": float(i["opened"]), "warned_until": end})
        elif i.get("warned") is not None:
            out.append({**i, "warned_from": float(i["warned"]), "warned_until": float(i["opened"])})
    return out


def false_causes(files: RunFiles, evaluation: RunEvaluation) -> list[dict[str, Any]]:
    """Each false incident with what was going on: beside an injected fault (its symptoms named
    another root), or nothing injected at the time."""
    out = []
    for fp in evaluation.false_positives:
        near = [
            f
            for f in files.faults
            if float(f["onset"]) - WINDOW_S <= float(fp["opened"]) <= float(f.get("end") or f["onset"]) + WINDOW_S
        ]
        cause = f"beside {near[0]['kind']} at {near[0]['root']}" if near else "no fault injected at the time"
        out.append({**fp, "cause": cause})
    return out


# ------------------------------------------------------------------ the PNGs


def write_pngs(out: Path, files: RunFiles, latest: list[dict[str, Any]], evaluation: RunEvaluation | None) -> list[str]:
    """The plots as PNGs beside the page (for a README, a slide, a chat message)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    lo, hi = _span(files, latest)
    fig, ax = plt.subplots(figsize=(11, 3.2), dpi=110)
    groups: list[tuple[str, list[tuple[float, float]], str]] = [
        ("faults", [(float(f["onset"]), float(f.get("end") or f["onset"])) for f in files.faults], "#9334e6"),
        ("warnings", [(w["warned_from"], w["warned_until"]) for w in warnings_shown(latest, hi)], "#f9ab00"),
        (
            "incidents",
            [(float(i["opened"]), float(i.get("resolved") or hi)) for i in latest if i["status"] != "warning"],
            "#1a73e8",
        ),
    ]
    for row, (_, spans, colour) in enumerate(groups):
        for n, (a, b) in enumerate(spans):
            ax.broken_barh([((a - lo) / 3600, max((b - a) / 3600, 0.02))], (row * 3 + (n % 5) * 0.5, 0.4), color=colour)
    ax.set_yticks([row * 3 + 1 for row in range(len(groups))], [f"{g[0]} ({len(g[1])})" for g in groups])
    ax.set_xlabel("hours into the run")
    ax.set_title("faults, warnings and incidents")
    fig.tight_layout()
    fig.savefig(out / "timeline.png")
    plt.close(fig)
    written.append("timeline.png")
    if evaluation is not None and evaluation.kinds:
        kinds = sorted(evaluation.kinds)
        p50 = [evaluation.kinds[k].ttd_p50_s if math.isfinite(evaluation.kinds[k].ttd_p50_s) else 0.0 for k in kinds]
        p95 = [evaluation.kinds[k].ttd_p95_s if math.isfinite(evaluation.kinds[k].ttd_p95_s) else 0.0 for k in kinds]
        fig, ax = plt.subplots(figsize=(8, 0.35 * len(kinds) + 1.2), dpi=110)
        ax.barh(kinds, p95, color="#aecbfa", label="p95")
        ax.barh(kinds, p50, color="#1a73e8", label="p50")
        ax.set_xlabel("time to detect (s)")
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(out / "ttd.png")
        plt.close(fig)
        written.append("ttd.png")
    return written


# ------------------------------------------------------------------ the pages


def _incident_pages(
    out: Path, files: RunFiles, latest: list[dict[str, Any]], progress: Callable[[int], None] | None
) -> dict[str, str]:
    """Each incident's page, by the builder the daemon serves its pages with (show/incident_page.py),
    the series read from the run's telemetry.lp once for all of them."""
    graph = TopologyGraph.load(files.input / "topology.json") if files.input is not None else None
    schedule = None
    events: list[dict[str, Any]] = []
    if files.input is not None and (files.input / "events.jsonl").is_file():
        events, _ = read_events(files.input / "events.jsonl")
        schedule = Schedule.from_events(events)
    history = history_of(files.incidents)
    wanted: dict[tuple[str, str], tuple[float, float]] = {}
    for r in latest:
        a, b = window_of(r)
        for key in series_keys(r, graph):
            old = wanted.get(key)
            wanted[key] = (min(a, old[0]), max(b, old[1])) if old else (a, b)
    telemetry = files.input / "telemetry.lp" if files.input is not None else None
    series = from_telemetry(telemetry, wanted) if telemetry is not None and telemetry.is_file() else {}
    sources = PageSources(
        graph=graph,
        schedule=schedule,
        series=RecordedSeries(series) if series else None,
        series_name="telemetry.lp",
        look=PageLook(index_href="../index.html", incident_href=lambda i: f"{quote(i, safe='')}.html"),
    )
    (out / "incidents").mkdir(parents=True, exist_ok=True)
    pages = {}
    for n, r in enumerate(latest):
        facts = PageFacts(
            history=history.get(r["incident_id"], []),
            plans=None if files.plans is None else [asdict(p) for p in files.plans.get(r["incident_id"], [])],
            audit=f"the run's {AUDIT_LOG}",
            earlier=[e for e in latest if float(e["opened"]) < float(r["opened"])],
            events=events,
            predictions=files.predictions,
        )
        name = f"incidents/{r['incident_id']}.html"
        (out / name).write_text(incident_page(r, sources, facts))
        pages[r["incident_id"]] = name
        if progress is not None:
            progress(n + 1)
    return pages


_ENV = Environment(loader=PackageLoader("show", "templates"), autoescape=select_autoescape(default=True))


def write_report(
    run: Path,
    out: Path,
    truth: Path | None = None,
    input_dir: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """The report into `out`: index.html, incidents.html, incidents/<id>.html and the PNGs.
    Returns what it wrote and counted (for the CLI's summary line and tests)."""
    files = load(run, truth, input_dir)
    for state in files.incidents:  # each names a page (incidents/<id>.html): a path, not a guess
        ident = str(state.get("incident_id", ""))
        if problem := record_id_refusal(ident):
            raise ValueError(f"{run}: an incident id {shown(ident)} that names no page: {problem}")
    out.mkdir(parents=True, exist_ok=True)
    latest = [dict(i) for i in latest_states(files.incidents)]
    latest.sort(key=lambda r: float(r["opened"]))
    notes = check_truth(files) if truth is not None else []
    evaluation = evaluate_paths(truth, run) if truth is not None else None
    false_ids = {fp["incident_id"] for fp in evaluation.false_positives} if evaluation else set()
    pages = _incident_pages(out, files, latest, progress)
    pngs = write_pngs(out, files, latest, evaluation)
    plans = {i: [asdict(p) for p in rows] for i, rows in (files.plans or {}).items()}
    (out / "incidents.html").write_text(
        render_list(latest, lambda i: pages[i], title=f"Incidents of {run.name}", plans=plans)
    )
    kinds = []
    if evaluation is not None:
        for name, k in sorted(evaluation.kinds.items()):
            kinds.append(
                {
                    "kind": name,
                    **{
                        f: getattr(k, f)
                        for f in ("faults", "detected", "recall", "ttd_p50_s", "ttd_p95_s", "top1", "precision")
                    },
                }
            )
    stats = files.stats
    ticks = int(stats.get("ticks") or 0)
    seconds = float(stats.get("seconds") or 0.0)
    throughput = {
        "ticks": ticks,
        "value_count": int(stats.get("values") or 0),
        "seconds": seconds,
        "values_per_s": (stats.get("values") or 0) / seconds if seconds else None,
        "tick_ms": 1000 * seconds / ticks if ticks else None,
    }
    html = _ENV.get_template("report.html").render(
        title=f"Run report: {run.name}",
        style=Markup(STYLE),
        timeline=Markup(timeline_svg(files, latest, false_ids, pages)),
        min_lead_min=MIN_USEFUL_LEAD_S / 60,
        pngs=pngs,
        evaluation=evaluation.to_json() if evaluation is not None else None,
        kinds=kinds,
        false=false_causes(files, evaluation) if evaluation is not None else [],
        leads=lead_times(files),
        coverage=stats.get("coverage") or [],
        throughput=throughput,
        incidents=[{**r, "href": pages[r["incident_id"]]} for r in latest],
        faults=files.faults,
        when=_when,
    )
    (out / "index.html").write_text(html)
    return {"incidents": len(latest), "faults": len(files.faults), "pages": len(pages), "pngs": pngs, "notes": notes}


__all__ = [
    "RunFiles",
    "TruthMismatchError",
    "check_truth",
    "lead_times",
    "load",
    "timeline_svg",
    "write_pngs",
    "write_report",
]
