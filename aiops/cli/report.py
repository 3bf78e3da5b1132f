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
    return 0


def _incident_count(run: Path) -> int | None:
    """How many incidents (pages) the run holds: the distinct ids of its incidents.jsonl; None
    when it cannot be read (the report says why)."""
    try:
        with (run / "incidents.jsonl").open() as f:
            return len({json.loads(line).get("incident_id") for line in f if line.strip()})
    except (OSError, ValueError, AttributeError):
        return None
