"""Entities that should report and went silent: a GPU of a running job, a switch. Said once per
silence; reporting again re-arms it.

All of a node's GPUs going silent together while the node's other telemetry (its NICs, its BMC)
still arrives is the GPU exporter restarting or stuck, not eight GPUs failing at once: that is one
telemetry-gap notice, not eight hardware anomalies. A GPU that falls off the bus goes silent alone.

Apart from the anomalies: every watched entity (expected to report or not, an exporter gap or
not) that stops reporting is said once as `presence:gone`, and once as `presence:back` when its
samples return (`moves`): not alarms, the facts an incident on it needs to stay open while there
is no data and to resolve only once it is back (rca/incidents.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from detectors.anomaly import PRESENCE_BACK, PRESENCE_GONE, REPORTING, Anomaly
from detectors.base import Family, FloatArray, Mask, State, flatten, grow, per_measurement
from detectors.stack.summary import CohortSummary
from detectors.stack.view import MeasurementTick
from vocab.entities import EntityIndex
from vocab.thresholds import PresenceThresholds

WATCHED = ("gpu", "switch")


@dataclass
class _Presence:
    entities: EntityIndex = field(default_factory=EntityIndex)
    last_seen: np.ndarray = field(default_factory=lambda: np.zeros(0))
    expected: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))  # should report
    silent_reported: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    node: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))  # GPUs: their node
    gone: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))  # said presence:gone

    def __setstate__(self, state: dict[str, object]) -> None:
        state.setdefault("gone", np.zeros(0, dtype=np.bool_))  # a checkpoint from before issue 66
        self.__dict__.update(state)


@dataclass(frozen=True, slots=True)
class TelemetryGap:
    """A node whose GPU exporter went quiet while its other agents did not."""

    at: float
    node: str
    gpus: int


class Presence(Family):
    """Stated alternative: presence scores who is absent, so its rows are the measurement's known
    entities (rows of its entity index), not the frame's: the score is the ticks since each was
    last seen (0 for those in the frame). Judging a frame learns who reported; silence is decided
    at the tick's end (`close`), since a measurement whose every entity went quiet sends no frame."""

    def __init__(self, limits: PresenceThresholds, interval: float) -> None:
        self.limits = limits
        self.interval = interval
        self._state: dict[str, _Presence] = {}
        self._tick: float | None = None
        self._nodes_reporting: set[str] = set()  # nodes with non-GPU telemetry in this tick
        self.gaps: list[TelemetryGap] = []
        self.moves: list[Anomaly] = []  # presence:gone / presence:back of this tick (take_moves)

    def __setstate__(self, state: dict[str, object]) -> None:
        state.setdefault("moves", [])  # a checkpoint from before issue 66
        self.__dict__.update(state)

    def take_moves(self) -> list[Anomaly]:
        """Who stopped or started reporting since the last call."""
        moves, self.moves = self.moves, []
        return moves

    def follow(self, measurement: str, entities: EntityIndex) -> None:
        """Index the measurement's entities with `entities` (the stack's own index, shared, so
        that it is not kept twice); a presence on its own indexes the frames it learns."""
        self._state.setdefault(measurement, _Presence()).entities = entities

    def _entities(self, m: MeasurementTick, st: _Presence) -> EntityIndex:
        """The measurement's index, holding the frame's entities (in the stack, it already does)."""
        index = st.entities
        if len(index) < m.n_entities:  # a frame's new entities are the rows past the index, in order
            fresh = np.flatnonzero(m.series >= len(index))
            index.add(m.ids[fresh[np.argsort(m.series[fresh], kind="stable")]])
        return index

    def score(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> FloatArray:
        """(known entities, 1): ticks since each was last seen, the frame's own at 0."""
        out = np.full((m.n_entities, 1), np.nan)
        st = self._state.get(m.name)
        if st is not None:
            known = min(len(st.last_seen), m.n_entities)
            out[:known, 0] = (m.t - st.last_seen[:known]) / self.interval
        out[m.series, 0] = 0.0
        return out

    def learn(self, m: MeasurementTick, mask: Mask | None = None) -> None:
        """Who reported in this frame (`mask` is not taken: a row in the frame reported)."""
        if m.t != self._tick:
            self._tick, self._nodes_reporting = m.t, set()
        if m.name != "gpu" and "node" in m.frame.tags:
            self._nodes_reporting.update(m.frame.tags["node"].tolist())
        st = self._state.setdefault(m.name, _Presence())
        entities = self._entities(m, st)
        st.last_seen = grow(st.last_seen, m.n_entities, np.nan)
        if m.name in WATCHED:
            st.gone = grow(st.gone, m.n_entities, False)
            back = m.series[st.gone[m.series]]
            if len(back):
                ids = entities.ids
                self.moves += [
                    Anomaly(m.t, str(ids[r]), REPORTING, PRESENCE_BACK, 0.0, 1.0, None, m.name, _since(st, r))
                    for r in back.tolist()
                ]
                st.gone[back] = False
        st.last_seen[m.series] = m.t
        st.expected = grow(st.expected, m.n_entities, False)
        st.silent_reported = grow(st.silent_reported, m.n_entities, False)
        st.silent_reported[m.series] = False
        if m.name == "gpu":  # a GPU of a running job (one whose job is unknown is not counted on)
            st.node = grow(st.node, m.n_entities, "")
            st.node[m.series] = m.frame.tag("node")
            job = m.frame.tag("job")
            st.expected[m.series] = (job != "idle") & (job != "")
        elif m.name == "switch":
            st.expected[m.series] = True

    def judge(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> list[Anomaly]:
        self.learn(m)
        return []

    def close(self, t: float, found: list[Anomaly]) -> list[Anomaly]:
        return found + self.silent(t)

    def silent(self, t: float) -> list[Anomaly]:
        out: list[Anomaly] = []
        for name in WATCHED:
            st = self._state.get(name)
            if st is None or not len(st.entities):
                continue
            quiet = t - st.last_seen >= self.limits.silent_after_ticks * self.interval - 1e-6
            self._gone(t, name, st, quiet)
            gone = st.expected & quiet & ~st.silent_reported
            if name == "gpu" and gone.any():
                gone &= ~self._exporter_gaps(t, st, quiet)
            rows = np.flatnonzero(gone[: len(st.entities)])
            ids = st.entities.ids
            for r in rows.tolist():
                out.append(
                    Anomaly(
                        t,
                        str(ids[r]),
                        "silent",
                        "rule:silent",
                        float((t - st.last_seen[r]) / self.interval),
                        None,
                        None,
                        name,
                        {"last_seen": f"{st.last_seen[r]:.0f}"},
                    )
                )
            st.silent_reported[rows] = True
        return out

    def _gone(self, t: float, name: str, st: _Presence, quiet: np.ndarray) -> None:
        """Every watched entity newly quiet, said once: it stopped reporting (presence:gone)."""
        st.gone = grow(st.gone, len(quiet), False)
        n = len(st.entities)
        rows = np.flatnonzero(quiet[:n] & ~st.gone[:n])
        if not len(rows):
            return
        ids = st.entities.ids
        for r in rows.tolist():
            self.moves.append(Anomaly(t, str(ids[r]), REPORTING, PRESENCE_GONE, 0.0, 0.0, None, name, _since(st, r)))
        st.gone[rows] = True

    def _exporter_gaps(self, t: float, st: _Presence, quiet: np.ndarray) -> np.ndarray:
        """GPU rows silent only because their node's exporter is: every GPU of the node quiet,
        the node's other telemetry arriving. Each such node is one TelemetryGap, said once."""
        n = min(len(st.node), len(quiet))
        node, quiet = st.node[:n], quiet[:n]
        out = np.zeros(len(st.expected), dtype=np.bool_)
        candidates = set(node[quiet & st.expected[:n] & ~st.silent_reported[:n]].tolist()) & self._nodes_reporting
        for name in sorted(candidates):
            members = node == name
            if quiet[members].all():
                out[:n] |= members
                self.gaps.append(TelemetryGap(t, str(name), int(members.sum())))
        st.silent_reported[:n] |= out[:n]
        return out

    def state_dict(self) -> State:
        return flatten(
            {
                name: {
                    "ids": np.asarray(st.entities.ids, dtype=object),
                    "last_seen": st.last_seen.copy(),
                    "expected": st.expected.copy(),
                    "silent_reported": st.silent_reported.copy(),
                    "gone": st.gone.copy(),
                }
                for name, st in self._state.items()
            }
        )

    def load_state(self, state: State) -> None:
        for name, s in per_measurement(state).items():
            if "last_seen" not in s:
                continue
            entities = EntityIndex()
            entities.add(np.asarray(s.get("ids", np.zeros(0)), dtype=object))
            self._state[name] = _Presence(
                entities,
                np.asarray(s["last_seen"], dtype=np.float64).copy(),
                np.asarray(s["expected"], dtype=np.bool_).copy(),
                np.asarray(s["silent_reported"], dtype=np.bool_).copy(),
                gone=np.asarray(s.get("gone", np.zeros(0)), dtype=np.bool_).copy(),
            )


def _since(st: _Presence, row: int) -> dict[str, str]:
    """What a presence record says of when the entity last reported (before this tick)."""
    return {"last_seen": f"{st.last_seen[row]:.0f}"}
