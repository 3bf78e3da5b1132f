"""The cluster's topology as a dependency graph: what an entity depends on, what depends on it.

Loaded from the topology file (JSON node-link, relations contains / connects / powers / cools /
cooled_by / member_of), validated with errors that name the bad entity or edge, and turned into
integer adjacency arrays so walks stay fast at 100,000 GPUs (about 900,000 entities).

"A depends on B" means a failure of B can show up as symptoms on A. Mostly that is the edge
direction the inventory already uses, with two exceptions: a NIC *contains* its optic but depends
on it (a failing optic shows as NIC errors), and a node *contains* its PSUs but is powered by them.
So a GPU depends on its node, the node's PSUs, rack and cooling loop, and the NVSwitches it
talks through; a NIC on its optic, the link, the leaf port, the leaf and the leaf's spines.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

RELATIONS = frozenset({"contains", "connects", "powers", "cools", "cooled_by", "member_of"})
KINDS = frozenset(
    {"rack", "cooling", "node", "gpu", "nvswitch", "psu", "nic", "optic", "leaf", "spine", "port", "link", "group"}
)


def _label(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else -1


class GraphError(ValueError):
    """A topology that cannot be used; the message names the entity or edge at fault."""


class TopologyGraph:
    def __init__(self, entities: list[dict[str, Any]], links: list[dict[str, Any]]) -> None:
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        # what the file says of itself (node-link's "graph"): its source, the importer's findings
        self.attrs: dict[str, Any] = {}
        for n, node in enumerate(entities):
            entity, kind = node.get("id"), node.get("kind")
            if not isinstance(entity, str) or not entity:
                raise GraphError(f"entity #{n} has no id: {node!r}"[:200])
            if kind not in KINDS:
                raise GraphError(f"entity {entity!r} has unknown kind {kind!r} (expected one of {sorted(KINDS)})")
            if entity in self.index:
                raise GraphError(f"entity {entity!r} appears twice")
            self.index[entity] = len(self.ids)
            self.ids.append(entity)
        self.kinds: list[str] = [node["kind"] for node in entities]  # a list: indexing numpy strings is slow
        # the labels a topology gives its NICs and switches (a rail-optimised fabric's rail, a
        # fat-tree's pod of leaves): what dashboards group by; -1 where the file says nothing
        self._rail = np.array([_label(node.get("rail")) for node in entities], dtype=np.int32)
        self._pod = np.array([_label(node.get("pod")) for node in entities], dtype=np.int32)
        up_src: list[int] = []
        up_dst: list[int] = []
        self._parent = np.full(len(self.ids), -1, dtype=np.int64)  # container, by "contains"
        self._children: dict[int, list[int]] = {}
        self._peers: dict[int, list[int]] = {}  # "connects", both directions
        for n, link in enumerate(links):
            s, t, rel = link.get("source"), link.get("target"), link.get("relation")
            if rel not in RELATIONS:
                raise GraphError(f"edge #{n} {s!r} -> {t!r} has unknown relation {rel!r}")
            if s not in self.index or t not in self.index:
                missing = s if s not in self.index else t
                raise GraphError(f"edge #{n} {s!r} -{rel}-> {t!r} names unknown entity {missing!r}")
            a, b = self.index[s], self.index[t]
            if rel == "contains":
                self._parent[b] = a
                self._children.setdefault(a, []).append(b)
                child_kind = self.kinds[b]
                if child_kind == "optic":
                    up_src.append(a)  # the NIC depends on its optic
                    up_dst.append(b)
                elif child_kind != "psu":  # PSUs power the node: see "powers"
                    up_src.append(b)
                    up_dst.append(a)
            elif rel in {"powers", "cools"}:
                up_src.append(b)
                up_dst.append(a)
            elif rel == "cooled_by":
                pass  # the same dependency as "cools", stated from the rack's side
            elif rel == "connects":
                up_src.append(a)
                up_dst.append(b)
                self._peers.setdefault(a, []).append(b)
                self._peers.setdefault(b, []).append(a)
        self._up = _csr(len(self.ids), np.array(up_src, dtype=np.int64), np.array(up_dst, dtype=np.int64))
        self._down = _csr(len(self.ids), np.array(up_dst, dtype=np.int64), np.array(up_src, dtype=np.int64))
        self.dependents_of = lru_cache(maxsize=4096)(self._dependents)
        self._plane = self._switch_planes()
        self.plane = lru_cache(maxsize=1 << 16)(self._plane_of)
        self.node_of = lru_cache(maxsize=1 << 20)(self._node_of)
        self.cables = lru_cache(maxsize=1 << 14)(self._cables)
        self._far = self._far_ends()
        self._nic_switch = self._nic_switches()

    # ------------------------------------------------------------------ loading

    @staticmethod
    def from_json(data: dict[str, Any]) -> TopologyGraph:
        if not isinstance(data, dict) or "nodes" not in data or "links" not in data:
            raise GraphError('a topology is a JSON object with "nodes" and "links" (node-link format)')
        graph = TopologyGraph(list(data["nodes"]), list(data["links"]))
        attrs = data.get("graph")
        graph.attrs = dict(attrs) if isinstance(attrs, dict) else {}
        return graph

    @staticmethod
    def load(path: Path) -> TopologyGraph:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise GraphError(f"no topology file at {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise GraphError(f"{path}: not JSON ({exc})") from None
        except OSError as exc:
            raise GraphError(f"{path}: cannot read ({exc.strerror})") from None
        return TopologyGraph.from_json(data)

    # ------------------------------------------------------------------ queries

    def __contains__(self, entity: str) -> bool:
        return entity in self.index

    def __len__(self) -> int:
        return len(self.ids)

    def kind(self, entity: str) -> str:
        return self.kinds[self._i(entity)]

    def depends_on(self, entity: str, max_depth: int = 8) -> list[str]:
        """Everything whose failure can show on `entity`, nearest first."""
        return [self.ids[i] for i in self._walk(self._i(entity), self._up, max_depth)]

    def dependents(self, entity: str, kinds: Iterable[str] | None = None) -> list[str]:
        """Everything that can show symptoms when `entity` fails (cached: hot during bursts)."""
        found = self.dependents_of(self._i(entity))
        if kinds is None:
            return [self.ids[i] for i in found]
        wanted = set(kinds)
        kinds = self.kinds
        return [self.ids[i] for i in found if kinds[i] in wanted]

    def parent(self, entity: str) -> str | None:
        p = int(self._parent[self._i(entity)])
        return self.ids[p] if p >= 0 else None

    def children(self, entity: str, kind: str | None = None) -> list[str]:
        out = [self.ids[c] for c in self._children.get(self._i(entity), [])]
        return out if kind is None else [c for c in out if self.kinds[self.index[c]] == kind]

    def peers(self, entity: str) -> list[str]:
        """What `entity` is cabled or linked to, either direction."""
        return [self.ids[p] for p in self._peers.get(self._i(entity), [])]

    def ancestor(self, entity: str, kind: str) -> str | None:
        """The nearest container of `kind` (a GPU's node, a node's rack, a port's switch)."""
        i = int(self._parent[self._i(entity)])
        while i >= 0:
            if self.kinds[i] == kind:
                return self.ids[i]
            i = int(self._parent[i])
        return None

    def _node_of(self, entity: str) -> str | None:
        return entity if self.kind(entity) == "node" else self.ancestor(entity, "node")

    def _cables(self, switch: str) -> tuple[tuple[str, str | None], ...]:
        """(port, what is at its far end: a NIC, or the far switch's port) for each port of a
        switch: what a switch failure shows up on, without walking everything behind it."""
        out = []
        for port in self._children.get(self._i(switch), []):
            if self.kinds[port] == "port":
                far = self._far.get(port)
                out.append((self.ids[port], self.ids[far] if far is not None else None))
        return tuple(out)

    def _far_ends(self) -> dict[int, int]:
        """Port -> the entity at the other end of its cable (a NIC, through its optic, or another
        switch's port), for every cable, once at load: bursts ask about thousands of them."""
        far: dict[int, int] = {}
        kinds, parent = self.kinds, self._parent
        for link, ends in self._peers.items():
            if kinds[link] != "link" or len(ends) != 2:
                continue
            a, b = ends
            for near, other in ((a, b), (b, a)):
                if kinds[near] == "port":
                    far[near] = int(parent[other]) if kinds[other] == "optic" and parent[other] >= 0 else other
        return far

    def _nic_switches(self) -> dict[int, int]:
        """NIC -> the switch its one cable lands on, from the far ends read at load: a storm over
        a plane asks this of every NIC in it, and walking up from each costs tens of µs. A NIC
        cabled to several ports is left to the walk."""
        found: dict[int, list[int]] = {}
        for port, far in self._far.items():
            if self.kinds[far] == "nic" and self._parent[port] >= 0:
                found.setdefault(far, []).append(int(self._parent[port]))
        return {nic: switches[0] for nic, switches in found.items() if len(switches) == 1}

    def switch_of(self, entity: str) -> str | None:
        """The switch a port or NIC is cabled to (for a switch: itself)."""
        i = self._i(entity)
        kind = self.kinds[i]
        if kind in ("leaf", "spine"):
            return entity
        if kind == "port":
            return self.parent(entity)
        if i in self._nic_switch:
            return self.ids[self._nic_switch[i]]
        for up in self.depends_on(entity, max_depth=4):
            if self.kind(up) in ("leaf", "spine"):
                return up
        return None

    def rail_and_pod(self, entity: str) -> tuple[int, int]:
        """The rail and the fabric pod `entity` sits in (-1 for either the topology does not
        give): a NIC's or switch's own labels; an optic's, port's or link's through its NIC or
        switch; a GPU's or node's pod through the leaf its first NIC is cabled to."""
        i = self._i(entity)
        kind = self.kinds[i]
        if kind in ("gpu", "node", "nvswitch", "psu"):
            node = entity if kind == "node" else self.ancestor(entity, "node")
            nics = sorted(self.children(node, "nic")) if node else []
            if not nics:
                return -1, -1
            switch = self.switch_of(nics[0])
            return -1, int(self._pod[self.index[switch]]) if switch else -1
        rail, pod = int(self._rail[i]), int(self._pod[i])
        if rail < 0 and kind == "optic":
            nic = self.ancestor(entity, "nic")
            rail = int(self._rail[self.index[nic]]) if nic else -1
        switch = self.switch_of(entity) if kind in ("nic", "optic", "port", "link") else None
        if switch is not None:
            s = self.index[switch]
            rail = rail if rail >= 0 else int(self._rail[s])
            pod = pod if pod >= 0 else int(self._pod[s])
        return rail, pod

    def nic_of_port(self, port: str) -> str | None:
        """The NIC at the far end of a downlink port (None for switch-to-switch ports)."""
        for link in self.peers(port):
            for optic in self.peers(link):
                if self.kind(optic) == "optic":
                    return self.parent(optic)
        return None

    def port_of_nic(self, nic: str) -> str | None:
        for optic in self.children(nic, "optic"):
            for link in self.peers(optic):
                for end in self.peers(link):
                    if self.kind(end) == "port":
                        return end
        return None

    def far_switch(self, port: str) -> str | None:
        """For a switch-to-switch port, the switch at the other end."""
        for link in self.peers(port):
            for end in self.peers(link):
                if end != port and self.kind(end) == "port":
                    return self.parent(end)
        return None

    def cooling_of(self, entity: str) -> str | None:
        rack: str | None = entity if self.kind(entity) == "rack" else self.ancestor(entity, "rack")
        if rack is None:
            return None
        return next((e for e in self.depends_on(rack, max_depth=1) if self.kind(e) == "cooling"), None)

    def psus_of(self, node: str) -> list[str]:
        return self.children(node, "psu")

    # ------------------------------------------------------------------ internals

    def _switch_planes(self) -> dict[int, int]:
        """Switches joined by switch-to-switch cables form a plane (a rail of a rail-optimised
        fat-tree, the whole of a dragonfly): congestion and pause frames spread within one."""
        switches = [i for i, k in enumerate(self.kinds) if k in ("leaf", "spine")]
        root = {i: i for i in switches}

        def find(i: int) -> int:
            while root[i] != i:
                root[i] = root[root[i]]
                i = root[i]
            return i

        for i in switches:
            for j in self._peers.get(i, []):
                if j in root:
                    root[find(i)] = find(j)
        return {i: find(i) for i in switches}

    def _plane_of(self, entity: str) -> int:
        switch = self.switch_of(entity)
        return self._plane.get(self.index[switch], -1) if switch is not None else -1

    def _i(self, entity: str) -> int:
        try:
            return self.index[entity]
        except KeyError:
            raise GraphError(f"unknown entity {entity!r}") from None

    @staticmethod
    def _walk(start: int, adj: tuple[NDArray[np.int64], NDArray[np.int64]], max_depth: int) -> list[int]:
        offsets, targets = adj
        seen = {start}
        out: list[int] = []
        frontier = deque([(start, 0)])
        while frontier:
            i, depth = frontier.popleft()
            if depth >= max_depth:
                continue
            for j in targets[offsets[i] : offsets[i + 1]].tolist():
                if j not in seen:
                    seen.add(j)
                    out.append(j)
                    frontier.append((j, depth + 1))
        return out

    def _dependents(self, i: int) -> tuple[int, ...]:
        return tuple(self._walk(i, self._down, 16))


def _csr(n: int, src: NDArray[np.int64], dst: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    order = np.argsort(src, kind="stable")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.add.at(offsets, src + 1, 1)
    return np.cumsum(offsets), dst[order]


__all__ = ["GraphError", "TopologyGraph"]
