"""Announced maintenance: anomalies of a drained node's parts (and of the switch ports facing
them) are expected, so they are held back and counted, not emitted."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from detectors.anomaly import Anomaly
from detectors.base import Family, FloatArray, Mask, State
from detectors.stack.summary import CohortSummary
from detectors.stack.view import MeasurementTick


class Maintenance(Family):
    """Stated alternative: a filter on the other families' findings, not a detector of anything.
    It learns which node each entity sits on (switch ports: the node at the other end), which the
    stack has it learn from the frame each entity first appears in, as it indexes the frame (a
    judged frame no longer says which of its entities are new); its score is 1 where a row's node
    is out for announced maintenance at the frame's time (its findings are held back), 0
    elsewhere: not "more anomalous". It decides at the tick's end (`close`), holding back what the
    others found."""

    def __init__(self) -> None:
        # windows out of service, each under a key so a later event can move or close it (a
        # drain is open until the node is resumed; a reservation can be cut short)
        self._windows: dict[str, tuple[frozenset[str], float, float]] = {}
        self._node_of: dict[str, str] = {}
        self._peer_of: dict[str, str] = {}  # switch port -> the entity at the other end
        self.suppressed = 0

    def announce(self, nodes: Iterable[str], start: float, end: float, key: str | None = None) -> None:
        nodes = frozenset(nodes)
        self._windows[key if key is not None else f"{sorted(nodes)}:{start}:{end}"] = (nodes, start, end)

    def __setstate__(self, state: dict[str, object]) -> None:
        windows = state.get("_windows")
        if isinstance(windows, list):  # a checkpoint from before windows had keys
            state["_windows"] = {f"{sorted(n)}:{s}:{e}": (n, s, e) for n, s, e in windows}
        self.__dict__.update(state)

    def window(self, key: str) -> tuple[frozenset[str], float, float] | None:
        return self._windows.get(key)

    def _drained(self, t: float) -> frozenset[str]:
        active = [nodes for nodes, start, end in self._windows.values() if start <= t < end]
        return frozenset().union(*active)

    def score(self, m: MeasurementTick, cohorts: CohortSummary | None = None) -> FloatArray:
        drained = self._drained(m.t)
        held = [bool(drained) and self.node_of(str(e)) in drained for e in m.ids.tolist()]
        return np.asarray(held, dtype=np.float64).reshape(len(m.ids), 1)

    def learn(self, m: MeasurementTick, mask: Mask | None = None) -> None:
        """Which node each row's entity belongs to; `mask` (rows, 1) False leaves a row out (the
        stack learns each entity from the frame it first appears in)."""
        rows = np.ones(len(m.ids), dtype=np.bool_) if mask is None else np.asarray(mask, dtype=np.bool_)[:, 0]
        if m.name == "switch_port":  # its node is its peer's, which may not be known yet
            for port, peer in zip(m.ids[rows].tolist(), m.frame.tag("peer")[rows].tolist(), strict=True):
                if peer:
                    self._peer_of[str(port)] = str(peer)
            return
        nodes = m.ids if m.name == "node" else m.frame.tag("node")
        for entity, node in zip(m.ids[rows].tolist(), nodes[rows].tolist(), strict=True):
            if node:
                self._node_of[str(entity)] = str(node)

    def node_of(self, entity: str) -> str | None:
        node = self._node_of.get(entity)
        if node is None and entity in self._peer_of:
            node = self._node_of.get(self._peer_of[entity])
        return node

    def close(self, t: float, found: list[Anomaly]) -> list[Anomaly]:
        return self.filter(t, found)

    def filter(self, t: float, anomalies: list[Anomaly]) -> list[Anomaly]:
        drained = self._drained(t)
        if not drained or not anomalies:
            return anomalies
        kept = [a for a in anomalies if self.node_of(a.entity) not in drained]
        self.suppressed += len(anomalies) - len(kept)
        return kept

    def state_dict(self) -> State:
        """The windows (nodes joined by spaces, which no id holds), who sits where, the count held back."""
        keys = sorted(self._windows)
        return {
            "windows.key": np.asarray(keys, dtype=object),
            "windows.nodes": np.asarray([" ".join(sorted(self._windows[k][0])) for k in keys], dtype=object),
            "windows.start": np.asarray([self._windows[k][1] for k in keys], dtype=np.float64),
            "windows.end": np.asarray([self._windows[k][2] for k in keys], dtype=np.float64),
            "node_of.entity": np.asarray(list(self._node_of), dtype=object),
            "node_of.node": np.asarray(list(self._node_of.values()), dtype=object),
            "peer_of.port": np.asarray(list(self._peer_of), dtype=object),
            "peer_of.peer": np.asarray(list(self._peer_of.values()), dtype=object),
            "suppressed": self.suppressed,
        }

    def load_state(self, state: State) -> None:
        def strings(key: str) -> list[str]:
            return [str(x) for x in np.asarray(state.get(key, np.zeros(0)), dtype=object).tolist()]

        starts = np.asarray(state.get("windows.start", np.zeros(0)), dtype=np.float64).tolist()
        ends = np.asarray(state.get("windows.end", np.zeros(0)), dtype=np.float64).tolist()
        windows = zip(strings("windows.key"), strings("windows.nodes"), starts, ends, strict=True)
        self._windows = {key: (frozenset(nodes.split()), start, end) for key, nodes, start, end in windows}
        self._node_of = dict(zip(strings("node_of.entity"), strings("node_of.node"), strict=True))
        self._peer_of = dict(zip(strings("peer_of.port"), strings("peer_of.peer"), strict=True))
        self.suppressed = int(state.get("suppressed", 0))
