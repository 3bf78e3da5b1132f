"""Raw telemetry into the real InfluxDB: read back equal through InfluxQL; retried, refused and
evicted writes are counted. Faults come from a small proxy in front of the real database that
answers some requests itself and forwards the rest, so every byte that lands is really stored."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from ingest.frames import Column, Frame, frame_differences
from ingest.influx_writer import InfluxUnavailableError, InfluxWriter
from ingest.pipeline import IngestCore, IngestStats
from tests.conftest import SAMPLE_LP, influxql
from tests.influx_relay import FaultyRelay
from vocab.catalog import FieldType
from vocab.settings import InfluxSettings

pytestmark = pytest.mark.services


def _read_back(settings: InfluxSettings, like: dict[str, Frame]) -> dict[str, Frame]:
    """Every measurement as a frame, typed like the frames that were written."""
    out: dict[str, Frame] = {}
    for name, original in like.items():
        tag_keys = list(original.tags)
        body = influxql(settings, f'SELECT * FROM "{name}" GROUP BY *', settings.database)
        rows: list[tuple[int, dict[str, str], dict[str, object]]] = []
        for series in body["results"][0].get("series", []):  # type: ignore[index]
            tags = series.get("tags", {})
            columns = series["columns"]
            for values in series["values"]:
                record = dict(zip(columns, values, strict=True))
                rows.append((record.pop("time"), tags, record))
        n = len(rows)
        fields: dict[str, Column] = {}
        for key, col in original.fields.items():
            present = np.array([r[2].get(key) is not None for r in rows], dtype=np.bool_)
            fill = {FieldType.STRING: "", FieldType.BOOL: False}.get(col.type, 0)
            values = [r[2].get(key) if r[2].get(key) is not None else fill for r in rows]
            fields[key] = Column(col.type, Column.of(col.type, values).values, present)
        out[name] = Frame(
            name,
            np.array([r[0] for r in rows], dtype=np.int64),
            {k: np.array([r[1].get(k, "") for r in rows], dtype=object) for k in tag_keys},
            fields,
        )
        assert len(out[name]) == n
    return out


def test_frames_written_read_back_equal_through_influxql(influx_settings: InfluxSettings) -> None:
    core = IngestCore()
    frames = core.process(SAMPLE_LP.read_bytes()).frames
    writer = InfluxWriter(influx_settings, core.stats)
    writer.write(frames)
    writer.flush()
    writer.close()
    stored = {name: frame.with_values_only() for name, frame in frames.items()}
    assert core.stats.written == sum(len(f) for f in stored.values())
    assert core.stats.dropped == 0
    assert frame_differences(stored, _read_back(influx_settings, stored)) == []


def test_every_value_type_and_escaped_names_survive(influx_settings: InfluxSettings) -> None:
    frame = Frame(
        "odd measurement,name",
        np.array([1_767_225_600_000_000_000, 1_767_225_610_000_000_000], dtype=np.int64),
        {"tag key": np.array(["a=b,c d", "北京"], dtype=object)},
        {
            "f": Column.of(FieldType.FLOAT, [0.1, -1.5e300]),
            "i": Column.of(FieldType.INT, [-(2**63) + 1, 2**62]),
            "b": Column.of(FieldType.BOOL, [True, False]),
            "s": Column(FieldType.STRING, np.array(['quote " and \\', ""], dtype=object), np.array([True, False])),
        },
    )
    writer = InfluxWriter(influx_settings)
    writer.write({frame.measurement: frame})
    writer.flush()
    assert frame_differences({frame.measurement: frame}, _read_back(influx_settings, {frame.measurement: frame})) == []


def _faulty_proxy(target: str, fail: int, status: int) -> FaultyRelay:
    """Forwards to the real InfluxDB, except that the first `fail` writes get `status` back."""
    remaining = [fail]

    def refuse() -> int | None:
        if remaining[0] > 0:
            remaining[0] -= 1
            return status
        return None

    return FaultyRelay(target, refuse)


ProxyFactory = Callable[[int, int], FaultyRelay]


@pytest.fixture
def proxy_factory(influx_settings: InfluxSettings) -> Iterator[ProxyFactory]:
    proxies: list[FaultyRelay] = []

    def make(fail: int, status: int) -> FaultyRelay:
        proxies.append(_faulty_proxy(influx_settings.url, fail, status))
        return proxies[-1]

    yield make
    for p in proxies:
        p.close()


def _one_frame(n: int = 10) -> dict[str, Frame]:
    frame = Frame(
        "gpu",
        1_767_225_600_000_000_000 + np.arange(n, dtype=np.int64) * 10**10,
        {"gpu": np.array(["g0"] * n, dtype=object)},
        {"DCGM_FI_DEV_GPU_TEMP": Column.of(FieldType.FLOAT, np.linspace(40, 50, n))},
    )
    return {"gpu": frame}


def _count(settings: InfluxSettings) -> int:
    body = influxql(settings, 'SELECT count("DCGM_FI_DEV_GPU_TEMP") FROM gpu', settings.database)
    series = body["results"][0].get("series")  # type: ignore[index]
    return int(series[0]["values"][0][1]) if series else 0


def test_server_errors_are_retried_with_backoff_until_written(
    influx_settings: InfluxSettings, proxy_factory: ProxyFactory
) -> None:
    proxy = proxy_factory(2, 503)
    sleeps: list[float] = []
    stats = IngestStats()
    writer = InfluxWriter(influx_settings.model_copy(update={"url": proxy.url}), stats, sleep=sleeps.append)
    writer.write(_one_frame())
    writer.flush()
    assert (stats.retried, stats.written, stats.dropped) == (2, 10, 0)
    assert sleeps == [0.2, 0.4]  # exponential backoff from retry_initial_s
    assert _count(influx_settings) == 10


def test_a_refused_batch_is_split_until_the_refused_lines_are_found_and_the_rest_is_written(
    influx_settings: InfluxSettings,
) -> None:
    """The database's own refusal: a field that changes type (an uncatalogued field a collector
    sent as a number, then as text) is refused, its neighbours in the batch are stored."""
    stats = IngestStats()
    writer = InfluxWriter(influx_settings, stats, sleep=lambda _: None)
    base = 1_767_225_600_000_000_000
    writer.write_lines([f"gpu,gpu=g0 extra_field=1 {base}".encode()])  # the field is a float from now on
    assert writer.flush() == []
    good = [f"gpu,gpu=g{i} DCGM_FI_DEV_GPU_TEMP=40 {base + i}".encode() for i in range(9)]
    bad = f'gpu,gpu=g9 extra_field="text" {base + 9}'.encode()
    writer.write_lines([*good[:4], bad, *good[4:]])
    refused = writer.flush()
    assert [line for line, _ in refused] == [bad]
    assert "field type conflict" in refused[0][1]
    assert stats.written == 1 + 9 and writer.buffered_lines == 0
    assert _count(influx_settings) == 9


def test_a_client_error_for_a_whole_batch_is_split_and_the_halves_written(
    influx_settings: InfluxSettings, proxy_factory: ProxyFactory
) -> None:
    proxy = proxy_factory(1, 400)  # the first request is refused whole, the halves go through
    stats = IngestStats()
    writer = InfluxWriter(influx_settings.model_copy(update={"url": proxy.url}), stats, sleep=lambda _: None)
    writer.write(_one_frame())
    assert writer.flush() == []
    assert (stats.retried, stats.written) == (0, 10)
    assert _count(influx_settings) == 10


def test_while_the_database_is_away_nothing_is_dropped_and_the_next_flush_writes_it(
    influx_settings: InfluxSettings, proxy_factory: ProxyFactory
) -> None:
    settings = influx_settings.model_copy(update={"max_retries": 2})
    proxy = proxy_factory(3, 503)  # one flush's three attempts fail
    stats = IngestStats()
    writer = InfluxWriter(settings.model_copy(update={"url": proxy.url}), stats, sleep=lambda _: None)
    writer.write(_one_frame())
    with pytest.raises(InfluxUnavailableError):
        writer.flush()
    assert (stats.written, stats.dropped, writer.buffered_lines) == (0, 0, 10)
    assert writer.flush() == []
    assert (stats.written, writer.buffered_lines) == (10, 0)
    assert _count(influx_settings) == 10


def test_a_missing_database_is_an_outage_not_a_reason_to_drop(influx_settings: InfluxSettings) -> None:
    stats = IngestStats()
    missing = influx_settings.model_copy(update={"database": "no_such_database_here"})
    writer = InfluxWriter(missing, stats, sleep=lambda _: None)
    writer.write(_one_frame())
    with pytest.raises(InfluxUnavailableError, match="database not found"):
        writer.flush()
    assert (stats.written, stats.dropped, writer.buffered_lines) == (0, 0, 10)
