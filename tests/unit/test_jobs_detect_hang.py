"""Hang detection from collective progress (detectors.jobs.hang): synthetic NCCL Inspector streams
of one job, 8 ranks on one data-parallel communicator, a collective a second, the watermark moving
in 5-second checks as the daemon's would."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

from detectors.jobs import Hang, HangDetector, JobWatch
from ingest.jobs.records import Collective, FlightDump, FlightEntry

NS = 1_000_000_000
T0 = 1_796_402_653 * NS
RANKS = 8
COMM = "0x7f8c496ae9f661"
CHECK_EVERY = 5 * NS


def coll(seq: int, rank: int, t_ns: int, exec_us: float = 60_000.0, job: str = "4242") -> Collective:
    return Collective(
        time_ns=t_ns, job=job, node=f"dgx-{rank // 8:02d}", pid=1000 + rank, comm=COMM, comm_name="DP Group 0",
        rank=rank, n_ranks=RANKS, n_nodes=1, op="AllReduce", p2p=False, seq=seq, peer=None,
        size_bytes=1 << 30, size_exact=True, exec_time_us=exec_us, algbw_gbs=None, busbw_gbs=None,
        timing_source="kernel_gpu", cuda_device=rank, trace=None, version="v4.0",
    )  # fmt: skip


class Job:
    """A job's stream: `run` collectives a second on every rank (the ranks' records a few ms apart),
    `pause` every rank still after the same collective; `clock` is the event time reached."""

    def __init__(self) -> None:
        self.seq = 0
        self.clock = T0

    def run(self, seconds: int, skip: frozenset[int] = frozenset()) -> Iterator[Collective]:
        for _ in range(seconds):
            self.seq += 1
            for rank in range(RANKS):
                if rank not in skip:
                    yield coll(self.seq, rank, self.clock + rank * 3_000_000)
            self.clock += NS

    def pause(self, seconds: float) -> Iterator[Collective]:
        self.clock += int(seconds * NS)
        return iter(())


def feed(detector: HangDetector, records: Iterator[Collective], checks: list[int], idle_s: float = 0) -> list[Hang]:
    """Records in event-time order with a check every 5 s of event time, then `idle_s` of checks
    with nothing coming."""
    found: list[Hang] = []
    last = checks[-1]
    for c in records:
        while checks[-1] + CHECK_EVERY <= c.time_ns:
            checks.append(checks[-1] + CHECK_EVERY)
            found += detector.check(checks[-1])
        detector.observe(c)
        last = max(last, c.time_ns)
    while checks[-1] + CHECK_EVERY <= last + idle_s * NS:
        checks.append(checks[-1] + CHECK_EVERY)
        found += detector.check(checks[-1])
    return found


def healthy_history(detector: HangDetector, checks: list[int], job: Job) -> list[Hang]:
    """Two hours with checkpoints every 20 minutes of 90 to 170 s and an evaluation pause."""
    found: list[Hang] = []
    for pause in (90, 150, 170, 160, 60):
        found += feed(detector, job.run(1200), checks)
        job.pause(pause)
    found += feed(detector, job.run(600), checks)
    return found


def test_checkpoint_and_evaluation_pauses_raise_nothing() -> None:
    detector, job = HangDetector(), Job()
    assert healthy_history(detector, [T0], job) == []
    # the job has taught its pauses: an all-ranks-still pause is judged past twice the longest
    lagged, still = detector.limits_s("4242")
    assert lagged == 60.0
    assert 340.0 < still < 342.0  # the longest pause, 170 s, from the last record before it to the first after


def test_a_first_checkpoint_longer_than_two_minutes_waits_for_the_cold_floor() -> None:
    detector, job, checks = HangDetector(), Job(), [T0]
    found = feed(detector, job.run(600), checks)
    job.pause(280)  # the job's first pause: longer than the warm floor, under the cold one
    found += feed(detector, job.run(60), checks)
    assert found == []


def test_a_rank_that_never_entered_the_collective_is_found_within_two_minutes() -> None:
    detector, job, checks = HangDetector(), Job(), [T0]
    assert healthy_history(detector, checks, job) == []
    stuck = frozenset({5})
    found = feed(detector, job.run(1, skip=stuck), checks, idle_s=600)
    assert len(found) == 1
    hang = found[0]
    assert hang.cause == "rank_behind"
    assert [(c.comm, c.rank, c.node, c.cuda_device) for c in hang.culprits] == [(COMM, 5, "dgx-00", 5)]
    assert hang.waiting_at == job.seq
    last_progress = job.clock - NS + 7 * 3_000_000
    assert hang.since_ns == last_progress
    assert 60 * NS < hang.detected_ns - last_progress <= 120 * NS
    assert "ranks 5 at" in hang.evidence


def test_a_deadlock_with_every_rank_at_one_sequence_is_the_jobs_own() -> None:
    detector, job, checks = HangDetector(), Job(), [T0]
    assert healthy_history(detector, checks, job) == []
    last_progress = job.clock - NS + 7 * 3_000_000
    # as long as the longest pause the job has shown: not a hang
    assert feed(detector, iter(()), checks, idle_s=170) == []
    found = feed(detector, iter(()), checks, idle_s=600)
    assert len(found) == 1
    hang = found[0]
    assert (hang.cause, hang.culprits, hang.waiting_at) == ("job", (), job.seq)
    # past twice the longest healthy pause (170 s), before PyTorch's watchdog (600 s)
    assert 340 * NS < hang.detected_ns - last_progress <= 347 * NS
    assert "the job's own" in hang.evidence


def test_a_deadlock_before_any_pause_waits_for_the_cold_floor() -> None:
    detector, job, checks = HangDetector(), Job(), [T0]
    found = feed(detector, job.run(600), checks, idle_s=600)
    assert [h.cause for h in found] == ["job"]
    assert 300 * NS < found[0].detected_ns - found[0].since_ns <= 305 * NS


def dump(rank: int, seq: int, state: str, job: str = "4242") -> FlightDump:
    entries = tuple(
        FlightEntry(
            record_id=s, pg_id=0, pg_name="0", pg_desc="default_pg", collective_seq_id=s, p2p_seq_id=None,
            op_id=s, op="nccl:all_reduce", is_p2p=False, state="completed" if s < seq else state,
            created_ns=T0, started_ns=None, completed_ns=None, duration_ms=None, timeout_ms=600_000,
            retired=None, input_sizes=(), output_sizes=(),
        )
        for s in range(max(0, seq - 3), seq + 1)
    )  # fmt: skip
    groups = {"0": ("default_pg", tuple(range(RANKS)))}
    return FlightDump(job, f"dgx-{rank // 8:02d}", rank, "2.10", None, groups, {}, entries)


def test_the_flight_recorder_names_the_rank_the_sequences_could_not() -> None:
    watch, job, checks = JobWatch(), Job(), [T0]
    found = feed(watch.hangs, job.run(600), checks, idle_s=400)
    assert [h.cause for h in found] == ["job"]
    # the dumps come (the watchdog's, or asked for): rank 3 never launched collective 601
    for rank in range(RANKS):
        watch.observe(dump(rank, 601, "scheduled" if rank == 3 else "started"))
    again = watch.check(checks[-1] + CHECK_EVERY)
    assert len(again) == 1
    assert again[0].cause == "flight_recorder"
    assert [(c.comm, c.rank, c.node) for c in again[0].culprits] == [("0", 3, "dgx-00")]
    assert again[0].waiting_at == 601
    assert watch.check(checks[-1] + 2 * CHECK_EVERY) == []  # said once


def test_a_missing_flight_entry_is_the_culprit() -> None:
    detector = HangDetector()
    detector.observe(coll(10, 0, T0))
    for rank in range(RANKS):
        detector.observe_flight(dump(rank, 2 if rank == 1 else 3, "scheduled"))
    hang = detector.check(T0 + 400 * NS)
    assert [(h.cause, [c.rank for c in h.culprits], h.waiting_at) for h in hang] == [("flight_recorder", [1], 3)]
    assert "none for 3" in hang[0].evidence


def test_progress_after_a_hang_is_not_learnt_as_a_pause_and_state_pickles() -> None:
    detector, job, checks = HangDetector(), Job(), [T0]
    found = feed(detector, job.run(600), checks, idle_s=400)
    assert len(found) == 1
    found += feed(detector, job.run(60), checks)  # restarted in place, progress again
    assert detector.limits_s("4242") == (60.0, 300.0)  # the 400 s stall taught nothing
    copy = pickle.loads(pickle.dumps(detector))
    left = feed(detector, iter(()), list(checks), idle_s=400)
    right = feed(copy, iter(()), list(checks), idle_s=400)
    assert left == right
    assert len(left) == 1


def test_point_to_point_progress_keeps_a_job_alive() -> None:
    detector = HangDetector()
    detector.observe(coll(1, 0, T0))
    for i in range(1, 50):  # a pipeline stage sending to the next: no collective, still progress
        p2p = coll(i, 0, T0 + i * 10 * NS)
        detector.observe(Collective(**{**{f: getattr(p2p, f) for f in p2p.__slots__}, "p2p": True, "peer": 1}))
    assert detector.check(T0 + 500 * NS) == []
