"""`aiops detect`: the detectors over a recorded folder (scored against its truth with --eval), or
between Kafka topics as a member of the detection group."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from aiops.cli.common import CliError, folder_progress, load_predictor, settings_from, stop_on_signals
from aiops.cli.daemon import add_daemon_options
from vocab.settings import Settings


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("detect", help="run the detectors over a recorded folder or between Kafka topics")
    p.add_argument("--input", metavar="DIR", help="folder with telemetry.lp (and events.jsonl)")
    p.add_argument("--out", metavar="DIR", help="where anomalies.jsonl and deadletters.jsonl go")
    p.add_argument("--eval", action="store_true", help="score against DIR/truth.jsonl afterwards")
    add_daemon_options(p, "aiops.telemetry -> aiops.anomalies, aiops.predictions (a member of the group)")
    p.add_argument("--stats", metavar="FILE", help="with --kafka: what the member counted, as JSON, when it stops")
    p.set_defaults(handler=cmd_detect)


def cmd_detect(args: argparse.Namespace) -> int:
    from aiops.detect_daemon import detect_kafka
    from detectors.detect_loop import detect_folder, load_events, read_anomalies
    from detectors.evaluate import evaluate, format_report
    from detectors.predict.online import (
        Prediction,
        evaluate_predictions,
        format_prediction_report,
    )

    settings = settings_from(args)
    interval = _scrape_interval(args, settings)
    predictor = load_predictor(args)
    if args.kafka:
        events = load_events(Path(args.events)) if args.events else []
        kafka = settings.kafka.model_copy(update={"detect_group": args.group}) if args.group else settings.kafka
        stats = detect_kafka(
            kafka,
            interval,
            stop_on_signals(),
            events,
            idle_stop_s=args.stop_when_idle,
            lateness_s=args.lateness if args.lateness is not None else settings.tick_lateness_s,
            predictor=predictor,
            detector_settings=settings.detectors,
            state_dir=Path(args.state_dir) if args.state_dir else settings.state_dir,
            checkpoint_every_s=settings.checkpoint_every_s,
        )
        print(f"{stats.ticks} ticks, {stats.values:,} values, {stats.anomalies} anomalies -> {kafka.anomalies_topic}")
        if args.stats:
            Path(args.stats).write_text(json.dumps(dataclasses.asdict(stats)) + "\n")
        return 0
    if not args.input or not args.out:
        raise CliError("give --input DIR and --out DIR, or --kafka HOST:PORT")
    source, out = Path(args.input), Path(args.out)
    try:
        with folder_progress(source, "aiops detect", counts_ticks=False) as step:
            stats = detect_folder(
                source,
                out,
                interval,
                on_tick=lambda: step(0),
                predictor=predictor,
                detector_settings=settings.detectors,
            )
    except FileNotFoundError as exc:
        raise CliError(str(exc)) from None
    print(
        f"{stats.ticks} ticks, {stats.values:,} values in {stats.seconds:.1f}s "
        f"({stats.values / max(stats.seconds, 1e-9):,.0f} values/s): {stats.anomalies} anomalies "
        f"({stats.suppressed} held back for announced maintenance), {stats.deadletters} dead letters -> {out}"
    )
    truth = source / "truth.jsonl"
    if args.eval and truth.is_file():  # scoring only: detection never reads the truth
        records = [json.loads(line) for line in truth.read_text().splitlines() if line.strip()]
        topology = json.loads((source / "topology.json").read_text())
        gpus = int(topology["graph"]["gpus"])
        hours = stats.ticks * interval / 3600
        print(format_report(evaluate(read_anomalies(out / "anomalies.jsonl"), records, interval, gpus, hours)))
        if predictor is not None:
            lines = (out / "predictions.jsonl").read_text().splitlines()
            predictions = [Prediction.from_json(line) for line in lines if line.strip()]
            report = evaluate_predictions(predictions, records, earliest=_first_time(source) + predictor.warmup_s)
            print(format_prediction_report(report))
    return 0


def _first_time(folder: Path) -> float:
    with (folder / "telemetry.lp").open("rb") as f:
        return int(f.readline().rsplit(b" ", 1)[1]) / 1e9


def _scrape_interval(args: argparse.Namespace, settings: Settings) -> float:
    """--interval, else the daemons' setting, else (offline) the folder's meta.json; else a
    one-line refusal."""
    from detectors.detect_loop import IntervalUnknownError, scrape_interval

    given = getattr(args, "interval", None)
    given = given if given is not None else settings.scrape_interval_s
    folder = Path(args.input) if getattr(args, "input", None) and not getattr(args, "kafka", None) else None
    try:
        return scrape_interval(folder, given)
    except IntervalUnknownError as exc:
        raise CliError(str(exc)) from None
