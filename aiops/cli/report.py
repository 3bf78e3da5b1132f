"""`aiops report RUN_DIR [--truth TRUTH] --out DIR`: a recorded run as HTML pages and PNGs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("report", help="a run as pages: timeline, detection, prediction, a page per incident")
    p.add_argument("run", metavar="RUN_DIR", help="the folder `aiops run --out` wrote")
    p.add_argument("--truth", metavar="FILE", help="truth.jsonl of a generated run: scores, faults on the timeline")
    p.add_argument(
        "--input", metavar="DIR", help="the run's input (topology.json, telemetry.lp); default: beside the truth"
    )
    p.add_argument("--out", metavar="DIR", required=True, help="where index.html and the rest go")
    p.add_argument(
        "--serve",
        metavar="[HOST:]PORT",
        help="then serve the pages over HTTP until interrupted (a head node has no desktop); host default 127.0.0.1",
    )
    p.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from aiops.cli.common import CliError
    from aiops.progress_bar import Progress
    from rca.graph import GraphError
    from show.report import write_report

    truth = Path(args.truth) if args.truth else None
    try:  # on a terminal a bar; piped, a line every few seconds (a report of a long run takes a minute)
        with Progress(_incident_count(Path(args.run)), "aiops report", "incident pages") as bar:
            done = write_report(
                Path(args.run),
                Path(args.out),
                truth,
                Path(args.input) if args.input else None,
                progress=lambda n: bar.update(completed=n),
            )
    except (OSError, GraphError, ValueError) as exc:
        raise CliError(str(exc)) from None
    for note in done["notes"]:
        print(f"aiops report: {note}", file=sys.stderr)
    print(
        f"{Path(args.out) / 'index.html'}: {done['incidents']} incidents, {done['faults']} faults, "
        f"{done['pages']} incident pages, {len(done['pngs'])} pictures"
    )
    if args.serve:
        return _serve(Path(args.out), args.serve)
    return 0


def _serve(folder: Path, address: str) -> int:
    import time

    from aiops.cli.common import CliError, stop_on_signals
    from show.serve import parse_address, serve_folder

    try:
        host, port = parse_address(address)
        server = serve_folder(folder, host, port)
    except (OSError, ValueError) as exc:
        raise CliError(str(exc)) from None
    shown_host = f"[{host}]" if ":" in host else host
    print(f"serving {folder} on http://{shown_host}:{server.server_address[1]}/index.html (Ctrl-C to stop)", flush=True)
    stopping = stop_on_signals()  # SIGINT or SIGTERM: stop serving, exit 0
    try:
        while not stopping():
            time.sleep(0.2)
    finally:
        server.shutdown()
        server.server_close()
    return 0


def _incident_count(run: Path) -> int | None:
    """How many incidents (pages) the run holds: the distinct ids of its incidents.jsonl; None
    when it cannot be read (the report says why)."""
    try:
        with (run / "incidents.jsonl").open() as f:
            return len({json.loads(line).get("incident_id") for line in f if line.strip()})
    except (OSError, ValueError, AttributeError):
        return None
