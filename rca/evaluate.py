"""Scoring a run against the generator's truth, as docs/accuracy.md describes it:
detection recall and time to detect, RCA top-1/top-3, incident precision and failure prediction,
overall and per fault kind.

The engine's outputs are read as written (incidents.jsonl holds successive states; the last line
of each incident wins). Nothing here reads telemetry, so a run can be rescored without replaying.

An incident that resolved and reopened (flap damping, rca/incidents.py FLAP_WINDOW_S) is one
incident: counted once for precision and false incidents, however many episodes it had. Each of
its episodes' openings may detect a fault (within the detection window of the fault's onset), one
fault per episode: the operator was told of each reopening.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from vocab.thresholds import MIN_USEFUL_LEAD_S

__all__ = [
    "DETECT_WINDOW_S",
    "Detection",
    "EvaluationError",
    "KindScore",
    "RunEvaluation",
    "detections",
    "evaluate_many",
    "evaluate_paths",
    "evaluate_run",
    "latest_states",
    "load_contains",
]

DETECT_WINDOW_S = 600.0
# the truth's severity (0 = barely visible .. 1), in bands for recall
SEVERITY_BANDS = (("faint (<0.3)", 0.0, 0.3), ("moderate (0.3-0.7)", 0.3, 0.7), ("plain (>=0.7)", 0.7, 1.01))
FALSE_POSITIVES_KEPT = 20
NAN = math.nan
_T = TypeVar("_T")


class EvaluationError(ValueError):
    """An input that cannot be scored: a missing file, a malformed line or record."""


@dataclass
class KindScore:
    """One row of the report; rates are NaN where their denominator is zero."""

    faults: int = 0
    detected: int = 0
    recall: float = NAN
    ttd_p50_s: float = NAN
    ttd_p95_s: float = NAN
    ttd_p50_ticks: float = NAN
    ttd_p95_ticks: float = NAN
    top1_count: int = 0
    top3_count: int = 0
    top1: float = NAN  # over detected faults, the incident's last state
    top3: float = NAN
    top1_first_count: int = 0
    top1_first: float = NAN  # over detected faults, the incident's first state (what on-call saw first)
    incidents_per_fault: float = NAN  # true incidents over detected faults (1.0: one per fault)
    incidents: int = 0  # true incidents attributed to this kind plus false positives claiming it
    true_incidents: int = 0
    precision: float = NAN
    predictable: int = 0
    predicted: int = 0
    prediction_recall: float = NAN
    median_lead_h: float = NAN


@dataclass
class RunEvaluation:
    overall: KindScore
    kinds: dict[str, KindScore]
    predictions: int
    prediction_hits: int
    prediction_precision: float
    false_positives: list[dict[str, Any]]  # the first FALSE_POSITIVES_KEPT by opening time
    false_positive_count: int
    warnings: int  # incidents left as "warning": judged as predictions, not detections
    interval_s: float | None = None
    min_lead_s: float = MIN_USEFUL_LEAD_S
    # recall and the rest per severity band of the truth (the generator's 0..1 severity)
    bands: dict[str, KindScore] = field(default_factory=dict)
    gpu_days: float | None = None  # from meta.json beside the truth: the false-incident rate's base
    false_per_1000_gpu_days: float = NAN
    notices: int = 0  # notices.jsonl: monitoring facts, never counted as incidents

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types; undefined rates become null so strict JSON encoders accept it."""
        # json.dumps writes NaN as a bare constant, which parse_constant reads back as None
        out: dict[str, Any] = json.loads(json.dumps(asdict(self)), parse_constant=lambda _: None)
        return out

    def format_table(self) -> str:
        in_ticks = not math.isnan(self.overall.ttd_p50_ticks) or self.interval_s is not None
        unit = "ticks" if in_ticks else "s"
        head = (
            f"{'kind':20s} {'faults':>6s} {'detected':>8s} {'recall':>6s} {'TTD p50':>9s} {'TTD p95':>9s} "
            f"{'top1':>5s} {'top1@1st':>8s} {'top3':>5s} {'incidents':>9s} {'inc/fault':>9s} {'precision':>9s}"
        )
        lines = [f"detection (TTD in {unit})", head]
        for name, k in [*self.kinds.items(), ("all", self.overall)]:
            p50, p95 = (k.ttd_p50_ticks, k.ttd_p95_ticks) if in_ticks else (k.ttd_p50_s, k.ttd_p95_s)
            lines.append(
                f"{name:20s} {k.faults:6d} {k.detected:8d} {_f(k.recall, 6, 2)} {_f(p50, 9, 1)} {_f(p95, 9, 1)} "
                f"{_f(k.top1, 5, 2)} {_f(k.top1_first, 8, 2)} {_f(k.top3, 5, 2)} {k.incidents:9d} "
                f"{_f(k.incidents_per_fault, 9, 2)} {_f(k.precision, 9, 2)}"
            )
        rate = _f(self.false_per_1000_gpu_days, 0, 1).strip()
        days = f"{self.gpu_days:,.0f} GPU-days" if self.gpu_days else "GPU-days unknown (no meta.json)"
        lines.append(
            f"false incidents: {self.false_positive_count} ({rate} per 1,000 GPU-days over {days}); "
            f"warnings {self.warnings} and notices {self.notices} scored apart"
        )
        if self.bands:
            lines += ["", "recall by severity band (the truth's severity, 0 = barely visible)"]
            lines.append(f"{'band':20s} {'faults':>6s} {'detected':>8s} {'recall':>6s} {'top1':>5s}")
            for name, k in self.bands.items():
                lines.append(f"{name:20s} {k.faults:6d} {k.detected:8d} {_f(k.recall, 6, 2)} {_f(k.top1, 5, 2)}")
        lines += ["", f"prediction (lead >= {self.min_lead_s / 60:.0f} min)"]
        lines.append(f"{'kind':20s} {'faults':>6s} {'predicted':>9s} {'recall':>6s} {'median lead h':>13s}")
        for name, k in [*self.kinds.items(), ("all", self.overall)]:
            if k.predictable:
                lines.append(
                    f"{name:20s} {k.predictable:6d} {k.predicted:9d} {_f(k.prediction_recall, 6, 2)} "
                    f"{_f(k.median_lead_h, 13, 2)}"
                )
        lines.append(
            f"prediction precision {_f(self.prediction_precision, 0, 3).strip()} "
            f"({self.prediction_hits}/{self.predictions} predictions)"
        )
        return "\n".join(lines)


def _f(value: float, width: int, digits: int) -> str:
    return f"{'-':>{width}s}" if math.isnan(value) else f"{value:{width}.{digits}f}"


@dataclass(frozen=True, slots=True)
class _Fault:
    fault_id: str
    kind: str
    root: str
    onset: float
    end: float
    predictable: bool
    entities: frozenset[str]  # root and affected: what an incident may name to match it
    severity: float = NAN
    interval_s: float = NAN  # its run's scrape interval, when runs of several intervals are pooled


@dataclass(frozen=True, slots=True)
class _Incident:
    incident_id: str
    opened: float
    root: str
    root_kind: str
    ranked: tuple[str, ...]  # candidate entities, best first
    entities: frozenset[str]  # root cause and affected
    openings: tuple[float, ...] = ()  # each episode's opening, the first `opened` (the record's `episodes`)


def _interval(f: _Fault, run_interval_s: float | None) -> float:
    if not math.isnan(f.interval_s):
        return f.interval_s
    return run_interval_s if run_interval_s else NAN


def _fault(d: Mapping[str, Any]) -> _Fault:
    try:
        root, onset = str(d["root"]), float(d["onset"])
        end = max(onset, float(d["end"] if d.get("end") is not None else onset))
        entities = frozenset([root, *map(str, d.get("affected") or ())])
        precursor = d.get("precursor_start") is not None
        severity = float(d["severity"]) if d.get("severity") is not None else NAN
        interval = float(d["interval_s"]) if d.get("interval_s") is not None else NAN
        return _Fault(str(d["fault_id"]), str(d["kind"]), root, onset, end, precursor, entities, severity, interval)
    except (KeyError, TypeError, ValueError) as exc:
        raise EvaluationError(f"truth record {d.get('fault_id', '?')}: {exc!r}") from None


def _incident(d: Mapping[str, Any]) -> _Incident:
    try:
        rc = d["root_cause"]
        root = str(rc["entity"])
        ranked = tuple(str(c["entity"]) for c in d.get("candidates") or ()) or (root,)
        entities = frozenset([root, *map(str, d.get("affected") or ())])
        opened = float(d["opened"])
        openings = tuple(float(e["opened"]) for e in d.get("episodes") or ()) or (opened,)
        return _Incident(str(d["incident_id"]), opened, root, str(rc.get("kind", "")), ranked, entities, openings)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EvaluationError(f"incident {d.get('incident_id', '?')}: {exc!r}") from None


def latest_states(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The last state written for each incident_id (the engine appends on every change)."""
    states: dict[str, Mapping[str, Any]] = {}
    for r in records:
        states[str(r.get("incident_id"))] = r
    return list(states.values())


def _under(entity: str, contains: Mapping[str, Collection[str]], cache: dict[str, frozenset[str]]) -> frozenset[str]:
    """The entity and everything it contains, transitively; cached because predictions repeat
    entities, and computed on demand because closing a 900k-entity topology up front is wasteful."""
    if (hit := cache.get(entity)) is not None:
        return hit
    seen, stack = {entity}, [entity]
    while stack:
        for child in contains.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    cache[entity] = result = frozenset(seen)
    return result


def _rate(num: int, den: int) -> float:
    return num / den if den else NAN


def _index(items: Iterable[_T], keys: Callable[[_T], Iterable[str]]) -> dict[str, list[_T]]:
    out: dict[str, list[_T]] = defaultdict(list)
    for item in items:
        for key in keys(item):
            out[key].append(item)
    return out


@dataclass(frozen=True, slots=True)
class Detection:
    """How one fault was detected: the incident that owns it and how soon it opened."""

    incident_id: str
    ttd_s: float  # from onset to the first incident naming the root, as cause or affected
    top: tuple[str, ...]  # the owning incident's candidates, best first


def _detect(faults: list[_Fault], incs: list[_Incident]) -> dict[str, Detection]:
    """Each fault's owning incident. An incident's episode is credited to one fault at most: two
    faults that overlap need two incidents (faults taken in onset order; one that names its root
    as the cause is preferred as owner)."""
    naming = _index(incs, lambda i: i.entities)
    out: dict[str, Detection] = {}
    owned: set[tuple[str, float]] = set()  # (incident, episode opening)
    ordered = sorted(faults, key=lambda f: (f.onset, f.fault_id))
    # first the incidents that name a fault's root as their cause, then those that only show it
    for as_cause in (True, False):
        for f in ordered:
            if f.fault_id in out:
                continue
            window = (f.onset, f.onset + DETECT_WINDOW_S)
            found = [(i, at) for i in naming.get(f.root, ()) for at in i.openings if window[0] <= at <= window[1]]
            free = [
                (i, at) for i, at in found if (i.incident_id, at) not in owned and (i.root == f.root or not as_cause)
            ]
            if not free:
                continue
            best, best_at = min(free, key=lambda p: (p[1], p[0].incident_id))
            owned.add((best.incident_id, best_at))
            first = min(at for i, at in found if (i.incident_id, at) not in owned or (i is best and at == best_at))
            out[f.fault_id] = Detection(best.incident_id, first - f.onset, best.ranked)
    return out


def detections(truth: Iterable[Mapping[str, Any]], incidents: Iterable[Mapping[str, Any]]) -> dict[str, Detection]:
    """Per detected fault (by fault_id), as the evaluation counts it; for reports that show each
    fault beside its incident."""
    faults = [_fault(f) for f in truth]
    live = [_incident(s) for s in latest_states(incidents) if s.get("status") != "warning"]
    return _detect(faults, sorted(live, key=lambda i: (i.opened, i.incident_id)))


def _attribute(faults: list[_Fault], incs: list[_Incident]) -> tuple[dict[str, int], list[_Incident]]:
    """True incidents per fault kind, and the false positives."""
    touching = _index(faults, lambda f: f.entities)
    true_by_kind: dict[str, int] = defaultdict(int)
    fps: list[_Incident] = []
    for inc in incs:
        near = {f.fault_id: f for e in inc.entities for f in touching.get(e, ())}.values()
        # "same window" stretched over the whole fault: a fault still active is still being reported
        matches = [f for f in near if any(f.onset <= at <= f.end + DETECT_WINDOW_S for at in inc.openings)]
        if matches:
            owner = min(matches, key=lambda f: (f.root != inc.root, f.onset, f.fault_id))
            true_by_kind[owner.kind] += 1
        else:
            fps.append(inc)
    return true_by_kind, fps


def _predict(
    faults: list[_Fault], predictions: list[Mapping[str, Any]], contains: Mapping[str, Collection[str]] | None
) -> tuple[int, dict[str, float]]:
    """Predictions that hit, and the longest lead time per fault hit."""
    by_root = _index(faults, lambda f: (f.root,))
    cache: dict[str, frozenset[str]] = {}
    lead: dict[str, float] = {}
    hits = 0
    for p in predictions:
        try:
            entity, at, horizon = str(p["entity"]), float(p["at"]), float(p["horizon_s"])
        except (KeyError, TypeError, ValueError) as exc:
            raise EvaluationError(f"prediction {dict(p)!r}: {exc!r}") from None
        under: Collection[str] = _under(entity, contains, cache) if contains else (entity,)
        hit = False
        for f in (f for e in under for f in by_root.get(e, ())):
            if at < f.onset <= at + horizon:
                hit = True
                lead[f.fault_id] = max(lead.get(f.fault_id, 0.0), f.onset - at)
        hits += hit
    return hits, lead


def evaluate_run(
    truth: Iterable[Mapping[str, Any]],
    incidents: Iterable[Mapping[str, Any]],
    predictions: Iterable[Mapping[str, Any]],
    *,
    interval_s: float | None = None,
    contains: Mapping[str, Collection[str]] | None = None,
    min_lead_s: float = MIN_USEFUL_LEAD_S,
    earliest: float | None = None,
    gpu_days: float | None = None,
    notices: int = 0,
) -> RunEvaluation:
    """Score one run. `incidents` may hold every state written (the last per id wins);
    `contains` maps an entity to what it contains, directly or transitively (closed here);
    `earliest`: when the predictor could first speak; predictable faults with onset before
    earliest + min_lead_s are left out of prediction recall."""
    faults = sorted(map(_fault, truth), key=lambda f: (f.onset, f.fault_id))
    records = list(incidents)
    first_ranked: dict[str, tuple[str, ...]] = {}
    for r in records:
        if r.get("status") != "warning" and str(r.get("incident_id")) not in first_ranked:
            first_ranked[str(r.get("incident_id"))] = _incident(r).ranked
    states = latest_states(records)
    live = [_incident(s) for s in states if s.get("status") != "warning"]
    incs = sorted(live, key=lambda i: (i.opened, i.incident_id))
    found = _detect(faults, incs)
    roots = {f.fault_id: f.root for f in faults}
    ttd = {fid: d.ttd_s for fid, d in found.items()}
    top1 = {fid for fid, d in found.items() if d.top[0] == roots[fid]}
    top3 = {fid for fid, d in found.items() if roots[fid] in d.top[:3]}
    top1_first = {fid for fid, d in found.items() if first_ranked.get(d.incident_id, d.top)[0] == roots[fid]}
    true_by_kind, fps = _attribute(faults, incs)
    # a false positive counts against the fault kind it claims, so per-kind precision can fall
    fp_by_kind = Counter(i.root_kind for i in fps)
    preds = list(predictions)
    hits, lead = _predict(faults, preds, contains)

    def score(group: list[_Fault], true_incidents: int, false_positives: int) -> KindScore:
        times = [ttd[f.fault_id] for f in group if f.fault_id in ttd]
        p50, p95 = (float(p) for p in np.percentile(times, [50, 95])) if times else (NAN, NAN)
        # in ticks: each fault's time over its own run's interval (pooled runs may differ)
        ticks = [ttd[f.fault_id] / _interval(f, interval_s) for f in group if f.fault_id in ttd]
        t50, t95 = (float(p) for p in np.percentile(ticks, [50, 95])) if ticks else (NAN, NAN)
        predictable = [f for f in group if f.predictable and (earliest is None or f.onset >= earliest + min_lead_s)]
        caught = [lead[f.fault_id] for f in predictable if lead.get(f.fault_id, 0.0) >= min_lead_s]
        n1 = sum(f.fault_id in top1 for f in group)
        n3 = sum(f.fault_id in top3 for f in group)
        n1_first = sum(f.fault_id in top1_first for f in group)
        total = true_incidents + false_positives
        return KindScore(
            faults=len(group),
            detected=len(times),
            recall=_rate(len(times), len(group)),
            ttd_p50_s=p50,
            ttd_p95_s=p95,
            ttd_p50_ticks=t50,
            ttd_p95_ticks=t95,
            top1_count=n1,
            top3_count=n3,
            top1=_rate(n1, len(times)),
            top3=_rate(n3, len(times)),
            top1_first_count=n1_first,
            top1_first=_rate(n1_first, len(times)),
            incidents_per_fault=_rate(true_incidents, len(times)),
            incidents=total,
            true_incidents=true_incidents,
            precision=_rate(true_incidents, total),
            predictable=len(predictable),
            predicted=len(caught),
            prediction_recall=_rate(len(caught), len(predictable)),
            median_lead_h=float(np.median(caught)) / 3600 if caught else NAN,
        )

    kinds = {
        k: score([f for f in faults if f.kind == k], true_by_kind[k], fp_by_kind[k])
        for k in sorted({f.kind for f in faults})
    }
    bands = {}
    for name, lo, hi in SEVERITY_BANDS:
        group = [f for f in faults if lo <= f.severity < hi]
        if group:
            bands[name] = score(group, 0, 0)
    return RunEvaluation(
        overall=score(faults, len(incs) - len(fps), len(fps)),
        kinds=kinds,
        predictions=len(preds),
        prediction_hits=hits,
        prediction_precision=_rate(hits, len(preds)),
        false_positives=[
            {"incident_id": i.incident_id, "opened": i.opened, "root": i.root, "kind": i.root_kind}
            for i in fps[:FALSE_POSITIVES_KEPT]
        ],
        false_positive_count=len(fps),
        warnings=len(states) - len(live),
        interval_s=interval_s,
        min_lead_s=min_lead_s,
        bands=bands,
        gpu_days=gpu_days,
        false_per_1000_gpu_days=len(fps) / gpu_days * 1000 if gpu_days else NAN,
        notices=notices,
    )


def load_contains(topology_path: Path) -> dict[str, set[str]]:
    """Direct "contains" children from a node-link topology file, for entities that contain
    something. Other links and the nodes are dropped while parsing: on a 100k-GPU fat-tree
    (1.6M links) that halves both the time and the peak memory of a plain json.load."""

    def keep(obj: dict[str, Any]) -> object:
        if obj.get("relation") == "contains" and "source" in obj and "target" in obj:
            return (str(obj["source"]), str(obj["target"]))
        return None if "source" in obj or "id" in obj else obj  # other links, nodes

    try:
        with topology_path.open("rb") as f:
            data = json.load(f, object_hook=keep)
    except OSError as exc:
        raise EvaluationError(f"{topology_path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise EvaluationError(f"{topology_path}:{exc.lineno}: not JSON ({exc.msg})") from None
    links = data.get("links", data.get("edges")) if isinstance(data, dict) else None
    if not isinstance(links, list):
        raise EvaluationError(f"{topology_path}: not a node-link topology (no links list)")
    children: dict[str, set[str]] = defaultdict(set)
    for link in links:
        if isinstance(link, tuple):
            children[link[0]].add(link[1])
    return dict(children)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise EvaluationError(f"{path}: {exc.strerror or exc}") from None
    records: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvaluationError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise EvaluationError(f"{path}:{n}: expected a JSON object, got {type(record).__name__}")
        records.append(record)
    return records


@dataclass
class _Loaded:
    truth: list[dict[str, Any]]
    incidents: list[dict[str, Any]]
    predictions: list[dict[str, Any]]
    interval_s: float | None
    earliest: float | None
    contains: dict[str, set[str]] | None
    gpu_days: float | None
    notices: int


def _load(truth_path: Path, run_dir: Path, interval_s: float | None) -> _Loaded:
    truth = _read_jsonl(truth_path)
    incidents = _read_jsonl(run_dir / "incidents.jsonl")
    predictions_path = run_dir / "predictions.jsonl"
    predictions = _read_jsonl(predictions_path) if predictions_path.exists() else []
    predictions = [p for p in predictions if not p.get("update")]  # a warning said again is not another
    run_path = run_dir / "run.json"
    earliest = None
    if run_path.exists():
        try:
            run = json.loads(run_path.read_text())
        except json.JSONDecodeError as exc:
            raise EvaluationError(f"{run_path}:{exc.lineno}: not JSON ({exc.msg})") from None
        if interval_s is None and isinstance(run, dict) and isinstance(run.get("interval_s"), int | float):
            interval_s = float(run["interval_s"])
        # faults too early for the predictor to have spoken (its warm-up) are not counted missed
        if isinstance(run, dict) and isinstance(run.get("predictions_from"), int | float):
            earliest = float(run["predictions_from"])
    topology = truth_path.parent / "topology.json"
    contains = load_contains(topology) if topology.exists() else None
    gpu_days = None
    meta_path = truth_path.parent / "meta.json"
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
            gpu_days = float(meta["gpus"]) * float(meta["end"] - meta["start"]) / 86_400
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            gpu_days = None
    notices_path = run_dir / "notices.jsonl"
    notices = len(_read_jsonl(notices_path)) if notices_path.exists() else 0
    return _Loaded(truth, incidents, predictions, interval_s, earliest, contains, gpu_days, notices)


def evaluate_paths(
    truth_path: Path, run_dir: Path, interval_s: float | None = None, min_lead_s: float = MIN_USEFUL_LEAD_S
) -> RunEvaluation:
    """Score run_dir (incidents.jsonl, predictions.jsonl if any, run.json if any) against
    truth_path; topology.json beside the truth enables the "E contains" prediction rule. An
    explicit interval_s wins over run.json's."""
    r = _load(truth_path, run_dir, interval_s)
    return evaluate_run(
        r.truth,
        r.incidents,
        r.predictions,
        interval_s=r.interval_s,
        contains=r.contains,
        earliest=r.earliest,
        gpu_days=r.gpu_days,
        notices=r.notices,
        min_lead_s=min_lead_s,
    )


POOL_SPACING_S = 1e8  # runs are laid end to end this far apart, so no window spans two of them


def evaluate_many(
    pairs: list[tuple[Path, Path]], interval_s: float | None = None, min_lead_s: float = MIN_USEFUL_LEAD_S
) -> RunEvaluation:
    """Several (truth, run) pairs scored as one: each run is moved to its own stretch of time and
    its ids are prefixed, so matches never cross runs; counts add up and percentiles are over
    every fault. A fault its run's predictor could not yet have seen is left out of prediction
    recall, as evaluate_paths does for one run."""
    truth: list[dict[str, Any]] = []
    incidents: list[dict[str, Any]] = []
    predictions: list[dict[str, Any]] = []
    contains: dict[str, set[str]] = {}
    intervals = set()
    days: list[float | None] = []
    notices = 0
    for k, (truth_path, run_dir) in enumerate(pairs):
        r = _load(truth_path, run_dir, interval_s)
        days.append(r.gpu_days)
        notices += r.notices
        shift = k * POOL_SPACING_S
        intervals.add(r.interval_s)
        for f in r.truth:
            g = {**f, "fault_id": f"{k}:{f['fault_id']}", "interval_s": r.interval_s}
            for key in ("onset", "end", "precursor_start"):
                if g.get(key) is not None:
                    g[key] = float(g[key]) + shift
            too_early = r.earliest is not None and float(f["onset"]) < r.earliest + min_lead_s
            if too_early and g.get("precursor_start") is not None:
                g["precursor_start"] = None  # before the predictor could speak: not counted
            truth.append(g)
        for i in r.incidents:
            j = {**i, "incident_id": f"{k}:{i['incident_id']}"}
            for key in ("opened", "updated", "resolved", "warned"):
                if j.get(key) is not None:
                    j[key] = float(j[key]) + shift
            if j.get("episodes"):  # each episode's opening may detect a fault: moved with the run
                j["episodes"] = [
                    {k: None if v is None else float(v) + shift for k, v in e.items()} for e in j["episodes"]
                ]
            incidents.append(j)
        predictions += [{**p, "at": float(p["at"]) + shift} for p in r.predictions]
        for parent, children in (r.contains or {}).items():
            contains.setdefault(parent, set()).update(children)
    known = {i for i in intervals if i is not None}
    pooled_interval = known.pop() if len(known) == 1 else None
    gpu_days = None if any(d is None for d in days) else float(sum(d for d in days if d is not None))
    return evaluate_run(
        truth,
        incidents,
        predictions,
        interval_s=pooled_interval,
        contains=contains or None,
        gpu_days=gpu_days,
        notices=notices,
        min_lead_s=min_lead_s,
    )
