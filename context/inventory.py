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
node of the inventory that is not on the fabric, are findings.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context.fabric import FabricTopology, Finding
from context.ibnetdiscover import FabricFormatError
from vocab.entities import id_problem

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


def _count(value: Any, where: str) -> int:
    if value in (None, ""):
        return 0
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise FabricFormatError(f"{where}: {value!r} is not a count") from None
    if n < 0:
        raise FabricFormatError(f"{where}: a count cannot be negative ({n})")
    return n


def _name(value: Any, where: str) -> str:
    text = str(value or "").strip()
    problem = id_problem(text) if text else "empty"
    if problem:
        raise FabricFormatError(f"{where}: {text!r} cannot be an id ({problem})")
    return text


def read(path: Path) -> list[Device]:
    """CSV or NetBox JSON, told apart by the file; FabricFormatError naming the file and row."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith(("{", "[")):
        return _netbox(path, text)
    rows = list(csv.DictReader(text.splitlines()))
    if not rows or "device" not in rows[0]:
        raise FabricFormatError(f"{path}:1: an inventory CSV starts with a header of {', '.join(CSV_COLUMNS)}")
    out = []
    for number, row in enumerate(rows, 2):
        where = f"{path}:{number}"
        role = (row.get("role") or "node").strip()
        position = row.get("position") or ""
        out.append(
            Device(
                _name(row.get("device"), where),
                role,
                _name(row["rack"], where) if row.get("rack") else None,
                float(position) if position.strip() else None,
                _count(row.get("psus"), where),
                _count(row.get("gpus"), where),
                _count(row.get("nvswitches"), where),
                _name(row["cooling"], where) if row.get("cooling") else None,
            )
        )
    return out


def _netbox(path: Path, text: str) -> list[Device]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FabricFormatError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    pages = raw if isinstance(raw, list) else [raw]
    out = []
    for page in pages:
        results = page.get("results") if isinstance(page, dict) else None
        if not isinstance(results, list):
            raise FabricFormatError(f"{path}: not NetBox's /api/dcim/devices/ (no 'results' list)")
        for n, d in enumerate(results):
            where = f"{path}: results[{n}]"
            role = d.get("role") or d.get("device_role") or {}
            rack = d.get("rack") or {}
            custom = d.get("custom_fields") or {}
            slug = str(role.get("slug", "")) if isinstance(role, dict) else str(role)
            out.append(
                Device(
                    _name(d.get("name"), where),
                    "node" if slug in ("node", "gpu-server", "server", "compute") else slug,
                    _name(rack.get("name"), where) if isinstance(rack, dict) and rack.get("name") else None,
                    float(d["position"]) if d.get("position") is not None else None,
                    _count(custom.get("psus"), where),
                    _count(custom.get("gpus"), where),
                    _count(custom.get("nvswitches"), where),
                    _name(custom["cooling"], where) if custom.get("cooling") else None,
                )
            )
    return out


def merge(topology: FabricTopology, devices: list[Device]) -> None:
    """The inventory's racks, cooling, GPUs, NVSwitches and PSUs into the fabric's topology."""
    nodes = {n["id"]: n for n in topology.nodes}
    add_node, add_link = topology.nodes.append, topology.links.append
    racks: dict[str, str | None] = {}
    listed = set()
    for d in devices:
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
        gpus = [f"{d.name}-gpu{i}" for i in range(d.gpus)]
        switches = [f"{d.name}-nvsw{j}" for j in range(d.nvswitches)]
        for i, gpu in enumerate(gpus):
            add_node({"id": gpu, "kind": "gpu", "node": d.name, "index": i})
            add_link({"source": d.name, "target": gpu, "relation": "contains"})
        for sw in switches:
            add_node({"id": sw, "kind": "nvswitch", "node": d.name})
            add_link({"source": d.name, "target": sw, "relation": "contains"})
            for gpu in gpus:  # every GPU of an HGX board talks through every NVSwitch
                add_link({"source": gpu, "target": sw, "relation": "connects"})
        for k in range(d.psus):
            psu = f"{d.name}-psu{k}"
            add_node({"id": psu, "kind": "psu", "node": d.name})
            add_link({"source": d.name, "target": psu, "relation": "contains"})
            add_link({"source": psu, "target": d.name, "relation": "powers"})
    for rack, cooling in sorted(racks.items()):
        add_node({"id": rack, "kind": "rack"})
        if cooling is not None:
            add_node({"id": cooling, "kind": "cooling", "rack": rack})
            add_link({"source": rack, "target": cooling, "relation": "cooled_by"})
            add_link({"source": cooling, "target": rack, "relation": "cools"})
    for d in devices:
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
    topology.counts["gpus"] = sum(d.gpus for d in devices if d.role == "node")


__all__ = ["CSV_COLUMNS", "Device", "merge", "read"]
