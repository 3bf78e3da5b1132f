"""`aiops bench ...`: throughput measured on this machine, printed as tables.

Tests check behaviour; this is where speed is measured. Every figure is the best of a few runs
(the least disturbed by whatever else the machine is doing), stated with its inputs.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from aiops.progress_bar import output_console, track
from ingest.frames import Frame, merge_rows
from ingest.lineprotocol import decode, encode
from vocab.settings import InfluxSettings, KafkaSettings


@dataclass(frozen=True, slots=True)
class Row:
    what: str
    values: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.values / self.seconds if self.seconds > 0 else float("inf")


def _best(repeat: int, fn: Callable[[], int]) -> tuple[int, float]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        started = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - started)
    return count, best


def bench_ingest(args: argparse.Namespace, console: Console) -> list[Row]:
    from telemetry_gen.generator import GenConfig, Generation

    gen = Generation(
        GenConfig(realism="clean", gpus=args.gpus, hours=(args.ticks + 1) * 30 / 3600, interval=30, seed=1, faults="")
    )
    ticks_iter = gen.ticks()
    tick = next(ticks_iter).frames
    data = encode(tick)
    values = sum(f.value_count for f in tick)
    console.print(
        f"generated tick: {args.gpus:,} GPUs, {gen.topology.entity_count:,} entities, "
        f"{values:,} field values, {len(data) / 1e6:.1f} MB of line protocol"
    )
    rows: list[Row] = []
    decoded_values, seconds = _best(args.repeat, lambda: decode(data).value_count)
    rows.append(Row("decode (one core)", decoded_values, seconds, "one tick, vectorised path"))
    _, seconds = _best(args.repeat, lambda: len(encode(tick)))
    rows.append(Row("encode (one core)", values, seconds, "frames -> line protocol"))
    single = encode(_one_field_per_line(tick))
    single_values, seconds = _best(args.repeat, lambda: decode(single).value_count)
    rows.append(Row("decode, one field per line (one core)", single_values, seconds, "Telegraf metric_version = 2"))
    _, seconds = _best(args.repeat, lambda: _decode_and_merge(single))
    rows.append(Row("decode + merge per entity (one core)", single_values, seconds, "back to one row per entity"))
    ticks = [encode(t.frames) for t in ticks_iter]
    if args.kafka:
        rows += bench_kafka(args.kafka, ticks)
    if args.influx:
        rows += bench_influx(args.influx, ticks)
    return rows


def _one_field_per_line(frames: list[Frame]) -> list[Frame]:
    """A tick as Telegraf's prometheus input writes it: one line per sample."""
    out = []
    for frame in frames:
        for name, col in frame.fields.items():
            rows = np.flatnonzero(col.present)
            out.append(Frame(frame.measurement, frame.time_ns, frame.tags, {name: col}).take(rows))
    return out


def _decode_and_merge(data: bytes) -> int:
    from vocab.catalog import measurement

    merged = 0
    for name, frame in decode(data).frames.items():
        spec = measurement(name)
        merged += merge_rows(frame, spec.id_tag).value_count if spec is not None else frame.value_count
    return merged


def _produce(bootstrap: str, topic: str, ticks: list[bytes]) -> int:
    from ingest.kafka import TelemetryProducer
    from ingest.messages import messages_from_lines

    producer = TelemetryProducer(bootstrap)
    sent = sum(producer.send(topic, messages_from_lines(t)) for t in ticks)
    producer.flush()
    producer.close()
    return sent


def _consume_all(settings: KafkaSettings, total_values: int) -> tuple[int, float]:
    """Consume and decode until every value arrived; returns (values, seconds from first poll)."""
    from ingest.kafka import TelemetryConsumer
    from ingest.messages import join_messages
    from ingest.pipeline import IngestCore

    consumer = TelemetryConsumer(settings)
    core = IngestCore()
    started = time.perf_counter()
    deadline = started + 300
    while core.stats.values < total_values and time.perf_counter() < deadline:
        messages = consumer.poll()
        if messages:
            data, default_times, source_of = join_messages(messages)
            core.process(data, default_times, source_of)
            consumer.commit()
    seconds = time.perf_counter() - started
    consumer.close()
    return core.stats.values, seconds


def bench_kafka(bootstrap: str, ticks: list[bytes]) -> list[Row]:
    """Producer alone, consumer alone, then both at once in two processes (as deployed: the
    exporter side and the ingest side are different processes, here on the machine's 2 cores)."""
    import multiprocessing

    from ingest.kafka import ensure_topics

    suffix = uuid.uuid4().hex[:8]
    first = KafkaSettings(bootstrap=bootstrap, telemetry_topic=f"bench.a.{suffix}", ingest_group=f"bench-a-{suffix}")
    second = KafkaSettings(bootstrap=bootstrap, telemetry_topic=f"bench.b.{suffix}", ingest_group=f"bench-b-{suffix}")
    ensure_topics(bootstrap, [first.telemetry_topic, second.telemetry_topic])
    total = sum(decode(t).value_count for t in ticks)
    note = f"{len(ticks)} ticks"

    started = time.perf_counter()
    sent = _produce(bootstrap, first.telemetry_topic, ticks)
    produce_s = time.perf_counter() - started
    consumed, consume_s = _consume_all(first, total)

    context = multiprocessing.get_context("fork")
    producer = context.Process(target=_produce, args=(bootstrap, second.telemetry_topic, ticks), daemon=True)
    started = time.perf_counter()
    producer.start()
    piped, _ = _consume_all(second, total)
    pipeline_s = time.perf_counter() - started
    producer.join(timeout=60)
    return [
        Row("kafka produce", total, produce_s, f"{sent:,} messages, {note}"),
        Row("kafka consume + decode + validate", consumed, consume_s, note),
        Row("kafka end to end, pipelined", piped, pipeline_s, f"producer process ∥ ingest, {note}"),
    ]


def bench_influx(url: str, ticks: list[bytes]) -> list[Row]:
    import requests

    from ingest.influx_writer import InfluxWriter
    from ingest.pipeline import IngestCore

    database = f"bench_{uuid.uuid4().hex[:8]}"
    requests.post(f"{url}/query", params={"q": f'CREATE DATABASE "{database}"'}, timeout=30).raise_for_status()
    core = IngestCore()
    batches = [core.process(t).frames for t in ticks]
    writer = InfluxWriter(InfluxSettings(url=url, database=database), core.stats)
    values = sum(f.value_count for b in batches for f in b.values())
    started = time.perf_counter()
    for frames in batches:
        writer.write(frames)
        writer.flush()
    seconds = time.perf_counter() - started
    writer.close()
    requests.post(f"{url}/query", params={"q": f'DROP DATABASE "{database}"'}, timeout=60)
    return [Row("influxdb write (encode + HTTP)", values, seconds, f"{core.stats.written:,} lines, {len(ticks)} ticks")]


def bench_gen(args: argparse.Namespace, console: Console) -> None:
    """Topology size and generation throughput per cluster size, to a file and to Kafka."""
    import tempfile
    from pathlib import Path

    from telemetry_gen.emit import to_kafka, write_folder
    from telemetry_gen.generator import GenConfig, Generation
    from telemetry_gen.topology import build

    sizes = Table(title="topology size (series = values per tick)")
    for col in ("GPUs", "topology", "entities", "edges", "series", "build s"):
        sizes.add_column(col, justify="right")
    speed = Table(title=f"aiops bench gen: {args.ticks} ticks at 30 s, all fault kinds active")
    for col in ("GPUs", "sink", "ticks", "values", "seconds", "values/s", "MB"):
        speed.add_column(col, justify="right")
    for gpus in track(args.sizes, "aiops bench gen", "sizes"):
        hours = args.ticks * 30 / 3600
        for name in ("fat-tree", "torus", "dragonfly"):
            started = time.perf_counter()
            topology = build(name, gpus)
            build_s = time.perf_counter() - started
            one_tick = Generation(
                GenConfig(realism="clean", gpus=gpus, topology=name, hours=30 / 3600, interval=30, faults="")
            )
            series = sum(t.value_count for t in one_tick.ticks())
            sizes.add_row(
                f"{gpus:,}",
                name,
                f"{topology.entity_count:,}",
                f"{len(topology.edges):,}",
                f"{series:,}",
                f"{build_s:.2f}",
            )
        config = GenConfig(
            realism="clean", gpus=gpus, hours=hours, interval=30, seed=1, faults="" if gpus < 256 else "all=1"
        )
        with tempfile.TemporaryDirectory() as tmp:
            stats = write_folder(Generation(config), Path(tmp))
        speed.add_row(
            f"{gpus:,}",
            "file",
            str(stats.ticks),
            f"{stats.values:,}",
            f"{stats.seconds:.2f}",
            f"{stats.values / stats.seconds:,.0f}",
            f"{stats.bytes / 1e6:,.0f}",
        )
        if args.kafka and gpus <= args.kafka_max_gpus:
            from ingest.kafka import ensure_topics

            topic = f"bench.gen.{uuid.uuid4().hex[:8]}"
            ensure_topics(args.kafka, [topic])
            stats = to_kafka(Generation(config), args.kafka, topic)
            speed.add_row(
                f"{gpus:,}",
                "kafka",
                str(stats.ticks),
                f"{stats.values:,}",
                f"{stats.seconds:.2f}",
                f"{stats.values / stats.seconds:,.0f}",
                f"{stats.bytes / 1e6:,.0f}",
            )
    console.print(sizes)
    console.print(speed)


def _state_bytes(state: object) -> int:
    if isinstance(state, dict):
        return sum(_state_bytes(v) for v in state.values())
    if isinstance(state, np.ndarray):
        return int(state.nbytes) if state.dtype != object else 0  # entity ids belong to the index
    return 8


def bench_detect(args: argparse.Namespace, console: Console) -> None:
    """The whole detector stack on a generated 10,000-GPU stream, beside river and pysad."""
    import pickle

    from detectors.stack import DetectorStack
    from telemetry_gen.generator import GenConfig, Generation

    gen = Generation(
        GenConfig(
            realism=args.realism,
            gpus=args.gpus,
            hours=(args.ticks + 1) * 30 / 3600,
            interval=30,
            seed=1,
            faults="all=1" if args.gpus >= 1024 else "",
        )
    )
    ticks = [(t.time_ns / 1e9, {f.measurement: f for f in t.frames}) for t in gen.ticks()]
    series = sum(f.value_count for f in ticks[0][1].values())
    stack = DetectorStack(30)
    stack.process(*ticks[0])  # first tick: entities register, counters get their reference
    started = time.perf_counter()
    samples = 0
    for t, frames in track(ticks[1:], "aiops bench detect: the detector stack", "ticks"):
        samples += sum(f.value_count for f in frames.values())
        stack.process(t, frames)
    ours_s = time.perf_counter() - started
    ours_rate = samples / ours_s
    state = _state_bytes(stack.state_dict())
    table = Table(
        title=f"aiops bench detect: {args.gpus:,} GPUs, {series:,} series, {len(ticks) - 1} ticks, "
        f"{args.realism} realism"
    )
    for col in ("detector", "samples", "seconds", "samples/s", "state bytes/series", "ours ×"):
        table.add_column(col, justify="right" if col != "detector" else "left")
    table.add_row(
        "aiops detector stack (rules, peers, rates, drift)",
        f"{samples:,}",
        f"{ours_s:.2f}",
        f"{ours_rate:,.0f}",
        f"{state / series:.1f}",
        "1",
    )
    # The peers get the same values in the same order, one sample at a time, as their API takes them.
    flat = np.concatenate(
        [np.nan_to_num(c.as_float()) for _, frames in ticks[1:2] for f in frames.values() for c in f.fields.values()]
    )[: args.peer_samples]
    for name, step, model in track(_peers(flat), "aiops bench detect: river and pysad", "detectors"):
        started = time.perf_counter()
        for v in flat.tolist():
            step(v)
        secs = time.perf_counter() - started
        rate = len(flat) / secs
        size = len(pickle.dumps(model))  # one model per series is what a per-series detector needs
        table.add_row(name, f"{len(flat):,}", f"{secs:.2f}", f"{rate:,.0f}", f"{size:,}", f"{ours_rate / rate:,.0f}")
    console.print(table)


def _peers(sample: np.ndarray) -> list[tuple[str, Callable[[float], object], object]]:
    out: list[tuple[str, Callable[[float], object], object]] = []
    try:
        from river import anomaly

        hst = anomaly.HalfSpaceTrees(seed=1)

        def river_step(v: float) -> object:
            x = {"v": v}
            score = hst.score_one(x)
            hst.learn_one(x)
            return score

        out.append(("river HalfSpaceTrees (learn_one/score_one)", river_step, hst))
    except ImportError:
        pass
    try:
        from pysad.models import HalfSpaceTrees as PysadHST
        from pysad.models import MedianAbsoluteDeviation

        lo, hi = float(np.min(sample)), float(np.max(sample)) + 1.0
        for name, model in (
            ("pysad HalfSpaceTrees (fit_partial/score_partial)", PysadHST(feature_mins=[lo], feature_maxes=[hi])),
            ("pysad MedianAbsoluteDeviation", MedianAbsoluteDeviation()),
        ):

            def pysad_step(v: float, m: object = model) -> object:
                x = np.array([v])
                m.fit_partial(x)  # type: ignore[attr-defined]
                return m.score_partial(x)  # type: ignore[attr-defined]

            out.append((name, pysad_step, model))
    except ImportError:
        pass
    return out


def print_rows(title: str, rows: list[Row], console: Console) -> None:
    table = Table(title=title)
    table.add_column("stage")
    table.add_column("values", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("values/s", justify="right")
    table.add_column("note")
    for r in rows:
        table.add_row(r.what, f"{r.values:,}", f"{r.seconds:.3f}", f"{r.rate:,.0f}", r.note)
    console.print(table)


def run_bench(args: argparse.Namespace) -> int:
    console = output_console()  # piped or to a file: every column whole
    if args.bench == "ingest":
        print_rows("aiops bench ingest", bench_ingest(args, console), console)
        return 0
    if args.bench == "gen":
        bench_gen(args, console)
        return 0
    if args.bench == "detect":
        bench_detect(args, console)
        return 0
    if args.bench == "nab":
        from benchmarks.nab import bench_nab

        return bench_nab(args, console)
    if args.bench == "soak":
        from benchmarks.soak import bench_soak

        report = bench_soak(args, console)
        return 0 if not (report.differences or report.died) else 1
    if args.bench == "backlog":
        from benchmarks.backlog import bench_backlog

        backlogged = bench_backlog(args, console)
        # a phase passes when what it published equals offline and its last daemon exited 0 (the
        # SIGKILLed one of run-killed exits -9 by design)
        return 0 if not any(p.differences or p.exit_codes[-1] for p in backlogged.phases) else 1
    if args.bench == "goodput":
        from benchmarks.goodput import bench_goodput

        figures = bench_goodput(args, console)
        if args.out:
            Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
        return 0
    if args.bench == "scale":
        from benchmarks.scale import run_scale

        return run_scale(args, console)
    if args.bench == "store":
        from benchmarks.store import bench_store

        figures = bench_store(args, console)
        if args.out:
            Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
        return 0
    if args.bench == "rca":
        from benchmarks.rca import bench_rca

        bench_rca(args, console)
        return 0
    if args.bench == "dashboards":
        from benchmarks.dashboards import bench_dashboards

        times = bench_dashboards(args, console)
        return 1 if any(t.error for t in times) else 0
    if args.bench == "hostile-poll":
        from benchmarks.hostile import bench_hostile_poll

        bench_hostile_poll(args, console)
        return 0
    console.print(f"unknown benchmark {args.bench!r}")
    return 2
