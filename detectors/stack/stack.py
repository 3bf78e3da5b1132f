"""The detector stack the service runs on every tick: frames of one tick in, anomalies out.

It assembles each measurement's view (entities, counter rates) and hands it to the detector
families in a fixed order, each in its own module with its own thresholds (vocab/thresholds.py),
each a `Family` of the protocol in detectors/base.py, run through the same verbs:
- rules.py: hard signals (XIDs, uncorrectable ECC, link/NVLink/PCIe errors, pause rates, bad
  states); unambiguous, they fire on the first tick;
- cohorts.py: peer groups (a GPU against its job, a switch against its role), persistent;
- history.py: slow physical signals against their own history (drift, sag);
- presence.py: entities that should report and went silent;
- maintenance.py: anomalies of nodes drained for announced maintenance held back.

A tick: `prepare` (each measurement's view; maintenance learns where each new entity sits),
`summarise` (each family's share of the comparisons across entities), `judge` (each family judges
each frame it watches, then each closes the tick).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from detectors.anomaly import Anomaly
from detectors.base import Family, FloatArray, State, flatten, per_measurement
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
    def families(self) -> tuple[Family, ...]:
        """In the order they judge a frame, and close the tick (maintenance last: it holds back
        what the others found)."""
        drift = () if self.drift is None else (self.drift,)
        return (self.rules, self.peers, *drift, self.sag, self.presence, self.maintenance)

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
        families = self.families
        for m in ticks:
            for family in families:
                if family.watches(m.name):
                    family.summarise(m, summary)

    def judge(self, t: float, ticks: list[MeasurementTick], cohorts: CohortSummary) -> list[Anomaly]:
        """The detector families on the tick, cohorts as the merged summary shows them."""
        families = self.families
        out: list[Anomaly] = []
        for m in ticks:
            for family in families:
                if family.watches(m.name):
                    out += family.judge(m, cohorts)
        for family in families:
            out = family.close(t, out)
        self.last_tick = t
        return out

    def _view(self, t: float, name: str, frame: Frame) -> MeasurementTick:
        ent = self.entities.get(name)
        if ent is None:
            ent = self.entities[name] = _Entities()
            self.presence.follow(name, ent.index)
        ids = frame.tag(self._id_tag[name])
        known = len(ent.index)
        series = ent.index.add(ids)
        m = MeasurementTick(t, name, frame, ids, series, len(ent.index))
        if m.n_entities > known:  # where each new entity sits, from the frame it first appears in
            self.maintenance.learn(m, (series >= known)[:, None])
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
        """Per measurement: its entities, counter references and each family's state of it
        (maintenance's windows are no measurement's: a daemon's checkpoint, the whole loop, holds them)."""
        out: dict[str, State] = {}
        for name, ent in self.entities.items():
            out[name] = {"ids": np.asarray(ent.index.ids, dtype=object)}
            if ent.rates is not None:
                out[name].update({f"rates.{k}": v for k, v in ent.rates.state_dict().items()})
        for family in self._measured:
            for name, s in per_measurement(family.state_dict()).items():
                if name in out:
                    out[name].update(s)
        return out

    def load_state(self, state: dict[str, State]) -> None:
        self.entities = {}
        for name, s in state.items():
            ent = _Entities()
            ent.index.add(np.asarray(s["ids"], dtype=object))
            sub = {k.split(".", 1)[1]: v for k, v in s.items() if k.startswith("rates.")}
            if sub:
                ent.rates = CounterRates(np.asarray(sub["last_value"]).shape[1])
                ent.rates.load_state(sub)
            self.entities[name] = ent
        flat = flatten(state)
        for family in self._measured:
            family.load_state(flat)
        for name, ent in self.entities.items():
            self.presence.follow(name, ent.index)

    @property
    def _measured(self) -> tuple[Family, ...]:
        """The families whose state is kept per measurement."""
        return tuple(family for family in self.families if family is not self.maintenance)
