"""Downsampling raw telemetry per window (ingest/downsample.py): what one point per series and
window holds, when a window closes, what happens to rows that come too late or again after a
restart, and which offsets may be committed."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.consume import line_offsets
from ingest.deadletter import Source
from ingest.downsample import Downsampler, aggregate
from ingest.frames import Column, Frame, to_pandas
from ingest.pipeline import Batch, IngestCore, IngestStats, MemoryFrameSink
from vocab.catalog import FieldType

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z, a whole minute
NS = 1_000_000_000
A, B = ("telemetry", 0), ("telemetry", 1)


def _lp(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _gpu(gpu: str, second: float, temp: float, clock: int, ecc: int, xid: int = 0, extra: str = "") -> str:
    fields = (
        f"DCGM_FI_DEV_GPU_TEMP={temp},DCGM_FI_DEV_SM_CLOCK={clock}i,"
        f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL={ecc}i,DCGM_FI_DEV_XID_ERRORS={xid}i{extra}"
    )
    return f"gpu,gpu={gpu},node=n1 {fields} {int((T0 + second) * NS)}"


def _batch(core: IngestCore, *lines: str) -> Batch:
    batch = core.process(_lp(*lines))
    assert batch.deadletters == []
    return batch


def _written(sink: MemoryFrameSink) -> dict[tuple[str, int], dict[str, object]]:
    """Every point written: (gpu, seconds after T0) -> its fields."""
    out: dict[tuple[str, int], dict[str, object]] = {}
    for frames in sink.batches:
        for frame in frames.values():
            table = to_pandas(frame)
            for row in table.to_dict("records"):
                key = (str(row["gpu"]), int(row["time"]) // NS - T0)
                assert key not in out, f"two points for {key}"
                out[key] = {k: v for k, v in row.items() if k in frame.fields}
    return out


def test_gauges_get_mean_max_min_and_counters_states_text_their_last_value() -> None:
    core, sink = IngestCore(), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, stats=core.stats)
    lines = [
        # arrival order is not time order: "last" means the newest sample, not the last to come
        _gpu("g1", 50, 70.0, 1500, 12, xid=0, extra=',fw="b",fan=3i'),
        _gpu("g1", 0, 60.0, 1400, 10, xid=0, extra=',fw="a",fan=1i'),
        _gpu("g1", 10, 62.0, 1401, 10, xid=79),
        _gpu("g1", 20, 90.0, 1402, 11, xid=0),
        _gpu("g1", 30, 64.0, 1403, 11, xid=0),
        _gpu("g1", 40, 66.0, 1404, 11, xid=0),
    ]
    down.write(_batch(core, *lines).frames)
    down.close_all()
    down.flush()
    point = _written(sink)[("g1", 0)]
    assert point["DCGM_FI_DEV_GPU_TEMP"] == pytest.approx((60 + 62 + 90 + 64 + 66 + 70) / 6)
    assert point["DCGM_FI_DEV_GPU_TEMP_max"] == 90.0  # the peak survives the window
    assert point["DCGM_FI_DEV_GPU_TEMP_min"] == 60.0
    assert point["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == 12  # a counter: its last value, no mean
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL_max" not in point
    assert point["DCGM_FI_DEV_XID_ERRORS"] == 0  # a state: last, and the XID of one scrape in _max
    assert point["DCGM_FI_DEV_XID_ERRORS_max"] == 79
    assert point["DCGM_FI_DEV_XID_ERRORS_min"] == 0
    assert point["fw"] == "b"  # text the catalog does not know: the last value
    assert point["fan"] == 2.0  # a number the catalog does not know: a gauge (mean of 1 and 3)
    assert point["fan_max"] == 3.0
    frame = sink.batches[0]["gpu"]
    # an integer gauge keeps its type (InfluxDB refuses a float for an integer field): rounded
    assert frame.fields["DCGM_FI_DEV_SM_CLOCK"].type is FieldType.INT
    assert point["DCGM_FI_DEV_SM_CLOCK"] == round((1400 + 1401 + 1402 + 1403 + 1404 + 1500) / 6)
    assert frame.fields["DCGM_FI_DEV_SM_CLOCK_max"].values[0] == 1500


def test_windows_are_aligned_to_whole_multiples_and_stamped_at_their_start() -> None:
    core, sink = IngestCore(), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, stats=core.stats)
    # 59.9 s belongs to the first minute, 60.0 s to the second; 7 s into the stream is no start
    down.write(_batch(core, _gpu("g1", 7, 50.0, 1, 1), _gpu("g1", 59.9, 52.0, 1, 1), _gpu("g1", 60, 80.0, 1, 1)).frames)
    down.close_all()
    down.flush()
    points = _written(sink)
    assert sorted(points) == [("g1", 0), ("g1", 60)]
    assert points[("g1", 0)]["DCGM_FI_DEV_GPU_TEMP"] == 51.0
    assert points[("g1", 60)]["DCGM_FI_DEV_GPU_TEMP"] == 80.0


def test_each_tag_set_is_its_own_series() -> None:
    core, sink = IngestCore(), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, stats=core.stats)
    lines = [
        f"gpu,gpu=g1,node=n1,job=j1 DCGM_FI_DEV_GPU_TEMP=40 {T0 * NS}",
        f"gpu,gpu=g1,node=n1,job=j2 DCGM_FI_DEV_GPU_TEMP=60 {(T0 + 30) * NS}",
        f"gpu,gpu=g2,node=n1,job=j1 DCGM_FI_DEV_GPU_TEMP=50 {T0 * NS}",
    ]
    down.write(_batch(core, *lines).frames)
    down.close_all()
    down.flush()
    table = to_pandas(sink.batches[0]["gpu"]).sort_values(["gpu", "job"])
    assert table[["gpu", "job", "DCGM_FI_DEV_GPU_TEMP"]].values.tolist() == [
        ["g1", "j1", 40.0],
        ["g1", "j2", 60.0],
        ["g2", "j1", 50.0],
    ]


def test_a_sample_split_over_lines_or_delivered_twice_counts_once() -> None:
    """Rows of one series and timestamp merge as InfluxDB merges points: the mean is that of the
    samples full resolution would have stored, not weighted by how often one arrived."""
    core, sink = IngestCore(), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, stats=core.stats)
    t0, t1 = T0 * NS, (T0 + 10) * NS
    lines = [
        f"gpu,gpu=g1 DCGM_FI_DEV_GPU_TEMP=40 {t0}",
        f"gpu,gpu=g1 DCGM_FI_DEV_POWER_USAGE=300 {t0}",  # the same sample, one field per line
        f"gpu,gpu=g1 DCGM_FI_DEV_GPU_TEMP=50 {t1}",
        f"gpu,gpu=g1 DCGM_FI_DEV_GPU_TEMP=50 {t1}",  # delivered twice
        f"gpu,gpu=g1 DCGM_FI_DEV_GPU_TEMP=56 {t1}",  # and corrected: the newest arrival wins
    ]
    down.write(_batch(core, *lines).frames)
    down.close_all()
    down.flush()
    point = _written(sink)[("g1", 0)]
    assert point["DCGM_FI_DEV_GPU_TEMP"] == 48.0  # (40 + 56) / 2
    assert point["DCGM_FI_DEV_GPU_TEMP_max"] == 56.0
    assert point["DCGM_FI_DEV_POWER_USAGE"] == 300.0


def test_a_window_closes_per_partition_once_its_time_passed_the_end_plus_the_lateness() -> None:
    core, sink = IngestCore(), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, lateness_s=30, stats=core.stats)
    down.write_stream(_batch(core, _gpu("a1", 0, 50.0, 1, 1)).frames, A, None)
    down.write_stream(_batch(core, _gpu("b1", 0, 50.0, 1, 1)).frames, B, None)
    # A's time reaches 89 s: the first minute (ends at 60 s) waits 30 s more, until 90 s
    down.write_stream(_batch(core, _gpu("a1", 89, 51.0, 1, 1)).frames, A, None)
    down.flush()
    assert sink.batches == []
    down.write_stream(_batch(core, _gpu("a1", 90, 52.0, 1, 1)).frames, A, None)
    down.flush()
    assert sorted(_written(sink)) == [("a1", 0)]  # A's minute closed; B's time has not moved
    down.write_stream(_batch(core, _gpu("b1", 95, 53.0, 1, 1)).frames, B, None)
    down.flush()
    assert sorted(_written(sink)) == [("a1", 0), ("b1", 0)]
    assert core.stats.open_rows == 3  # a1 at 89 s and 90 s, b1 at 95 s: the second minute, open


def test_one_host_ahead_does_not_close_its_partitions_windows() -> None:
    """A partition's time is the 90th percentile of a batch, not its newest row."""
    core, sink = IngestCore(), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, lateness_s=30, stats=core.stats)
    lines = [_gpu(f"g{i}", 10, 50.0, 1, 1) for i in range(20)] + [_gpu("skewed", 600, 50.0, 1, 1)]
    down.write_stream(_batch(core, *lines).frames, A, None)
    down.flush()
    assert sink.batches == []
    down.write_stream(_batch(core, _gpu("g0", 40, 60.0, 1, 1)).frames, A, None)
    down.flush()
    down.close_all()
    down.flush()
    assert _written(sink)[("g0", 0)]["DCGM_FI_DEV_GPU_TEMP"] == 55.0  # nothing of g0 was late
    assert core.stats.late_for_window == 0


def test_rows_for_a_closed_window_are_counted_and_not_written() -> None:
    core, sink = IngestCore(), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, lateness_s=30, stats=core.stats)
    down.write_stream(_batch(core, _gpu("g1", 0, 50.0, 1, 1), _gpu("g1", 100, 50.0, 1, 1)).frames, A, None)
    down.flush()
    assert _written(sink)[("g1", 0)]["DCGM_FI_DEV_GPU_TEMP"] == 50.0
    down.write_stream(_batch(core, _gpu("g1", 30, 99.0, 1, 1), _gpu("g9", 59, 99.0, 1, 1)).frames, A, None)
    down.close_all()
    down.flush()
    assert core.stats.late_for_window == 2
    points = _written(sink)  # no second, partial point for the closed minute
    assert sorted(points) == [("g1", 0), ("g1", 60)]


def test_commits_stop_at_the_first_message_with_rows_in_an_open_window() -> None:
    core, sink = IngestCore(), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, lateness_s=30, stats=core.stats)
    messages = [
        (Source("telemetry", 0, 100), 0, _lp(_gpu("g1", 0, 50.0, 1, 1), _gpu("g2", 0, 50.0, 1, 1))),
        (Source("telemetry", 0, 101), 0, _lp(_gpu("g1", 60, 50.0, 1, 1))),
        (Source("telemetry", 0, 102), 0, _lp(_gpu("g1", 70, 50.0, 1, 1), _gpu("g2", 70, 50.0, 1, 1))),
    ]
    data = b"".join(v for _, _, v in messages)
    batch = core.process(data, stream=A)
    offsets = line_offsets(messages, batch.line_no)
    assert offsets["gpu"].tolist() == [100, 100, 101, 102, 102]
    down.write_stream(batch.frames, A, offsets)
    down.flush()
    assert down.held() == {A: 100}  # 70 s has not passed 60 + 30: every row still open
    late = [(Source("telemetry", 0, 103), 0, _lp(_gpu("g1", 95, 50.0, 1, 1)))]
    batch = core.process(late[0][2], stream=A)
    down.write_stream(batch.frames, A, line_offsets(late, batch.line_no))
    down.flush()
    assert down.held() == {A: 101}  # the first minute is written; the second holds from 101 on
    down.close_all()
    down.flush()
    assert down.held() == {}


def test_a_restart_reading_again_from_the_commit_writes_no_partial_window() -> None:
    """Windows before the first one a partition shows a new reader were written before; rows of
    them read again are counted, and the complete aggregate stays."""
    stats = IngestStats()
    sink = MemoryFrameSink()
    down = Downsampler(sink, window_s=60, lateness_s=30, stats=stats)
    core = IngestCore(stats)
    # after the restart the partition resumes at offset 7, whose row is in the second minute;
    # offset 8 is a row of the first minute that came late (and was counted late before)
    again = [
        (Source("telemetry", 0, 7), 0, _lp(_gpu("g1", 65, 70.0, 1, 1))),
        (Source("telemetry", 0, 8), 0, _lp(_gpu("g1", 55, 10.0, 1, 1))),
        (Source("telemetry", 0, 9), 0, _lp(_gpu("g1", 75, 72.0, 1, 1))),
    ]
    batch = core.process(b"".join(v for _, _, v in again), stream=A)
    down.write_stream(batch.frames, A, line_offsets(again, batch.line_no))
    down.close_all()
    down.flush()
    assert sorted(_written(sink)) == [("g1", 60)]
    assert _written(sink)[("g1", 60)]["DCGM_FI_DEV_GPU_TEMP"] == 71.0
    assert stats.repeated_after_restart == 1


def test_a_rebalance_drops_the_partitions_open_rows_unwritten() -> None:
    core, sink = IngestCore(), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, stats=core.stats)
    down.write_stream(_batch(core, _gpu("g1", 0, 50.0, 1, 1)).frames, A, {"gpu": np.array([5])})
    down.write_stream(_batch(core, _gpu("g2", 0, 50.0, 1, 1)).frames, B, {"gpu": np.array([9])})
    down.forget([A])
    assert down.held() == {B: 9}
    down.close_all()
    down.flush()
    assert sorted(_written(sink)) == [("g2", 0)]
    assert (core.stats.released_rows, core.stats.open_rows) == (1, 0)


def test_every_line_is_accounted_for() -> None:
    """lines = written + deadlettered + dropped + blank_rows + late_for_window
    + repeated_after_restart + open_rows + released_rows + (aggregated_rows - aggregate_points),
    with the points the store accepted as `written` (here: all of them)."""
    stats = IngestStats()
    core, sink = IngestCore(stats), MemoryFrameSink()
    down = Downsampler(sink, window_s=60, lateness_s=0, stats=stats)
    blank = f"gpu,gpu=g3 DCGM_FI_DEV_GPU_TEMP={2**60}.0 {T0 * NS}"  # a DCGM blank: nothing to store
    rows = [_gpu(f"g{i % 3}", s, 50.0 + s, 1, 1) for s in range(0, 300, 10) for i in range(3)]
    unknown = f"mystery,x=1 y=1 {T0 * NS}"  # dead-lettered
    down.write_stream(core.process(_lp(*rows[:60], blank, unknown)).frames, A, None)
    down.flush()
    down.write_stream(_batch(core, *rows[60:], _gpu("g0", 5, 1.0, 1, 1)).frames, A, None)  # late
    down.write_stream(_batch(core, _gpu("g0", 0, 1.0, 1, 1)).frames, B, None)
    down.forget([B])
    down.flush()
    stats.written = sum(len(f) for frames in sink.batches for f in frames.values())  # as InfluxWriter counts
    s = stats
    assert (s.deadlettered, s.blank_rows, s.late_for_window, s.released_rows) == (1, 1, 1, 1)
    assert s.open_rows > 0  # the last minute waits for time to pass it
    assert s.lines == (
        s.written
        + s.deadlettered
        + s.dropped
        + s.blank_rows
        + s.late_for_window
        + s.repeated_after_restart
        + s.open_rows
        + s.released_rows
        + s.aggregated_rows
        - s.aggregate_points
    )


def test_aggregate_of_a_frame_without_tags_or_catalog_entry() -> None:
    frame = Frame(
        "unknown",
        np.array([0, 10, 70], dtype=np.int64) * NS,
        {},
        {"v": Column.of(FieldType.UINT, [1, 4, 9])},
    )
    out = aggregate(frame, frame.time_ns // (60 * NS), 60 * NS)
    assert out.time_ns.tolist() == [0, 60 * NS]
    assert out.fields["v"].values.tolist() == [2, 9]  # mean 2.5 rounds to even, as np.rint does
    assert out.fields["v_max"].values.tolist() == [4, 9]
    assert out.fields["v_min"].values.tolist() == [1, 9]


def test_a_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Downsampler(MemoryFrameSink(), window_s=0)
