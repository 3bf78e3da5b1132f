"""Ticks are windows of the scrape grid: clock offsets, jitter, truncation and phases put every
sample on the tick it belongs to; the samples of one entity in one window merge field by field,
as a time-series database merges points of one series; late samples are counted, not analysed."""

from __future__ import annotations

import time

import numpy as np
import pytest

from detectors.detect_loop import DetectLoop, IntervalUnknownError, scrape_interval
from detectors.stack.view import MeasurementTick
from detectors.ticks import TickAssembler
from ingest.deadletter import Source
from ingest.frames import Frame, merge_rows
from ingest.lineprotocol import decode
from vocab.schedule import NodeJobs, Schedule

T0 = 1_767_225_600
S = 10**9


def _frames(lines: list[str]) -> dict[str, Frame]:
    return decode(("\n".join(lines) + "\n").encode()).frames


def test_single_field_lines_of_one_entity_merge_into_one_row() -> None:
    frame = _frames(
        [
            f"gpu,gpu=a,node=n1 DCGM_FI_DEV_GPU_TEMP=50 {T0 * S}",
            f"gpu,gpu=b,node=n1 DCGM_FI_DEV_GPU_TEMP=40 {T0 * S}",
            f"gpu,gpu=a,node=n1 DCGM_FI_DEV_SM_CLOCK=1980i {T0 * S}",
            f"gpu,gpu=a,node=n1,job=j1 DCGM_FI_DEV_POWER_USAGE=600 {T0 * S}",
        ]
    )["gpu"]
    merged = merge_rows(frame, "gpu")
    assert sorted(merged.tag("gpu")) == ["a", "b"]
    a = int(np.flatnonzero(merged.tag("gpu") == "a")[0])
    assert merged.fields["DCGM_FI_DEV_GPU_TEMP"].as_float()[a] == 50
    assert merged.fields["DCGM_FI_DEV_SM_CLOCK"].as_float()[a] == 1980
    assert merged.fields["DCGM_FI_DEV_POWER_USAGE"].as_float()[a] == 600
    assert merged.tag("job")[a] == "j1" and merged.tag("node")[a] == "n1"  # a tag any line carried
    b = 1 - a
    assert not merged.fields["DCGM_FI_DEV_SM_CLOCK"].present[b]


def test_the_newest_value_of_a_field_wins_then_the_last_to_arrive() -> None:
    frame = _frames(
        [
            f"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=52 {T0 * S + 2 * S}",
            f"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=50 {T0 * S}",  # older: loses
            f"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=53 {T0 * S + 2 * S}",  # same time, later: wins
        ]
    )["gpu"]
    merged = merge_rows(frame, "gpu")
    assert len(merged) == 1 and merged.fields["DCGM_FI_DEV_GPU_TEMP"].as_float()[0] == 53
    assert merged.time_ns[0] == T0 * S + 2 * S


def _hosts(tick: int, offsets: dict[str, float]) -> list[str]:
    return [
        f"gpu,gpu={h}-gpu0,node={h} DCGM_FI_DEV_GPU_TEMP={tick} {int((T0 + 30 * tick + off) * S)}"
        for h, off in offsets.items()
    ]


@pytest.mark.parametrize(
    "offsets",
    [
        {"h1": 0.0, "h2": 0.0, "h3": 0.0},
        {"h1": 0.0, "h2": 2.7, "h3": -3.9},  # clocks seconds apart
        {"h1": 14.0, "h2": -14.0, "h3": 7.0},  # scraping at their own phase, within half an interval
    ],
)
def test_hosts_whose_clocks_disagree_land_on_the_same_ticks(offsets: dict[str, float]) -> None:
    a = TickAssembler(30.0)
    out = []
    for k in range(5):
        a.add(_frames(_hosts(k, offsets)))
        out += [(t.t, sorted(t.frames["gpu"].tag("gpu"))) for t in a.ready()]
    out += [(t.t, sorted(t.frames["gpu"].tag("gpu"))) for t in a.flush()]
    assert out == [(T0 + 30.0 * k, ["h1-gpu0", "h2-gpu0", "h3-gpu0"]) for k in range(5)]


def test_a_host_silent_for_a_window_is_missing_from_that_tick_only() -> None:
    a = TickAssembler(30.0)
    for k in range(4):
        offsets = {"h1": 1.0} if k == 2 else {"h1": 1.0, "h2": 2.0}
        a.add(_frames(_hosts(k, offsets)))
    ticks = [(t.t - T0, sorted(t.frames["gpu"].tag("gpu"))) for t in [*a.ready(), *a.flush()]]
    assert ticks[2] == (60.0, ["h1-gpu0"]) and ticks[3] == (90.0, ["h1-gpu0", "h2-gpu0"])


def test_a_late_row_is_counted_and_kept_out_of_detection_not_dead_lettered() -> None:
    loop = DetectLoop(30.0, drift_factory=None)
    loop.feed(("\n".join(_hosts(0, {"h1": 0.0}) + _hosts(1, {"h1": 0.0}) + _hosts(2, {"h1": 0.0})) + "\n").encode())
    _, letters = loop.feed(("\n".join(_hosts(0, {"h2": 0.0})) + "\n").encode())  # tick 0 is done
    assert letters == [] and loop.stats.late_rows == 1


def test_the_interval_is_given_or_read_never_guessed(tmp_path: pytest.TempPathFactory) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path))
    assert scrape_interval(folder, 15.0) == 15.0
    with pytest.raises(IntervalUnknownError, match="--interval"):
        scrape_interval(folder, None)
    (folder / "meta.json").write_text('{"interval_s": 30}')
    assert scrape_interval(folder, None) == 30.0
    with pytest.raises(IntervalUnknownError, match="positive"):
        scrape_interval(folder, 0.0)


def test_node_jobs_follow_the_schedule_through_time() -> None:
    schedule = Schedule.from_events(
        [
            {"type": "job_start", "job": "j1", "nodes": ["n1", "n2"], "time": 100.0},
            {"type": "job_end", "job": "j1", "time": 200.0},
            {"type": "job_start", "job": "j2", "nodes": ["n2"], "time": 200.0},
        ]
    )
    jobs = NodeJobs(schedule)
    nodes = np.array(["n1", "n2", "n3", "n1"], dtype=object)
    assert list(jobs.at(50.0, nodes)) == ["idle", "idle", "idle", "idle"]
    assert list(jobs.at(100.0, nodes)) == ["j1", "j1", "idle", "j1"]
    assert list(jobs.at(200.0, nodes)) == ["idle", "j2", "idle", "idle"]
    assert list(jobs.at(150.0, nodes)) == ["j1", "j1", "idle", "j1"]  # a replay goes back in time


def test_without_a_job_tag_gpus_get_their_job_from_the_schedule_and_a_wrong_tag_is_counted() -> None:
    from detectors.detect_loop import apply_events

    loop = DetectLoop(30.0, drift_factory=None)
    apply_events(loop, [{"type": "job_start", "job": "j1", "nodes": ["h1"], "time": float(T0 - 60)}])
    seen: list[list[str]] = []
    original = loop.stack.prepare

    def spy(t: float, frames: dict[str, Frame]) -> list[MeasurementTick]:
        seen.append(list(frames["gpu"].tag("job")))
        return original(t, frames)

    loop.stack.prepare = spy  # type: ignore[method-assign]
    lines = [*_hosts(0, {"h1": 0.0, "h2": 0.0}), f"gpu,gpu=h1-gpu1,node=h1,job=j9 DCGM_FI_DEV_GPU_TEMP=1 {T0 * S}"]
    loop.feed(("\n".join(lines) + "\n").encode())
    loop.finish()
    assert sorted(seen[0]) == ["idle", "j1", "j1"]
    assert loop.stats.job_tag_mismatches == 1


def test_event_time_of_a_message_comes_from_its_lines() -> None:
    from ingest.messages import event_time_ms

    assert event_time_ms(b"gpu,node=n f=1 1700000000123456789\n", 5) == 1700000000123
    # the last line decides (one entity and time per message)
    assert event_time_ms(b"a,x=1 f=1 1000000\nb,x=1 f=2 2000000\n", 5) == 2
    # no timestamp on the line (Telegraf may leave it to the broker), or a string field: fallback
    assert event_time_ms(b"gpu,node=n f=1\n", 5) == 5
    assert event_time_ms(b'gpu,node=n s="a 123"\n', 5) == 5
    assert event_time_ms(b"", 5) == 5


def _message(partition: int, offset: int, host: str, t_s: int) -> tuple[Source, int, bytes]:
    line = f"gpu,gpu={host}-gpu0,node={host} DCGM_FI_DEV_GPU_TEMP=50 {t_s * S}"
    return Source("t", partition, offset), t_s * 1000, line.encode()


def test_messages_whose_tick_is_still_open_are_held_back_from_the_commit() -> None:
    loop = DetectLoop(30.0, lateness_s=0.0)
    # partition 0 is two ticks ahead of partition 1: the slowest partition holds ticks back
    loop.feed_polled([_message(0, k, "h1", T0 + 30 * k) for k in range(3)] + [_message(1, 0, "h2", T0)])
    assert loop.stats.ticks == 0  # nothing analysed: partition 1 has not passed the first window
    assert loop.held.first_held() == {("t", 0): 0, ("t", 1): 0}
    loop.feed_polled([_message(1, 1, "h2", T0 + 30), _message(1, 2, "h2", T0 + 60)])
    # the stream is at T0+60 on both: ticks T0 and T0+30 are analysed, T0+60 is still open
    assert loop.stats.ticks == 2
    assert loop.held.first_held() == {("t", 0): 2, ("t", 1): 2}
    loop.finish()
    assert loop.held.first_held() == {}


def test_a_late_or_dead_lettered_message_holds_nothing_back() -> None:
    loop = DetectLoop(30.0, lateness_s=0.0)
    loop.feed_polled([_message(0, k, "h1", T0 + 30 * k) for k in range(4)])
    assert loop.held.first_held() == {("t", 0): 3}
    late = _message(1, 0, "h2", T0)  # its tick was analysed: counted late, done
    future = _message(1, 1, "h2", int(time.time()) + 30 * 86_400)  # a month ahead of the wall: dead-lettered
    _, letters = loop.feed_polled([late])
    assert not letters and loop.stats.late_rows == 1
    _, letters = loop.feed_polled([future])
    assert len(letters) == 1
    assert loop.held.first_held() == {("t", 0): 3}


def test_a_revoked_partition_is_forgotten_its_new_owner_commits_it() -> None:
    loop = DetectLoop(30.0, lateness_s=0.0)
    loop.feed_polled([_message(0, 7, "h1", T0), _message(1, 9, "h2", T0)])
    loop.held.forget({("t", 1)})
    assert loop.held.first_held() == {("t", 0): 7}


def test_a_partition_far_behind_is_waited_for_while_the_broker_still_holds_records_for_it() -> None:
    from detectors.ticks import PartitionClock

    clock = PartitionClock(stall_s=1800)
    stamps = [("a", (T0 + 7200) * 1000), ("b", T0 * 1000)]
    # quiet for two hours of event time with nothing waiting: its producers stopped; not waited for
    assert clock.observe(stamps) == (T0 + 7200) * S
    # the same lag while its records are still on the broker (a backlog after an outage): waited for
    assert clock.observe([], backlogged={"b"}) == T0 * S


def test_a_partition_that_has_delivered_nothing_yet_holds_every_tick_while_the_broker_holds_its_records() -> None:
    """Catching up a backlog, the broker hands out a few partitions at a time: partition 1 is
    hours into the backlog before partition 2 delivers a line. No tick may be analysed meanwhile,
    or every entity of partition 2 would be silent in it."""
    loop = DetectLoop(30.0, lateness_s=0.0)
    hours = [_message(1, k, "h1", T0 + 30 * k) for k in range(240)]
    loop.feed_polled(hours, backlogged={("t", 1), ("t", 2)})
    assert loop.stats.ticks == 0
    # partition 2 delivers the first two ticks: those (and only those) can be analysed
    loop.feed_polled([_message(2, 0, "h2", T0), _message(2, 1, "h2", T0 + 30)], backlogged={("t", 1), ("t", 2)})
    assert loop.stats.ticks == 1  # the tick at T0; T0 + 30's window is not closed for partition 2 yet
    # caught up, partition 2 (now quiet and far behind: its producers stopped) holds nothing back
    loop.feed_polled([], backlogged=set())
    assert loop.stats.ticks > 200


def test_an_empty_partition_the_broker_confirms_caught_up_holds_nothing_back() -> None:
    from detectors.ticks import PartitionClock

    clock = PartitionClock()
    assert clock.observe([("a", T0 * 1000)], backlogged={"b"}) == 0  # b unknown or behind: wait
    assert clock.observe([], backlogged=set()) == T0 * S  # b confirmed empty: a alone sets the pace


def test_partitions_far_ahead_of_the_slowest_one_still_behind_are_named_for_pausing() -> None:
    from detectors.ticks import PartitionClock

    clock = PartitionClock()
    clock.observe([("a", (T0 + 3600) * 1000), ("b", (T0 + 60) * 1000), ("c", T0 * 1000)], backlogged={"b"})
    # c is caught up (quiet): it has nothing more to deliver, so nobody is paused for it
    assert clock.ahead(300) == {"a"}
    # every partition caught up: nothing to wait for, nothing paused
    clock.observe([], backlogged=set())
    assert clock.ahead(300) == set()
    # a partition still behind that delivered nothing: every partition that did is paused
    clock.observe([], backlogged={"d"})
    assert clock.ahead(300) == {"a", "b", "c"}
