"""`aiops bench store`: what InfluxDB on this machine takes through our writer, at full resolution
and per window, against what 10,000 and 100,000 GPUs scraped every `--interval` seconds send.

A generated cluster (clean, no faults, starting on a whole window) is written to a fresh
database twice: every value as it came, and the windows' aggregates (ingest/downsample.py). The
downsampler's own speed is measured on one core over the same ticks (best of `--repeat`). What
a size needs: its values per scrape (one generated tick of that size) over the interval, and,
downsampled, each measurement's values per window as measured here (the ratio of aggregate
values to raw values is a property of the measurement's fields, not of the cluster's size).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import requests
from rich.console import Console
from rich.table import Table

from ingest.downsample import Downsampler
from ingest.frames import Frame
from ingest.influx_writer import InfluxWriter
from ingest.lineprotocol import encode
from ingest.pipeline import IngestStats, MemoryFrameSink
from vocab.settings import InfluxSettings


@dataclass(frozen=True, slots=True)
class Store:
    what: str
    points: int
    values: int
    seconds: float

    @property
    def values_per_s(self) -> float:
        return self.values / self.seconds if self.seconds > 0 else float("inf")


def _ticks(gpus: int, minutes: float, interval: float) -> list[dict[str, Frame]]:
    from telemetry_gen.generator import GenConfig, Generation

    gen = Generation(GenConfig(realism="clean", gpus=gpus, hours=minutes / 60, interval=interval, seed=1, faults=""))
    return [{f.measurement: f for f in tick.frames} for tick in gen.ticks()]


def _values_by_measurement(batches: list[dict[str, Frame]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for frames in batches:
        for name, frame in frames.items():
            out[name] += frame.value_count
    return out


def downsample(ticks: list[dict[str, Frame]], window_s: float) -> tuple[list[dict[str, Frame]], float]:
    """The windows' aggregates of `ticks` (one stream, every window closed at the end) and the
    seconds it took on this core: the benchmark of the downsampler alone."""
    sink = MemoryFrameSink()
    down = Downsampler(sink, window_s, stats=IngestStats())
    started = time.perf_counter()
    for frames in ticks:
        down.write_stream(frames, 0, None)
        down.flush()
    down.close_all()
    down.flush()
    return sink.batches, time.perf_counter() - started


def _write(url: str, what: str, batches: list[dict[str, Frame]]) -> Store:
    """Every batch through InfluxWriter (encode + HTTP) into a fresh database, flushed each."""
    database = f"bench_{uuid.uuid4().hex[:8]}"
    requests.post(f"{url}/query", params={"q": f'CREATE DATABASE "{database}"'}, timeout=30).raise_for_status()
    stats = IngestStats()
    writer = InfluxWriter(InfluxSettings(url=url, database=database), stats)
    values = sum(f.value_count for b in batches for f in b.values())
    started = time.perf_counter()
    try:
        for frames in batches:
            writer.write(frames)
            writer.flush()
        seconds = time.perf_counter() - started
    finally:
        writer.close()
        requests.post(f"{url}/query", params={"q": f'DROP DATABASE "{database}"'}, timeout=120)
    return Store(what, stats.written, values, seconds)


def bench_store(args: argparse.Namespace, console: Console) -> dict[str, object]:
    from telemetry_gen.generator import GenConfig, Generation

    ticks = _ticks(args.gpus, args.minutes, args.interval)
    raw = _values_by_measurement(ticks)
    best = float("inf")
    aggregates: list[dict[str, Frame]] = []
    for _ in range(args.repeat):
        aggregates, seconds = downsample(ticks, args.window)
        best = min(best, seconds)
    folded = _values_by_measurement(aggregates)
    total_raw = sum(raw.values())
    console.print(
        f"{args.gpus:,} GPUs, {len(ticks)} scrapes {args.interval:g} s apart, {total_raw:,} values; "
        f"downsampled per {args.window:g} s on one core: {total_raw / best:,.0f} values/s "
        f"(best of {args.repeat}, {best:.2f} s)"
    )
    stores = [_write(args.influx, "full resolution", ticks), _write(args.influx, f"per {args.window:g} s", aggregates)]
    table = Table(title=f"aiops bench store: InfluxDB at {args.influx} through InfluxWriter")
    for col in ("written", "points", "values", "seconds", "values/s", "raw values/s it covers"):
        table.add_column(col, justify="right" if col != "written" else "left")
    for s in stores:
        covers = total_raw / s.seconds
        table.add_row(
            s.what, f"{s.points:,}", f"{s.values:,}", f"{s.seconds:.1f}", f"{s.values_per_s:,.0f}", f"{covers:,.0f}"
        )
    console.print(table)

    # per measurement: aggregate values per raw value (over whole windows: the run starts on one)
    ratio = {name: folded[name] / raw[name] for name in raw if raw[name]}
    need = Table(title=f"what a cluster scraped every {args.interval:g} s sends InfluxDB")
    # what Kafka keeps: the line protocol as collectors send it (no producer compression)
    wire = len(encode(list(ticks[0].values()))) / sum(f.value_count for f in ticks[0].values())
    console.print(f"line protocol on the wire: {wire:.1f} bytes per value")
    columns = ("GPUs", "values/scrape", "full resolution values/s", f"per {args.window:g} s values/s", "reduction")
    for col in (*columns, "Kafka GB/day"):
        need.add_column(col, justify="right")
    sizes: dict[str, object] = {}
    for gpus in args.sizes:
        one = Generation(
            GenConfig(realism="clean", gpus=gpus, hours=args.interval / 3600, interval=args.interval, faults="")
        )
        per_scrape = _values_by_measurement([{f.measurement: f for f in t.frames} for t in one.ticks()])
        full = sum(per_scrape.values()) / args.interval
        down = sum(v * ratio.get(name, 1.0) for name, v in per_scrape.items()) / args.interval
        kafka_gb_day = full * wire * 86_400 / 1e9
        need.add_row(
            f"{gpus:,}",
            f"{sum(per_scrape.values()):,}",
            f"{full:,.0f}",
            f"{down:,.0f}",
            f"{full / down:.1f}×",
            f"{kafka_gb_day:,.0f}",
        )
        sizes[str(gpus)] = {
            "values_per_scrape": sum(per_scrape.values()),
            "full_values_per_s": full,
            "down_values_per_s": down,
            "kafka_gb_per_day": kafka_gb_day,
        }
    console.print(need)
    return {
        "downsample_values_per_s": total_raw / best,
        "wire_bytes_per_value": wire,
        "stores": [{"what": s.what, "points": s.points, "values": s.values, "seconds": s.seconds} for s in stores],
        "sizes": sizes,
    }
