"""From a fabric as ibnetdiscover describes it to the project's topology, and what is wrong with it.

Roles come from the fabric's own shape, never from names: a *leaf* is a switch with hosts on it,
a *spine* a switch of switches with a leaf below it, the *core* what sits above the spines. Hosts
and their HCA index come from the node description (`o0001 HCA-1`, `worker20 mlx5_3`) or from the
node-name map; a SHARP aggregation node is a CA but no host. Rails: in a rail-optimised fat tree
every leaf carries one HCA index of all its hosts; a rail is numbered by the order of the HCA
indices in use, and a leaf's rail is what most of its HCAs are. NIC ids follow the project's
scheme, `<host>-nic<rail>`; an HCA with no host name keeps a GUID-based id, and is reported.

Findings, each with the entity, what is wrong and the fix: a leaf carrying HCAs of several rails,
an HCA on another rail's leaf, a link below the fabric's common width or speed, a host missing
HCAs the others have, an unnamed HCA, a leaf with no uplink; and what the input says that is not
taken: a host name outside the id grammar (`vocab.ids.node_refusal`: a node description is set by
root on any host, `n[0000-0015] mlx5_0` would name sixteen nodes to Slurm), a switch name outside
it (`entity_refusal`), a GUID described twice, two switches under one name, a host with more HCAs
than a node has (`context.bounds.MAX_NICS_PER_NODE`).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from context.bounds import MAX_NICS_PER_NODE
from context.ibnetdiscover import Cable, Fabric, FabricNode
from vocab.ids import entity_refusal, node_refusal, shown

# "host mlx5_3" (index 3), "host HCA-1" (the first: index 0), "host HCA" (one, index 0)
_HCA = re.compile(r"^(?P<host>\S+)\s+(?:mlx\d+_(?P<mlx>\d+)|HCA-?(?P<hca>\d+)?)\s*$", re.IGNORECASE)
AGGREGATION_NODE = "Aggregation Node"  # SHARP's in-network reduction engines: CAs, not hosts
# more than this share of HCAs on a leaf of their own rail, and a fabric is taken for rail-optimised
# (NVIDIA's DGX SuperPOD reference architecture cables HCA i of every node to rail i's leaf)
RAIL_OPTIMISED_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    entity: str
    message: str
    fix: str


@dataclass(slots=True)
class Hca:
    guid: int
    host: str | None  # None: the fabric does not say whose it is
    index: int | None  # the HCA's own number on its host (mlx5_N, HCA-N)
    rail: int = 0
    nic: str = ""
    refused: str = ""  # the host name its description gave and why the grammar refused it


@dataclass(slots=True)
class FabricTopology:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    leaf_hosts: dict[str, list[str]] = field(default_factory=dict)  # leaf -> its hosts

    def node_link(self) -> dict[str, Any]:
        return {
            "directed": True,
            "multigraph": False,
            "graph": {"source": "ibnetdiscover"},
            "nodes": self.nodes,
            "links": self.links,
        }

    def report(self) -> dict[str, Any]:
        return {"counts": self.counts, "findings": [asdict(f) for f in self.findings]}


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# a managed Mellanox/NVIDIA switch describes itself "MF0;<host name>:<model>/U1"
_MANAGED = re.compile(r"^MF0;([^:]+):")
_VENDOR_WORDS = re.compile(r"Mellanox|Voltaire|Infiniscale|SwitchIB|Quantum|Technologies|MT\d{4}")


@dataclass(slots=True)
class _Shape:
    """The fabric as the entity and finding passes read it: who is what, and what hangs where."""

    fabric: Fabric
    switches: dict[int, FabricNode]
    hcas: dict[int, Hca]
    by_host: dict[str, list[Hca]]
    ids: dict[int, str]  # switch GUID -> its id
    role: dict[int, str]  # switch GUID -> leaf | spine | core
    leaf_rail: dict[int, int]
    neighbours: dict[int, list[tuple[int, Cable]]]
    rail_optimised: bool

    @property
    def leaves(self) -> set[int]:
        return {g for g, r in self.role.items() if r == "leaf"}


def _switch_id(node: FabricNode, names: dict[int, str]) -> str:
    """A switch's own name when it has one a person would use (the node-name map's, its managed
    host name, a plain description), else the name ibnetdiscover gave it ("S-<GUID>")."""
    for given in (names.get(node.guid, ""), node.description):
        text = " ".join(given.split())
        if m := _MANAGED.match(text):
            text = m.group(1)
        if text and _NAME.match(text) and not _VENDOR_WORDS.search(text) and entity_refusal(text) is None:
            return text
    return node.name if _NAME.match(node.name) and entity_refusal(node.name) is None else f"S-{node.guid:016x}"


def _hca(node: FabricNode, names: dict[int, str], mapped: set[str]) -> Hca:
    """The HCA's host and index from the node-name map, else its node description; a host name
    the grammar refuses names no host (the HCA keeps its GUID id) and says why."""
    refused = ""
    for text in (names.get(node.guid, ""), node.description):
        m = _HCA.match(" ".join(text.split()))
        host = m.group("host") if m else text.strip() if text and text in mapped and " " not in text.strip() else ""
        if not host:
            continue
        if problem := node_refusal(host):
            refused = refused or f"{shown(host)}: {problem}"
            continue
        if m is None:
            return Hca(node.guid, host, None)  # a map that names hosts, not HCAs
        index = m.group("mlx") or m.group("hca")
        number = None if index is None else int(index) - (1 if m.group("hca") else 0)
        return Hca(node.guid, host, number)
    return Hca(node.guid, None, None, refused=refused)


def build(fabric: Fabric, names: dict[int, str] | None = None) -> FabricTopology:
    names = names or {}
    out = FabricTopology()
    switches = {g: n for g, n in fabric.nodes.items() if n.type == "switch"}
    cas = {g: n for g, n in fabric.nodes.items() if n.type == "ca"}
    aggregation = {g for g, n in cas.items() if AGGREGATION_NODE in n.description}
    mapped = set(names.values())
    hcas = {g: _hca(n, names, mapped) for g, n in cas.items() if g not in aggregation}
    neighbours: dict[int, list[tuple[int, Cable]]] = defaultdict(list)
    for c in fabric.cables:
        if c.a[0] != c.b[0]:
            neighbours[c.a[0]].append((c.b[0], c))
            neighbours[c.b[0]].append((c.a[0], c))

    # roles from the shape: hosts below leaves, spines above leaves, the core above spines
    leaves = {g for g in switches if any(p in hcas for p, _ in neighbours[g])}
    spines = {g for g in switches if g not in leaves and any(p in leaves for p, _ in neighbours[g])}
    cores = set(switches) - leaves - spines
    ids = {g: _switch_id(n, names) for g, n in switches.items()}
    out.findings += [Finding(n.kind, n.entity, n.message, n.fix) for n in fabric.notes]
    out.findings += [Finding(n.kind, n.entity, n.message, n.fix) for n in getattr(names, "notes", ())]
    for g in sorted(switches):
        given = " ".join(names.get(g, "").split())
        if given and (problem := entity_refusal(given)) is not None:
            out.findings.append(
                Finding(
                    "invalid_name",
                    ids[g],
                    f"the node-name map names switch 0x{g:016x} {shown(given)}, refused: {problem}; it is {ids[g]}",
                    "give it a name of letters, digits, '.', '_' and '-' in the node-name map",
                )
            )
    out.findings += _unique(ids)

    # HCA indices in use, in order, are the rails; HCAs without an index are their host's only one
    by_host: dict[str, list[Hca]] = defaultdict(list)
    for h in hcas.values():
        if h.host is not None:
            by_host[h.host].append(h)
    for members in by_host.values():
        if len(members) == 1 and members[0].index is None:
            members[0].index = 0
        for n, h in enumerate(sorted((m for m in members if m.index is None), key=lambda m: m.guid)):
            h.index = n  # several HCAs without their numbers: by GUID, as the OS enumerates them
    order = sorted({h.index for h in hcas.values() if h.index is not None})
    rail_of_index = {index: rail for rail, index in enumerate(order)}
    for h in hcas.values():
        h.rail = rail_of_index.get(h.index if h.index is not None else -1, 0)
        h.nic = f"{h.host}-nic{h.rail}" if h.host is not None else f"H-{h.guid:016x}"
    leaf_rail: dict[int, int] = {}
    aligned = cabled = 0
    for g in leaves:
        rails = Counter(hcas[p].rail for p, _ in neighbours[g] if p in hcas)
        leaf_rail[g], most = rails.most_common(1)[0]
        aligned, cabled = aligned + most, cabled + sum(rails.values())
    # rail-optimised when every rail has leaves of its own (it is what most HCAs on some leaf are)
    # and most HCAs sit on a leaf of their rail (cabling mistakes aside); a fabric whose leaves
    # each carry every HCA index is not, and there rails say nothing of cabling
    own_leaves = set(leaf_rail.values()) == set(range(len(order)))
    rail_optimised = len(order) > 1 and own_leaves and aligned > RAIL_OPTIMISED_SHARE * cabled

    out.counts = {
        "switches": {"leaf": len(leaves), "spine": len(spines), "core": len(cores)},
        "hosts": len(by_host),
        "hcas": len(hcas),
        "aggregation_nodes": len(aggregation),
        "cables": sum(1 for c in fabric.cables if c.a[0] != c.b[0]),
        "rails": len(order) or (1 if hcas else 0),
        "rail_optimised": rail_optimised,
    }
    role = {**dict.fromkeys(leaves, "leaf"), **dict.fromkeys(spines, "spine"), **dict.fromkeys(cores, "core")}
    shape = _Shape(fabric, switches, hcas, by_host, ids, role, leaf_rail, neighbours, rail_optimised)
    _entities(out, shape)
    _findings(out, shape)
    return out


def _unique(ids: dict[int, str]) -> list[Finding]:
    """Two switches with one name (a default description left on both) keep their GUIDs apart,
    and are reported: neither wins the name."""
    counts = Counter(ids.values())
    out = []
    for g, name in sorted(ids.items()):
        if counts[name] > 1:
            ids[g] = f"{name}-{g:016x}"
            out.append(
                Finding(
                    "duplicate_name",
                    ids[g],
                    f"{counts[name]} switches are named {name}; switch 0x{g:016x} is {ids[g]}",
                    "give each switch its own name (the node-name map, or its node description)",
                )
            )
    return out


def _entities(out: FabricTopology, shape: _Shape) -> None:
    fabric, switches, hcas, by_host = shape.fabric, shape.switches, shape.hcas, shape.by_host
    ids, role, leaf_rail, neighbours = shape.ids, shape.role, shape.leaf_rail, shape.neighbours
    add_node, add_link = out.nodes.append, out.links.append
    for g in switches:
        kind = "spine" if role[g] in ("spine", "core") else "leaf"  # the graph's kinds: a core is a spine above
        attrs: dict[str, Any] = {"id": ids[g], "kind": kind, "role": role[g], "guid": f"0x{g:016x}"}
        if g in leaf_rail:
            attrs["rail"] = leaf_rail[g]
        add_node(attrs)
    for host in sorted(by_host):
        add_node({"id": host, "kind": "node"})
    for h in sorted(hcas.values(), key=lambda h: h.nic):
        attrs = {"id": h.nic, "kind": "nic", "rail": h.rail, "guid": f"0x{h.guid:016x}"}
        if h.host is not None:
            attrs["node"] = h.host
            add_link({"source": h.host, "target": h.nic, "relation": "contains"})
        add_node(attrs)
        add_node({"id": f"{h.nic}-optic", "kind": "optic", "nic": h.nic, **({"node": h.host} if h.host else {})})
        add_link({"source": h.nic, "target": f"{h.nic}-optic", "relation": "contains"})
    ports: set[str] = set()
    link_ids: Counter[str] = Counter()
    # a leaf's uplinks are u0, u1, ... in the order of their port numbers; every other port is
    # p<physical port - 1> (physical port 1 is p0), as the project's generated fabrics name them
    uplink_rank: dict[int, dict[int, int]] = {}
    for g in switches:
        if role[g] == "leaf":
            up = sorted(
                {mine for c in fabric.cables for (mine_g, mine), (other, _) in ((c.a, c.b), (c.b, c.a))
                 if mine_g == g and other in switches and other != g}
            )  # fmt: skip
            uplink_rank[g] = {number: rank for rank, number in enumerate(up)}

    def port(g: int, number: int, peer: str, upward: bool = False) -> str:
        name = f"u{uplink_rank[g][number]}" if upward and g in uplink_rank else f"p{number - 1}" if number else "m0"
        pid = f"{ids[g]}:{name}"
        if pid not in ports:
            ports.add(pid)
            add_node({"id": pid, "kind": "port", "switch": ids[g], "peer": peer})
            add_link({"source": ids[g], "target": pid, "relation": "contains"})
        return pid

    tier = {"leaf": 0, "spine": 1, "core": 2}
    paired: set[tuple[str, str]] = set()
    for c in fabric.cables:
        (ga, pa), (gb, pb) = c.a, c.b
        if ga == gb:
            continue  # a port cabled back to its own switch (a loopback plug): no path of the fabric
        speed = {"width": c.width, "speed": c.speed}
        if ga in hcas or gb in hcas:
            (hg, _), (sg, sp) = (c.a, c.b) if ga in hcas else (c.b, c.a)
            if sg not in switches:
                continue  # two CAs back to back: no switch to place
            nic = hcas[hg].nic
            link = f"link-{nic}"
            add_node({"id": link, "kind": "link", **speed})
            add_link({"source": f"{nic}-optic", "target": link, "relation": "connects"})
            add_link({"source": link, "target": port(sg, sp, nic), "relation": "connects"})
        elif ga in switches and gb in switches:
            # the lower tier first: leaf to spine, spine to core
            low, high = sorted([(tier[role[ga]], ids[ga], ga, pa), (tier[role[gb]], ids[gb], gb, pb)])
            base = f"link-{low[1]}-{high[1]}"
            link_ids[base] += 1
            link = base if link_ids[base] == 1 else f"{base}-{link_ids[base]}"
            add_node({"id": link, "kind": "link", **speed})
            add_link({"source": port(low[2], low[3], high[1], upward=True), "target": link, "relation": "connects"})
            add_link({"source": link, "target": port(high[2], high[3], low[1]), "relation": "connects"})
            if (low[1], high[1]) not in paired:  # the switches themselves, once per pair
                paired.add((low[1], high[1]))
                add_link({"source": low[1], "target": high[1], "relation": "connects"})
    for g, kind in role.items():
        if kind == "leaf":
            out.leaf_hosts[ids[g]] = sorted({hcas[p].host or hcas[p].nic for p, _ in neighbours[g] if p in hcas})


def _findings(out: FabricTopology, shape: _Shape) -> None:
    fabric, switches, hcas, by_host, ids = shape.fabric, shape.switches, shape.hcas, shape.by_host, shape.ids
    leaves, leaf_rail, neighbours, rail_optimised = (
        shape.leaves,
        shape.leaf_rail,
        shape.neighbours,
        shape.rail_optimised,
    )
    add = out.findings.append
    inter_switch = any(c.a[0] in switches and c.b[0] in switches and c.a[0] != c.b[0] for c in fabric.cables)
    for g in sorted(leaves, key=lambda g: ids[g]):
        on_leaf = [hcas[p] for p, _ in neighbours[g] if p in hcas]
        wrong = [h for h in on_leaf if h.rail != leaf_rail[g]]
        if rail_optimised and wrong:
            add(
                Finding(
                    "mixed_rails",
                    ids[g],
                    f"{ids[g]} carries HCAs of rails {sorted({h.rail for h in on_leaf})}, mostly rail {leaf_rail[g]}",
                    "move each cable to the leaf of its HCA's rail",
                )
            )
            for h in sorted(wrong, key=lambda h: h.nic):
                add(
                    Finding(
                        "wrong_rail",
                        h.nic,
                        f"{h.nic} (rail {h.rail}) is cabled to {ids[g]}, a leaf of rail {leaf_rail[g]}",
                        f"move its cable to a leaf of rail {h.rail}",
                    )
                )
        # (only when the description shows switch-to-switch cables at all: hosts' LLDP does not)
        if inter_switch and not any(p in switches for p, _ in neighbours[g]):
            add(
                Finding(
                    "no_uplink",
                    ids[g],
                    f"{ids[g]} has hosts but no cable to another switch",
                    "cable its uplinks; its hosts reach nothing beyond it",
                )
            )
    for cls, pick in (("host", True), ("switch", False)):
        cables = [c for c in fabric.cables if c.a[0] != c.b[0] and (c.a[0] in hcas or c.b[0] in hcas) == pick]
        if not cables:
            continue
        width = Counter(c.width for c in cables).most_common(1)[0][0]
        speed = Counter(c.speed for c in cables).most_common(1)[0][0]
        for c in cables:
            if c.width != width or c.speed != speed:
                entity = _cable_entity(c, hcas, ids)
                add(
                    Finding(
                        "degraded_link",
                        entity,
                        f"{entity} runs at {c.width}{c.speed}, the fabric's {cls} links at {width}{speed}",
                        "reseat or replace the cable (or transceiver); check both ports",
                    )
                )
    counts = Counter(len(m) for m in by_host.values())
    if counts:
        usual = counts.most_common(1)[0][0]
        for host, members in sorted(by_host.items()):
            if len(members) < usual:
                have = sorted(h.rail for h in members)
                add(
                    Finding(
                        "missing_hca",
                        host,
                        f"{host} shows {len(members)} HCAs on the fabric, its peers {usual} (rails present: {have})",
                        "check the HCAs' links and firmware; a port may be down",
                    )
                )
    for host, members in sorted(by_host.items()):
        if len(members) > MAX_NICS_PER_NODE:
            add(
                Finding(
                    "too_many_hcas",
                    host,
                    f"{len(members)} HCAs name {host} as their host; a node has at most {MAX_NICS_PER_NODE}",
                    "check the HCAs' node descriptions: several hosts may share one name",
                )
            )
    for h in sorted(hcas.values(), key=lambda h: h.guid):
        if h.host is None and h.refused:
            add(
                Finding(
                    "invalid_name",
                    h.nic,
                    f"HCA {h.nic}'s host name {h.refused}",
                    "set a plain host name in its node description (rdma-ndd) or map its GUID in the node-name map",
                )
            )
        elif h.host is None:
            add(
                Finding(
                    "unnamed_hca",
                    h.nic,
                    f"HCA {h.nic} has no host name in its node description",
                    "set its node description (rdma-core's rdma-ndd does) or add it to the node-name map",
                )
            )


def _cable_entity(c: Cable, hcas: dict[int, Hca], ids: dict[int, str]) -> str:
    for g, _ in (c.a, c.b):
        if g in hcas:
            return f"link-{hcas[g].nic}"
    (ga, _), (gb, _) = c.a, c.b
    low, high = sorted([ids.get(ga, f"{ga:x}"), ids.get(gb, f"{gb:x}")])
    return f"link-{low}-{high}"


__all__ = ["FabricTopology", "Finding", "build"]
