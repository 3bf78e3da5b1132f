"""`aiops`: one command line for every stage. Subcommands parse arguments and call library code;
nothing here holds logic worth testing on its own."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiops.cli.dashboards as cli_dashboards
import aiops.cli.rca as cli_rca
import aiops.cli.report as cli_report
import aiops.cli.scheduler as cli_scheduler
import aiops.cli.topology as cli_topology
from aiops.cli.common import CliError, folder_progress, load_predictor, meta_ticks, settings_from, stop_on_signals
from aiops.cli.daemon import add_daemon_options
from vocab.settings import Settings

Handler = Callable[[argparse.Namespace], int]


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


def cmd_produce(args: argparse.Namespace) -> int:
    from detectors.detect_loop import read_chunks
    from ingest.kafka import TelemetryProducer, ensure_topics
    from ingest.messages import messages_from_lines

    settings = settings_from(args)
    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"no such file: {path}")
    topic = settings.kafka.telemetry_topic
    ensure_topics(settings.kafka.bootstrap, [topic], partitions=args.partitions)
    producer = TelemetryProducer(settings.kafka.bootstrap)
    sent = 0
    for chunk in read_chunks(path):  # a recording of a large cluster is gigabytes: in pieces
        sent += producer.send(topic, messages_from_lines(chunk))
    producer.flush()
    producer.close()
    print(f"sent {sent} messages from {path} to {topic} at {settings.kafka.bootstrap}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("confluent_kafka") is None:  # an optional dependency: the bench extra
        raise CliError("aiops replay needs confluent-kafka: pip install 'aiops-gpu[bench]'")
    from aiops.replay import replay

    settings = settings_from(args)
    if args.speed <= 0:
        raise CliError(f"--speed takes a positive number, got {args.speed:g}")
    started_file = Path(args.started_file) if args.started_file else None

    def started(at: float) -> None:
        if started_file is not None:
            started_file.write_text(f"{at:.6f}\n")

    try:
        stats = replay(
            settings.kafka.bootstrap,
            args.source,
            settings.kafka.telemetry_topic,
            speed=args.speed,
            should_stop=stop_on_signals(),
            on_start=started,
        )
    except RuntimeError as exc:
        raise CliError(str(exc)) from exc
    except Exception as exc:  # confluent-kafka's KafkaException: a topic not there, a broker gone
        if type(exc).__name__ != "KafkaException":
            raise
        raise CliError(f"replay {args.source} at {settings.kafka.bootstrap}: {exc}") from None
    print(
        f"replayed {stats.records:,} records ({stats.bytes / 1e6:,.0f} MB) from {args.source} to "
        f"{settings.kafka.telemetry_topic}; at most {stats.behind_max_s:.2f} s behind their time"
    )
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.remote_write:
        return cmd_remote_write(args, settings)
    from ingest.service import run_ingest_service

    if args.downsample is not None:
        if args.downsample < 0:
            raise CliError(f"--downsample takes seconds >= 0 (0 = every value), got {args.downsample:g}")
        ingest = settings.ingest.model_copy(update={"downsample_s": args.downsample})
        settings = settings.model_copy(update={"ingest": ingest})
    stats = run_ingest_service(settings, should_stop=stop_on_signals(), idle_stop_s=args.stop_when_idle)
    print(
        f"ingested {stats.lines} lines ({stats.values} values); written {stats.written}, "
        f"dead-lettered {stats.deadlettered}, dropped {stats.dropped}"
    )
    if settings.ingest.downsample_s > 0:
        print(
            f"per {settings.ingest.downsample_s:g} s window: {stats.aggregated_rows} rows as "
            f"{stats.aggregate_points} points; late for their window {stats.late_for_window}, "
            f"stored before a restart {stats.repeated_after_restart}, still open {stats.open_rows}"
        )
    return 0


def cmd_remote_write(args: argparse.Namespace, settings: Settings) -> int:
    import os

    from pydantic import SecretStr

    from ingest.remote_write import MAX_BODY_BYTES
    from ingest.remote_write_service import Credentials, read_secret, run_remote_write, server_tls, start_refusal

    # Secrets from files or the environment, never the command line (ps and shell history show it):
    # the token as Prometheus's `authorization: {credentials_file}` sends it, the basic-auth pair as
    # `basic_auth` does (one line "user:password").
    try:
        token: SecretStr | None = None
        if args.remote_write_token_file:
            token = read_secret(Path(args.remote_write_token_file))
        elif os.environ.get("AIOPS_REMOTE_WRITE_TOKEN"):
            token = SecretStr(os.environ["AIOPS_REMOTE_WRITE_TOKEN"])
        basic = None
        if args.remote_write_basic_auth_file:
            user, sep, password = read_secret(Path(args.remote_write_basic_auth_file)).get_secret_value().partition(":")
            if not sep or not user or not password:
                raise ValueError(f"{args.remote_write_basic_auth_file}: give user:password on the first line")
            basic = (user, SecretStr(password))
        tls = None
        if args.remote_write_tls_cert or args.remote_write_tls_key:
            if not (args.remote_write_tls_cert and args.remote_write_tls_key):
                raise ValueError("--remote-write-tls-cert and --remote-write-tls-key go together")
            tls = server_tls(Path(args.remote_write_tls_cert), Path(args.remote_write_tls_key))
        credentials = Credentials(token, basic)
    except (OSError, ValueError) as exc:
        raise CliError(f"remote write: {exc}") from exc
    from aiops.cli.checks import listen_address

    host, _ = listen_address(args.remote_write)
    if refusal := start_refusal(host, credentials, tls is not None, args.remote_write_open):
        raise CliError(refusal)
    counts = run_remote_write(
        settings.kafka,
        args.remote_write,
        stop_on_signals(),
        idle_stop_s=args.stop_when_idle,
        max_body_bytes=args.remote_write_max_bytes or MAX_BODY_BYTES,
        credentials=credentials,
        tls=tls,
        open_door=args.remote_write_open,
    )
    print(
        f"remote write: {counts['requests']} requests, {counts['series']} series, {counts['samples']} samples "
        f"as {counts['lines']} lines; dead-lettered {counts['deadlettered']} ({counts['series_unmapped']} series "
        f"unmapped), {counts['stale_markers']} stale markers, {counts['dcgm_blanks']} DCGM blanks dropped, "
        f"refused {counts['refused']} ({counts['refused_bounds']} over a bound), unauthorized "
        f"{counts['unauthorized']}, busy {counts['busy']}, read timeouts {counts['read_timeouts']}, "
        f"Kafka unavailable {counts['unavailable']}"
    )
    return 0


def cmd_gen(args: argparse.Namespace) -> int:
    from aiops.progress_bar import Progress
    from telemetry_gen.emit import EmitStats, to_kafka, write_folder
    from telemetry_gen.faults import FaultSpecError
    from telemetry_gen.generator import GenConfig, Generation, write_jsonl, write_meta
    from telemetry_gen.simulate import T0
    from telemetry_gen.topology import TopologyError

    if bool(args.out) == bool(args.kafka):
        raise CliError("give exactly one of --out DIR or --kafka HOST:PORT")
    config = GenConfig(
        gpus=args.gpus,
        topology=args.topology,
        hours=args.hours,
        interval=args.interval,
        seed=args.seed,
        faults=args.faults,
        realism=args.realism,
        clock_offset_s=args.clock_offset,
        jitter_s=args.jitter,
        truncate_s=True if args.truncate_seconds else None,
        job_tags=False if args.no_job_tags else None,
        single_field=True if args.one_field_per_line else None,
        job_shapes=args.job_shapes,
        schedule_gpu_indices=not args.schedule_nodes_only,
        start=args.start if args.start is not None else T0,
    )
    try:
        gen = Generation(config)
    except FaultSpecError as exc:
        hint = " (a larger --gpus or --hours, or fewer --faults)" if "no free place" in str(exc) else ""
        raise CliError(f"{exc}{hint}") from None
    except (TopologyError, ValueError) as exc:
        raise CliError(str(exc)) from None
    progress = Progress(gen.sim.steps, "aiops gen", "ticks")

    def ticked(_: EmitStats) -> None:
        progress.advance()

    if args.out:
        out = Path(args.out)
        with progress:
            stats = write_folder(gen, out, speed=args.speed, on_tick=ticked)
        where = str(out)
        if args.site_formats:
            from telemetry_gen.site_formats import write_site_formats

            if not write_site_formats(json.loads((out / "topology.json").read_text()), out / "site"):
                print(f"aiops: no site formats for a {args.topology} (fat-trees only)", file=sys.stderr)
    else:
        from ingest.kafka import ensure_topics

        settings = settings_from(args)
        ensure_topics(settings.kafka.bootstrap, [settings.kafka.telemetry_topic])
        folder = Path(args.truth_dir) if args.truth_dir else None
        if folder is not None:  # the topology first: a daemon can start on it meanwhile
            folder.mkdir(parents=True, exist_ok=True)
            gen.topology.write(folder / "topology.json")
            write_meta(folder / "meta.json", gen)
        with progress:
            stats = to_kafka(
                gen, settings.kafka.bootstrap, settings.kafka.telemetry_topic, speed=args.speed, on_tick=ticked
            )
        where = f"{settings.kafka.telemetry_topic} at {settings.kafka.bootstrap}"
        if folder is not None:  # events and truth last: the stream adds events as it goes
            write_jsonl(folder / "events.jsonl", gen.events())
            write_jsonl(folder / "truth.jsonl", gen.truth())
    rate = stats.values / max(stats.seconds, 1e-9)
    print(
        f"generated {config.gpus:,} GPUs ({config.topology}), {stats.ticks} ticks, {stats.values:,} values, "
        f"{len(gen.faults)} faults -> {where} in {stats.seconds:.1f}s ({rate:,.0f} values/s)"
    )
    return 0


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


def cmd_bench(args: argparse.Namespace) -> int:
    """A bench that cannot run (no service where it was pointed, a stage that failed in a child
    process) says so in one line, exit 1, with the child's own last word when it left a log."""
    from benchmarks.run import run_bench

    try:
        return run_bench(args)
    except OSError as exc:  # requests' ConnectionError is one: nothing listens at the URL
        where = getattr(args, "influx", None)
        refused = isinstance(exc, ConnectionError) or type(exc).__name__ == "ConnectionError"
        if refused and where:
            said = f"no InfluxDB answers at {where} (--influx); scripts/services up starts one"
        else:
            said = (str(exc).splitlines() or [type(exc).__name__])[0]
        print(f"aiops bench {args.bench}: {said}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"aiops bench {args.bench}: {exc}{_last_word(str(exc))}", file=sys.stderr)
        return 1


def _last_word(message: str) -> str:
    """`: <the last line of the log>` when `message` says `see FILE.log` and that line is aiops's
    own one-line refusal (`aiops: ...`); else nothing."""
    import re

    found = re.search(r"see (\S+\.log)\b", message)
    if found is None:
        return ""
    try:
        lines = [line for line in Path(found.group(1)).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {lines[-1].removeprefix('aiops: ')}" if lines and lines[-1].startswith("aiops: ") else ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiops", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

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

    p = sub.add_parser("produce", help="publish a line-protocol file to Kafka")
    p.add_argument("file")
    p.add_argument("--kafka", metavar="HOST:PORT", help="bootstrap server (default from AIOPS_KAFKA__BOOTSTRAP)")
    p.add_argument("--topic", help="topic (default aiops.telemetry)")
    p.add_argument("--partitions", type=int, default=6, help="partitions if the topic must be created")
    p.set_defaults(handler=cmd_produce)

    p = sub.add_parser(
        "replay",
        help="publish a recorded telemetry topic (one partition, CreateTime = scrape time) to the telemetry "
        "topic at the pace it was scraped",
    )
    p.add_argument("source", help="the recorded topic")
    p.add_argument("--kafka", metavar="HOST:PORT", help="bootstrap server (default from AIOPS_KAFKA__BOOTSTRAP)")
    p.add_argument("--topic", help="where to (default aiops.telemetry)")
    p.add_argument("--speed", type=float, default=1.0, help="times real time (default 1)")
    p.add_argument("--started-file", metavar="FILE", help="write the wall clock of the first release here")
    p.set_defaults(handler=cmd_replay)

    p = sub.add_parser(
        "ingest",
        help="consume telemetry from Kafka and write it raw to InfluxDB; with --remote-write, take "
        "Prometheus remote write onto the telemetry topic instead",
    )
    p.add_argument("--kafka", metavar="HOST:PORT")
    p.add_argument("--topic")
    p.add_argument("--group", help="consumer group (default aiops-ingest)")
    p.add_argument("--influx", metavar="URL", help="InfluxDB URL (default from AIOPS_INFLUX__URL)")
    p.add_argument("--database", help="InfluxDB database (default aiops)")
    p.add_argument("--stop-when-idle", type=float, metavar="SECONDS", help="exit after this long with no input")
    p.add_argument(
        "--downsample",
        type=float,
        metavar="SECONDS",
        help="store raw telemetry per window of this many seconds (mean/max/min of gauges, last of counters; "
        "default AIOPS_INGEST__DOWNSAMPLE_S, 0 = every value); Kafka keeps full resolution",
    )
    p.add_argument(
        "--remote-write",
        metavar="HOST:PORT",
        help="instead: listen for Prometheus remote write 1.0 (POST /api/v1/write; :PORT is 127.0.0.1) and publish "
        "the dcgm-exporter "
        "and node-exporter InfiniBand series to the telemetry topic as the catalog's lines (docs/collectors.md)",
    )
    p.add_argument(
        "--remote-write-max-bytes",
        type=int,
        metavar="BYTES",
        help="largest compressed body taken (default 16 MiB; the decompressed limit is 4 times this, at least 64 MiB)",
    )
    p.add_argument(
        "--remote-write-token-file",
        metavar="FILE",
        help="require Authorization: Bearer <the token on this file's first line> (Prometheus's remote_write "
        "authorization: credentials_file); or AIOPS_REMOTE_WRITE_TOKEN",
    )
    p.add_argument(
        "--remote-write-basic-auth-file",
        metavar="FILE",
        help="also take basic auth (Prometheus's basic_auth): 'user:password' on this file's first line",
    )
    p.add_argument("--remote-write-tls-cert", metavar="PEM", help="serve HTTPS with this certificate (chain)")
    p.add_argument("--remote-write-tls-key", metavar="PEM", help="and this private key")
    p.add_argument(
        "--remote-write-open",
        action="store_true",
        help="listen on an address other than loopback without credentials or TLS (logged as a warning); "
        "without it such a door refuses to start",
    )
    p.set_defaults(handler=cmd_ingest)

    p = sub.add_parser("gen", help="generate a synthetic cluster's telemetry, events and truth")
    p.add_argument("--gpus", type=int, default=1024, help="cluster size (a multiple of 8)")
    p.add_argument("--topology", default="fat-tree", choices=["fat-tree", "torus", "dragonfly"])
    p.add_argument("--hours", type=float, default=6.0, help="simulated hours")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between ticks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--start",
        type=float,
        metavar="UNIX_S",
        help="event time of the first tick (default 2026-01-01T00:00:00Z, so runs compare); "
        "e.g. $(( $(date +%%s) - 6*3600 )) for a history that ends now",
    )
    p.add_argument(
        "--faults", metavar="SPEC", help="e.g. gpu_hbm_ecc=3,leaf_down=1 or all=2; default: the published rate"
    )
    p.add_argument(
        "--job-shapes",
        choices=["nodes", "gpus"],
        default="nodes",
        help="jobs hold whole nodes, or any number of GPUs (several jobs sharing a node)",
    )
    p.add_argument(
        "--schedule-nodes-only",
        action="store_true",
        help="events name each job's nodes, not the GPU indices it holds there",
    )
    p.add_argument("--speed", type=float, help="pace: simulated seconds per second (default: as fast as possible)")
    p.add_argument("--out", metavar="DIR", help="write topology.json, telemetry.lp, events.jsonl, truth.jsonl")
    p.add_argument("--force", action="store_true", help="with --out: write into a folder that is not empty")
    p.add_argument("--kafka", metavar="HOST:PORT", help="publish telemetry to Kafka instead")
    p.add_argument("--topic", help="Kafka topic (default aiops.telemetry)")
    p.add_argument("--truth-dir", metavar="DIR", help="with --kafka: where topology, events and truth go")
    p.add_argument(
        "--site-formats",
        action="store_true",
        help="with --out: also the cluster as a site's tools describe it, in site/ (ibnetdiscover, LLDP, inventory)",
    )
    p.add_argument(
        "--realism",
        default="typical",
        choices=["clean", "typical", "harsh"],
        help="a healthy fleet's everyday noise (default typical; clean: none, for exact fault signatures)",
    )
    collector = p.add_argument_group(
        "what real collectors send (the line protocol only, never the physics; default: the realism level's)"
    )
    collector.add_argument("--clock-offset", type=float, metavar="S", help="per-host clocks off by 0..S s")
    collector.add_argument("--jitter", type=float, metavar="S", help="per-host, per-tick jitter 0..S s")
    collector.add_argument(
        "--truncate-seconds", action="store_true", help='timestamps in whole seconds (precision "1s")'
    )
    collector.add_argument(
        "--no-job-tags", action="store_true", help="GPU lines without a job tag (stock dcgm-exporter)"
    )
    collector.add_argument(
        "--one-field-per-line", action="store_true", help="one line per sample, as Telegraf's metric_version = 2"
    )
    p.set_defaults(handler=cmd_gen)

    p = sub.add_parser("detect", help="run the detectors over a recorded folder or between Kafka topics")
    p.add_argument("--input", metavar="DIR", help="folder with telemetry.lp (and events.jsonl)")
    p.add_argument("--out", metavar="DIR", help="where anomalies.jsonl and deadletters.jsonl go")
    p.add_argument("--eval", action="store_true", help="score against DIR/truth.jsonl afterwards")
    add_daemon_options(p, "aiops.telemetry -> aiops.anomalies, aiops.predictions (a member of the group)")
    p.add_argument("--stats", metavar="FILE", help="with --kafka: what the member counted, as JSON, when it stops")
    p.set_defaults(handler=cmd_detect)

    cli_rca.add_parsers(sub)
    cli_topology.add_parsers(sub)
    cli_scheduler.add_parsers(sub)
    cli_report.add_parsers(sub)
    cli_dashboards.add_parsers(sub)

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

    p = sub.add_parser("bench", help="benchmarks that print tables")
    bench = p.add_subparsers(dest="bench", required=True)
    b = bench.add_parser("ingest", help="decode, Kafka and InfluxDB throughput")
    b.add_argument("--gpus", type=int, default=10_000, help="cluster size of the synthetic tick")
    b.add_argument("--ticks", type=int, default=3, help="ticks through Kafka and InfluxDB")
    b.add_argument("--repeat", type=int, default=5, help="decode repetitions (best is reported)")
    b.add_argument("--kafka", metavar="HOST:PORT", help="also measure Kafka end to end")
    b.add_argument("--influx", metavar="URL", help="also measure InfluxDB writes")
    b = bench.add_parser("store", help="InfluxDB at full resolution and downsampled vs what 10k/100k GPUs need")
    b.add_argument("--influx", metavar="URL", default="http://127.0.0.1:8086")
    b.add_argument("--gpus", type=int, default=1024, help="cluster size written to InfluxDB")
    b.add_argument("--minutes", type=float, default=5.0, help="cluster time written (whole windows)")
    b.add_argument("--interval", type=float, default=10.0, help="scrape interval, seconds")
    b.add_argument("--window", type=float, default=60.0, help="downsampling window, seconds")
    b.add_argument("--repeat", type=int, default=3, help="downsampler runs (best is reported)")
    b.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="cluster sizes to size for")
    b.add_argument("--out", help="also write the figures as JSON here")
    b = bench.add_parser("gen", help="generator throughput and topology sizes")
    b.add_argument("--sizes", type=int, nargs="+", default=[1024, 10_000, 100_000], help="cluster sizes in GPUs")
    b.add_argument("--ticks", type=int, default=4, help="ticks per size")
    b.add_argument("--kafka", metavar="HOST:PORT", help="also publish to Kafka")
    b.add_argument("--kafka-max-gpus", type=int, default=10_000, help="largest size sent to Kafka")
    b = bench.add_parser("detect", help="detector stack throughput and state, beside river and pysad")
    b.add_argument("--gpus", type=int, default=10_000)
    b.add_argument(
        "--realism", choices=["clean", "typical", "harsh"], default="typical", help="the fleet noise in the stream"
    )
    b.add_argument("--ticks", type=int, default=5)
    b.add_argument("--peer-samples", type=int, default=20_000, help="samples fed to each one-at-a-time library")
    b = bench.add_parser(
        "nab", help="NAB scores of the series detector, settings chosen out of fold (a NAB-layout folder)"
    )
    b.add_argument("--data", default=str(Path(__file__).resolve().parents[3] / "shared" / "datasets" / "nab"))
    b.add_argument("--out", help="also write the figures as JSON here")
    b = bench.add_parser("rca", help="root-cause ranking latency per tick: trickle, a leaf going down, a PFC storm")
    b.add_argument("--sizes", type=int, nargs="+", default=[1024, 10_000, 100_000], help="cluster sizes in GPUs")
    b.add_argument("--repeat", type=int, default=3, help="runs per size, fresh engine each (first: cold caches)")
    b.add_argument("--background-ticks", type=int, default=20, help="ticks of unrelated anomalies before a burst")
    b.add_argument("--seed", type=int, default=1)
    b = bench.add_parser("goodput", help="GPU-hours lost with and without acting (drains on failures, on predictions)")
    b.add_argument("--gpus", type=int, default=4096)
    b.add_argument("--hours", type=float, default=48.0)
    b.add_argument("--interval", type=float, default=60.0)
    b.add_argument("--seeds", type=int, nargs="+", default=[2801, 2802])
    b.add_argument("--restart-s", type=float, default=600.0, help="a job's restart after an interruption (assumed)")
    b.add_argument("--human-s", type=float, default=1800.0, help="none: a person drains a failed node this long after")
    b.add_argument("--horizon-h", type=float, default=12.0, help="a drain with no fault this long after it is wrong")
    b.add_argument("--max-nodes", type=int, default=8, help="the breaker: nodes out of service per hour")
    b.add_argument("--max-fraction", type=float, default=0.02, help="the breaker: share of the cluster per hour")
    b.add_argument("--faults", help="a generator fault spec (e.g. all=1) instead of the Llama 3 rate")
    b.add_argument("--big-gpus", type=int, default=10_000, help="the large job whose ETTR is reported")
    b.add_argument("--big-ckpt-s", type=float, default=1800.0, help="the large job's checkpoint period")
    b.add_argument("--cache", default=None, help="keep each history's replay here (a rerun of the acting side is fast)")
    b.add_argument("--out", help="also write the figures as JSON here")
    b = bench.add_parser(
        "soak", help="the daemons under a 10,000-GPU stream for 30 min, with kills and a broker restart (services)"
    )
    b.add_argument("--minutes", type=float, default=30.0)
    b.add_argument("--gpus", type=int, default=10_000)
    b.add_argument("--interval", type=float, default=10.0)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--faults", default="all=1", help="the cluster's faults (a generator spec)")
    b.add_argument("--no-predict", action="store_true", help="run the root-cause daemon without the predictor")
    b.add_argument("--broker-down-s", type=float, default=10.0)
    b.add_argument("--sample-s", type=float, default=5.0, help="seconds between RSS and lag samples")
    b.add_argument("--drain-timeout-s", type=float, default=600.0)
    b.add_argument("--work", default="/tmp", help="where logs, state and the offline reference go")
    b.add_argument("--out", default="docs/bench", help="where soak.json and soak.svg go")
    b = bench.add_parser(
        "backlog",
        help="the daemons started behind a 6-hour backlog of 4,096 GPUs: equal to offline? memory? (services)",
    )
    b.add_argument("--gpus", type=int, default=4096)
    b.add_argument("--hours", type=float, default=6.0)
    b.add_argument("--interval", type=float, default=30.0)
    b.add_argument("--seed", type=int, default=717)
    b.add_argument("--faults", default="all=2", help="the cluster's faults (a generator spec)")
    b.add_argument("--speed", type=float, default=30.0, help="how fast the steady-state hour is paced")
    b.add_argument("--kill-after-s", type=float, default=5.0, help="SIGKILL this long after the first incident")
    b.add_argument("--checkpoint-every-s", type=float, default=10.0)
    b.add_argument("--work", default="/tmp", help="where the recording, logs and state go")
    b.add_argument("--keep", action="store_true", help="keep the recording")
    b.add_argument("--out", default="docs/bench", help="where backlog.json goes")
    b = bench.add_parser(
        "scale", help="split detection at 10,000 and 100,000 GPUs through Kafka, 1 and 2 members (services)"
    )
    b.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="cluster sizes in GPUs")
    b.add_argument("--members", type=int, nargs="+", default=[1, 2], help="detection members per run")
    b.add_argument("--ticks", type=int, default=12, help="cluster time, in scrapes")
    b.add_argument("--interval", type=float, default=10.0)
    b.add_argument("--seed", type=int, default=3)
    b.add_argument("--partitions", type=int, default=6)
    b.add_argument("--faults", default="all=1", help="the cluster's faults (a generator spec)")
    b.add_argument("--no-predict", dest="predict", action="store_false", help="the members without the predictor")
    b.add_argument("--idle-stop-s", type=float, default=20.0, help="a member stops after this long with no input")
    b.add_argument(
        "--consume",
        type=int,
        nargs="*",
        default=[500, 5000],
        help="batch sizes for the kafka-python/confluent-kafka read",
    )
    b.add_argument("--work", default="/tmp", help="where the recordings, logs and state go")
    b.add_argument("--keep", action="store_true", help="keep the recordings")
    b.add_argument(
        "--lateness",
        type=float,
        default=5.0,
        help="how long the members hold a tick for late rows (AIOPS_TICK_LATENESS_S; a tick's delay is at least this)",
    )
    b.add_argument(
        "--live",
        action="store_true",
        help="publish the cluster as it happens (gen --kafka --speed 1), not as a backlog: lag and tick delay",
    )
    b.add_argument(
        "--staged",
        action="store_true",
        help="live, from a recording staged to a topic first and replayed at the cluster's pace (aiops replay): "
        "the generator's and the encoder's CPU stay out of the measurement; no offline references (a 30-minute "
        "100,000-GPU recording is ~40 GB as a folder)",
    )
    b.add_argument("--out", default="docs/bench", help="where scale.json (and, live, scale-lag.svg) go")
    b = bench.add_parser(
        "dashboards", help="each dashboard panel's query on a GPU history in InfluxDB: rows and time per query"
    )
    b.add_argument("--influx", metavar="URL", default="http://127.0.0.1:8086")
    b.add_argument("--gpus", type=int, default=10_000, help="cluster size of the history")
    b.add_argument("--hours", type=float, default=1.0, help="history written, ending now")
    b.add_argument("--interval", type=float, default=10.0, help="scrape interval, seconds")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--faults", metavar="SPEC", help="fault schedule (aiops gen syntax; default: the published rate)")
    b.add_argument("--keep", action="store_true", help="keep the database afterwards (default: dropped)")
    b.add_argument("--out", help="also write the times as JSON here")
    b = bench.add_parser("hostile-poll", help="a poll with strings never closed: time, values kept, dead letters")
    b.add_argument("--messages", type=int, nargs="+", default=[10, 20, 40, 80], help="poll sizes, in messages")
    b.add_argument("--repeat", type=int, default=3, help="runs per size (best is reported)")
    p.set_defaults(handler=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # kafka-python warns whenever one large send holds its I/O loop for >100 ms; that is
    # expected with megabyte batches and says nothing the operator can act on.
    logging.getLogger("kafka.net.selector").setLevel(logging.ERROR)
    handler: Handler = args.handler
    from vocab.settings import unknown_variables

    for name, nearest in unknown_variables(os.environ):  # a misspelt setting is no setting at all
        hint = f" (did you mean {nearest}?)" if nearest else ""
        logging.getLogger("aiops.settings").warning(
            "%s is set but is no aiops setting: ignored%s; settings: docs/configuration.md", name, hint
        )
    from aiops.cli.checks import ArgumentError, check

    try:  # before the command imports its stage: a bad argument is refused in well under a second
        check(args)
    except ArgumentError as exc:
        print(f"aiops: {exc}", file=sys.stderr)
        return 2
    try:
        return handler(args)
    except CliError as exc:
        print(f"aiops: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a service error: one clear line, not a traceback
        from ingest.influx_writer import InfluxUnavailableError, InfluxWriteError
        from ingest.kafka import KafkaIOError

        if isinstance(exc, KafkaIOError | InfluxWriteError | InfluxUnavailableError):
            print(f"aiops: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())
