"""`aiops topology import`: the topology file the daemons read, from what the site's tools write
(so far the InfiniBand fabric as `ibnetdiscover` prints it, with an optional node-name map), and
a report of the fabric's health from its own description.

Every input is bounded and every name checked against the id grammar (`vocab.bounds`,
`vocab.ids`): a malformed or oversized file is refused with one line naming the file, the place
and the rule, exit status 2, and nothing written."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("topology", help="the cluster's topology from the fabric and the inventory")
    what = p.add_subparsers(dest="topology_command", required=True)
    i = what.add_parser("import", help="write topology.json from ibnetdiscover output, with a report")
    i.add_argument("--ibnetdiscover", metavar="FILE", help="ibnetdiscover output (plain or -p): an InfiniBand fabric")
    i.add_argument(
        "--lldp", metavar="FILE_OR_DIR", help="lldpcli -f json/json0 show neighbors, one file per host: a RoCE fabric"
    )
    i.add_argument(
        "--inventory", metavar="FILE", help="racks, PSUs, cooling, GPUs: a CSV or NetBox's /api/dcim/devices/ JSON"
    )
    i.add_argument("--node-name-map", metavar="FILE", help="infiniband-diags' node-name map: GUID name per line")
    i.add_argument("--out", metavar="FILE", required=True, help="the topology file to write (JSON node-link)")
    i.add_argument("--report", metavar="FILE", help="also write the counts and findings as JSON")
    i.add_argument("--dry-run", action="store_true", help="write nothing; with --against, print what would change")
    i.add_argument("--against", metavar="FILE", help="the topology in use, to compare with (--dry-run)")
    i.set_defaults(handler=cmd_topology_import)


def cmd_topology_import(args: argparse.Namespace) -> int:
    from aiops.cli.common import CliError
    from context.fabric import build
    from context.ibnetdiscover import FabricFormatError, read, read_node_name_map
    from context.inventory import merge
    from context.inventory import read as read_inventory
    from context.lldp import fabric_from_lldp, read_neighbours
    from rca.graph import GraphError, TopologyGraph

    if bool(args.ibnetdiscover) == bool(args.lldp):
        raise CliError("give the fabric as one of --ibnetdiscover FILE (InfiniBand) or --lldp FILE_OR_DIR (RoCE)")
    try:
        names = read_node_name_map(Path(args.node_name_map)) if args.node_name_map else {}
        if args.ibnetdiscover:
            fabric = read(Path(args.ibnetdiscover))
        else:
            fabric = fabric_from_lldp(read_neighbours(Path(args.lldp)))
        topology = build(fabric, names)
        if args.inventory:
            merge(topology, read_inventory(Path(args.inventory)))
        TopologyGraph(topology.nodes, topology.links)  # validated as the daemons will load it
    except (OSError, FabricFormatError, GraphError) as exc:  # nothing is written
        raise CliError(str(exc)) from None
    except (ValueError, RecursionError) as exc:  # a reader's check missed: still one line, not a traceback
        raise CliError(f"the topology input is not usable: {type(exc).__name__}: {str(exc)[:300]}") from None
    report = topology.report()
    out = Path(args.out)
    if args.dry_run:
        if args.against:
            from context.diff import diff

            try:
                old = json.loads(Path(args.against).read_text())
            except (OSError, ValueError) as exc:
                raise CliError(f"{args.against}: cannot read the topology in use ({exc})") from None
            print("\n".join(diff(old, topology.node_link()).lines()))
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(topology.node_link()) + "\n")
        if args.report:
            Path(args.report).write_text(json.dumps(report, indent=1) + "\n")
    c = report["counts"]
    s = c["switches"]
    print(
        f"{out}: {s['leaf']} leaves, {s['spine']} spines, {s['core']} core switches; {c['hosts']} hosts, "
        f"{c['hcas']} HCAs, {c['cables']} cables, {c['rails']} rail(s)"
        + (" (rail-optimised)" if c["rail_optimised"] else "")
    )
    print("\n".join(first_screen(report)))
    return 0


TOP = 10  # findings on the first screen (a terminal's 24 lines with the summary)


def first_screen(report: dict[str, Any]) -> list[str]:
    """The summary (problems, then notes, by kind) and the top findings, ranked by what they cost;
    the rest are in the report file."""
    summary, findings = report["summary"], report["findings"]
    if not findings:
        return ["no findings"]

    def said(side: str) -> str:
        kinds = summary[side]
        return ", ".join(f"{n} {kind}" for kind, n in kinds.items()) if kinds else "none"

    lines = [f"problems: {said('problems')}; notes: {said('notes')}"]
    for n, f in enumerate(findings[:TOP], 1):
        lines.append(f"  {n}. {f['kind']} {f['entity']}: {f['message'][:300]}; fix: {f['fix'][:200]}")
    if len(findings) > TOP:
        lines.append(f"  ... {len(findings) - TOP} more findings, with their evidence, in the report (--report FILE)")
    return lines
