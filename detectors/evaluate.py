"""Detector quality on a generated cluster: per fault kind, did a detector fire on the fault's
root or affected entities within two ticks of onset; and how many alarm episodes fired where no
fault was (false alarms per 10,000 GPU-hours)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from detectors.anomaly import Anomaly

EPISODE_GAP_TICKS = 12  # anomalies of one (entity, metric, detector) this close are one episode
GRACE_AFTER_END_S = 900.0  # symptoms fade (temperatures cool, counters settle) after a fault ends


@dataclass(slots=True)
class KindResult:
    faults: int = 0
    detected: int = 0
    delays_ticks: list[float] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.detected / self.faults if self.faults else float("nan")


@dataclass(slots=True)
class DetectionReport:
    kinds: dict[str, KindResult]
    false_alarm_episodes: int
    episodes: int
    gpu_hours: float
    false_alarms: list[Anomaly]

    @property
    def false_alarms_per_10k_gpu_hours(self) -> float:
        return self.false_alarm_episodes / self.gpu_hours * 10_000 if self.gpu_hours else float("nan")

    @property
    def recall(self) -> float:
        total = sum(k.faults for k in self.kinds.values())
        return sum(k.detected for k in self.kinds.values()) / total if total else float("nan")


def evaluate(
    anomalies: Iterable[Anomaly],
    truth: list[dict[str, object]],
    interval: float,
    gpus: int,
    hours: float,
    within_ticks: int = 2,
    allowance: Mapping[str, float] | None = None,
) -> DetectionReport:
    """`allowance`: per fault kind, ticks it may take instead of `within_ticks` (a kind judged
    on a window of scrapes cannot be seen in one)."""
    items = sorted(anomalies, key=lambda a: a.at)
    by_entity: dict[str, list[Anomaly]] = defaultdict(list)
    for a in items:
        by_entity[a.entity].append(a)
    kinds: dict[str, KindResult] = defaultdict(KindResult)
    explained: set[int] = set()
    for fault in truth:
        onset, end = float(fault["onset"]), float(fault["end"])  # type: ignore[arg-type]
        start = float(fault["precursor_start"]) if fault.get("precursor_start") is not None else onset  # type: ignore[arg-type]
        affected = set(fault["affected"])  # type: ignore[call-overload]
        result = kinds[str(fault["kind"])]
        result.faults += 1
        first: float | None = None
        for entity in affected:
            for a in by_entity.get(entity, []):
                if start - interval <= a.at <= end + GRACE_AFTER_END_S:
                    explained.add(id(a))
                    if a.at >= onset and (first is None or a.at < first):
                        first = a.at
        allowed = (allowance or {}).get(str(fault["kind"]), within_ticks)
        if first is not None and first <= onset + allowed * interval + 1e-6:
            result.detected += 1
            result.delays_ticks.append((first - onset) / interval)
    episodes, false_episodes, false_alarms = _episodes(items, explained, interval)
    return DetectionReport(dict(kinds), false_episodes, episodes, gpus * hours, false_alarms)


def _episodes(items: list[Anomaly], explained: set[int], interval: float) -> tuple[int, int, list[Anomaly]]:
    last: dict[tuple[str, str, str], float] = {}
    episodes = false = 0
    false_alarms: list[Anomaly] = []
    for a in items:
        key = (a.entity, a.metric, a.detector)
        if key in last and a.at - last[key] <= EPISODE_GAP_TICKS * interval:
            last[key] = a.at
            continue
        last[key] = a.at
        episodes += 1
        if id(a) not in explained:
            false += 1
            false_alarms.append(a)
    return episodes, false, false_alarms


def format_report(report: DetectionReport) -> str:
    lines = [f"{'kind':20s} {'faults':>6s} {'detected':>8s} {'recall':>7s} {'mean delay (ticks)':>19s}"]
    for kind, r in sorted(report.kinds.items()):
        delay = sum(r.delays_ticks) / len(r.delays_ticks) if r.delays_ticks else float("nan")
        lines.append(f"{kind:20s} {r.faults:6d} {r.detected:8d} {r.recall:7.2f} {delay:19.2f}")
    lines.append(
        f"overall recall {report.recall:.3f}; {report.episodes} alarm episodes, {report.false_alarm_episodes} false "
        f"= {report.false_alarms_per_10k_gpu_hours:.2f} per 10,000 GPU-hours ({report.gpu_hours:,.0f} GPU-hours)"
    )
    return "\n".join(lines)
