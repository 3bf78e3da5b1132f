"""`aiops run` (the whole pipeline: detectors, predictor, incidents) and `aiops eval`."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiops.cli.daemon import add_daemon_options
from vocab.thresholds import MIN_USEFUL_LEAD_S

if TYPE_CHECKING:
    from act.policy import ActConfig
    from aiops.daemon_metrics import DaemonMetrics
    from aiops.pipeline import HealthSink
    from detectors.predict.online import OnlinePredictor
    from notify.service import Notifier
    from rca.influx import IncidentWriter
    from vocab.settings import Settings

log = logging.getLogger(__name__)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("run", help="the whole pipeline: anomalies, predictions and incidents (folder or Kafka)")
    p.add_argument("--input", metavar="DIR", help="folder with topology.json, telemetry.lp, events.jsonl")
    p.add_argument("--out", metavar="DIR", help="where incidents.jsonl, anomalies.jsonl, predictions.jsonl go")
    add_daemon_options(p, "aiops.telemetry (or, --from-detection, the detectors' findings) -> incidents")
    p.add_argument("--topology", metavar="FILE", help="with --kafka: the cluster's topology.json")
    p.add_argument(
        "--wait-for-topology",
        action="store_true",
        help="with --kafka: if the topology file is not there yet, say so once and wait for it instead of refusing",
    )
    p.add_argument(
        "--from-detection",
        action="store_true",
        help="with --kafka: read the anomalies and predictions of `aiops detect --kafka` members (split detection) "
        "instead of telemetry",
    )
    p.add_argument("--influx", metavar="URL", help="also write incident states to InfluxDB (for Grafana)")
    p.add_argument("--database", help="with --influx: database (default aiops)")
    p.add_argument(
        "--notify-config",
        metavar="FILE",
        help="receivers and routes for chat notifications, YAML (default AIOPS_NOTIFY_CONFIG; none: send nothing)",
    )
    p.add_argument(
        "--actions",
        metavar="FILE",
        help="action policies, YAML (default AIOPS_ACTIONS_CONFIG; none: act on nothing); a dry run unless it says",
    )
    p.add_argument(
        "--api-port",
        type=int,
        metavar="PORT",
        help="with --kafka: serve the HTTP API here (default AIOPS_HTTP_PORT; none: no API; 0: any free port)",
    )
    p.add_argument("--api-host", metavar="HOST", help="with --api-port: address to bind (default AIOPS_HTTP_HOST)")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("eval", help="score a run's incidents and predictions against the truth (docs/accuracy.md)")
    p.add_argument(
        "run_dirs", metavar="RUN_DIR", nargs="*", help="the output folder of aiops run (as aiops report takes it)"
    )
    p.add_argument("--truth", metavar="FILE", required=True, nargs="+", help="truth.jsonl of the generated cluster")
    p.add_argument("--run", metavar="DIR", nargs="+", help="the output folder of aiops run (or RUN_DIR, first)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--min-lead-min",
        type=float,
        default=MIN_USEFUL_LEAD_S / 60,
        metavar="MIN",
        help="count a prediction for recall only with this much lead (default 30: a checkpoint surely comes "
        "first; issue 46 counts from 10)",
    )
    p.set_defaults(handler=cmd_eval)


NOTIFY_DRAIN_S = 30.0  # on exit, how long to keep sending what is pending (the rest stays in the outbox)


def _notifier(args: argparse.Namespace, configured: Any) -> Any:
    """The notification stage, when a config is given: its outbox lives beside the run's output
    (offline) or in the state directory (the daemon, one file per consumer group)."""
    from aiops.cli.checks import receiver_url_problems
    from aiops.cli.common import CliError
    from notify.config import NotifyConfigError, load
    from notify.service import Notifier

    path = args.notify_config or configured.notify_config
    if not path:
        if args.kafka:  # a daemon that tells no one says so once at start, not never
            log.warning("no notify config (AIOPS_NOTIFY_CONFIG or --notify-config): no message will be sent")
        return None
    if not args.notify_config and not Path(path).exists():
        # the compose files point at /etc/aiops/notify.yml by default: a site that has not made
        # one yet runs, and is told, rather than restarting in a loop
        log.warning(
            "no notify config at %s (AIOPS_NOTIFY_CONFIG): no message will be sent; "
            "copy config/notify.example.yml to config/notify.yml",
            path,
        )
        return None
    try:
        config = load(Path(path))
    except NotifyConfigError as exc:
        raise CliError(str(exc)) from None
    problems = receiver_url_problems(config)  # AIOPS_NOTIFY_CONFIG is not seen by the early checks
    if problems:
        raise CliError(f"{path}: " + "; ".join(problems))
    if config.public_url is None and configured.public_url:  # one place for it: AIOPS_PUBLIC_URL
        config = config.model_copy(update={"public_url": configured.public_url})
    receivers = ", ".join(f"{r.name} ({r.kind})" for r in config.receivers)
    link = (
        f"incident links to {config.public_url}"
        if config.public_url
        else ("no incident links (set AIOPS_PUBLIC_URL or public_url)")
    )
    print(f"aiops: notify: {len(config.receivers)} receivers from {path}: {receivers}; {link}", file=sys.stderr)
    if args.kafka:
        state = Path(args.state_dir) if args.state_dir else configured.state_dir
        outbox = state / f"notify-{args.group or configured.kafka.run_group}.sqlite"
    else:
        outbox = Path(args.out or ".") / "notify-outbox.sqlite"
    notifier = Notifier(config, outbox, live=bool(args.kafka))  # Alertmanager: the live daemon only
    notifier.start()
    return notifier


def _api(args: argparse.Namespace, configured: Any) -> Any:
    """The HTTP API's options, when a port is given (flag or AIOPS_HTTP_PORT)."""
    from aiops.api import ApiOptions

    port = args.api_port if args.api_port is not None else configured.http_port
    if port is None:
        return None
    if configured.api_token is None:
        log.warning("HTTP API without AIOPS_API_TOKEN: reads only; ack, resolve and silences are refused")
    # the incident pages draw their series from InfluxDB when the daemon writes there
    influx = configured.influx if getattr(args, "influx", None) else None
    return ApiOptions(args.api_host or configured.http_host, port, configured.api_token, influx)


def _health_sink(writer: IncidentWriter, group: str) -> HealthSink:
    """The daemon's metrics as aiops_service points, tagged by host (the member) and group."""
    import socket

    from rca.influx import service_line

    instance = socket.gethostname().replace(" ", "_").replace(",", "_")

    def write(m: DaemonMetrics) -> None:
        writer.add_service(
            service_line(
                instance, group, m.values, m.ticks, m.lag, m.tick_delay_s(), m.tick_seconds_sum, time.time_ns()
            )
        )

    return write


def _actions(args: argparse.Namespace, configured: Any) -> Any:
    """The action policies, when a file is given (validated: a bad one stops the run here)."""
    from act.policy import PolicyError, load
    from aiops.cli.common import CliError

    path = getattr(args, "actions", None) or configured.actions_config
    if not path:
        return None
    try:
        config = load(Path(path))
    except PolicyError as exc:
        raise CliError(str(exc)) from None
    mode = "dry run" if config.dry_run else "executing where a policy says execute: true"
    log.warning("acting on incidents per %s (%d policies; %s)", path, len(config.policies), mode)
    return config


def _lines_to(writer: IncidentWriter | None) -> Callable[[str], None] | None:
    """Audit points of the acting loop into the same InfluxDB as the incidents."""
    if writer is None:
        return None
    sink = writer

    def write(line: str) -> None:
        sink.add_lines([line], "actions")

    return write


TOPOLOGY_POLL_S = 5.0  # an operational choice: a file copied in by hand is seen within seconds


def wait_for_file(path: Path, what: str, poll_s: float = TOPOLOGY_POLL_S) -> None:
    """Block until `path` exists, having said once (on stderr, the container's log) what is
    missing and how to make it."""
    if path.exists():
        return
    print(f"aiops run: waiting for {path}, {what}", file=sys.stderr, flush=True)
    while not path.exists():
        time.sleep(poll_s)


def cmd_run(args: argparse.Namespace) -> int:
    from aiops.cli.common import CliError, folder_progress, load_predictor, settings_from
    from aiops.pipeline import run_folder
    from detectors.detect_loop import IntervalUnknownError, scrape_interval
    from rca.graph import GraphError

    if args.kafka and args.topology and args.wait_for_topology:
        wait_for_file(
            Path(args.topology),
            "the cluster's topology (aiops topology import ... --out topology.json, or aiops gen --truth-dir)",
        )
    configured = settings_from(args)
    thresholds = configured.detectors
    try:
        given = args.interval if args.interval is not None else configured.scrape_interval_s
        interval = scrape_interval(None if args.kafka else Path(args.input or "."), given)
    except IntervalUnknownError as exc:
        raise CliError(str(exc)) from None
    predictor = load_predictor(args)
    writer = None
    if args.influx:
        from rca.influx import IncidentWriter

        writer = IncidentWriter(settings_from(args).influx)
    sink = writer.add if writer is not None else None
    notice_sink = writer.add_notices if writer is not None else None
    finding_sink = writer.add_findings if writer is not None else None
    notifier = _notifier(args, configured)
    actions = _actions(args, configured)
    try:
        if args.kafka:
            return _run_kafka(args, configured, interval, predictor, notifier, actions, writer)
        if not args.input or not args.out:
            raise CliError("give --input DIR and --out DIR, or --kafka HOST:PORT --topology FILE")
        with folder_progress(Path(args.input), "aiops run") as step:
            stats = run_folder(
                Path(args.input),
                Path(args.out),
                interval,
                predictor,
                on_tick=lambda pipeline: step(pipeline.detect.stats.ticks),
                incident_sink=sink,
                detector_settings=thresholds,
                notice_sink=notice_sink,
                notifier=notifier,
                finding_sink=finding_sink,
                schedule_sink=writer.add_schedule if writer is not None else None,
                actions=actions,
                action_sink=_lines_to(writer),
            )
            step(stats.ticks)
    except (FileNotFoundError, GraphError) as exc:
        raise CliError(str(exc)) from None
    finally:
        if writer is not None:
            writer.close()
        if notifier is not None:  # what is still pending stays in the outbox for the next start
            notifier.stop(drain_s=NOTIFY_DRAIN_S)
            print(f"notifications: {notifier.summary()}")
    print(
        f"{stats.ticks} ticks, {stats.values:,} values in {stats.seconds:.1f}s "
        f"({stats.values / max(stats.seconds, 1e-9):,.0f} values/s): {stats.anomalies} anomalies, "
        f"{stats.predictions} predictions, {stats.incidents} incident updates -> {args.out}"
    )
    return 0


def _run_kafka(
    args: argparse.Namespace,
    configured: Settings,
    interval: float,
    predictor: OnlinePredictor | None,
    notifier: Notifier | None,
    actions: ActConfig | None,
    writer: IncidentWriter | None,
) -> int:
    """`aiops run --kafka`: the daemon between the topics, until it is stopped."""
    from aiops.cli.common import CliError, settings_from, stop_on_signals
    from aiops.run_daemon import RunOptions, RunSinks, run_kafka
    from detectors.detect_loop import load_events

    if not args.topology:
        raise CliError("with --kafka, give --topology FILE (the cluster's topology.json)")
    if args.from_detection and actions is not None:
        raise CliError(
            "--actions needs the telemetry (a drain waits for the job's checkpoint in it): "
            "run it without --from-detection"
        )
    settings = settings_from(args)
    kafka = settings.kafka.model_copy(update={"run_group": args.group}) if args.group else settings.kafka
    events = load_events(Path(args.events)) if args.events else []
    options = RunOptions(
        interval,
        Path(args.topology),
        events,
        idle_stop_s=args.stop_when_idle,
        lateness_s=args.lateness if args.lateness is not None else configured.tick_lateness_s,
        predictor=predictor,
        detector_settings=configured.detectors,
        state_dir=Path(args.state_dir) if args.state_dir else configured.state_dir,
        checkpoint_every_s=configured.checkpoint_every_s,
        notifier=notifier,
        api=_api(args, configured),
        actions=actions,
        from_detection=args.from_detection,
    )
    sinks = RunSinks(
        incidents=writer.add if writer is not None else None,
        notices=writer.add_notices if writer is not None else None,
        findings=writer.add_findings if writer is not None else None,
        health=_health_sink(writer, kafka.run_group) if writer is not None else None,
        schedule=writer.add_schedule if writer is not None else None,
        actions=_lines_to(writer),
    )
    stats = run_kafka(kafka, options, stop_on_signals(), sinks)
    print(
        f"{stats.ticks} ticks, {stats.values:,} values: {stats.anomalies} anomalies, "
        f"{stats.predictions} predictions, {stats.incidents} incident updates -> {kafka.incidents_topic}"
        + (f" ({stats.late_rows} findings late for their tick, not analysed)" if args.from_detection else "")
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from aiops.cli.common import CliError
    from rca.evaluate import EvaluationError, evaluate_many, evaluate_paths

    args.run = [*(getattr(args, "run_dirs", None) or []), *(args.run or [])]  # RUN_DIR or --run DIR: both
    if not args.run:
        raise CliError("give the run to score: aiops eval RUN_DIR --truth FILE (the folder aiops run --out wrote)")
    if len(args.truth) != len(args.run):
        raise CliError("give one --run DIR per --truth FILE (in the same order) to score several runs together")
    from show.report import TruthMismatchError, check_truth, load

    for truth, run in zip(args.truth, args.run, strict=True):  # a truth file of another run is refused
        try:
            for note in check_truth(load(Path(run), Path(truth), None)):
                print(f"aiops eval: {note}", file=sys.stderr)
        except TruthMismatchError as exc:
            raise CliError(str(exc)) from None
        except FileNotFoundError:
            pass  # no incidents.jsonl: the evaluation says what is missing
    try:
        if not 0 <= args.min_lead_min <= 24 * 60:
            raise CliError(f"--min-lead-min {args.min_lead_min:g}: give 0 to 1440 minutes")
        lead = args.min_lead_min * 60.0
        if len(args.truth) == 1:
            result = evaluate_paths(Path(args.truth[0]), Path(args.run[0]), min_lead_s=lead)
        else:
            pairs = [(Path(t), Path(r)) for t, r in zip(args.truth, args.run, strict=True)]
            result = evaluate_many(pairs, min_lead_s=lead)
    except EvaluationError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_json(), indent=1, sort_keys=True, allow_nan=False))
    else:
        print(result.format_table())
    return 0
