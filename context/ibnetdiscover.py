"""The InfiniBand fabric as `ibnetdiscover` prints it: switches, channel adapters (HCAs, SHARP
aggregation nodes), routers, and every cable with its two ports, width and speed.

Two formats, both as infiniband-diags writes them:
- the default topology file: a block per node (`vendid=`, `switchguid=`/`caguid=` lines, then
  `Switch 36 "S-0008f10500200b50"  # "description" ...` and one `[port] "peer"[peer port]` line per
  connected port, the link's width and speed at its end: `4xQDR`);
- `--ports` (`-p`): one line per port, `SW  1719 10 0x7cfe9003009ce5b0 4x EDR - CA 134 1 0x7cfe...
  ( 'ib-i1l1s01' - 'o0001 HCA-1' )`, an unconnected port without the far end.
Quirks the real files show: descriptions with `#`, runs of spaces or no host name at all, port
GUIDs in parentheses without their leading zeros, unconnected ports absent, each cable listed
from both of its ends. A line that is neither says so with its file and line number.

Bounded (`vocab.bounds`): the file's size before it is read, the number of nodes, port numbers
(8 bits in InfiniBand). A GUID described twice (or, in `--ports`, named twice), two nodes under one
name, or one port cabled to two peers is no silent win for either: the first stands and the file's
`notes` say what was left out (the fabric reports them as findings).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from vocab.bounds import MAX_FABRIC_BYTES, MAX_FABRIC_NODES, MAX_NAME_MAP_BYTES, MAX_PORT, BoundError, read_text

NODE_TYPES = {"Switch": "switch", "Ca": "ca", "Rt": "router", "SW": "switch", "CA": "ca", "RT": "router"}


class FabricFormatError(ValueError):
    """Not ibnetdiscover output, or broken (the message names the file and line)."""


@dataclass(slots=True)
class FabricNode:
    guid: int
    type: str  # switch | ca | router
    name: str  # the name the file refers to it by ("S-0008f10500200b50"), or its GUID
    description: str  # what the node calls itself: "o0001 HCA-1", "Voltaire 4036 # 4036-8C5C"
    ports: int = 0
    # the system image GUID (`sysimgguid=`, topology format only; 0 unknown): one for every node
    # of one box, so a SHARP aggregation node shares its switch's
    system: int = 0


@dataclass(frozen=True, slots=True)
class Cable:
    a: tuple[int, int]  # (node GUID, port)
    b: tuple[int, int]
    width: str  # "4x"
    speed: str  # "QDR", "NDR", "???" when the file cannot tell
    lines: tuple[int, ...] = ()  # the file's lines that describe it (each end's, in the topology format)


@dataclass(frozen=True, slots=True)
class Note:
    """Something the file says that the reader did not take (a GUID described twice): reported
    by the fabric as a finding, with what to fix."""

    kind: str
    entity: str
    message: str
    fix: str
    evidence: tuple[str, ...] = ()  # the input's lines that say it (`file:line: text`)


class NameMap(dict[int, str]):
    """A node-name map: GUID -> name, and the GUIDs it names twice (the first name stands)."""

    def __init__(self) -> None:
        super().__init__()
        self.notes: list[Note] = []


@dataclass(slots=True)
class Fabric:
    nodes: dict[int, FabricNode] = field(default_factory=dict)
    cables: list[Cable] = field(default_factory=list)
    source: str = ""
    notes: list[Note] = field(default_factory=list)
    # a port's label where the file gives one: Quantum-2 (NDR) switches number their ports
    # ASIC/Cage/Port[/Split] and ibdiagnet's ibnetdiscover-format file prints it: `[1](1/1/1)`
    labels: dict[tuple[int, int], str] = field(default_factory=dict)
    text: dict[int, str] = field(default_factory=dict)  # line number -> the line, for findings' evidence
    # a node's block in the topology format: its node line to its last port line (the -p format
    # has no blocks: a node's lines there are its cables')
    blocks: dict[int, tuple[int, int]] = field(default_factory=dict)

    def quote(self, numbers: Iterable[int]) -> tuple[str, ...]:
        """The dump's lines, as `file:line: text`."""
        return tuple(f"{self.source}:{n}: {self.text.get(n, '')[:200]}" for n in numbers)

    def evidence(self, cable: Cable) -> tuple[str, ...]:
        """The dump's lines that describe a cable."""
        return self.quote(cable.lines)

    def block(self, guid: int) -> tuple[str, ...]:
        """A node's own lines in the topology format (its node line and its port lines); none in -p."""
        first, last = self.blocks.get(guid, (0, -1))
        return self.quote(n for n in range(first, last + 1) if n in self.text)

    def neighbours(self, guid: int) -> list[tuple[int, Cable]]:
        out = []
        for c in self.cables:
            if c.a[0] == guid:
                out.append((c.b[0], c))
            elif c.b[0] == guid:
                out.append((c.a[0], c))
        return out


_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([^"]*)"\s*(?:#\s*"(.*?)"(?:\s+(.*))?)?\s*$')
# [port][ext N]?(label)?(port guid)? "peer"[peer port][ext N]?(label)?(peer port guid)?  # comment
# ending in the link: 4xQDR. `[ext N]` is `ibnetdiscover -g`'s external port (rdma-core
# infiniband-diags/ibnetdiscover.c, out_ext_port); a label `(1/1/1)` is ibdiagnet's Quantum-2 port
# label, ASIC/Cage/Port with a fourth number for a split port (2 x 200G in one 400G port). ibdiagnet
# (2.10) prints a CA's port with its label and its GUID, each in parentheses:
# `[1](1)(b0cf0e0300e5b948) "S-b0cf0e0300e5b940"[65]` (a SHARP aggregation node, and hosts' HCAs).
_PORT = re.compile(
    r'^\[(\d+)\](?:\[ext \d+\])?((?:\([0-9A-Za-z/]+\)){0,2})\s*"([^"]*)"\[(\d+)\](?:\[ext \d+\])?'
    r"((?:\s*\([0-9A-Za-z/]+\)){0,2})\s*(?:#\s*(.*))?$"
)
_PARENS = re.compile(r"\(([^)]*)\)")
_LABEL = re.compile(r"^\d{1,3}(?:/\d{1,3}){2,3}$")  # ASIC/Cage/Port[/Split]
# the label before a GUID: a CA's is its port number ("1"), a switch's ASIC/Cage/Port[/Split]
_ANY_LABEL = re.compile(r"^\d{1,3}(?:/\d{1,3}){0,3}$")
_GUID_TEXT = re.compile(r"^[0-9a-fA-F]{1,16}$")
_LINK = re.compile(r"(\d+x)\s*([A-Za-z0-9?]+)\s*$")
_HEADER = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|rtguid)\s*=\s*(0x[0-9a-fA-F]+)")
_PORTS_LINE = re.compile(
    r"^(SW|CA|RT)\s+(\d+)\s+(\d+)\s+(0x[0-9a-fA-F]+)\s+(\d+x)\s+(\S+)"
    r"(?:\s+-\s+(SW|CA|RT)\s+(\d+)\s+(\d+)\s+(0x[0-9a-fA-F]+)\s+\(\s*'(.*)'\s+-\s+'(.*)'\s*\)|\s+'?(.*?)'?)\s*$"
)


# lines that are not the fabric but come with it: the chassis grouping of `ibnetdiscover -g`, and
# infiniband-diags' own warnings when its stderr was captured too (`src/query_smp.c:195; umad ...`)
_NOISE = re.compile(r"^(Non-Chassis Nodes|Chassis\b.*|ibwarn:.*|\S+\.c:\d+;.*)$")


# What only ibsim's fabric descriptions have (linux-rdma/ibsim, ibsim/sim_net.c: parse_netconf,
# parse_port, parse_port_opt), never ibnetdiscover's output: the node type `Hca` (ibnetdiscover
# prints `Ca`), link options after a port (`w=4` width, `s=2` speed), ibsim's own directives, and
# nodes named with no GUID anywhere (ibsim numbers them itself; ibnetdiscover writes a
# `switchguid=`/`caguid=`/`rtguid=` line before every node).
_IBSIM_HCA = re.compile(r'^Hca\s+\d+\s+"')
_IBSIM_OPTION = re.compile(r'^@?\[\d+\]\s*"[^"]*"(?:\[\d+\])?\s+[ws]=\d+')
_IBSIM_DIRECTIVE = re.compile(r"^(?:include\s|do\s|module\s*=|width\s*=|speed\s*=|hcaguids\s*[=+]|pdebug\b)")
_NODE_GUID = re.compile(r"^(?:switchguid|caguid|rtguid)\s*=")


def _ibsim_sign(content: list[tuple[int, str]]) -> tuple[int, str] | None:
    """The first line that shows the file is ibsim's fabric description, and what shows it."""
    guids = any(_NODE_GUID.match(line) for _, line in content)
    for number, line in content:
        if _IBSIM_HCA.match(line):
            return number, "an `Hca` node: ibnetdiscover prints `Ca`"
        if _IBSIM_OPTION.match(line):
            return number, "a link option after the port (w= width, s= speed)"
        if _IBSIM_DIRECTIVE.match(line):
            return number, f"ibsim's directive {line.split()[0].split('=')[0]!r}"
        if not guids and (m := _NODE.match(line)) and _guid_of_name(m.group(3)) is None:
            return number, f"node {m.group(3)[:40]!r} and every other one without a GUID: ibsim numbers them itself"
    return None


def _not_ibsim(path: Path, content: list[tuple[int, str]], error: FabricFormatError) -> FabricFormatError:
    """A file the reader refused, said to be ibsim's fabric description when it is one (the shared
    dataset has ibsim's examples beside real dumps, and both start `Switch 8 "..."`)."""
    sign = _ibsim_sign(content)
    if sign is None:
        return error
    number, why = sign
    return FabricFormatError(
        f"{path}:{number}: this is an ibsim topology file, not ibnetdiscover output ({why}); it describes a "
        "fabric for ibsim to simulate: import what ibnetdiscover prints on the fabric (or under ibsim: "
        f"`ibsim -s {path.name}`, then `ibsim-run ibnetdiscover`)"
    )


def _guid_of_name(name: str) -> int | None:
    """ibnetdiscover names a node it has no name map for "S-<16 hex digits>" / "H-…" / "R-…"."""
    m = re.fullmatch(r"[SHR]-([0-9a-fA-F]{16})", name)
    return int(m.group(1), 16) if m else None


def _port(text: str, path: Path, number: int) -> int:
    port = int(text)
    if port > MAX_PORT:
        raise FabricFormatError(
            f"{path}:{number}: port {port:,} is over {MAX_PORT} (InfiniBand port numbers are 8 bits) [bound port]"
        )
    return port


def _room(fabric: Fabric, path: Path, number: int) -> None:
    if len(fabric.nodes) >= MAX_FABRIC_NODES:
        raise FabricFormatError(
            f"{path}:{number}: more than {MAX_FABRIC_NODES:,} nodes (switches and HCAs of a 100,000-GPU "
            "fabric) [bound fabric_nodes]"
        )


def read(path: Path) -> Fabric:
    """Either format, told apart by its lines; FabricFormatError with the line at fault."""
    try:
        text = read_text(path, MAX_FABRIC_BYTES, "fabric description")
    except BoundError as exc:
        raise FabricFormatError(str(exc)) from None
    lines = text.splitlines()
    content = [
        (n, line.strip())
        for n, line in enumerate(lines, 1)
        if line.strip() and not line.startswith("#") and not _NOISE.match(line.strip())
    ]
    if not content:
        raise FabricFormatError(f"{path}: empty, no ibnetdiscover output")
    first = content[0][1]
    try:
        if _PORTS_LINE.match(first):
            return _read_ports(path, content)
        if _HEADER.match(first) or _NODE.match(first):
            return _read_topology(path, content)
        raise FabricFormatError(f"{path}:{content[0][0]}: not ibnetdiscover output: {first[:80]!r}")
    except FabricFormatError as refused:
        raise _not_ibsim(path, content, refused) from None


def _read_topology(path: Path, content: list[tuple[int, str]]) -> Fabric:
    fabric = Fabric(source=str(path))
    by_name: dict[str, int] = {}
    pending: list[tuple[int, int, int, str, int, str]] = []  # (line, guid, port, peer name, peer port, comment)
    links: dict[tuple[int, int], tuple[str, str]] = {}
    peer_labels: dict[tuple[int, str, int], str] = {}  # a label printed for the far end of a line
    current: FabricNode | None = None
    header_guid: int | None = None
    header_system = 0
    first_line: dict[int, int] = {}  # GUID -> the line that described it
    dropped = 0  # port lines of a node described twice, not taken
    for number, line in content:
        if m := _HEADER.match(line):
            if m.group(1) in ("switchguid", "caguid", "rtguid"):
                header_guid = int(m.group(2), 16)
            elif m.group(1) == "sysimgguid":
                header_system = int(m.group(2), 16)
            current, dropped = None, 0
            continue
        if m := _NODE.match(line):
            kind, ports, name, description = m.group(1), _port(m.group(2), path, number), m.group(3), m.group(4) or ""
            guid = header_guid if header_guid is not None else _guid_of_name(name)
            if guid is None:
                raise FabricFormatError(f"{path}:{number}: node {name!r} has no GUID (no {kind.lower()}guid= line)")
            header_guid, system, header_system = None, header_system, 0
            fabric.text[number] = line
            if guid in fabric.nodes:  # described twice: the first stands, this block is left out
                fabric.notes.append(_twice(fabric, guid, first_line[guid], number, kind))
                current, dropped = None, -1
                continue
            _room(fabric, path, number)
            current = FabricNode(guid, NODE_TYPES[kind], name, " ".join(description.split()), ports, system)
            fabric.nodes[guid] = current
            fabric.blocks[guid] = (number, number)
            first_line[guid] = number
            dropped = 0
            if name in by_name:  # ports naming it could mean either: the first stands
                fabric.notes.append(
                    Note(
                        "duplicate_name",
                        f"0x{guid:016x}",
                        f"{path}:{number}: node {name[:80]!r} (GUID 0x{guid:016x}) has the name of the node on line "
                        f"{first_line[by_name[name]]} (GUID 0x{by_name[name]:016x}); "
                        "ports naming it are read as the first",
                        "give each node its own name (the node-name map, or its node description)",
                        fabric.quote((first_line[by_name[name]], number)),
                    )
                )
            else:
                by_name[name] = guid
            continue
        if m := _PORT.match(line):
            if current is None and dropped < 0:
                continue  # a port of a node described twice, said in its note
            if current is None:
                raise FabricFormatError(f"{path}:{number}: a port line outside any node: {line[:80]!r}")
            comment = m.group(6) or ""
            link = _LINK.search(comment)
            port, peer, peer_port = _port(m.group(1), path, number), m.group(3), _port(m.group(4), path, number)
            for given, end in ((m.group(2), (current.guid, port)), (m.group(5), None)):
                label = _port_label(_PARENS.findall(given or ""), path, number)
                if label and end is None:
                    peer_labels[(number, peer, peer_port)] = label
                elif label and end is not None:
                    fabric.labels[end] = label
            fabric.text[number] = line
            fabric.blocks[current.guid] = (fabric.blocks[current.guid][0], number)
            pending.append((number, current.guid, port, peer, peer_port, comment))
            if link:
                links[(current.guid, port)] = (link.group(1), link.group(2))
            continue
        raise FabricFormatError(f"{path}:{number}: not a line of ibnetdiscover's topology output: {line[:80]!r}")
    seen: set[frozenset[tuple[int, int]]] = set()
    at: dict[frozenset[tuple[int, int]], list[int]] = {}
    order: list[tuple[frozenset[tuple[int, int]], Cable]] = []
    for number, guid, port, peer, peer_port, _ in pending:
        peer_guid = by_name.get(peer, _guid_of_name(peer))
        if peer_guid is None:
            raise FabricFormatError(f"{path}:{number}: port {port} names {peer!r}, a node the file does not describe")
        if peer_guid not in fabric.nodes:
            # a node past the discovery's hop limit: known only by name
            _room(fabric, path, number)
            fabric.nodes[peer_guid] = FabricNode(peer_guid, "switch" if peer.startswith("S-") else "ca", peer, "")
        if (far_label := peer_labels.get((number, peer, peer_port))) is not None:
            fabric.labels.setdefault((peer_guid, peer_port), far_label)
        ends = frozenset({(guid, port), (peer_guid, peer_port)})
        if ends in seen:
            at[ends].append(number)
            continue
        seen.add(ends)
        at[ends] = [number]
        width, speed = links.get((guid, port)) or links.get((peer_guid, peer_port)) or ("", "")
        order.append((ends, Cable((guid, port), (peer_guid, peer_port), width, speed)))
    fabric.cables = one_peer_per_port(fabric, [Cable(c.a, c.b, c.width, c.speed, tuple(at[ends])) for ends, c in order])
    return fabric


def one_peer_per_port(fabric: Fabric, cables: list[Cable]) -> list[Cable]:
    """The cables with each port on one only: a port is one connector and holds one cable, so a
    second cable at a port already cabled to another peer (a miscabling recorded from its two
    ends, or two captures concatenated) is left out with a `duplicate_port` note, the first
    standing; the same cable seen again is no conflict. Every format's reader ends here."""
    peer_of: dict[tuple[int, int], tuple[tuple[int, int], Cable]] = {}
    kept: list[Cable] = []
    for c in cables:
        clash = next(
            ((end, far) for end, far in ((c.a, c.b), (c.b, c.a)) if end in peer_of and peer_of[end][0] != far), None
        )
        if clash is None:
            peer_of[c.a], peer_of[c.b] = (c.b, c), (c.a, c)
            kept.append(c)
            continue
        (guid, port), again = clash
        first_peer, first = peer_of[(guid, port)]
        where = f"{fabric.source}:{c.lines[0]}" if c.lines else fabric.source
        fabric.notes.append(
            Note(
                "duplicate_port",
                f"0x{guid:016x}",
                f"{where}: port {port} of {_called(fabric, guid)} is cabled to {_called(fabric, first_peer[0])} "
                f"port {first_peer[1]} and again to {_called(fabric, again[0])} port {again[1]}; a port holds "
                "one cable: the first stands, the second is left out",
                "check the cabling at that port (and the far ends' records); or the file is two captures concatenated",
                fabric.quote((*first.lines, *c.lines)),
            )
        )
    return kept


def _called(fabric: Fabric, guid: int) -> str:
    node = fabric.nodes.get(guid)
    named = f"{node.description or node.name}"[:80] if node is not None else ""
    return f"{named!r} (0x{guid:016x})" if named else f"0x{guid:016x}"


def _port_label(given: list[str], path: Path, number: int) -> str:
    """The Quantum-2 label among a port's parentheses ("" when none): one is a label or a port
    GUID, two are a label then the GUID (ibdiagnet's CA ports). A CA's label, its port number
    again, tells nothing the port does not, and is not kept."""
    if len(given) == 2:
        label, guid = given
        if not (_ANY_LABEL.match(label) and _GUID_TEXT.match(guid)):
            raise FabricFormatError(
                f"{path}:{number}: ({label[:40]})({guid[:40]}) is not a port label then a port GUID"
            )
        return label if _LABEL.match(label) else ""
    for one in given:
        if _LABEL.match(one):
            return one
        if not _GUID_TEXT.match(one):
            raise FabricFormatError(
                f"{path}:{number}: ({one[:40]}) is neither a port GUID nor a port label (ASIC/Cage/Port[/Split])"
            )
    return ""


def _twice(fabric: Fabric, guid: int, first: int, again: int, kind: str) -> Note:
    return Note(
        "duplicate_guid",
        f"0x{guid:016x}",
        f"{fabric.source}:{again}: {kind.lower()} GUID 0x{guid:016x} is described again (first on line {first}); "
        "the first description stands, this one and its cables are left out",
        "GUIDs are unique on a fabric: check for a cloned GUID (a replaced board flashed with the old "
        "one) or two captures concatenated",
        fabric.quote((first, again)),
    )


def _read_ports(path: Path, content: list[tuple[int, str]]) -> Fabric:
    fabric = Fabric(source=str(path))
    seen: set[frozenset[tuple[int, int]]] = set()
    said: set[int] = set()  # GUIDs whose contradiction is already a note
    first_line: dict[int, int] = {}  # GUID -> the line it first appears on

    def node(kind: str, guid_text: str, description: str, number: int, line: str) -> int:
        guid = int(guid_text, 16)
        known = fabric.nodes.get(guid)
        clean = " ".join(description.split())
        if known is None:
            _room(fabric, path, number)
            fabric.nodes[guid] = FabricNode(guid, NODE_TYPES[kind], guid_text, clean)
            first_line[guid] = number
            fabric.text[number] = line
        elif known.type != NODE_TYPES[kind] and guid not in said:
            # one GUID on two kinds of node: two devices share it; the first word stands
            said.add(guid)
            fabric.text[number] = line
            fabric.notes.append(
                Note(
                    "duplicate_guid",
                    f"0x{guid:016x}",
                    f"{path}:{number}: GUID 0x{guid:016x} is a {NODE_TYPES[kind]} here and a {known.type} before; "
                    f"it is read as the {known.type}",
                    "GUIDs are unique on a fabric: check for a cloned GUID or two captures concatenated",
                    fabric.quote((first_line[guid], number)),
                )
            )
        elif not known.description:
            known.description = clean
        elif clean and clean != known.description and guid not in said:
            # one GUID under two names: two devices share it (a cloned GUID) or two captures were
            # concatenated; the first name stands, as in the topology format
            said.add(guid)
            fabric.text[number] = line
            fabric.notes.append(
                Note(
                    "duplicate_guid",
                    f"0x{guid:016x}",
                    f"{path}:{number}: {known.type} GUID 0x{guid:016x} is named {clean[:80]!r} here and "
                    f"{known.description[:80]!r} on line {first_line[guid]}; the first name stands",
                    "GUIDs are unique on a fabric: check for a cloned GUID (a replaced board flashed with the old "
                    "one) or two captures concatenated",
                    fabric.quote((first_line[guid], number)),
                )
            )
        return guid

    ports: dict[int, int] = {}
    for number, line in content:
        m = _PORTS_LINE.match(line)
        if m is None:
            raise FabricFormatError(f"{path}:{number}: not a line of `ibnetdiscover --ports` output: {line[:80]!r}")
        if m.group(7) is None:  # an unconnected port: the node, no cable
            node(m.group(1), m.group(4), m.group(13), number, line)
            _port(m.group(3), path, number)
            continue
        a = node(m.group(1), m.group(4), m.group(11), number, line)
        b = node(m.group(7), m.group(10), m.group(12), number, line)
        pa, pb = _port(m.group(3), path, number), _port(m.group(9), path, number)
        ends = frozenset({(a, pa), (b, pb)})
        if ends not in seen:
            seen.add(ends)
            fabric.text[number] = line
            fabric.cables.append(Cable((a, pa), (b, pb), m.group(5), m.group(6), (number,)))
            ports[a], ports[b] = max(ports.get(a, 0), pa), max(ports.get(b, 0), pb)
    fabric.cables = one_peer_per_port(fabric, fabric.cables)
    for guid, n in fabric.nodes.items():  # ports seen per node (one pass: a fabric has 100,000s of cables)
        n.ports = ports.get(guid, 0)
    return fabric


def read_node_name_map(path: Path) -> NameMap:
    """infiniband-diags' node-name-map: `GUID "name"` per line (`#` comments). Sites also key it
    by the name ibnetdiscover prints for a node it cannot name (`H-003048c74e4a0000 x5570comp1`).
    A GUID named twice keeps its first name, and the map's `notes` say so."""
    out = NameMap()
    first: dict[int, int] = {}
    try:
        text = read_text(path, MAX_NAME_MAP_BYTES, "node-name map")
    except BoundError as exc:
        raise FabricFormatError(str(exc)) from None
    lines = text.splitlines()
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith('"') else raw.strip()
        if not line:
            continue
        key, _, rest = line.partition(" ")
        name = rest.strip().strip('"').strip()
        guid = int(key, 16) if re.fullmatch(r"0x[0-9a-fA-F]+", key) else _guid_of_name(key)
        if guid is None or not name:
            raise FabricFormatError(f"{path}:{number}: not a node-name-map line (GUID name): {raw[:80]!r}")
        if guid in out:
            if out[guid] != name:
                out.notes.append(
                    Note(
                        "duplicate_guid",
                        f"0x{guid:016x}",
                        f"{path}:{number}: the node-name map names GUID 0x{guid:016x} again ({name[:80]!r}; "
                        f"line {first[guid]} named it {out[guid][:80]!r}); the first name stands",
                        "keep one line per GUID in the node-name map",
                        tuple(f"{path}:{n}: {lines[n - 1][:200]}" for n in (first[guid], number)),
                    )
                )
            continue
        out[guid], first[guid] = name, number
    return out


__all__ = [
    "Cable",
    "Fabric",
    "FabricFormatError",
    "FabricNode",
    "NameMap",
    "Note",
    "one_peer_per_port",
    "read",
    "read_node_name_map",
]
