"""`aiops score-csv`: anomaly scores in [0, 1] for a CSV with a timestamp column, from the series
detector run online over it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aiops.cli.common import CliError


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("score-csv", help="anomaly scores in [0, 1] for a CSV with a timestamp column, online")
    p.add_argument("input", metavar="IN.csv")
    p.add_argument("--out", metavar="OUT.csv", required=True)
    p.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="change a detector setting (detectors/series.py SeriesConfig), e.g. still=true for sensors "
        "that freeze, period_days=7 for series with weeks of history; repeatable",
    )
    p.set_defaults(handler=cmd_score_csv)


def cmd_score_csv(args: argparse.Namespace) -> int:
    from detectors.scorecsv import ScoreCsvError, score_csv
    from detectors.series import SeriesConfig

    try:
        config = SeriesConfig.from_settings(args.set or [])
    except ValueError as exc:
        raise CliError(f"--set {exc}") from None
    try:
        rows = score_csv(Path(args.input), Path(args.out), config)
    except (ScoreCsvError, OSError) as exc:
        raise CliError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    print(f"scored {rows} rows -> {args.out}")
    return 0
