"""`aiops catalog`, `aiops thresholds`, `aiops check-recording`: what the product holds as
reference (the telemetry catalog, the detector thresholds in force) and the check that those
thresholds raise nothing on a recorded healthy GPU."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from aiops.cli.common import CliError, settings_from


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("catalog", help="list the telemetry measurements and fields")
    p.add_argument("--markdown", action="store_true", help="print the full catalog as Markdown")
    p.set_defaults(handler=cmd_catalog)

    p = sub.add_parser("thresholds", help="the detector thresholds in force, each with its reason and source")
    p.set_defaults(handler=cmd_thresholds)

    p = sub.add_parser(
        "check-recording", help="replay the recorded real GPU as whole jobs: healthy GPUs must raise nothing"
    )
    p.add_argument("--recording", help="the NVML recording (default: ../shared/datasets/real-gpu/h200/nvml-1s.csv)")
    p.add_argument("--phases", default="train,burn,membound,cooldown", help="recorded phases, comma-separated")
    p.add_argument("--intervals", default="10,30,60", help="scrape intervals in seconds, comma-separated")
    p.add_argument(
        "--ticks", type=int, default=240, help="scrapes per replay (past 50 busy ones, each GPU is judged on its place)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--desync", action="store_true", help="every GPU anywhere in the trace (no synchronous step)")
    p.set_defaults(handler=cmd_check_recording)


def cmd_catalog(args: argparse.Namespace) -> int:
    from vocab.catalog import MEASUREMENTS, render_markdown

    if args.markdown:
        sys.stdout.write(render_markdown() + "\n")
    else:
        for m in MEASUREMENTS:
            print(f"{m.name:12s} id={m.id_tag:9s} key={m.partition_tag:7s} fields={len(m.metrics)}")
    return 0


def cmd_thresholds(args: argparse.Namespace) -> int:
    """The detector thresholds in force (defaults and this site's AIOPS_DETECTORS__* overrides),
    each with its reason and source."""
    import json

    from vocab.thresholds import describe

    for name, value, why, source in describe(settings_from(args).detectors):
        shown = json.dumps(value, default=list) if not isinstance(value, str) else value
        print(f"{name} = {shown}\n    why: {why}\n    source: {source}")
    return 0


def cmd_check_recording(args: argparse.Namespace) -> int:
    """The recorded H200 replayed as whole jobs through detection and root cause: exit 1 if
    anything was raised (aiops/recording_check.py)."""
    from aiops.recording_check import RECORDING, check, table

    recording = Path(args.recording) if args.recording else RECORDING
    if not recording.is_file():
        raise CliError(f"no recording at {recording}: give --recording nvml-1s.csv")
    phases = tuple(args.phases.split(","))
    intervals = tuple(float(x) for x in args.intervals.split(","))
    results = check(phases, intervals, ticks=args.ticks, seed=args.seed, recording=recording, desync=args.desync)
    print(table(results))
    return 1 if any(r.raised for r in results) else 0
