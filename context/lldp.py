"""Ethernet/RoCE fabrics through LLDP: what each host's lldpd sees on its interfaces
(`lldpcli -f json show neighbors` or `-f json0`), one file per host or a folder of them.

lldpd's two JSON shapes, both as it writes them: `json` keys objects by name (`"interface":
{"eth0": {...}}` for one interface, a list of such objects for several; `"chassis": {"leaf07":
{...}}`, or the chassis without its name key when the peer sends none), and `json0` wraps every
value in a list (`"chassis": [{"name": [{"value": "leaf07"}]}]`). The host is the file's name
(`gpu001.json`), or the `lldp_loc_chassis` a collector merged in. A host's interfaces are its
HCAs in their natural order (ens1f0np0 before ens2f0np0); which rail each is on follows from the
leaves, as for InfiniBand (`context.fabric`).

Bounded (`vocab.bounds`): files in a folder, each file's size, its JSON's depth (lldpd's own
nests under ten; `_values` walks it recursively, so depth is checked before parsing). A host or
switch name outside the id grammar (`vocab.ids`) is left out with a note the fabric reports, and so
is a second cable at a port already cabled to another peer (`duplicate_port`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context.ibnetdiscover import Cable, Fabric, FabricFormatError, FabricNode, Note, one_peer_per_port
from vocab.bounds import MAX_LLDP_FILE_BYTES, MAX_LLDP_FILES, BoundError, loads, read_bytes
from vocab.ids import entity_refusal, node_refusal, shown


@dataclass(frozen=True, slots=True)
class Neighbour:
    host: str
    interface: str  # the host's own interface
    switch: str  # the peer's chassis name (or its id when it sends no name)
    port: str  # the peer's port id (ifname, as switches send it)
    file: str = ""  # where it was read, for a note about it


def _values(node: Any) -> Any:
    """json0's `[{"value": x}]` wrapping taken off, at every level."""
    if isinstance(node, list) and len(node) == 1 and isinstance(node[0], dict) and set(node[0]) == {"value"}:
        return node[0]["value"]
    if isinstance(node, list) and len(node) == 1 and isinstance(node[0], dict):
        return _values(node[0])
    if isinstance(node, dict):
        return {k: _values(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_values(v) for v in node]
    return node


def _named(node: Any, key: str = "name") -> list[tuple[str, dict[str, Any]]]:
    """(name, body) pairs whether lldpd keyed the objects by name or gave them a `name` field."""
    items = node if isinstance(node, list) else [node]
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if key in item and isinstance(item[key], str):
            out.append((item[key], item))
        else:
            out += [(k, v) for k, v in item.items() if isinstance(v, dict)]
    return out


def _chassis_name(chassis: Any) -> str:
    if not isinstance(chassis, dict):
        return ""
    if isinstance(chassis.get("name"), str):
        return str(chassis["name"])
    if "id" in chassis:  # no name key: the peer sent none; its id (a MAC) names it
        ident = chassis["id"]
        return str(ident.get("value", "")) if isinstance(ident, dict) else str(ident)
    name, body = next(iter(chassis.items()), ("", {}))
    return name if isinstance(body, dict) else ""


def read_neighbours(path: Path) -> list[Neighbour]:
    """Every neighbour in a file (or in every *.json of a folder); FabricFormatError naming the file."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if len(files) > MAX_LLDP_FILES:
        raise FabricFormatError(
            f"{path}: {len(files):,} LLDP files, over {MAX_LLDP_FILES:,} (one per host) [bound lldp_files]"
        )
    out: list[Neighbour] = []
    for file in files:
        try:
            raw = loads(read_bytes(file, MAX_LLDP_FILE_BYTES, "host's LLDP neighbours"), str(file))
        except BoundError as exc:
            raise FabricFormatError(str(exc)) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FabricFormatError(f"{file}: not lldpcli JSON ({exc})") from None
        if not isinstance(raw, dict) or "lldp" not in raw:
            raise FabricFormatError(f"{file}: not lldpcli JSON (no top-level 'lldp')")
        lldp = _values(raw["lldp"])
        local = _values(raw.get("lldp_loc_chassis", {}))
        local = local.get("local-chassis", local) if isinstance(local, dict) else {}
        host = _chassis_name(local.get("chassis")) if isinstance(local, dict) else ""
        host = host or file.stem
        interfaces = lldp.get("interface", []) if isinstance(lldp, dict) else []
        for name, body in _named(interfaces):
            switch = _chassis_name(body.get("chassis"))
            port = body.get("port", {})
            ident = port.get("id", {}) if isinstance(port, dict) else {}
            port_id = ident.get("value", "") if isinstance(ident, dict) else str(ident)
            if switch and port_id:
                out.append(Neighbour(host, name, switch, str(port_id), str(file)))
    return out


def _natural(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _guid(*parts: str) -> int:
    """A stable 64-bit id for an entity LLDP names but gives no GUID."""
    return int.from_bytes(hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest(), "big")


def fabric_from_lldp(neighbours: list[Neighbour]) -> Fabric:
    """The neighbours as a fabric: switches, host NICs (indexed in their host's natural order)
    and one cable per link seen (from either end). A file whose own name other files see as a
    switch is that switch's view (lldpd on SONiC or Cumulus): its neighbours are switch-to-switch
    cables. A switch's ports are numbered in the natural order of their names (swp1, swp2, ...;
    Ethernet0, Ethernet4, ... on SONiC), as the names carry no common numbering across vendors."""
    fabric = Fabric(source="lldp")
    neighbours = _named_by_grammar(neighbours, fabric.notes)
    switches = {n.switch for n in neighbours}
    ports: dict[str, set[str]] = {}
    for n in neighbours:
        ports.setdefault(n.switch, set()).add(n.port)
        if n.host in switches:
            ports.setdefault(n.host, set()).add(n.interface)
    number = {sw: {name: i + 1 for i, name in enumerate(sorted(names, key=_natural))} for sw, names in ports.items()}
    for sw, names in ports.items():
        fabric.nodes[_guid("switch", sw)] = FabricNode(_guid("switch", sw), "switch", sw, sw, len(names))
    by_host: dict[str, list[Neighbour]] = {}
    for n in neighbours:
        if n.host not in switches:
            by_host.setdefault(n.host, []).append(n)
    for host, seen in by_host.items():
        for index, interface in enumerate(sorted({n.interface for n in seen}, key=_natural)):
            guid = _guid("nic", host, interface)
            fabric.nodes[guid] = FabricNode(guid, "ca", interface, f"{host} HCA-{index + 1}", 1)
    cabled: set[frozenset[tuple[int, int]]] = set()
    for n in neighbours:
        far = (_guid("switch", n.switch), number[n.switch][n.port])
        near = (
            (_guid("switch", n.host), number[n.host][n.interface])
            if n.host in switches
            else (_guid("nic", n.host, n.interface), 1)
        )
        if frozenset({near, far}) not in cabled:
            cabled.add(frozenset({near, far}))
            fabric.cables.append(Cable(near, far, "", ""))
    # two hosts' interfaces on one switch port, or one interface seeing two switch ports (a hub or
    # an unmanaged switch between): a duplicate_port note, the first file's cable standing
    fabric.cables = one_peer_per_port(fabric, fabric.cables)
    return fabric


def _named_by_grammar(neighbours: list[Neighbour], notes: list[Note]) -> list[Neighbour]:
    """The neighbours whose host is a node name and whose switch an entity id (`vocab.ids`);
    each other one left out with a note (once per name)."""
    kept: list[Neighbour] = []
    said: set[str] = set()
    switches = {n.switch for n in neighbours}
    for n in neighbours:
        # a host that other files see as a switch is that switch's own view: an entity, not a node
        host_problem = entity_refusal(n.host) if n.host in switches else node_refusal(n.host)
        for name, problem, what in ((n.host, host_problem, "host"), (n.switch, entity_refusal(n.switch), "switch")):
            if problem is not None and name not in said:
                said.add(name)
                notes.append(
                    Note(
                        "invalid_name",
                        f"R-{_guid('refused', name):016x}",  # never the refused name itself as an id
                        f"{n.file or 'lldp'}: interface {n.interface[:40]!r}: {what} {shown(name)} refused: {problem}; "
                        "its links are left out",
                        f"give the {what} a plain host name (its lldpd system name, or the file's name)",
                    )
                )
        if host_problem is None and entity_refusal(n.switch) is None:
            kept.append(n)
    return kept


__all__ = ["Neighbour", "fabric_from_lldp", "read_neighbours"]
