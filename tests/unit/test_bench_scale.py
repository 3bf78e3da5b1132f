"""`aiops bench scale` reads lag, tick delay and the steady rate from the progress records'
broker times, and CPU time from /proc."""

from __future__ import annotations

import os
import time

from benchmarks.scale import ScaleRun, lag_svg, live_delays, steady_seconds_per_tick
from benchmarks.soak import cpu_seconds
from detectors.progress_topic import idle_record, judged_record

S = 10**9


def test_lag_and_tick_delay_come_from_when_the_last_partition_judged_each_tick() -> None:
    started = 1000.0  # the first tick (event time 50 s) was scraped then
    marks = [
        (1012.0, judged_record(0, 50 * S)),
        (1014.0, judged_record(1, 50 * S)),  # tick 50 whole at 1014: 14 s after its scrape
        (1013.0, idle_record(1)),
        (1021.0, judged_record(0, 60 * S)),
        (1023.0, judged_record(1, 60 * S)),  # tick 60, scraped at 1010: 13 s
        (1055.0, judged_record(0, 70 * S)),
        (1056.0, judged_record(1, 70 * S)),  # tick 70, scraped at 1020: 36 s (it fell behind)
    ]
    lag, delays = live_delays(marks, started, 10.0, every_s=5.0)
    assert delays == [14.0, 13.0, 36.0]
    at = dict(lag)
    assert at[5.0] == 5.0  # nothing judged yet: the whole run so far
    assert at[15.0] == 15.0  # at 1015 the newest whole tick is 50 (scraped at 1000)
    assert at[25.0] == 15.0  # at 1025, tick 60 (scraped at 1010)
    assert at[50.0] == 40.0  # at 1050, still 60: the lag grows while it falls behind
    assert at[60.0] == 40.0  # at 1060, tick 70 (scraped at 1020): caught up, 40 s behind the clock
    run = ScaleRun(10_000, 2, lag_s=lag, tick_delay_s=delays)
    assert "<polyline" in lag_svg([run]) and "10,000 GPUs, 2 members" in lag_svg([run])


def test_the_steady_rate_leaves_out_the_first_tick_and_the_last() -> None:
    """The first tick waits for the members to join, the last for the input to go quiet."""
    whole = {50: 30.0, 60: 34.0, 70: 38.5, 80: 42.0, 90: 46.0, 100: 90.0}  # tick s -> judged everywhere
    marks = [(at - 0.5, judged_record(0, t * S)) for t, at in whole.items()]
    marks += [(at, judged_record(1, t * S)) for t, at in whole.items()] + [(31.0, idle_record(2))]
    assert steady_seconds_per_tick(marks) == (46.0 - 34.0) / 3
    assert steady_seconds_per_tick(marks[:3]) == 0.0  # too few ticks to say
    run = ScaleRun(10_000, 2, ticks=6, values=6_000_000, steady_s_per_tick=4.0)
    assert run.steady_rate == 250_000.0  # a tick's values every 4 s


def test_cpu_seconds_of_this_process_grow_with_work_and_the_machine_has_more() -> None:
    before = cpu_seconds(os.getpid())
    assert before is not None
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    after = cpu_seconds(os.getpid())
    machine = cpu_seconds()
    assert after is not None and machine is not None
    assert after - before >= 0.2 and machine >= after
    assert cpu_seconds(2**22 + 7) is None  # no such process
