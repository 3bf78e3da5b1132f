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
        self._windows: list[tuple[frozenset[str], float, float]] = []
        self._node_of: dict[str, str] = {}
        self._peer_of: dict[str, str] = {}  # switch port -> the entity at the other end
        self.suppressed = 0

    def announce(self, nodes: Iterable[str], start: float, end: float) -> None:
        self._windows.append((frozenset(nodes), start, end))

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
        active = [nodes for nodes, start, end in self._windows if start <= t < end]
        if not active or not anomalies:
            return anomalies
        drained = frozenset().union(*active)
        kept = [a for a in anomalies if self.node_of(a.entity) not in drained]
        self.suppressed += len(anomalies) - len(kept)
        return kept
