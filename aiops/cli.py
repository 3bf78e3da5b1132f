"""`aiops`: one command line for every stage. Subcommands parse arguments and call library code;
nothing here holds logic worth testing on its own."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from aiops.settings import InfluxSettings, KafkaSettings, Settings

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


def _settings(args: argparse.Namespace) -> Settings:
    base = Settings()
    kafka: KafkaSettings = base.kafka
    influx: InfluxSettings = base.influx
    if getattr(args, "kafka", None):
        kafka = kafka.model_copy(update={"bootstrap": args.kafka})
    if getattr(args, "topic", None):
        kafka = kafka.model_copy(update={"telemetry_topic": args.topic})
    if getattr(args, "group", None):
        kafka = kafka.model_copy(update={"ingest_group": args.group})
    if getattr(args, "influx", None):
        influx = influx.model_copy(update={"url": args.influx})
    if getattr(args, "database", None):
        influx = influx.model_copy(update={"database": args.database})
    return base.model_copy(update={"kafka": kafka, "influx": influx})


def cmd_catalog(args: argparse.Namespace) -> int:
    from aiops.catalog import MEASUREMENTS, render_markdown

    if args.markdown:
        sys.stdout.write(render_markdown() + "\n")
    else:
        for m in MEASUREMENTS:
            print(f"{m.name:12s} id={m.id_tag:9s} key={m.partition_tag:7s} fields={len(m.metrics)}")
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    from ingest.kafka_io import TelemetryProducer, ensure_topics, messages_from_lines

    settings = _settings(args)
    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"no such file: {path}")
    topic = settings.kafka.telemetry_topic
    ensure_topics(settings.kafka.bootstrap, [topic], partitions=args.partitions)
    producer = TelemetryProducer(settings.kafka.bootstrap)
    sent = producer.send(topic, messages_from_lines(path.read_bytes()))
    producer.flush()
    producer.close()
    print(f"sent {sent} messages from {path} to {topic} at {settings.kafka.bootstrap}")
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from ingest.service import run_ingest_service

    settings = _settings(args)
    stop = {"now": False}

    def request_stop(signum: int, _frame: object) -> None:
        logging.getLogger("aiops").info("signal %d: finishing the current batch, then stopping", signum)
        stop["now"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    stats = run_ingest_service(settings, should_stop=lambda: stop["now"], idle_stop_s=args.stop_when_idle)
    print(
        f"ingested {stats.lines} lines ({stats.values} values); written {stats.written}, "
        f"dead-lettered {stats.deadlettered}, dropped {stats.dropped}"
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from aiops.demo import run_demo

    return run_demo(Path(args.input) if args.input else None)


def cmd_bench(args: argparse.Namespace) -> int:
    from aiops.bench import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiops", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("catalog", help="list the telemetry measurements and fields")
    p.add_argument("--markdown", action="store_true", help="print the full catalog as Markdown")
    p.set_defaults(handler=cmd_catalog)

    p = sub.add_parser("produce", help="publish a line-protocol file to Kafka")
    p.add_argument("file")
    p.add_argument("--kafka", metavar="HOST:PORT", help="bootstrap server (default from AIOPS_KAFKA__BOOTSTRAP)")
    p.add_argument("--topic", help="topic (default aiops.telemetry)")
    p.add_argument("--partitions", type=int, default=6, help="partitions if the topic must be created")
    p.set_defaults(handler=cmd_produce)

    p = sub.add_parser("ingest", help="consume telemetry from Kafka and write it raw to InfluxDB")
    p.add_argument("--kafka", metavar="HOST:PORT")
    p.add_argument("--topic")
    p.add_argument("--group", help="consumer group (default aiops-ingest)")
    p.add_argument("--influx", metavar="URL", help="InfluxDB URL (default from AIOPS_INFLUX__URL)")
    p.add_argument("--database", help="InfluxDB database (default aiops)")
    p.add_argument("--stop-when-idle", type=float, metavar="SECONDS", help="exit after this long with no input")
    p.set_defaults(handler=cmd_ingest)

    p = sub.add_parser("demo", help="run the pipeline in-process on an embedded sample (no services needed)")
    p.add_argument("--input", help="line-protocol file (default: the sample shipped with the tests)")
    p.set_defaults(handler=cmd_demo)

    p = sub.add_parser("bench", help="benchmarks that print tables")
    bench = p.add_subparsers(dest="bench", required=True)
    b = bench.add_parser("ingest", help="decode, Kafka and InfluxDB throughput")
    b.add_argument("--gpus", type=int, default=10_000, help="cluster size of the synthetic tick")
    b.add_argument("--ticks", type=int, default=3, help="ticks through Kafka and InfluxDB")
    b.add_argument("--repeat", type=int, default=5, help="decode repetitions (best is reported)")
    b.add_argument("--kafka", metavar="HOST:PORT", help="also measure Kafka end to end")
    b.add_argument("--influx", metavar="URL", help="also measure InfluxDB writes")
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
    try:
        return handler(args)
    except CliError as exc:
        print(f"aiops: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a service error: one clear line, not a traceback
        from ingest.influx_writer import InfluxWriteError
        from ingest.kafka_io import KafkaIOError

        if isinstance(exc, KafkaIOError | InfluxWriteError):
            print(f"aiops: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())
