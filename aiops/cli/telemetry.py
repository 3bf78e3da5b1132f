"""`aiops produce`, `aiops replay`, `aiops ingest`: telemetry onto the telemetry topic (a
line-protocol file, a recorded topic at its pace, Prometheus remote write) and off it into InfluxDB."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aiops.cli.common import CliError, settings_from, stop_on_signals
from vocab.settings import Settings


def add_parsers(sub: Any) -> None:
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
