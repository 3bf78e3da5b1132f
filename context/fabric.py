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
than a node has (`vocab.bounds.MAX_NICS_PER_NODE`).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from context.ibnetdiscover import Cable, Fabric, FabricNode
from vocab.bounds import MAX_NICS_PER_NODE
from vocab.ids import entity_refusal, link_id, nic_id, node_refusal, optic_id, port_id, shown

# "host mlx5_3" (index 3), "host HCA-1" (the first: index 0), "host HCA" (one, index 0), and the
# netdev name systemd gives an IB port by its PCI address, "host ibp24s0" (bus 24, slot 0): no index
# of its own, its rail comes from the leaves it shares with HCAs that have one
_HCA = re.compile(
    r"^(?P<host>\S+)\s+(?:mlx\d+_(?P<mlx>\d+)|HCA-?(?P<hca>\d+)?|ibp(?P<bus>\d+)s(?P<slot>\d+)(?:f\d+)?(?:np\d+)?)\s*$",
    re.IGNORECASE,
)
AGGREGATION_NODE = "Aggregation Node"  # SHARP's in-network reduction engines: CAs, not hosts
# A SHARP aggregation node is a CA inside its switch, on the switch's last internal port (37 on
# Switch-IB 2, 81 on Quantum, 65 as ibdiagnet prints Quantum-2): its node GUID is the switch's plus
# 8 (b0cf0e0300e5b940 and ...948 in an ibdiagnet 2.10 file; 946dae0300630bf6 and ...bfe in an
# `ibnetdiscover -p` of an HDR fabric) and it shares the switch's system image GUID. A node-name
# map renames its description, never these: a CA cabled to a switch within this distance of its
# GUID, or of one box with it, is the switch's, not a host's. A host's HCA has GUIDs of its own
# vendor block, never a switch's.
AGGREGATION_GUID_SPAN = 16
# more than this share of HCAs on a leaf of their own rail, and a fabric is taken for rail-optimised
# (NVIDIA's DGX SuperPOD reference architecture cables HCA i of every node to rail i's leaf)
RAIL_OPTIMISED_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    entity: str
    message: str
    fix: str
    evidence: tuple[str, ...] = ()  # the input's lines that made it (`file:line: text`)


# What each finding costs the site, in the order the report ranks them (a stated operational
# choice, from what each takes away: a leaf without uplinks cuts all its hosts off their rail; a
# crossed rail makes a rail-optimised all-reduce leave the rail through the spines on both rails,
# halving it; a missing HCA takes a host out of jobs that need all its GPUs). "note": the input is
# unclear, the fabric may be fine.
COSTS: dict[str, tuple[str, str]] = {
    "no_uplink": ("problem", "every host on the leaf is cut off from the rest of its rail"),
    "crossed_cables": (
        "problem",
        "two rails cross: a rail-optimised all-reduce on them goes through the spines, at half its bandwidth",
    ),
    "wrong_rail": (
        "problem",
        "one HCA's traffic leaves its rail through the spines: a rail-optimised all-reduce slows to it",
    ),
    "duplicate_guid": ("problem", "the subnet manager routes to one of the two devices only: the other is unreachable"),
    "duplicate_port": (
        "problem",
        "a port cabled to two peers: one of the two cables is not where the records say, nor are paths through it",
    ),
    "missing_hca": ("problem", "the host cannot take jobs that need all its HCAs (large jobs)"),
    "not_on_fabric": ("problem", "the host takes no fabric traffic"),
    "degraded_link": ("problem", "one link at a fraction of its bandwidth: collectives through it slow down"),
    "slow_links": ("note", "links slower than the fabric's usual speed: older adapters, or a fault to check"),
    "too_many_hcas": ("note", "host names shared by several hosts: their HCAs cannot be told apart"),
    "duplicate_name": ("note", "two switches under one name: each keeps its GUID in its id"),
    "invalid_name": ("note", "a host name the id grammar refuses: the HCA keeps its GUID id"),
    "duplicate_device": ("note", "an inventory row listed twice: the first stands"),
    "not_in_inventory": ("note", "the host's racks, PSUs and GPUs are unknown"),
    "unnamed_hcas": ("note", "HCAs whose host is unknown: their faults name a GUID, not a host"),
}
_RANK = {kind: n for n, kind in enumerate(COSTS)}


def ranked(findings: list[Finding]) -> list[Finding]:
    """Problems first, by what they cost; then notes (stable within a kind)."""
    return sorted(findings, key=lambda f: _RANK.get(f.kind, len(_RANK)))


@dataclass(slots=True)
class Hca:
    guid: int
    host: str | None  # None: the fabric does not say whose it is
    index: int | None  # the HCA's own number on its host (mlx5_N, HCA-N)
    rail: int = 0
    nic: str = ""
    refused: str = ""  # the host name its description gave and why the grammar refused it
    bus: int | None = None  # ibp<bus>s<slot>: the PCI address its netdev name carries
    named: bool = False  # its rail comes from its name (else from the leaf it is cabled to)
    placed: str = ""  # how its host is known: "" (its name or the map) or "cabling"


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
        """The counts, a summary (problems, then notes, by kind) and every finding, ranked by cost."""
        findings = ranked(self.findings)
        summary: dict[str, dict[str, int]] = {"problems": {}, "notes": {}}
        for f in findings:
            side = "notes" if COSTS.get(f.kind, ("problem", ""))[0] == "note" else "problems"
            summary[side][f.kind] = summary[side].get(f.kind, 0) + 1
        return {
            "counts": self.counts,
            "summary": summary,
            "findings": [
                {**asdict(f), "evidence": list(f.evidence), "severity": COSTS.get(f.kind, ("problem", ""))[0],
                 "cost": COSTS.get(f.kind, ("", ""))[1]}
                for f in findings
            ],
        }  # fmt: skip


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
    leaf_of: dict[int, tuple[int, int]]

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
        if m.group("bus") is not None:
            return Hca(node.guid, host, None, bus=int(m.group("bus")) * 256 + int(m.group("slot")), named=True)
        index = m.group("mlx") or m.group("hca")
        number = None if index is None else int(index) - (1 if m.group("hca") else 0)
        return Hca(node.guid, host, number, named=True)
    return Hca(node.guid, None, None, refused=refused)


def _inside_switches(fabric: Fabric, switches: dict[int, FabricNode]) -> set[int]:
    """CAs that are part of the switch they are cabled to (SHARP aggregation nodes), by GUID."""
    out = set()
    for c in fabric.cables:
        for (ca, _), (sw, _) in ((c.a, c.b), (c.b, c.a)):
            node = fabric.nodes.get(ca)
            if node is None or node.type != "ca" or sw not in switches:
                continue
            same_box = node.system != 0 and node.system == switches[sw].system
            if same_box or abs(ca - sw) < AGGREGATION_GUID_SPAN:
                out.add(ca)
    return out


def build(fabric: Fabric, names: dict[int, str] | None = None) -> FabricTopology:
    names = names or {}
    out = FabricTopology()
    switches = {g: n for g, n in fabric.nodes.items() if n.type == "switch"}
    cas = {g: n for g, n in fabric.nodes.items() if n.type == "ca"}
    aggregation = {g for g, n in cas.items() if AGGREGATION_NODE in n.description} | _inside_switches(fabric, switches)
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
    out.findings += [Finding(n.kind, n.entity, n.message, n.fix, n.evidence) for n in fabric.notes]
    out.findings += [Finding(n.kind, n.entity, n.message, n.fix, n.evidence) for n in getattr(names, "notes", ())]
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

    # the HCAs' own numbers, from their names: an HCA without one is its host's only one, or they
    # are numbered by GUID, as the OS enumerates them
    by_host: dict[str, list[Hca]] = defaultdict(list)
    for h in hcas.values():
        if h.host is not None:
            by_host[h.host].append(h)
    for members in by_host.values():
        if len(members) == 1 and members[0].index is None and members[0].bus is None:
            members[0].index = 0
        unnumbered = [m for m in members if m.index is None and m.bus is None]
        for n, h in enumerate(sorted(unnumbered, key=lambda m: m.guid)):
            h.index = n
    leaf_of: dict[int, tuple[int, int]] = {}  # HCA GUID -> (leaf, leaf port) of its first cable
    for g in sorted(leaves):
        for p, c in neighbours[g]:
            if p in hcas and p not in leaf_of:
                leaf_of[p] = (g, c.a[1] if c.a[0] == g else c.b[1])
    rail_of_key, rails = _rails(hcas, leaves, neighbours)
    for h in hcas.values():
        key = _key(h)
        h.rail = rail_of_key[key] if key is not None else 0
    leaf_rail: dict[int, int] = {}
    aligned = cabled = 0
    for g in leaves:
        known = Counter(hcas[p].rail for p, _ in neighbours[g] if p in hcas and _key(hcas[p]) is not None)
        if known:
            leaf_rail[g], most = known.most_common(1)[0]
            aligned, cabled = aligned + most, cabled + sum(known.values())
    # rail-optimised when every rail has leaves of its own (it is what most HCAs on some leaf are)
    # and most HCAs sit on a leaf of their rail (cabling mistakes aside); a fabric whose leaves
    # each carry every HCA index is not, and there rails say nothing of cabling
    own_leaves = set(leaf_rail.values()) == set(range(rails))
    rail_optimised = rails > 1 and own_leaves and aligned > RAIL_OPTIMISED_SHARE * cabled
    if rail_optimised:
        _rails_of_bare_leaves(leaves, switches, neighbours, leaf_rail)
    # an HCA whose name gives no rail is on its leaf's rail; its host, when its name gives none, is
    # the one whose HCAs sit at the same port of the leaves its neighbours share (DGX SuperPOD
    # cabling: HCA i of the n-th node of a scalable unit on port n of rail i's leaf), if that host
    # lacks this rail, else it stays unknown
    for h in hcas.values():
        if _key(h) is None and h.guid in leaf_of:
            h.rail = leaf_rail.get(leaf_of[h.guid][0], 0) if rail_optimised else 0
    if rail_optimised:
        _place_by_cabling(hcas, by_host, leaf_of, leaf_rail)
    for h in hcas.values():
        h.nic = nic_id(h.host, h.rail) if h.host is not None else f"H-{h.guid:016x}"
    out.counts = {
        "switches": {"leaf": len(leaves), "spine": len(spines), "core": len(cores)},
        "hosts": len(by_host),
        "hcas": len(hcas),
        "aggregation_nodes": len(aggregation),
        "cables": sum(1 for c in fabric.cables if c.a[0] != c.b[0]),
        "rails": rails or (1 if hcas else 0),
        "rail_optimised": rail_optimised,
    }
    role = {**dict.fromkeys(leaves, "leaf"), **dict.fromkeys(spines, "spine"), **dict.fromkeys(cores, "core")}
    shape = _Shape(fabric, switches, hcas, by_host, ids, role, leaf_rail, neighbours, rail_optimised, leaf_of)
    _entities(out, shape)
    _findings(out, shape)
    return out


def _key(h: Hca) -> tuple[str, int] | None:
    """What an HCA's name says of its rail: its number (mlx5_N, HCA-N) or its PCI bus (ibpXsY)."""
    if h.index is not None:
        return ("index", h.index)
    if h.bus is not None:
        return ("bus", h.bus)
    return None


def _rails(
    hcas: dict[int, Hca], leaves: set[int], neighbours: dict[int, list[tuple[int, Cable]]]
) -> tuple[dict[tuple[str, int], int], int]:
    """Rails from the names' keys: each key is a rail, in the order of the HCA numbers; where two
    naming conventions meet on one fabric (`mlx5_3` on some hosts, `ibp154s0` on others), the keys
    that are each convention's majority on the same leaf are one rail."""
    keys = sorted({k for h in hcas.values() if (k := _key(h)) is not None})
    parent = {k: k for k in keys}

    def find(k: tuple[str, int]) -> tuple[str, int]:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for g in sorted(leaves):
        majors = []
        for space in ("index", "bus"):
            seen = Counter(k for p, _ in neighbours[g] if p in hcas and (k := _key(hcas[p])) and k[0] == space)
            if seen:
                top, n = seen.most_common(1)[0]
                if 2 * n > sum(seen.values()):
                    majors.append(top)
        for k in majors[1:]:
            a, b = find(majors[0]), find(k)
            if a != b:
                parent[max(a, b)] = min(a, b)
    classes = sorted({find(k) for k in keys})
    number = {c: n for n, c in enumerate(classes)}
    return {k: number[find(k)] for k in keys}, len(classes)


def _rails_of_bare_leaves(
    leaves: set[int],
    switches: dict[int, FabricNode],
    neighbours: dict[int, list[tuple[int, Cable]]],
    leaf_rail: dict[int, int],
) -> None:
    """A leaf whose HCAs have no names takes the rail of the spine plane it is cabled to, when every
    other leaf under its spines is of one rail."""
    for g in sorted(leaves - set(leaf_rail)):
        spines = {p for p, _ in neighbours[g] if p in switches and p not in leaves}
        around = {leaf_rail[q] for s in spines for q, _ in neighbours[s] if q in leaf_rail}
        if len(around) == 1:
            leaf_rail[g] = around.pop()


def _place_by_cabling(
    hcas: dict[int, Hca],
    by_host: dict[str, list[Hca]],
    leaf_of: dict[int, tuple[int, int]],
    leaf_rail: dict[int, int],
) -> None:
    at: dict[tuple[int, int], str] = {}  # (leaf, port) -> the named host there
    leaves_of_host: dict[str, set[int]] = defaultdict(set)
    for host, members in by_host.items():
        for m in members:
            if m.guid in leaf_of:
                at[leaf_of[m.guid]] = host
                leaves_of_host[host].add(leaf_of[m.guid][0])
    hosts_on: dict[int, set[str]] = defaultdict(set)
    for host, ls in leaves_of_host.items():
        for g in ls:
            hosts_on[g].add(host)
    for h in sorted(hcas.values(), key=lambda h: h.guid):
        if h.host is not None or h.refused or h.guid not in leaf_of or leaf_of[h.guid][0] not in leaf_rail:
            continue
        g, port = leaf_of[h.guid]
        siblings = {s for host in hosts_on[g] for s in leaves_of_host[host]} - {g}
        there = {at[(s, port)] for s in siblings if (s, port) in at}
        if len(there) == 1:
            host = there.pop()
            if h.rail not in {m.rail for m in by_host[host]}:
                h.host, h.placed = host, "cabling"
                by_host[host].append(h)


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
        optic = optic_id(h.nic)
        add_node({"id": optic, "kind": "optic", "nic": h.nic, **({"node": h.host} if h.host else {})})
        add_link({"source": h.nic, "target": optic, "relation": "contains"})
    ports: set[str] = set()
    link_ids: Counter[str] = Counter()
    hca_links: Counter[str] = Counter()
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
        # a port the file labels (ibdiagnet's Quantum-2 `1/3/2`: ASIC 1, cage 3, port 2) keeps its label
        name = fabric.labels.get((g, number)) or (
            f"u{uplink_rank[g][number]}" if upward and g in uplink_rank else f"p{number - 1}" if number else "m0"
        )
        pid = port_id(ids[g], name)
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
            hca_links[nic] += 1  # a second cabled port of one HCA (dual-port cards) is its own link
            link = link_id(nic, n=hca_links[nic])
            split = fabric.labels.get((sg, sp), "").split("/")
            add_node({"id": link, "kind": "link", **speed, **({"split": int(split[3])} if len(split) == 4 else {})})
            add_link({"source": optic_id(nic), "target": link, "relation": "connects"})
            add_link({"source": link, "target": port(sg, sp, nic), "relation": "connects"})
        elif ga in switches and gb in switches:
            # the lower tier first: leaf to spine, spine to core
            low, high = sorted([(tier[role[ga]], ids[ga], ga, pa), (tier[role[gb]], ids[gb], gb, pb)])
            base = link_id(low[1], high[1])
            link_ids[base] += 1
            link = link_id(low[1], high[1], n=link_ids[base])
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
    leaves, neighbours, rail_optimised = shape.leaves, shape.neighbours, shape.rail_optimised
    add = out.findings.append
    inter_switch = any(c.a[0] in switches and c.b[0] in switches and c.a[0] != c.b[0] for c in fabric.cables)
    if rail_optimised:
        _crossed(out, shape)
    for g in sorted(leaves, key=lambda g: ids[g]):
        # (only when the description shows switch-to-switch cables at all: hosts' LLDP does not)
        if inter_switch and not any(p in switches for p, _ in neighbours[g]):
            add(
                Finding(
                    "no_uplink",
                    ids[g],
                    f"{ids[g]} has hosts but no cable to another switch",
                    "cable its uplinks; its hosts reach nothing beyond it",
                    _lines_of(shape, g),
                )
            )
    slow: list[tuple[str, Cable, str]] = []
    for cls, pick in (("host", True), ("switch", False)):
        cables = [c for c in fabric.cables if c.a[0] != c.b[0] and (c.a[0] in hcas or c.b[0] in hcas) == pick]
        if not cables:
            continue
        width = Counter(c.width for c in cables).most_common(1)[0][0]
        speed = Counter(c.speed for c in cables).most_common(1)[0][0]
        for c in cables:
            entity = _cable_entity(c, hcas, ids)
            if _lanes(c.width) < _lanes(width):  # a 4x cable trained on fewer lanes: a fault of the cable
                add(
                    Finding(
                        "degraded_link",
                        entity,
                        f"{entity} runs at {c.width}{c.speed}, the fabric's {cls} links at {width}{speed}",
                        "reseat or replace the cable (or transceiver); check both ports",
                        fabric.evidence(c),
                    )
                )
            elif _GENERATIONS.get(c.speed, 99) < _GENERATIONS.get(speed, 0):
                slow.append((entity, c, f"{c.width}{c.speed} (the fabric's {cls} links: {width}{speed})"))
    if slow:
        # ibnetdiscover shows the speed a link trained at, not what its ends support: an adapter of
        # an older generation (a DDR card on a QDR switch) trains at its own top speed, so a slower
        # link is a note to check, not a fault (width is: every adapter since SDR has 4 lanes)
        add(
            Finding(
                "slow_links",
                "fabric",
                f"{len(slow)} links run slower than the fabric's usual speed: "
                + ", ".join(f"{e} at {why}" for e, _, why in slow[:3]) + (", ..." if len(slow) > 3 else ""),
                "check the adapter (or switch) model at each end: an older generation trains at its own top "
                "speed; if both ends support more, reseat or replace the cable",
                tuple(line for _, c, _ in slow for line in fabric.evidence(c)),
            )
        )  # fmt: skip
    likely = _missing(out, shape)
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
    _unnamed(out, shape, likely)


# InfiniBand link speeds in the order of their generations (IBTA), as ibnetdiscover prints them
_GENERATIONS = {s: n for n, s in enumerate(("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR"))}


def _lanes(width: str) -> int:
    return int(width[:-1]) if width[:-1].isdigit() else 0


def _where(shape: _Shape, h: Hca) -> str:
    if h.guid not in shape.leaf_of:
        return "not cabled to a leaf"
    g, port = shape.leaf_of[h.guid]
    label = shape.fabric.labels.get((g, port))
    return f"{shape.ids[g]} port {label or port}"


def _lines_of(shape: _Shape, guid: int) -> tuple[str, ...]:
    """A node's lines of the dump: its block in the topology format (its node line, with the
    description that names it, and its port lines), its cables' lines in the -p format."""
    if guid in shape.fabric.blocks:
        return shape.fabric.block(guid)
    return tuple(dict.fromkeys(line for _, c in shape.neighbours[guid] for line in shape.fabric.evidence(c)))


def _cable(shape: _Shape, h: Hca) -> Cable | None:
    for _, c in shape.neighbours[h.guid]:
        return c
    return None


def _crossed(out: FabricTopology, shape: _Shape) -> None:
    """HCAs whose name gives their rail, on a leaf of another: two of one host, each on the other's
    rail, are one swapped pair; any other is one cable on the wrong leaf. A leaf is never blamed
    for an HCA whose rail is unknown."""
    hcas, leaf_rail = shape.hcas, shape.leaf_rail
    foreign: dict[int, tuple[int, int]] = {}  # HCA -> (its leaf, the leaf's rail)
    for guid, (g, _) in shape.leaf_of.items():
        h = hcas[guid]
        if _key(h) is not None and g in leaf_rail and h.rail != leaf_rail[g]:
            foreign[guid] = (g, leaf_rail[g])
    paired: set[int] = set()
    for guid in sorted(foreign, key=lambda x: hcas[x].nic):
        if guid in paired:
            continue
        h = hcas[guid]
        g, rail = foreign[guid]
        mate = next(
            (
                o for o in sorted(foreign, key=lambda x: hcas[x].nic)
                if o != guid and o not in paired and hcas[o].host is not None and hcas[o].host == h.host
                and hcas[o].rail == rail and foreign[o][1] == h.rail
            ),
            None,
        )  # fmt: skip
        cable = _cable(shape, h)
        evidence = shape.fabric.evidence(cable) if cable else ()
        if mate is not None:
            m = hcas[mate]
            paired |= {guid, mate}
            other = _cable(shape, m)
            evidence += shape.fabric.evidence(other) if other else ()
            out.findings.append(
                Finding(
                    "crossed_cables",
                    h.host or h.nic,
                    f"{h.host}'s cables of rails {h.rail} and {m.rail} are swapped: {h.nic} is on {_where(shape, h)} "
                    f"(a leaf of rail {rail}) and {m.nic} on {_where(shape, m)} "
                    f"(a leaf of rail {foreign[mate][1]})",
                    f"swap the two cables back: {h.nic} to a leaf of rail {h.rail}, {m.nic} to a leaf of rail {m.rail}",
                    evidence,
                )
            )
            continue
        out.findings.append(
            Finding(
                "wrong_rail",
                h.nic,
                f"{h.nic} (rail {h.rail}) is cabled to {_where(shape, h)}, a leaf of rail {rail}",
                f"move its cable to a leaf of rail {h.rail}",
                evidence,
            )
        )


def _missing(out: FabricTopology, shape: _Shape) -> dict[str, list[int]]:
    """A host with fewer HCAs than its peers is one finding, unless an HCA without a host name sits
    where its missing one would (a leaf of that rail among its own leaves' neighbours): then it is
    most likely that one, and the unnamed summary says so. Returns those hosts and their rails."""
    hcas, by_host, leaf_rail, leaf_of = shape.hcas, shape.by_host, shape.leaf_rail, shape.leaf_of
    counts = Counter(len(m) for m in by_host.values())
    likely: dict[str, list[int]] = {}
    if not counts:
        return likely
    usual = counts.most_common(1)[0][0]
    rails = set(leaf_rail.values())
    spare: dict[int, list[int]] = defaultdict(list)  # leaf -> ports of HCAs there whose host is unknown
    for h in hcas.values():
        if h.host is None and not h.refused and h.guid in leaf_of:
            spare[leaf_of[h.guid][0]].append(leaf_of[h.guid][1])
    hosts_on: dict[int, set[str]] = defaultdict(set)
    for host, members in by_host.items():
        for m in members:
            if m.guid in leaf_of:
                hosts_on[leaf_of[m.guid][0]].add(host)
    for host, members in sorted(by_host.items()):
        if len(members) >= usual:
            continue
        have = sorted(h.rail for h in members)
        mine = {leaf_of[m.guid][0] for m in members if m.guid in leaf_of}
        near = mine | {
            leaf_of[o.guid][0] for g in mine for peer in hosts_on[g] for o in by_host[peer] if o.guid in leaf_of
        }
        lacking = sorted(rails - set(have)) if shape.rail_optimised else []
        need = lacking or [-1] * (usual - len(members))
        # where its HCAs all sit at one port number, the missing one would too (the cabling rule above)
        ports = {leaf_of[m.guid][1] for m in members if m.guid in leaf_of}
        taken: list[tuple[int, int]] = []
        for r in need:
            spot = next(
                (
                    (g, p) for g in sorted(near) if r < 0 or leaf_rail.get(g) == r
                    for p in spare[g] if len(ports) != 1 or p in ports
                ),
                None,
            )  # fmt: skip
            if spot is None:
                break
            spare[spot[0]].remove(spot[1])
            taken.append(spot)
        if len(taken) == len(need):
            likely[host] = lacking
            continue
        for g, p in taken:
            spare[g].append(p)
        out.findings.append(
            Finding(
                "missing_hca",
                host,
                f"{host} shows {len(members)} HCAs on the fabric, its peers {usual} (rails present: {have}"
                + (f", missing: {lacking}" if lacking else "") + ")",
                "check the HCAs' links and firmware; a port may be down or its cable out",
                tuple(line for m in sorted(members, key=lambda m: m.rail) for line in _lines_of(shape, m.guid)),
            )
        )  # fmt: skip
    return likely


def _unnamed(out: FabricTopology, shape: _Shape, likely: dict[str, list[int]]) -> None:
    """Every HCA without a host name, in one finding: where each is, whose it is when the cabling
    says, and the hosts short of an HCA that are most likely short of one of these."""
    unnamed = sorted((h for h in shape.hcas.values() if h.placed or (h.host is None and not h.refused)),
                     key=lambda h: h.guid)  # fmt: skip
    if not unnamed:
        return
    placed = [h for h in unnamed if h.placed]
    unknown = [h for h in unnamed if not h.placed]
    evidence = tuple(
        f"H-{h.guid:016x} on {_where(shape, h)}"
        + (f", rail {h.rail}" if shape.rail_optimised else "")
        + (f": placed on {h.host} by its cabling ({h.nic})" if h.placed else ": host unknown")
        for h in unnamed
    )
    hosts = sorted(likely)
    out.findings.append(
        Finding(
            "unnamed_hcas",
            "fabric",
            f"{len(unnamed)} HCAs have no host name in their node description"
            + (f": {len(placed)} placed on their host by their cabling" if placed else "")
            + (f"{'; ' if placed else ': '}{len(unknown)} host unknown" if unknown else "")
            + (f"; {len(hosts)} hosts short of an HCA are most likely short of one of these "
               f"({', '.join(hosts[:5])}{', ...' if len(hosts) > 5 else ''})" if hosts else ""),
            "set the node descriptions (rdma-core's rdma-ndd writes '<host> <device>' on every host) or map "
            "each GUID to '<host> mlx5_<n>' in the node-name map (--node-name-map)",
            evidence,
        )
    )  # fmt: skip


def _cable_entity(c: Cable, hcas: dict[int, Hca], ids: dict[int, str]) -> str:
    for g, _ in (c.a, c.b):
        if g in hcas:
            return link_id(hcas[g].nic)
    (ga, _), (gb, _) = c.a, c.b
    low, high = sorted([ids.get(ga, f"{ga:x}"), ids.get(gb, f"{gb:x}")])
    return link_id(low, high)


__all__ = ["FabricTopology", "Finding", "build"]
