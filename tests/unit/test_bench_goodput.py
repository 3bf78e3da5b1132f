"""The goodput bench's cost model on a hand-made history: what a failure costs a job with no
action, with a drain after it, and with a drain at the checkpoint before it; a drain with no
fault behind it is wrong and counted."""

from __future__ import annotations

import argparse
import math

import pytest

from act.audit import RemediationRecord, Row
from benchmarks.goodput import (
    CHECK_S,
    RESET_S,
    JobTimes,
    Outcome,
    TruthCheck,
    big_job_ettr,
    cost_of,
    fleet_ettr,
    outcomes,
)

JOB = JobTimes(frozenset({"n1"}), 16, start=0.0, end=10_000.0, period=1800.0, phase=0.0)
FAULT = {"kind": "gpu_fell_off_bus", "root": "n1-gpu3", "onset": 5000.0, "end": 9000.0, "jobs": ["job-1"]}
RESTART, HUMAN, WRITE = 600.0, 1800.0, 60.0


def drain(at: float, node: str = "n1") -> Row:
    return Row("p", "inc", "policy", "drain", node, "r", "execute", "done", None, "", at, at)


def resume(at: float, node: str) -> Row:
    return Row("q", "inc", "policy", "resume", node, "r", "execute", "done", None, "", at, at)


def cost(mode: str, rows: list[Row]) -> tuple[float, int, int]:
    c = cost_of(mode, [FAULT], rows, [JOB], lambda e: e.split("-")[0], RESTART, HUMAN, 12 * 3600, WRITE, 8, 20_000.0)
    return c.gpu_s, c.interruptions, c.wrong


def test_the_last_checkpoint_is_the_end_of_the_last_write() -> None:
    assert JOB.last_checkpoint(5000.0, WRITE) == 3660.0
    assert JOB.last_checkpoint(30.0, WRITE) == 0.0  # none completed yet: the job's start


def test_what_each_mode_costs() -> None:
    lost = 16 * (5000 - 3660 + RESTART)
    # no action: the failure, then two more restarts on the broken node before a person drains it
    assert cost("none", []) == (lost + 2 * 16 * RESTART, 3, 0)
    # drained 30 s after the failure: the restarted job lands elsewhere
    assert cost("failures", [drain(5030.0)]) == (lost, 1, 0)
    # drained right after the checkpoint before: the restart only, and no failure under a job
    assert cost("predictions", [drain(3670.0)]) == (16 * (10 + RESTART), 1, 0)


def test_a_drain_with_no_fault_behind_it_is_wrong_and_its_node_idle_until_resumed() -> None:
    gpu_s, interruptions, wrong = cost("predictions", [drain(3670.0), drain(200.0, node="n2"), resume(1200.0, "n2")])
    assert wrong == 1 and interruptions == 1  # n2 ran no job: nothing interrupted, still wrong
    assert gpu_s == 16 * (10 + RESTART) + 8 * 1000.0  # its 8 GPUs out of service for 1,000 s
    never_back, _, _ = cost("predictions", [drain(3670.0), drain(200.0, node="n2")])
    assert never_back == 16 * (10 + RESTART) + 8 * (20_000.0 - 200.0)  # out until the history ends


# ---------------------------------------------------------------- remediation, ETTR, self-heal, MTTR

ARGS = argparse.Namespace(restart_s=RESTART, human_s=HUMAN, big_ckpt_s=1800.0, big_gpus=10_000, horizon_h=12.0)


def node(entity: str) -> str:
    return entity.split("-", maxsplit=1)[0]


def test_the_truths_health_check_fails_from_the_precursor_until_the_step_that_fixes_the_kind() -> None:
    hbm = {"kind": "gpu_hbm_ecc", "root": "n1-gpu3", "onset": 5000.0, "end": 9000.0, "precursor_start": 2000.0}
    off_bus = {"kind": "gpu_fell_off_bus", "root": "n2-gpu0", "onset": 5000.0, "end": 9000.0, "precursor_start": None}
    psu = {"kind": "psu_failure", "root": "n3-psu0", "onset": 5000.0, "end": 9000.0, "precursor_start": None}
    check = TruthCheck([hbm, off_bus, psu], node)
    check.now = 1000.0
    assert check("n1").passed  # before the precursor: nothing a check can see
    check.now = 2500.0
    assert not check("n1").passed
    check.step("n1", "reset_gpu")
    assert check("n1").passed  # a reset applies the row remaps
    check.now = 5100.0
    check.step("n2", "reset_gpu")
    assert not check("n2").passed  # a reset cannot reach a GPU off the bus
    check.step("n2", "reboot")
    assert check("n2").passed
    check.step("n3", "reboot")
    assert not check("n3").passed  # a PSU is hardware
    assert check("n4").passed  # no fault at all: a wrong prediction's node


def record(state: str, drained: float, closed: float, steps: tuple[str, ...] = ()) -> RemediationRecord:
    history = tuple({"state": "x", "step": s} for s in steps)
    return RemediationRecord(
        "n1", "inc", "gpu_hbm_ecc", "n1-gpu3", "incident", "p", state, 0, 0.0, drained, drained, closed, history
    )


def test_outcomes_say_whether_the_job_met_the_fault_and_when_the_job_and_the_node_came_back() -> None:
    fault = {**FAULT, "kind": "gpu_hbm_ecc", "precursor_start": None}
    # none: a person drains it HUMAN after; the job runs again a restart later; a person is paged
    (o,) = outcomes("none", [fault], [], [], node, 0.0, ARGS)
    assert (o.job_back_s, o.person_s, o.healed) == (HUMAN + RESTART, HUMAN, False)
    assert o.big_job_loss_s == (5000 - 3600) + HUMAN + RESTART  # since the 30-min checkpoint, then out, restart
    # drained 60 s after onset, reset and checked, returned: healed with no person
    rows = [drain(5060.0), resume(5100.0, "n1")]
    (o,) = outcomes(
        "validation", [fault], rows, [record("returned", 5060.0, 5100.0, ("reset_gpu", "check"))], node, 0.0, ARGS
    )
    assert o.healed and o.job_back_s == 60 + RESTART
    assert o.node_back_s == 100 + RESET_S + CHECK_S  # the steps' own time added to the ticks'
    # escalated: a person, paged when the ladder ran out
    (o,) = outcomes(
        "validation", [fault], [drain(5060.0)], [record("escalated", 5060.0, 5700.0, ("check",))], node, 0.0, ARGS
    )
    assert not o.healed and o.person_s == 700 + CHECK_S and o.node_back_s is None
    # drained at a checkpoint ahead of the onset: the job never met it
    (o,) = outcomes("predictions", [fault], [drain(3670.0)], [], node, 0.0, ARGS)
    assert o.ahead and o.job_back_s is None and o.big_job_loss_s == 0.0
    assert o.warned_s is None  # a drain, but not on a prediction
    # the prediction policy's drain, waiting for a person (a job too large): warned, not ahead
    waiting = Row("w", "inc", "drain-predicted", "drain", "n1", "r", "awaiting_approval", "planned", None, "", 1000.0)
    (o,) = outcomes("predictions", [fault], [waiting], [], node, 0.0, ARGS)
    assert o.warned_s == 5000.0 - 1000.0 and not o.ahead


def test_the_large_jobs_ettr_at_the_llama3_rate() -> None:
    met = Outcome("gpu_hbm_ecc", True, False, 900.0, None, 900.0, False, 1800.0)
    ahead = Outcome("gpu_hbm_ecc", True, True, None, None, None, True, 0.0)
    per_day = 419 / (54 * 16_384) * 10_000  # 4.7 interruptions a day for 10,000 GPUs
    assert big_job_ettr([met], 0, 1.0, ARGS) == pytest.approx(1 - per_day * 1800.0 / 86_400)
    # a job within the prediction policy's max_job_gpus is drained at a checkpoint: all ahead, a
    # restart each; a wrong drain per 1,000 GPU-days costs a restart a day more
    small = argparse.Namespace(**{**vars(ARGS), "big_gpus": 1000})
    per_day_small = per_day / 10
    assert big_job_ettr([ahead], 1, 1_000.0, small) == pytest.approx(1 - (per_day_small + 1) * RESTART / 86_400)


def test_a_job_too_large_to_drain_swaps_a_warned_node_at_its_next_restart() -> None:
    """10,000 GPUs, over the shipped 1,024: a prediction cordons the node and kills nothing. The
    fault is missed only if no restart (4.7 a day) came between the warning and the onset; a
    wrong prediction costs the job nothing."""
    per_day = 419 / (54 * 16_384) * 10_000
    met = Outcome("gpu_hbm_ecc", True, False, 900.0, None, 900.0, False, 1800.0)
    warned = Outcome("gpu_hbm_ecc", True, True, None, None, None, True, 0.0, warned_s=2 * 3600.0)
    missed_share = math.exp(-2 * 3600.0 * per_day / 86_400)  # ~0.68 for a 2-hour warning
    expected = 1 - per_day * 1800.0 * missed_share / 86_400
    assert big_job_ettr([warned], 5, 1.0, ARGS, met=[met]) == pytest.approx(expected)
    assert big_job_ettr([met], 5, 1.0, ARGS, met=[met]) == big_job_ettr([met], 0, 1.0, ARGS)  # no warning
    assert expected > big_job_ettr([met], 0, 1.0, ARGS)


def test_the_fleets_ettr_is_the_share_of_its_gpu_time_the_faults_left() -> None:
    # the hand-made fault of test_what_each_mode_costs, with no action, on 16 GPUs for a day:
    # the job's 16 GPUs lose the steps since the checkpoint and three restarts
    lost, _, _ = cost("none", [])
    assert lost == 16 * (5000 - 3660 + 3 * RESTART)
    assert fleet_ettr(lost, 16.0) == pytest.approx(1 - 16 * 3140 / (16 * 86_400))
    assert fleet_ettr(0.0, 16.0) == 1.0
    assert fleet_ettr(16 * 86_400.0, 16.0) == 0.0  # every GPU-second lost


def test_a_node_put_back_with_its_fault_unfixed_fails_the_next_job_that_lands_on_it() -> None:
    after = JobTimes(frozenset({"n1"}), 32, start=12_000.0, end=15_000.0, period=1800.0, phase=0.0)
    fault = {**FAULT, "kind": "gpu_hbm_ecc"}  # a reset puts it right

    def back(*rows: Row) -> tuple[float, int, int]:
        c = cost_of("failures", [fault], list(rows), [JOB, after], node, RESTART, HUMAN, 12 * 3600, WRITE, 8, 20_000.0)
        return c.gpu_s, c.interruptions, c.returned_broken

    lost = 16 * (5000 - 3660 + RESTART)
    assert back(drain(5030.0)) == (lost, 1, 0)  # drained and left out: no job meets it again
    # its incident resolved and nothing checked it: the 32-GPU job that starts on it next fails
    assert back(drain(5030.0), resume(9500.0, "n1")) == (lost + 32 * RESTART, 2, 1)
    reset = Row(
        "r", "inc", "policy", "reset_gpu", "n1-gpu3", "r", "execute", "done", None, "", 9400.0, 9400.0, node="n1"
    )
    assert back(drain(5030.0), reset, resume(9500.0, "n1")) == (lost, 1, 0)  # reset, then back: healthy
    # a reset does not fix a GPU off the bus (a reboot does): still broken
    c = cost_of(
        "failures",
        [FAULT],
        [drain(5030.0), reset, resume(9500.0, "n1")],
        [JOB, after],
        node,
        RESTART,
        HUMAN,
        12 * 3600,
        WRITE,
        8,
        20_000.0,
    )
    assert c.returned_broken == 1
    # back after the last job started: no job meets it in the history
    assert back(drain(5030.0), resume(12_500.0, "n1"))[2] == 0
    # drained again before the next job landed, and back twice: that job is charged once
    twice = back(drain(5030.0), resume(9500.0, "n1"), drain(10_500.0), resume(11_000.0, "n1"))
    assert twice == (lost + 32 * RESTART, 2, 1)
