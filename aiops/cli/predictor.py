"""`aiops predictor train|default|evaluate`: the failure predictor trained on histories (a site's
own or generated), the default one made ready, or scored on held-out generated histories."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from aiops.cli.common import CliError, meta_ticks


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("predictor", help="the failure predictor: train one, or make the default ready")
    p.add_argument("action", choices=["train", "default", "evaluate"])
    p.add_argument("--seeds", type=int, nargs="+", default=[3001, 3002], help="with evaluate: held-out histories")
    p.add_argument(
        "--data",
        nargs="+",
        metavar="DIR",
        help="histories to train on: telemetry.lp and a failure log (failures.jsonl or truth.jsonl), "
        "a site's own or generated (aiops gen --out)",
    )
    p.add_argument("--out", metavar="MODEL", help="where the model goes (a .card.json lands beside it)")
    p.add_argument("--retrain", action="store_true", help="with default: train again even if cached")
    p.add_argument("--interval", type=float, metavar="SECONDS", help="with train: scrape interval (default: meta.json)")
    p.set_defaults(handler=cmd_predictor)


def cmd_predictor(args: argparse.Namespace) -> int:
    from aiops.default_model import default_model_path, install_shipped, shipped_model_path, train_default
    from aiops.progress_bar import Progress
    from detectors.detect_loop import IntervalUnknownError, scrape_interval, ticks_from_folder
    from detectors.predict.model import Dataset, ModelError, card_path, collect, load, save, train

    if args.action == "train":
        if not args.data or not args.out:
            raise CliError("give --data DIR [DIR ...] and --out MODEL")
        from detectors.predict.failure_log import FailureLogError, read_failure_log

        histories: list[tuple[Path, float, list[dict[str, Any]]]] = []
        for folder in map(Path, args.data):
            # a site's own history: its telemetry as line protocol, its failure log in the truth
            # format (failures.jsonl, or truth.jsonl as aiops gen writes it)
            log_file = next((folder / n for n in ("failures.jsonl", "truth.jsonl") if (folder / n).is_file()), None)
            if log_file is None or not (folder / "telemetry.lp").is_file():
                raise CliError(
                    f"{folder} needs telemetry.lp (line protocol) and a failure log, failures.jsonl or "
                    "truth.jsonl (one JSON object per failure: kind, root, onset, end)"
                )
            try:
                failures = read_failure_log(log_file)
                interval = scrape_interval(folder, getattr(args, "interval", None))
            except (FailureLogError, IntervalUnknownError) as exc:
                raise CliError(str(exc)) from None
            kept_out = ", ".join(f"{k} {n}" for k, n in sorted(failures.unpredictable.items()))
            print(
                f"{folder}: {len(failures.records)} failures that announce themselves"
                + (f" (kept out, no precursor: {kept_out})" if kept_out else "")
            )
            histories.append((folder, interval, failures.records))
        counts = [meta_ticks(folder) for folder, _, _ in histories]
        dataset = Dataset()
        with Progress(None if None in counts else sum(c or 0 for c in counts), "aiops predictor train", "ticks") as bar:
            for folder, interval, records in histories:
                collect(bar.track(ticks_from_folder(folder, interval)), records, dataset)
        predictor = train(dataset, sources=[str(Path(d).resolve()) for d in args.data])
        save(predictor, Path(args.out))
        print(f"model -> {args.out}, card -> {card_path(Path(args.out))}")
        return 0
    path = Path(args.out) if args.out else default_model_path()
    if args.action == "default":
        try:
            if args.retrain:
                raise ModelError("retrain requested")
            load(path)
            print(f"default model ready: {path}")
        except ModelError:
            if not args.retrain and install_shipped(path):
                print(f"default model (shipped with the package: {shipped_model_path()}) -> {path}")
            else:
                train_default(path)
                print(f"trained the default model -> {path}")
        print(card_path(path).read_text())
        return 0
    if args.action == "evaluate":
        from aiops.default_model import evaluate_on_generated, load_or_train_default
        from detectors.predict.online import format_prediction_report, pool_reports

        model = load(path) if args.out else load_or_train_default()
        reports = evaluate_on_generated(model, args.seeds)
        for seed, report in zip(args.seeds, reports, strict=True):
            print(f"held-out generated history, seed {seed}:")
            print(format_prediction_report(report))
        if len(reports) > 1:
            print(f"all {len(reports)} held-out histories together:")
            print(format_prediction_report(pool_reports(reports)))
        model.card["held_out"] = {
            str(s): {
                "recall": r.recall,
                "precision": r.precision,
                "median_lead_h": r.median_lead_h,
                "per_kind": r.kinds,
            }
            for s, r in zip(args.seeds, reports, strict=True)
        }
        card_path(path).write_text(json.dumps(model.card, indent=2, sort_keys=True) + "\n")
        return 0
    raise CliError(f"unknown predictor action {args.action!r}")
