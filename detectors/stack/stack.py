"""The detector stack the service runs on every tick: frames of one tick in, anomalies out.

It assembles each measurement's view (entities, counter rates) and hands it to the detector
families in a fixed order, each in its own module with its own thresholds (vocab/thresholds.py):
- rules.py: hard signals (XIDs, uncorrectable ECC, link/NVLink/PCIe errors, pause rates, bad
  states); unambiguous, they fire on the first tick;
- cohorts.py: peer groups (a GPU against its job, a switch against its role), persistent;
- history.py: slow physical signals against their own history (drift, sag);
- presence.py: entities that should report and went silent;
- maintenance.py: anomalies of nodes drained for announced maintenance held back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from detectors.anomaly import Anomaly
from detectors.base import FloatArray, State
from detectors.rates import CounterRates
from detectors.stack.cohorts import PeerRules
from detectors.stack.history import DriftFactory, DriftWatch, SagWatch, default_drift
from detectors.stack.maintenance import Maintenance
from detectors.stack.presence import Presence
from detectors.stack.rules import HardRules
from detectors.stack.summary import CohortSummary
from detectors.stack.view import MeasurementTick
from ingest.frames import Frame
from vocab.catalog import MEASUREMENTS, MetricKind
from vocab.entities import EntityIndex
from vocab.thresholds import DetectorSettings


@dataclass
class _Entities:
    index: EntityIndex = field(default_factory=EntityIndex)
    rates: CounterRates | None = None


class DetectorStack:
    """Per-entity state lives in arrays per measurement, inside each detector family."""

    def __init__(
        self,
        interval: float,
        drift_factory: DriftFactory | None = default_drift,
        settings: DetectorSettings | None = None,
    ) -> None:
        self._interval = interval
        self.settings = settings or DetectorSettings()
        self.drift_factory = drift_factory
        self.rules = HardRules(self.settings.rules)
        self.peers = PeerRules(self.settings.peers, interval)
        self.drift = DriftWatch(self.settings.drift, drift_factory) if drift_factory else None
        self.sag = SagWatch(self.settings.sag, interval)
        self.presence = Presence(self.settings.presence, interval)
        self.maintenance = Maintenance()
        self.entities: dict[str, _Entities] = {}
        self._counters = {m.name: [x.name for x in m.metrics if x.kind is MetricKind.COUNTER] for m in MEASUREMENTS}
        self._id_tag = {m.name: m.id_tag for m in MEASUREMENTS}
        self.last_tick: float | None = None

    @property
    def interval(self) -> float:
        return self._interval

    @interval.setter
    def interval(self, seconds: float) -> None:
        """The scrape interval; learnt from the data when not configured, so passed on."""
        self._interval = seconds
        self.sag.interval = seconds
        self.presence.interval = seconds
        self.peers.interval = seconds

    @property
    def suppressed(self) -> int:
        return self.maintenance.suppressed

    def announce_maintenance(self, nodes: Iterable[str], start: float, end: float, key: str | None = None) -> None:
        self.maintenance.announce(nodes, start, end, key)

    def process(self, t: float, frames: dict[str, Frame]) -> list[Anomaly]:
        """One process holding every entity: its share of the cohorts is all of them."""
        ticks = self.prepare(t, frames)
        summary = CohortSummary()
        self.summarise(ticks, summary)
        return self.judge(t, ticks, summary)

    def prepare(self, t: float, frames: dict[str, Frame]) -> list[MeasurementTick]:
        """Each measurement's view of the tick (entities, counter rates); what is present noted."""
        ticks: list[MeasurementTick] = []
        for name, frame in frames.items():
            if name in self._id_tag and len(frame):
                ticks.append(self._view(t, name, frame))
        return ticks

    def summarise(self, ticks: list[MeasurementTick], summary: CohortSummary) -> None:
        """What the comparisons across entities need from these entities (see summary.py)."""
        for m in ticks:
            self.peers.summarise(m, summary)
            self.rules.summarise(m, summary)

    def judge(self, t: float, ticks: list[MeasurementTick], cohorts: CohortSummary) -> list[Anomaly]:
        """The detector families on the tick, cohorts as the merged summary shows them."""
        out: list[Anomaly] = []
        for m in ticks:
            out += self.rules.process(m, cohorts)
            out += self.peers.judge(m, cohorts)
            if self.drift is not None and self.drift.watches(m.name):
                out += self.drift.process(m)
            if self.sag.watches(m.name):
                out += self.sag.process(m)
        out += self.presence.silent(t)
        self.last_tick = t
        return self.maintenance.filter(t, out)

    def _view(self, t: float, name: str, frame: Frame) -> MeasurementTick:
        ent = self.entities.setdefault(name, _Entities())
        ids = frame.tag(self._id_tag[name])
        known = len(ent.index)
        series = ent.index.add(ids)
        m = MeasurementTick(t, name, frame, ids, series, len(ent.index))
        if m.n_entities > known:
            self.maintenance.learn_nodes(name, frame, ids, series >= known)
        self.presence.seen(m, ent.index)
        m.rates, m.increments = self._rates(m, ent)
        return m

    def _rates(self, m: MeasurementTick, ent: _Entities) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
        """Per-second rate and increase of every counter of the measurement the frame carries."""
        known = self._counters.get(m.name, [])
        if not any(c in m.frame.fields for c in known):
            return {}, {}
        if ent.rates is None or ent.rates.width != len(known):
            ent.rates = CounterRates(len(known))
        values = np.full((len(m.frame), len(known)), np.nan)
        for j, c in enumerate(known):
            if c in m.frame.fields:
                values[:, j] = m.frame.fields[c].as_float()
        max_gap_s = self.settings.presence.max_gap_ticks * self._interval
        # over each sample's own timestamp, not the tick's: a host's scrape jitter would otherwise
        # read as a rate change of jitter/interval (10% at 10 s with a second of jitter)
        times = m.frame.time_ns
        on_tick = bool(len(times)) and times[0] == times[-1] and bool((times == times[0]).all())
        sampled_at: float | FloatArray = float(times[0]) / 1e9 if on_tick else (times / 1e9)[:, None]
        rate, inc = ent.rates.update(sampled_at, m.series, values, max_gap_s=max_gap_s)
        return {c: rate[:, j] for j, c in enumerate(known)}, {c: inc[:, j] for j, c in enumerate(known)}

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, State]:
        out: dict[str, State] = {}
        for name, ent in self.entities.items():
            s: State = {"ids": np.asarray(ent.index.ids, dtype=object)}
            s.update(self.rules.state_dict(name))
            s.update(self.presence.state_dict(name))
            s.update(self.sag.state_dict(name))
            if ent.rates is not None:
                s.update({f"rates.{k}": v for k, v in ent.rates.state_dict().items()})
            s.update(self.peers.state_dict(name))
            if self.drift is not None:
                s.update(self.drift.state_dict(name))
            out[name] = s
        return out

    def load_state(self, state: dict[str, State]) -> None:
        self.entities = {}
        for name, s in state.items():
            ent = _Entities()
            ent.index.add(np.asarray(s["ids"], dtype=object))
            self.rules.load_state(name, s)
            self.presence.load_state(name, s, ent.index)
            self.sag.load_state(name, s)
            sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith("rates.")}
            if sub:
                ent.rates = CounterRates(np.asarray(sub["last_value"]).shape[1])
                ent.rates.load_state(sub)
            self.peers.load_state(name, s)
            if self.drift is not None:
                self.drift.load_state(name, s)
            self.entities[name] = ent
