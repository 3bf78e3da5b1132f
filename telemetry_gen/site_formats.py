"""The generated cluster as a real site's tools would describe it, so the importers
(`aiops topology import`) can be checked against a topology whose truth is known:
- `fabric.ibnetdiscover`: `ibnetdiscover --ports` output of the fabric (InfiniBand);
- `lldp/<host>.json`: `lldpcli -f json show neighbors` of every host and leaf (the same cluster
  cabled as Ethernet/RoCE);
- `inventory.csv`: racks, positions, PSUs, cooling loops, GPUs and NVSwitches per node.

Written from the topology file itself, so it says no more than the file does. Fat-trees only: the
torus and dragonfly builders have no leaves and spines to describe."""

from __future__ import annotations

import csv
import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from vocab.ids import port_label

UPLINK_PORT_BASE = 100  # physical port of a leaf's first uplink (u0); downlink p<k> is port k + 1


def _guid(entity: str) -> str:
    return "0x" + hashlib.blake2b(entity.encode(), digest_size=8).hexdigest()


def _physical(port: str) -> int:
    name = port_label(port) or ""
    return UPLINK_PORT_BASE + int(name[1:]) if name.startswith("u") else int(name[1:]) + 1


def write_site_formats(topology: dict[str, Any], out: Path) -> bool:
    """Into `out`; False (nothing written) if the topology is not a fat-tree."""
    if topology.get("graph", {}).get("topology") != "fat-tree":
        return False
    nodes = {n["id"]: n for n in topology["nodes"]}
    links: dict[str, list[str]] = defaultdict(list)  # link entity -> the ports/optics it connects
    for e in topology["links"]:
        if e["relation"] == "connects":
            for a, b in ((e["source"], e["target"]), (e["target"], e["source"])):
                if nodes[a]["kind"] == "link":
                    links[a].append(b)
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    lldp: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, ends in sorted(links.items()):
        optic = next((e for e in ends if nodes[e]["kind"] == "optic"), None)
        ports = [e for e in ends if nodes[e]["kind"] == "port"]
        if optic is not None and ports:
            nic, port = nodes[optic]["nic"], ports[0]
            host, rail = nodes[nic]["node"], nodes[nic]["rail"]
            switch = nodes[port]["switch"]
            lines.append(
                f"CA {0:5d} 1 {_guid(nic)} 4x NDR - SW {0:5d} {_physical(port):3d} {_guid(switch)} "
                f"( '{host} mlx5_{rail}' - '{switch}' )"
            )
            lldp[host].append(_neighbour(f"ens{rail + 1}f0np0", switch, f"swp{_physical(port)}"))
        elif len(ports) == 2:
            lower, upper = sorted(ports, key=lambda e: (nodes[nodes[e]["switch"]]["kind"] != "leaf", e))
            a, b = nodes[lower]["switch"], nodes[upper]["switch"]
            lines.append(
                f"SW {0:5d} {_physical(lower):3d} {_guid(a)} 4x NDR - SW {0:5d} {_physical(upper):3d} {_guid(b)} "
                f"( '{a}' - '{b}' )"
            )
            lldp[a].append(_neighbour(f"swp{_physical(lower)}", b, f"swp{_physical(upper)}"))
    (out / "fabric.ibnetdiscover").write_text("\n".join(lines) + "\n")
    (out / "lldp").mkdir(exist_ok=True)
    for host, interfaces in lldp.items():
        (out / "lldp" / f"{host}.json").write_text(json.dumps({"lldp": {"interface": interfaces}}, indent=1) + "\n")
    _inventory(topology, nodes, out / "inventory.csv")
    return True


def _neighbour(interface: str, switch: str, port: str) -> dict[str, Any]:
    """One interface of `lldpcli -f json show neighbors`, as lldpd writes it (objects keyed by name)."""
    return {
        interface: {
            "via": "LLDP",
            "chassis": {switch: {"id": {"type": "mac", "value": _guid(switch)[2:14]}, "capability": []}},
            "port": {"id": {"type": "ifname", "value": port}, "descr": port},
        }
    }


def _inventory(topology: dict[str, Any], nodes: dict[str, dict[str, Any]], path: Path) -> None:
    count: dict[str, Counter[str]] = defaultdict(Counter)
    for n in topology["nodes"]:
        if n["kind"] in ("gpu", "psu", "nvswitch"):
            count[n["node"]][n["kind"]] += 1
    cooling = {n["rack"]: n["id"] for n in topology["nodes"] if n["kind"] == "cooling"}
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["device", "role", "rack", "position", "psus", "cooling", "gpus", "nvswitches"])
        position: Counter[str] = Counter()
        for n in topology["nodes"]:
            if n["kind"] != "node":
                continue
            rack = n.get("rack", "")
            position[rack] += 1
            c = count[n["id"]]
            w.writerow(
                [n["id"], "node", rack, position[rack], c["psu"], cooling.get(rack, ""), c["gpu"], c["nvswitch"]]
            )


__all__ = ["write_site_formats"]
