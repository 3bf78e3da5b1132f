"""`aiops demo`: its options, and which demo they pick: the generated cluster through the whole
pipeline (aiops/cli/demo.py), or the ingest path alone on a line-protocol file (demo_sample.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aiops.cli.common import CliError


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the pipeline in-process on an embedded sample (no services needed)")
    p.add_argument("--gpus", type=int, default=256)
    p.add_argument("--hours", type=float, default=4.0, help="simulated hours (the predictor speaks after 1)")
    p.add_argument("--speed", type=float, help="simulated seconds per second (default: as fast as it goes)")
    p.add_argument("--no-predict", action="store_true", help="without the failure predictor")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--faults", metavar="SPEC", help="fault schedule (aiops gen syntax)")
    p.add_argument("--sample", action="store_true", help="only the ingest path, on the sample shipped with the tests")
    p.add_argument("--input", help="with the ingest path: a line-protocol file instead of the sample")
    p.add_argument("--notify-config", metavar="FILE", help="also send the incidents to chat (see aiops run)")
    p.add_argument(
        "--report",
        "--out",
        dest="report",
        metavar="DIR",
        help="where the run and its report pages go (default: demo-report in the cache, ~/.cache/aiops)",
    )
    p.add_argument("--no-report", action="store_true", help="no report pages")
    p.set_defaults(handler=cmd_demo)


def demo_report_dir() -> Path:
    """Where `aiops demo` writes its run and report pages unless told (replaced by each demo)."""
    import os

    return Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops")) / "demo-report"


def cmd_demo(args: argparse.Namespace) -> int:
    if args.sample or args.input:  # the ingest path alone, on a line-protocol file
        from aiops.cli.demo_sample import run_demo

        return run_demo(Path(args.input) if args.input else None)
    # the imports below take seconds on a first start (Python compiles every module it loads once)
    print("aiops demo: loading the pipeline (ingest, the detectors, the root-cause engine, the predictor)", flush=True)
    from aiops.cli.demo import DEMO_FAULTS, run_cluster_demo
    from aiops.default_model import default_model_path, install_shipped, load_or_train_default
    from detectors.predict.model import ModelError, load
    from detectors.predict.online import OnlinePredictor

    predictor = None
    if not args.no_predict:
        try:
            load(default_model_path())
        except ModelError:
            print("aiops demo: the failure predictor's first use (the package's copy, or trained)", flush=True)
            if not install_shipped(default_model_path()):  # the package's copy serves on most installs
                print(f"training the failure predictor once (minutes), cached in {default_model_path().parent}")
        predictor = OnlinePredictor(load_or_train_default())
    from telemetry_gen.faults import FaultSpecError
    from telemetry_gen.topology import TopologyError

    notifier = None
    if args.notify_config:  # a fresh outbox each demo: the same demo twice gives the same keys
        import tempfile

        from notify.config import NotifyConfigError
        from notify.config import load as load_notify
        from notify.service import Notifier

        try:
            config = load_notify(Path(args.notify_config))
        except NotifyConfigError as exc:
            raise CliError(str(exc)) from None
        notifier = Notifier(config, Path(tempfile.mkdtemp(prefix="aiops-demo-")) / "notify-outbox.sqlite")
        notifier.start()
    report = None if args.no_report else Path(args.report) if args.report else demo_report_dir()
    if report is not None and report.is_dir() and not args.report:  # ours: the last demo's
        import shutil

        shutil.rmtree(report)
    try:
        return run_cluster_demo(
            report=report,
            gpus=args.gpus,
            hours=args.hours,
            seed=args.seed,
            faults=args.faults or DEMO_FAULTS,
            predictor=predictor,
            speed=args.speed,
            notifier=notifier,
        )
    except (TopologyError, FaultSpecError) as exc:
        raise CliError(f"{exc} (a larger --gpus or --hours, or fewer --faults)") from None
    finally:
        if notifier is not None:
            notifier.stop(drain_s=30.0)
            print(f"notifications: {notifier.summary()}")
