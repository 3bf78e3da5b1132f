"""Racks, power and cooling, and what sits in each node, from the site's inventory: the fabric
knows hosts and cables, not GPUs, PSUs, racks or cooling loops.

Two shapes:
- a plain CSV for sites without NetBox, one row per device: `device,role,rack,position,psus,
  cooling,gpus,nvswitches` (role `node` or a switch role; counts may be empty);
- NetBox's REST export of `/api/dcim/devices/` (`{"results": [...]}`, or a list of them), each
  device with `name`, `role` (`device_role` before NetBox 4.0) with its `slug`, `rack.name` and
  `position`, and the counts as custom fields (`custom_fields.gpus`, `psus`, `nvswitches`,
  `cooling`).
The merge adds racks (with the rack's cooling loop), nodes' GPUs (with NVSwitches between them)
and PSUs in the project's scheme (`<node>-gpu<i>`, `<node>-psu<k>`, `<node>-nvsw<j>`), and places
nodes and switches in their racks. A host on the fabric that the inventory does not list, and a
node of the inventory that is not on the fabric, are findings; so is a device listed twice (the
first row stands).

Every name passes the id grammar (`vocab.ids`): a device of role node is a host name
(`node_refusal`), any other device, rack or cooling loop an entity id (`entity_refusal`). Counts,
positions, rows and the file's size are bounded (`vocab.bounds`: `gpus=50000000` would build 50
million GPUs); each refusal names the file, the row (CSV) or JSON path (NetBox), and the rule.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context.fabric import FabricTopology, Finding
from context.ibnetdiscover import FabricFormatError
from vocab.bounds import (
    MAX_DEVICES,
    MAX_GPUS_PER_NODE,
    MAX_INVENTORY_BYTES,
    MAX_NVSWITCHES_PER_NODE,
    MAX_PSUS_PER_NODE,
    MAX_RACK_POSITION,
    BoundError,
    count,
    loads,
    read_text,
)
from vocab.ids import Refusal, entity_refusal, gpu_id, node_refusal, nvswitch_id, psu_id, shown

CSV_COLUMNS = ("device", "role", "rack", "position", "psus", "cooling", "gpus", "nvswitches")


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    role: str  # "node" for a GPU server; anything else is placed only
    rack: str | None
    position: float | None
    psus: int = 0
    gpus: int = 0
    nvswitches: int = 0
    cooling: str | None = None  # the rack's cooling loop (CDU)
    where: str = ""  # the file and row (or JSON path) it came from, for findings about it


# what each count may be, and why (vocab.bounds)
_LIMITS = {
    "gpus": (MAX_GPUS_PER_NODE, "a node holds 4 to 16 GPUs"),
    "psus": (MAX_PSUS_PER_NODE, "a chassis has at most 8 PSUs"),
    "nvswitches": (MAX_NVSWITCHES_PER_NODE, "an HGX board has 2 to 4 NVSwitches"),
}
NODE_ROLES = ("node", "gpu-server", "server", "compute")  # NetBox slugs taken for a GPU server


def _count(value: Any, where: str, what: str) -> int:
    if value in (None, ""):
        return 0
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise FabricFormatError(f"{where}: {what} {value!r} is not a count")
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        raise FabricFormatError(f"{where}: {what} {str(value)[:40]!r} is not a count") from None
    limit, reason = _LIMITS[what]
    try:
        return count(n, limit, where, what, reason)
    except BoundError as exc:
        raise FabricFormatError(str(exc)) from None


def _position(value: Any, where: str) -> float | None:
    """A rack unit: a number from 0 to MAX_RACK_POSITION (NetBox writes it as a decimal)."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError
        number = float(value)
    except (ValueError, OverflowError):
        raise FabricFormatError(f"{where}: position {str(value)[:40]!r} is not a rack unit (a number)") from None
    if not math.isfinite(number) or not 0 <= number <= MAX_RACK_POSITION:
        raise FabricFormatError(
            f"{where}: position {number} is outside 0..{MAX_RACK_POSITION:g} (racks are at most 58U) [bound position]"
        )
    return number


def _name(value: Any, where: str, rule: Callable[[str], Refusal | None] = entity_refusal) -> str:
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise FabricFormatError(f"{where}: {str(value)[:40]!r} is a {type(value).__name__}, not a name")
    text = str(value).strip()
    problem = rule(text)
    if problem is not None:
        raise FabricFormatError(f"{where}: {shown(text)} cannot be an id: {problem}")
    return text


def _device(name: Any, role: str, where: str, **fields: Any) -> Device:
    """One device, every field checked: a node's name as a host name, counts and position bounded."""
    return Device(
        _name(name, where + fields["name_at"], node_refusal if role == "node" else entity_refusal),
        role,
        _name(fields["rack"], where + fields["rack_at"]) if fields["rack"] not in (None, "") else None,
        _position(fields["position"], where + fields["position_at"]),
        _count(fields["psus"], where + fields["custom_at"].format("psus"), "psus"),
        _count(fields["gpus"], where + fields["custom_at"].format("gpus"), "gpus"),
        _count(fields["nvswitches"], where + fields["custom_at"].format("nvswitches"), "nvswitches"),
        _name(fields["cooling"], where + fields["custom_at"].format("cooling"))
        if fields["cooling"] not in (None, "")
        else None,
        where,
    )


def read(path: Path) -> list[Device]:
    """CSV or NetBox JSON, told apart by the file; FabricFormatError naming the file, the row or
    JSON path, and the rule."""
    try:
        text = read_text(path, MAX_INVENTORY_BYTES, "inventory")
    except BoundError as exc:
        raise FabricFormatError(str(exc)) from None
    if text.lstrip().startswith(("{", "[")):
        return _netbox(path, text)
    try:
        return _csv(path, text)
    except csv.Error as exc:  # a NUL byte, a field past csv's own size limit
        raise FabricFormatError(f"{path}: not a CSV this reader can use ({exc})") from None


def _rows(reader: csv.DictReader[str], path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    for row in reader:
        if reader.line_num - 1 > MAX_DEVICES:
            raise FabricFormatError(
                f"{path}:{reader.line_num}: more than {MAX_DEVICES:,} rows (every device of a 100,000-GPU "
                "site) [bound devices]"
            )
        yield reader.line_num, row


def _csv(path: Path, text: str) -> list[Device]:
    reader = csv.DictReader(text.splitlines())
    if reader.fieldnames is None or "device" not in reader.fieldnames:
        raise FabricFormatError(f"{path}:1: an inventory CSV starts with a header of {', '.join(CSV_COLUMNS)}")
    out = []
    for number, row in _rows(reader, path):
        where = f"{path}:{number}"
        role = (row.get("role") or "node").strip()
        out.append(
            _device(
                row.get("device") or "",
                role,
                where,
                name_at=", column device",
                rack=row.get("rack"),
                rack_at=", column rack",
                position=(row.get("position") or "").strip(),
                position_at=", column position",
                psus=row.get("psus"),
                gpus=row.get("gpus"),
                nvswitches=row.get("nvswitches"),
                cooling=row.get("cooling"),
                custom_at=", column {}",
            )
        )
    return out


def _object(value: Any, where: str, what: str) -> dict[str, Any]:
    """A nested NetBox object (or null): anything else is refused, never read as empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FabricFormatError(f"{where}: {what} is a {type(value).__name__}, not an object (NetBox nests it)")
    return value


def _netbox(path: Path, text: str) -> list[Device]:
    try:
        raw = loads(text, str(path))
    except BoundError as exc:
        raise FabricFormatError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise FabricFormatError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    pages = raw if isinstance(raw, list) else [raw]
    out: list[Device] = []
    for p, page in enumerate(pages):
        results = page.get("results") if isinstance(page, dict) else None
        at = f"{path}: [{p}]" if isinstance(raw, list) else f"{path}:"
        if not isinstance(results, list):
            raise FabricFormatError(f"{at} not NetBox's /api/dcim/devices/ (no 'results' list)")
        if len(out) + len(results) > MAX_DEVICES:
            raise FabricFormatError(
                f"{at} more than {MAX_DEVICES:,} devices (every device of a 100,000-GPU site) [bound devices]"
            )
        for n, d in enumerate(results):
            where = f"{at} results[{n}]"
            if not isinstance(d, dict):
                raise FabricFormatError(f"{where} is a {type(d).__name__}, not a device object")
            role = d.get("role") or d.get("device_role") or {}
            slug = str(role.get("slug", "")) if isinstance(role, dict) else str(role)
            custom = _object(d.get("custom_fields"), f"{where}.custom_fields", "custom_fields")
            rack = _object(d.get("rack"), f"{where}.rack", "rack")
            out.append(
                _device(
                    d.get("name"),
                    "node" if slug in NODE_ROLES else slug,
                    where,
                    name_at=".name",
                    rack=rack.get("name"),
                    rack_at=".rack.name",
                    position=d.get("position"),
                    position_at=".position",
                    psus=custom.get("psus"),
                    gpus=custom.get("gpus"),
                    nvswitches=custom.get("nvswitches"),
                    cooling=custom.get("cooling"),
                    custom_at=".custom_fields.{}",
                )
            )
    return out


def merge(topology: FabricTopology, devices: list[Device]) -> None:
    """The inventory's racks, cooling, GPUs, NVSwitches and PSUs into the fabric's topology."""
    nodes = {n["id"]: n for n in topology.nodes}
    add_node, add_link = topology.nodes.append, topology.links.append
    racks: dict[str, str | None] = {}
    listed = set()
    first: dict[str, Device] = {}
    for d in devices:
        if d.name in first:  # listed twice: the first row stands, neither silently
            topology.findings.append(
                Finding(
                    "duplicate_device",
                    d.name,
                    f"{d.where}: {d.name} is listed again (first at {first[d.name].where}); the first stands",
                    "keep one row per device in the inventory",
                )
            )
            continue
        first[d.name] = d
        if d.rack is not None:
            racks.setdefault(d.rack, None)
            if d.cooling is not None:
                racks[d.rack] = d.cooling
        if d.role != "node":
            if d.name in nodes and d.rack is not None:
                nodes[d.name]["rack"] = d.rack
            continue
        listed.add(d.name)
        if d.name not in nodes:
            topology.findings.append(
                Finding(
                    "not_on_fabric",
                    d.name,
                    f"{d.name} is in the inventory but none of its HCAs is on the fabric",
                    "check its HCAs' cables and ports, or its name in the node-name map",
                )
            )
            nodes[d.name] = {"id": d.name, "kind": "node"}
            add_node(nodes[d.name])
        node = nodes[d.name]
        if d.rack is not None:
            node["rack"] = d.rack
        gpus = [gpu_id(d.name, i) for i in range(d.gpus)]
        switches = [nvswitch_id(d.name, j) for j in range(d.nvswitches)]
        for i, gpu in enumerate(gpus):
            add_node({"id": gpu, "kind": "gpu", "node": d.name, "index": i})
            add_link({"source": d.name, "target": gpu, "relation": "contains"})
        for sw in switches:
            add_node({"id": sw, "kind": "nvswitch", "node": d.name})
            add_link({"source": d.name, "target": sw, "relation": "contains"})
            for gpu in gpus:  # every GPU of an HGX board talks through every NVSwitch
                add_link({"source": gpu, "target": sw, "relation": "connects"})
        for k in range(d.psus):
            psu = psu_id(d.name, k)
            add_node({"id": psu, "kind": "psu", "node": d.name})
            add_link({"source": d.name, "target": psu, "relation": "contains"})
            add_link({"source": psu, "target": d.name, "relation": "powers"})
    for rack, cooling in sorted(racks.items()):
        add_node({"id": rack, "kind": "rack"})
        if cooling is not None:
            add_node({"id": cooling, "kind": "cooling", "rack": rack})
            add_link({"source": rack, "target": cooling, "relation": "cooled_by"})
            add_link({"source": cooling, "target": rack, "relation": "cools"})
    for d in first.values():
        if d.rack is not None and d.name in nodes:
            add_link({"source": d.rack, "target": d.name, "relation": "contains"})
    for n in topology.nodes:
        if n["kind"] == "node" and n["id"] not in listed:
            topology.findings.append(
                Finding(
                    "not_in_inventory",
                    n["id"],
                    f"{n['id']} is on the fabric but not in the inventory",
                    "add it to the inventory (its rack, PSUs and GPUs are unknown until then)",
                )
            )
    topology.counts["racks"] = len(racks)
    topology.counts["gpus"] = sum(d.gpus for d in first.values() if d.role == "node")


__all__ = ["CSV_COLUMNS", "NODE_ROLES", "Device", "merge", "read"]
