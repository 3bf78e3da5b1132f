"""Cluster topologies: who contains, connects, powers and cools whom.

A `Topology` is the graph a real deployment would export from its inventory (JSON node-link:
entities with a kind and attributes, edges with a relation), plus dense index arrays the
simulator uses to move whole kinds at once (GPU -> node, NIC -> leaf, node -> rack, ...).

Entity ids are the same everywhere (topology, telemetry tags, truth, incidents):
node `n00012`, GPU `n00012-gpu3`, NIC `n00012-nic3`, optic `n00012-nic3-optic`,
NVSwitch `n00012-nvsw0`, PSU `n00012-psu1`, rack `rack0003`, cooling loop `rack0003-cdu`,
leaf `leaf-p2-r3` (pod 2, rail 3), spine `spine-r3-s1`, switch port `leaf-p2-r3:p17`,
link `link-n00012-nic3` (NIC to leaf) or `link-leaf-p2-r3-spine-r3-s1` (leaf to spine).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from vocab.ids import cooling_id, gpu_id, link_id, nic_id, nvswitch_id, optic_id, port_id, psu_id

GPUS_PER_NODE = 8
NICS_PER_NODE = 8  # fat-tree and dragonfly: NIC i on rail i
NVSWITCHES_PER_NODE = 4
PSUS_PER_NODE = 2
NODES_PER_RACK = 4  # ~40 kW racks of 8-GPU nodes
NODES_PER_POD = 32  # one leaf per rail per pod, 32 downlinks
SPINES_PER_RAIL_MAX = 32  # a leaf's 32 uplinks
TORUS_NICS_PER_NODE = 6  # +x -x +y -y +z -z
DRAGONFLY_NODES_PER_ROUTER = 4
DRAGONFLY_ROUTERS_PER_GROUP = 8

TOPOLOGIES = ("fat-tree", "torus", "dragonfly")


class TopologyError(ValueError):
    """A topology that cannot be built or loaded; the message names the bad entity or edge."""


@dataclass(slots=True)
class Topology:
    name: str
    gpus: int
    # entity ids per kind, in index order
    ids: dict[str, list[str]] = field(default_factory=dict)
    # attributes per entity id (only the interesting ones)
    attrs: dict[str, dict[str, str | int]] = field(default_factory=dict)
    edges: list[tuple[str, str, str]] = field(default_factory=list)  # (source, target, relation)
    # index arrays for the simulator
    gpu_node: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    nic_node: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    nic_rail: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    nic_switch: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # -1: none
    nvswitch_node: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    psu_node: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    node_rack: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    switch_role: list[str] = field(default_factory=list)  # per switch: leaf | spine
    # switch ports: owning switch and what is on the other end
    port_switch: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    port_peer_nic: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # -1: a switch
    port_peer_switch: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # -1: a NIC
    port_peer: list[str] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return len(self.ids.get(kind, ()))

    @property
    def switches(self) -> list[str]:
        return self.ids.get("switch", [])

    @property
    def entity_count(self) -> int:
        return sum(len(v) for v in self.ids.values())

    def kind_of(self, entity: str) -> str:
        return str(self.attrs[entity]["kind"])

    def to_json(self) -> dict[str, object]:
        """JSON node-link, as networkx's node_link_data writes it ("links" with "relation")."""
        nodes: list[dict[str, object]] = []
        for kind, ids in self.ids.items():
            for entity in ids:
                a = self.attrs.get(entity, {})
                nodes.append({"id": entity, **a} if "kind" in a else {"id": entity, "kind": kind, **a})
        return {
            "directed": True,
            "multigraph": False,
            "graph": {"topology": self.name, "gpus": self.gpus},
            "nodes": nodes,
            "links": [{"source": s, "target": t, "relation": r} for s, t, r in self.edges],
        }

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n")


def _ids(prefix: str, count: int, width: int) -> list[str]:
    return [f"{prefix}{i:0{width}d}" for i in range(count)]


class _Builder:
    """Collects entities and edges; keeps kinds in a fixed order so output is deterministic."""

    def __init__(self, name: str, gpus: int) -> None:
        self.t = Topology(name, gpus)

    def add(self, kind: str, ids: list[str], **attrs: Sequence[str | int] | str | int) -> None:
        """Register ids of one kind (switch roles share the kind "switch" in telemetry)."""
        bucket = "switch" if kind in ("leaf", "spine", "core") else kind
        self.t.ids.setdefault(bucket, []).extend(ids)
        for i, entity in enumerate(ids):
            record: dict[str, str | int] = {"kind": kind}
            for key, value in attrs.items():
                record[key] = value if isinstance(value, str | int) else value[i]
            self.t.attrs[entity] = record

    def edge(self, sources: list[str], targets: list[str], relation: str) -> None:
        self.t.edges.extend(zip(sources, targets, [relation] * len(sources), strict=True))


def _node_parts(b: _Builder, nodes: int, nics_per_node: int) -> tuple[list[str], list[str], list[str]]:
    """Nodes with GPUs, NVSwitches, NICs (+ optics), PSUs, racks and cooling loops."""
    t = b.t
    node_ids = _ids("n", nodes, 5)
    racks = -(-nodes // NODES_PER_RACK)
    rack_ids = _ids("rack", racks, 4)
    node_rack = np.arange(nodes) // NODES_PER_RACK
    b.add("rack", rack_ids)
    loops = [cooling_id(r) for r in rack_ids]
    b.add("cooling", loops, rack=rack_ids)
    b.add("node", node_ids, rack=[rack_ids[r] for r in node_rack])
    b.edge(rack_ids, loops, "cooled_by")
    b.edge(loops, rack_ids, "cools")
    b.edge([rack_ids[r] for r in node_rack], node_ids, "contains")
    t.node_rack = node_rack.astype(np.int64)

    def per_node(count: int, part: Callable[[str, int], str]) -> tuple[list[str], list[str], NDArray[np.int64]]:
        owner = np.repeat(np.arange(nodes), count)
        local = np.tile(np.arange(count), nodes)
        ids = [part(node_ids[n], i) for n, i in zip(owner.tolist(), local.tolist(), strict=True)]
        return ids, [node_ids[n] for n in owner], owner.astype(np.int64)

    gpus, gpu_owner, t.gpu_node = per_node(GPUS_PER_NODE, gpu_id)
    b.add("gpu", gpus, node=gpu_owner, index=np.tile(np.arange(GPUS_PER_NODE), nodes).tolist())
    b.edge(gpu_owner, gpus, "contains")
    nvsw, nvsw_owner, t.nvswitch_node = per_node(NVSWITCHES_PER_NODE, nvswitch_id)
    b.add("nvswitch", nvsw, node=nvsw_owner)
    b.edge(nvsw_owner, nvsw, "contains")
    for g, node in zip(gpus, gpu_owner, strict=True):  # every GPU reaches every NVSwitch of its node
        for s in range(NVSWITCHES_PER_NODE):
            t.edges.append((g, nvswitch_id(node, s), "connects"))
    psus, psu_owner, t.psu_node = per_node(PSUS_PER_NODE, psu_id)
    b.add("psu", psus, node=psu_owner)
    b.edge(psus, psu_owner, "powers")
    b.edge(psu_owner, psus, "contains")
    nics, nic_owner, t.nic_node = per_node(nics_per_node, nic_id)
    t.nic_rail = np.tile(np.arange(nics_per_node), nodes).astype(np.int64)
    b.add("nic", nics, node=nic_owner, rail=t.nic_rail.tolist())
    b.edge(nic_owner, nics, "contains")
    optics = [optic_id(n) for n in nics]
    b.add("optic", optics, nic=nics, node=nic_owner)
    b.edge(nics, optics, "contains")
    return node_ids, nics, optics


def _downlinks(b: _Builder, nics: list[str], optics: list[str], switch_of_nic: list[str], port_ids: list[str]) -> None:
    """Each NIC's cable: optic -> link -> the switch port it plugs into (ports index-aligned with
    NICs, which the simulator relies on)."""
    links = [link_id(n) for n in nics]
    b.add("port", port_ids, switch=switch_of_nic, peer=nics)
    b.add("link", links)
    b.edge(optics, links, "connects")
    b.edge(links, port_ids, "connects")
    b.edge(switch_of_nic, port_ids, "contains")


def build_fat_tree(gpus: int) -> Topology:
    """Rail-optimised fat-tree: NIC i of every node on rail i; per pod of 32 nodes one leaf per
    rail; per rail a plane of spines that every leaf of that rail connects to.

    Spine port counts are not capped: past 64 pods a real fabric adds a third tier, which the
    analyses here do not need."""
    nodes = _node_count(gpus)
    b = _Builder("fat-tree", gpus)
    t = b.t
    _, nics, optics = _node_parts(b, nodes, NICS_PER_NODE)
    pods = -(-nodes // NODES_PER_POD)
    spines_per_rail = max(1, min(SPINES_PER_RAIL_MAX, -(-pods // 2)))
    leaves = [f"leaf-p{p}-r{r}" for p in range(pods) for r in range(NICS_PER_NODE)]
    spines = [f"spine-r{r}-s{s}" for r in range(NICS_PER_NODE) for s in range(spines_per_rail)]
    b.add(
        "leaf",
        leaves,
        pod=[p for p in range(pods) for _ in range(NICS_PER_NODE)],
        rail=[r for _ in range(pods) for r in range(NICS_PER_NODE)],
    )
    b.add("spine", spines, rail=[r for r in range(NICS_PER_NODE) for _ in range(spines_per_rail)])
    t.switch_role = ["leaf"] * len(leaves) + ["spine"] * len(spines)
    switch_index = {s: i for i, s in enumerate(t.switches)}
    node_pod = np.arange(nodes) // NODES_PER_POD
    nic_leaf = node_pod[t.nic_node] * NICS_PER_NODE + t.nic_rail
    t.nic_switch = nic_leaf.astype(np.int64)
    # NIC downlinks: optic -> link -> leaf port
    local = np.arange(nodes) % NODES_PER_POD
    port_ids = [port_id(leaves[leaf], f"p{local[t.nic_node[i]]}") for i, leaf in enumerate(nic_leaf.tolist())]
    _downlinks(b, nics, optics, [leaves[x] for x in nic_leaf.tolist()], port_ids)
    # Uplinks: every leaf to every spine of its rail plane, a port on each end
    up_ports, up_switch, up_peer_switch, up_peer, up_links, spine_ports, spine_of = [], [], [], [], [], [], []
    for li, leaf in enumerate(leaves):
        rail = li % NICS_PER_NODE
        for s in range(spines_per_rail):
            spine = f"spine-r{rail}-s{s}"
            up_ports.append(port_id(leaf, f"u{s}"))
            up_switch.append(leaf)
            up_peer.append(spine)
            up_peer_switch.append(switch_index[spine])
            spine_ports.append(port_id(spine, f"p{li // NICS_PER_NODE}"))
            spine_of.append(spine)
            up_links.append(link_id(leaf, spine))
    b.add("port", up_ports, switch=up_switch, peer=up_peer)
    b.add("port", spine_ports, switch=spine_of, peer=up_switch)
    b.add("link", up_links)
    b.edge(up_switch, up_ports, "contains")
    b.edge(spine_of, spine_ports, "contains")
    b.edge(up_ports, up_links, "connects")
    b.edge(up_links, spine_ports, "connects")
    b.edge(up_switch, up_peer, "connects")
    t.port_switch = np.array(
        [switch_index[s] for s in [leaves[x] for x in nic_leaf.tolist()] + up_switch + spine_of], dtype=np.int64
    )
    t.port_peer_nic = np.concatenate([np.arange(len(nics)), np.full(2 * len(up_ports), -1)]).astype(np.int64)
    t.port_peer_switch = np.array(
        [-1] * len(nics) + up_peer_switch + [switch_index[s] for s in up_switch], dtype=np.int64
    )
    t.port_peer = nics + up_peer + up_switch
    return t


def build_torus(gpus: int) -> Topology:
    """3D torus: nodes on an X x Y x Z grid, six NICs each, cabled straight to the neighbours."""
    nodes = _node_count(gpus)
    dims = _grid3(nodes)
    b = _Builder("torus", gpus)
    t = b.t
    node_ids, nics, _ = _node_parts(b, nodes, TORUS_NICS_PER_NODE)
    t.nic_switch = np.full(len(nics), -1, dtype=np.int64)
    t.port_switch = t.port_peer_nic = t.port_peer_switch = np.zeros(0, dtype=np.int64)
    x, y, z = np.unravel_index(np.arange(nodes), dims)
    links: list[str] = []
    for axis, d in enumerate(dims):
        if d < 2:
            continue
        coords = [x.copy(), y.copy(), z.copy()]
        coords[axis] = (coords[axis] + 1) % d
        neighbour = np.ravel_multi_index(coords, dims)
        for a, nb in zip(range(nodes), neighbour.tolist(), strict=True):
            if d == 2 and a > nb:
                continue  # a ring of two has one cable, not two
            out_nic = nic_id(node_ids[a], 2 * axis)
            in_nic = nic_id(node_ids[nb], 2 * axis + 1)
            link = link_id(out_nic, in_nic)
            links.append(link)
            t.edges.append((optic_id(out_nic), link, "connects"))
            t.edges.append((link, optic_id(in_nic), "connects"))
    b.add("link", links)
    t.attrs[node_ids[0]]["grid"] = "x".join(str(d) for d in dims)
    return t


def build_dragonfly(gpus: int) -> Topology:
    """Dragonfly: routers of 4 nodes each, 8 routers a group wired all-to-all, and one global
    link from each router to a router of another group. Routers are leaf switches, groups are
    entities of kind `group`."""
    nodes = _node_count(gpus)
    b = _Builder("dragonfly", gpus)
    t = b.t
    _, nics, optics = _node_parts(b, nodes, NICS_PER_NODE)
    routers = -(-nodes // DRAGONFLY_NODES_PER_ROUTER)
    groups = -(-routers // DRAGONFLY_ROUTERS_PER_GROUP)
    router_ids = [
        f"leaf-g{r // DRAGONFLY_ROUTERS_PER_GROUP}-r{r % DRAGONFLY_ROUTERS_PER_GROUP}" for r in range(routers)
    ]
    group_ids = [f"group-{g}" for g in range(groups)]
    b.add("group", group_ids)
    b.add("leaf", router_ids, group=[group_ids[r // DRAGONFLY_ROUTERS_PER_GROUP] for r in range(routers)])
    b.edge(router_ids, [group_ids[r // DRAGONFLY_ROUTERS_PER_GROUP] for r in range(routers)], "member_of")
    t.switch_role = ["leaf"] * routers
    nic_router = t.nic_node // DRAGONFLY_NODES_PER_ROUTER
    t.nic_switch = nic_router.astype(np.int64)
    slot = (t.nic_node % DRAGONFLY_NODES_PER_ROUTER) * NICS_PER_NODE + t.nic_rail
    port_ids = [port_id(router_ids[r], f"p{s}") for r, s in zip(nic_router.tolist(), slot.tolist(), strict=True)]
    _downlinks(b, nics, optics, [router_ids[r] for r in nic_router.tolist()], port_ids)
    inter: list[tuple[int, int]] = []
    for r in range(routers):
        g, local = divmod(r, DRAGONFLY_ROUTERS_PER_GROUP)
        for other in range(local + 1, DRAGONFLY_ROUTERS_PER_GROUP):
            peer = g * DRAGONFLY_ROUTERS_PER_GROUP + other
            if peer < routers:
                inter.append((r, peer))
        if groups > 1:  # one global link to the same-position router of the next group
            peer = ((g + 1) % groups) * DRAGONFLY_ROUTERS_PER_GROUP + local
            if peer < routers and (groups > 2 or g == 0):
                inter.append((r, peer))
    ports_a = [port_id(router_ids[a], f"x{b_}") for a, b_ in inter]
    ports_b = [port_id(router_ids[b_], f"x{a}") for a, b_ in inter]
    inter_links = [link_id(router_ids[a], router_ids[b_]) for a, b_ in inter]
    b.add("port", ports_a, switch=[router_ids[a] for a, _ in inter], peer=[router_ids[x] for _, x in inter])
    b.add("port", ports_b, switch=[router_ids[x] for _, x in inter], peer=[router_ids[a] for a, _ in inter])
    b.add("link", inter_links)
    b.edge([router_ids[a] for a, _ in inter], ports_a, "contains")
    b.edge([router_ids[x] for _, x in inter], ports_b, "contains")
    b.edge(ports_a, inter_links, "connects")
    b.edge(inter_links, ports_b, "connects")
    b.edge([router_ids[a] for a, _ in inter], [router_ids[x] for _, x in inter], "connects")
    t.port_switch = np.array(nic_router.tolist() + [a for a, _ in inter] + [x for _, x in inter], dtype=np.int64)
    t.port_peer_nic = np.concatenate([np.arange(len(nics)), np.full(2 * len(inter), -1)]).astype(np.int64)
    t.port_peer_switch = np.array([-1] * len(nics) + [x for _, x in inter] + [a for a, _ in inter], dtype=np.int64)
    t.port_peer = nics + [router_ids[x] for _, x in inter] + [router_ids[a] for a, _ in inter]
    return t


def build(topology: str, gpus: int) -> Topology:
    builders = {"fat-tree": build_fat_tree, "torus": build_torus, "dragonfly": build_dragonfly}
    if topology not in builders:
        raise TopologyError(f"unknown topology {topology!r}; choose one of {', '.join(TOPOLOGIES)}")
    return builders[topology](gpus)


def _node_count(gpus: int) -> int:
    if gpus < GPUS_PER_NODE or gpus % GPUS_PER_NODE:
        raise TopologyError(f"--gpus must be a positive multiple of {GPUS_PER_NODE}, got {gpus}")
    return gpus // GPUS_PER_NODE


def _grid3(nodes: int) -> tuple[int, int, int]:
    """The most cube-like X x Y x Z with X*Y*Z == nodes."""
    best = (nodes, 1, 1)
    for x in range(1, round(nodes ** (1 / 3)) + 2):
        if nodes % x:
            continue
        rest = nodes // x
        for y in range(x, int(rest**0.5) + 1):
            if rest % y == 0:
                z = rest // y
                if max(x, y, z) - min(x, y, z) < max(best) - min(best):
                    best = (x, y, z)
    return best
