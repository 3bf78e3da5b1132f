"""The goodput bench's cost model on a hand-made history: what a failure costs a job with no
action, with a drain after it, and with a drain at the checkpoint before it; a drain with no
fault behind it is wrong and counted."""

from __future__ import annotations

from act.audit import Row
from aiops.bench_goodput import JobTimes, cost_of

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
