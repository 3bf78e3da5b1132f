"""Announced maintenance: anomalies of a drained node's parts (and of the switch ports facing
them) are expected, so they are held back and counted, not emitted."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from detectors.anomaly import Anomaly
from ingest.frames import Frame


class Maintenance:
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

    def learn_nodes(self, name: str, frame: Frame, ids: NDArray[np.object_], new: NDArray[np.bool_]) -> None:
        """Which node each new entity belongs to (switch ports: the node at the other end)."""
        if name == "switch_port":  # its node is its peer's, which may not be known yet
            for port, peer in zip(ids[new].tolist(), frame.tag("peer")[new].tolist(), strict=True):
                if peer:
                    self._peer_of[str(port)] = str(peer)
            return
        nodes = ids if name == "node" else frame.tag("node")
        for entity, node in zip(ids[new].tolist(), nodes[new].tolist(), strict=True):
            if node:
                self._node_of[str(entity)] = str(node)

    def node_of(self, entity: str) -> str | None:
        node = self._node_of.get(entity)
        if node is None and entity in self._peer_of:
            node = self._node_of.get(self._peer_of[entity])
        return node

    def filter(self, t: float, anomalies: list[Anomaly]) -> list[Anomaly]:
        active = [nodes for nodes, start, end in self._windows.values() if start <= t < end]
        if not active or not anomalies:
            return anomalies
        drained = frozenset().union(*active)
        kept = [a for a in anomalies if self.node_of(a.entity) not in drained]
        self.suppressed += len(anomalies) - len(kept)
        return kept
