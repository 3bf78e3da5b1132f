"""Downsampled ingest through the real Kafka and InfluxDB: a few minutes of a generated cluster
go to a topic, `aiops ingest --downsample 60` stores them, and InfluxDB holds exactly one point
per series and minute with the mean, max and min of gauges and the last value of counters and
states, as pandas computes them from the same lines. Stopped after its first batches and started
again, the ingest commits nothing it had only in memory and overwrites no window with a part."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ingest.consume import consume
from ingest.downsample import Downsampler
from ingest.frames import to_pandas
from ingest.influx_writer import InfluxWriter
from ingest.kafka import TelemetryConsumer, TelemetryProducer, ensure_topics
from ingest.messages import messages_from_lines
from ingest.pipeline import IngestCore, MemoryDeadLetterSink
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation
from telemetry_gen.simulate import T0
from tests.conftest import influxql
from tests.integration.test_cli_ingest import _aiops
from tests.integration.test_cli_ingest import _ingest as ingest_until_idle
from vocab.catalog import MetricKind, measurement
from vocab.settings import InfluxSettings, KafkaSettings

pytestmark = pytest.mark.services

WINDOW_S = 60
NS = 1_000_000_000
Point = tuple[str, tuple[tuple[str, str], ...], int]  # measurement, tag set, window start (ns)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five minutes of a 16-GPU cluster every 10 s, with the collectors' everyday noise (clock
    offsets, jitter), starting 25 s into a minute so the first window is a part of one."""
    folder = tmp_path_factory.mktemp("downsample")
    config = GenConfig(gpus=16, hours=5 / 60, interval=10, seed=11, faults="gpu_thermal=1", start=T0 + 25)
    write_folder(Generation(config), folder)
    return folder / "telemetry.lp"


def _expected(path: Path) -> dict[Point, dict[str, object]]:
    """Per series and minute what the store must hold, from the lines with pandas: samples of one
    series and time merged (the newest non-missing value per field), then per minute the mean,
    max and min of gauges (integers rounded) and the last value of counters and states (with a
    state's max and min)."""
    batch = IngestCore().process(path.read_bytes())
    assert batch.deadletters == []
    out: dict[Point, dict[str, object]] = {}
    for name, frame in batch.frames.items():
        spec = measurement(name)
        assert spec is not None
        table = to_pandas(frame)
        tags = sorted(frame.tags)
        samples = table.groupby([*tags, "time"], sort=True).last().reset_index()
        samples["window"] = samples["time"] // (WINDOW_S * NS) * (WINDOW_S * NS)
        for key, rows in samples.groupby([*tags, "window"]):
            tag_values = list(key)[:-1]
            tag_set = tuple((k, str(v)) for k, v in zip(tags, tag_values, strict=True) if v != "")
            point: dict[str, object] = {}
            for field, col in frame.fields.items():
                values = rows[field].dropna()
                if values.empty:
                    continue
                metric = spec.metric(field)
                kind = metric.kind if metric is not None else MetricKind.GAUGE
                integer = col.type.value != "float"
                if kind is MetricKind.GAUGE:
                    mean = float(values.mean())
                    point[field] = int(np.rint(mean)) if integer else mean
                else:
                    point[field] = values.iloc[-1]
                if kind is not MetricKind.COUNTER:
                    point[f"{field}_max"], point[f"{field}_min"] = values.max(), values.min()
            out[(name, tag_set, int(rows["window"].iloc[0]))] = point
    return out


def _stored(influx: InfluxSettings, names: set[str]) -> Iterator[tuple[Point, dict[str, object]]]:
    for name in sorted(names):
        body = influxql(influx, f'SELECT * FROM "{name}" GROUP BY *', influx.database)
        for series in body["results"][0].get("series", []):  # type: ignore[index]
            tag_set = tuple(sorted((k, v) for k, v in series["tags"].items() if v != ""))
            columns = series["columns"]
            for row in series["values"]:
                fields = {c: v for c, v in zip(columns[1:], row[1:], strict=True) if v is not None}
                fields = {c: v for c, v in fields.items() if c not in dict(tag_set)}
                yield (name, tag_set, int(row[0])), fields


def _differences(expected: dict[Point, dict[str, object]], influx: InfluxSettings) -> list[str]:
    diffs: list[str] = []
    seen: set[Point] = set()
    for point, fields in _stored(influx, {name for name, _, _ in expected}):
        assert point not in seen  # InfluxDB merges a point written twice; one answer per point
        seen.add(point)
        want = expected.get(point)
        if want is None:
            diffs.append(f"unexpected point {point}")
            continue
        for field in set(want) | set(fields):
            a, b = want.get(field), fields.get(field)
            same = (
                math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
                if isinstance(a, int | float) and isinstance(b, int | float)
                else a == b
            )
            if not same:
                diffs.append(f"{point} {field}: expected {a!r}, stored {b!r}")
    diffs += [f"missing point {p}" for p in set(expected) - seen]
    return diffs[:20]


def _produce(k: KafkaSettings, recording: Path) -> None:
    produced = _aiops("produce", str(recording), "--kafka", k.bootstrap, "--topic", k.telemetry_topic)
    assert produced.returncode == 0, produced.stderr


def _produce_with_a_repeat(k: KafkaSettings, recording: Path) -> None:
    """The recording with, two thirds in (minute 3), a copy of its first GPU line (a producer's
    retry delivers a sample twice): late for its window, it changes nothing; a reader that took
    that window for open after a restart would overwrite it with this one sample."""
    lines = recording.read_bytes().splitlines(keepends=True)
    repeat = next(line for line in lines if line.startswith(b"gpu,"))
    half = len(lines) * 2 // 3
    ensure_topics(k.bootstrap, [k.telemetry_topic])
    producer = TelemetryProducer(k.bootstrap)
    for part in (lines[:half], [repeat], lines[half:]):
        producer.send(k.telemetry_topic, messages_from_lines(b"".join(part)))
        producer.flush()  # in this order on the partition
    producer.close()


def _ingest(k: KafkaSettings, influx: InfluxSettings) -> subprocess.CompletedProcess[str]:
    ingested = ingest_until_idle(k, influx, "--downsample", str(WINDOW_S))
    assert ingested.returncode == 0, ingested.stderr
    return ingested


def _ingest_stats(influx: InfluxSettings) -> dict[str, int]:
    body = influxql(influx, "SELECT * FROM aiops_ingest ORDER BY time DESC LIMIT 1", influx.database)
    series = body["results"][0]["series"][0]  # type: ignore[index]
    return {c: v for c, v in zip(series["columns"], series["values"][0], strict=True) if isinstance(v, int)}


def test_one_point_per_series_and_minute_with_the_windows_aggregates(
    kafka_settings: KafkaSettings, influx_settings: InfluxSettings, recording: Path
) -> None:
    expected = _expected(recording)
    assert {w for _, _, w in expected} == {(T0 // 60 + m) * 60 * NS for m in range(6)}  # 5 min from :25
    _produce(kafka_settings, recording)
    ingested = _ingest(kafka_settings, influx_settings)
    assert _differences(expected, influx_settings) == []
    stats = _ingest_stats(influx_settings)
    # every window written once, none as a part first: one point handed over per expected point
    assert stats["aggregate_points"] == stats["written"] == len(expected)
    assert (stats["late_for_window"], stats["repeated_after_restart"], stats["open_rows"]) == (0, 0, 0)
    assert stats["lines"] == stats["aggregated_rows"] + stats["blank_rows"] + stats["deadlettered"]
    assert "still open 0" in ingested.stdout


def test_stopped_after_its_first_batches_and_started_again_it_stores_the_same(
    kafka_settings: KafkaSettings, influx_settings: InfluxSettings, recording: Path
) -> None:
    expected = _expected(recording)
    k = kafka_settings.model_copy(update={"max_poll_records": 20})  # small batches: a stop mid-stream
    _produce_with_a_repeat(k, recording)
    core = IngestCore()
    writer = InfluxWriter(influx_settings, core.stats)
    consumer = TelemetryConsumer(k)
    try:  # stopped once the repeat came (late), as SIGTERM stops the daemon: open windows unwritten
        down = Downsampler(writer, WINDOW_S, stats=core.stats)
        consume(consumer, core, down, MemoryDeadLetterSink(), lambda: core.stats.late_for_window > 0, idle_stop_s=8)
    finally:
        consumer.close()
        writer.close()
    assert core.stats.late_for_window == 1  # the repeat, after its window was written
    assert core.stats.aggregate_points > 0  # some windows were written before the stop
    assert core.stats.open_rows > 0  # and some were open: only their commit kept them
    _ingest(k, influx_settings)
    assert _differences(expected, influx_settings) == []
    # the repeat, read again after the restart with the window it belonged to written long before
    assert _ingest_stats(influx_settings)["repeated_after_restart"] >= 1
