"""Fail-slow from the step time (detectors.jobs.steps) and the rank the others wait for
(detectors.jobs.arrival), on the real H200 loop's steps (../shared/datasets/real-gpu/h200/
train-steps.csv: 702 healthy training steps, median 0.187 s, the first 3.17 s, two 8 s checkpoint
pauses between steps) and copies of it with a slowdown injected."""

from __future__ import annotations

import dataclasses
import pickle
import random
from pathlib import Path

import pytest

from detectors.jobs import ArrivalTracker, FailSlow, JobWatch, StepTimeDetector
from ingest.jobs import Step, read_step_csv
from ingest.jobs.records import Collective

ROOT = Path(__file__).resolve().parents[2]
STEPS_CSV = ROOT.parent / "shared" / "datasets" / "real-gpu" / "h200" / "train-steps.csv"
RANKS = 8
ONSET = 300  # the step the injected slowdown starts at


@pytest.fixture(scope="module")
def real() -> list[Step]:
    read = read_step_csv(STEPS_CSV.read_bytes(), job="4242", rank=0, node="dgx-00")
    assert len(read.records) == 702
    assert not read.deadletters
    return read.records


def ranks(steps: list[Step], slow: dict[int, float] | None = None, jitter: float = 0.0) -> list[Step]:
    """The loop on every rank, in time order; `slow`: rank -> factor from step ONSET on."""
    rng = random.Random(7)
    out = []
    for s in steps:
        for rank in range(RANKS):
            factor = (slow or {}).get(rank, 1.0) if s.step >= ONSET else 1.0
            duration = s.duration_s * factor * (1 + rng.uniform(-jitter, jitter))
            out.append(dataclasses.replace(s, rank=rank, duration_s=duration, time_ns=s.time_ns + rank * 1000))
    return out


def run(detector: StepTimeDetector | JobWatch, steps: list[Step]) -> list[FailSlow]:
    found: list[FailSlow] = []
    for s in steps:
        found += detector.observe(s)
    return found


def test_the_real_loop_raises_nothing(real: list[Step]) -> None:
    assert run(StepTimeDetector(), real) == []
    assert run(StepTimeDetector(), ranks(real, jitter=0.01)) == []


def test_data_loader_stalls_and_evaluation_raise_nothing(real: list[Step]) -> None:
    # every 10th step a 2 s data-loader stall on every rank at once; an evaluation phase of long steps
    steps = [dataclasses.replace(s, duration_s=s.duration_s + 2.0) if s.step % 10 == 0 else s for s in real]
    steps = [dataclasses.replace(s, phase="eval", duration_s=1.5) if 400 <= s.step < 460 else s for s in steps]
    assert run(StepTimeDetector(), ranks(steps)) == []


@pytest.mark.parametrize("slowdown", [0.10, 0.07])
def test_one_rank_slower_is_found_and_named(real: list[Step], slowdown: float) -> None:
    found = run(StepTimeDetector(), ranks(real, slow={3: 1 + slowdown}))
    assert len(found) == 1
    f = found[0]
    assert f.job == "4242"
    assert f.slowdown == pytest.approx(slowdown, abs=0.02)
    assert ONSET < f.step <= ONSET + 32  # within the window's half and the settling
    assert f.longest_ranks[0] == (3, 1.0)  # a loop timing its own compute: the longest step is the rank's


def collectives(seq0: int, count: int, late: int | None, seed: int = 1) -> list[Collective]:
    """An AllReduce a step: each rank's exec time is the collective's own plus its wait for the last
    rank; `late` arrives last (by 15 ms, the 10 % of a 0.187 s step) in every one, else arrival is random."""
    rng = random.Random(seed)
    out = []
    for seq in range(seq0, seq0 + count):
        arrivals = {r: rng.uniform(0, 2_000) for r in range(RANKS)}  # microseconds
        if late is not None:
            arrivals[late] = 15_000 + rng.uniform(0, 2_000)
        last = max(arrivals.values())
        for r in range(RANKS):
            out.append(
                Collective(
                    time_ns=1_796_402_653 * 10**9 + seq * 10**8, job="4242", node="dgx-00", pid=1000 + r,
                    comm="0x7f8c496ae9f661", comm_name="DP Group 0", rank=r, n_ranks=RANKS, n_nodes=1,
                    op="AllReduce", p2p=False, seq=seq, peer=None, size_bytes=1 << 30, size_exact=True,
                    exec_time_us=20_000 + last - arrivals[r], algbw_gbs=None, busbw_gbs=None,
                    timing_source="kernel_gpu", cuda_device=r, trace=None, version="v4.0",
                )
            )  # fmt: skip
    return out


def test_synchronous_slowdown_is_named_from_the_collectives(real: list[Step]) -> None:
    # every rank's step is 10 % longer (they all wait for rank 6); the collectives say who is waited for
    watch = JobWatch()
    for c in collectives(1, ONSET, late=None) + collectives(ONSET, 200, late=6):
        watch.observe(c)
    found = run(watch, ranks(real, slow=dict.fromkeys(range(RANKS), 1.10), jitter=0.005))
    assert len(found) == 1
    named = found[0].slow_ranks
    assert [(s.rank.rank, s.rank.cuda_device, s.rank.pid) for s in named] == [(6, 6, 1006)]
    assert named[0].share == 1.0
    assert named[0].median_wait_us == pytest.approx(14_000, abs=2_000)


def test_random_arrival_names_nobody() -> None:
    tracker = ArrivalTracker()
    for c in collectives(1, 500, late=None):
        tracker.observe(c)
    assert tracker.slow_ranks("4242") == []
    for c in collectives(501, 64, late=2, seed=2):
        tracker.observe(c)
    assert [s.rank.rank for s in tracker.slow_ranks("4242")] == [2]


def test_a_late_rank_report_and_a_restart_keep_the_judgement(real: list[Step]) -> None:
    steps = ranks(real, slow={5: 1.10})
    half = (ONSET - 10) * RANKS  # before the slowdown shows
    detector = StepTimeDetector()
    first = run(detector, steps[:half])
    copy = pickle.loads(pickle.dumps(detector))
    later = run(detector, steps[half:])
    assert first == []
    assert len(later) == 1
    assert later == run(copy, steps[half:])
    assert detector.is_slow("4242")
    # a report of a step long judged changes nothing
    assert detector.observe(dataclasses.replace(steps[0], duration_s=100.0)) == []
