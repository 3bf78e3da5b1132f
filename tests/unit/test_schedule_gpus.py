"""Jobs hold GPUs, not nodes: cohorts, silences and blast radius from the GPUs a job holds, events
taking effect at their event times whenever they arrive."""

from __future__ import annotations

import math

import numpy as np

from detectors.detect_loop import DetectLoop
from ingest.frames import Column, Frame
from vocab.catalog import FieldType
from vocab.schedule import IDLE, SHARED, NodeJobs, Schedule, event_problem

T = 1_767_225_600.0


def gpus_of(*nodes: str) -> tuple[np.ndarray, np.ndarray]:
    node = np.array([n for n in nodes for _ in range(8)], dtype=object)
    gpu = np.array([f"{n}-gpu{i}" for n in nodes for i in range(8)], dtype=object)
    return node, gpu


def test_a_job_holds_the_gpus_the_scheduler_names_and_the_rest_are_idle() -> None:
    jobs = NodeJobs()
    jobs.add({"type": "job_start", "job": "a", "nodes": ["n1"], "gpus": 2, "gpus_by_node": {"n1": [0, 1]}, "time": T})
    jobs.add(
        {"type": "job_start", "job": "b", "nodes": ["n1"], "gpus": 4, "gpus_by_node": {"n1": [4, 5, 6, 7]}, "time": T}
    )
    node, gpu = gpus_of("n1")
    assert list(jobs.at(T, node, gpu)) == ["a", "a", IDLE, IDLE, "b", "b", "b", "b"]
    jobs.add({"type": "job_end", "job": "a", "time": T + 60})
    assert list(jobs.at(T + 60, node, gpu)) == [IDLE] * 4 + ["b"] * 4


def test_two_jobs_on_a_node_known_by_node_alone_leave_its_gpus_in_no_cohort() -> None:
    jobs = NodeJobs()
    jobs.add({"type": "job_start", "job": "a", "nodes": ["n1", "n2"], "time": T})
    jobs.add({"type": "job_start", "job": "b", "nodes": ["n2"], "time": T})
    node, gpu = gpus_of("n1", "n2")
    assert list(jobs.at(T, node, gpu)) == ["a"] * 8 + [SHARED] * 8
    assert jobs.shared() == {"n2": ("a", "b")}


def test_an_event_heard_late_takes_effect_from_its_own_time_and_twice_changes_nothing() -> None:
    jobs = NodeJobs()
    node, gpu = gpus_of("n1")
    assert list(jobs.at(T + 100, node, gpu)) == [IDLE] * 8
    start = {"type": "job_start", "job": "a", "nodes": ["n1"], "time": T + 50}
    jobs.add(start)  # heard after tick T+100 was analysed: the next tick has it
    assert list(jobs.at(T + 110, node, gpu)) == ["a"] * 8
    end = {"type": "job_end", "job": "a", "time": T + 200}
    jobs.add(end)
    jobs.add(end)
    jobs.add(start)
    assert list(jobs.at(T + 150, node, gpu)) == ["a"] * 8
    assert list(jobs.at(T + 200, node, gpu)) == [IDLE] * 8
    assert list(jobs.at(T + 60, node, gpu)) == ["a"] * 8  # a replay from earlier
    assert list(jobs.at(T + 10, node, gpu)) == [IDLE] * 8


def test_drains_and_maintenance_silence_from_their_announcement_until_resumed() -> None:
    s = Schedule.from_events(
        [
            {"type": "node_state", "nodes": ["n1"], "state": "drain", "reason": "ECC", "time": T},
            {"type": "node_state", "nodes": ["n1"], "state": "ok", "time": T + 600},
            {"type": "node_state", "nodes": ["n2"], "state": "down", "reason": "not responding", "time": T},
            # announced after it began: nothing before the announcement is silenced
            {"type": "maintenance", "name": "r1", "nodes": ["n3"], "start": T, "end": T + 3600, "time": T + 900},
        ]
    )
    assert s.in_maintenance("n1", T + 1) and not s.in_maintenance("n1", T + 600)
    assert not s.in_maintenance("n2", T + 1)  # lost, not maintained: a symptom to find
    assert not s.in_maintenance("n3", T + 100) and s.in_maintenance("n3", T + 900)
    # the reservation cut short: the same name, a new end
    s.add({"type": "maintenance", "name": "r1", "nodes": ["n3"], "start": T, "end": T + 1200, "time": T + 1000})
    assert not s.in_maintenance("n3", T + 1300)
    assert s.down["n2"] == [(T, "not responding")]


def test_blast_radius_names_the_job_holding_the_gpu() -> None:
    s = Schedule.from_events(
        [
            {
                "type": "job_start",
                "job": "a",
                "nodes": ["n1"],
                "gpus": 4,
                "gpus_by_node": {"n1": [0, 1, 2, 3]},
                "time": T,
            },
            {
                "type": "job_start",
                "job": "b",
                "nodes": ["n1"],
                "gpus": 4,
                "gpus_by_node": {"n1": [4, 5, 6, 7]},
                "time": T,
            },
        ]
    )
    assert [j.job for j in s.jobs_holding([("n1", 5)], T + 1)] == ["b"]
    assert [j.job for j in s.jobs_on(["n1"], T + 1)] == ["a", "b"]  # the node's NIC, PSU: both


def test_events_are_checked() -> None:
    ok = {"type": "job_start", "job": "a", "nodes": ["n1"], "gpus_by_node": {"n1": [0]}, "time": T}
    assert event_problem(ok) is None
    assert "not one of the job's nodes" in str(event_problem({**ok, "gpus_by_node": {"n9": [0]}}))
    assert "GPU indices" in str(event_problem({**ok, "gpus_by_node": {"n1": [-1]}}))
    assert "node_state must be one of" in str(
        event_problem({"type": "node_state", "nodes": ["n1"], "state": "x", "time": T})
    )


def _tick(t: float, util: list[float]) -> dict[str, Frame]:
    node, gpu = gpus_of("n1")
    ns = np.full(8, int(t * 1e9), dtype=np.int64)
    fields = {"DCGM_FI_DEV_GPU_UTIL": Column.of(FieldType.FLOAT, util)}
    return {"gpu": Frame("gpu", ns, {"gpu": gpu, "node": node}, fields)}


def test_gpus_idle_since_a_node_only_job_started_are_left_out_and_said_so() -> None:
    loop = DetectLoop(30.0, drift_factory=None)
    loop.add_events([{"type": "job_start", "job": "a", "nodes": ["n1"], "gpus": 4, "time": T}])
    busy_four = [97.0] * 4 + [0.0] * 4
    first = loop._with_jobs(T + 30, _tick(T + 30, busy_four))["gpu"].tag("job")
    assert list(first) == ["a"] * 4 + [IDLE] * 4
    # a member stays one when it stops (a hang is what the cohort should see)
    later = loop._with_jobs(T + 60, _tick(T + 60, [97.0] * 3 + [0.0] * 5))["gpu"].tag("job")
    assert list(later) == ["a"] * 4 + [IDLE] * 4
    assert not [n for n in loop.notices if n.status == "idle_gpus"]  # still within the start-up grace
    loop._with_jobs(T + 1000, _tick(T + 1000, busy_four))
    (notice,) = [n for n in loop.notices if n.status == "idle_gpus"]
    assert notice.subject == "a" and notice.detail["gpus"] == [f"n1-gpu{i}" for i in range(4, 8)]
    assert math.isclose(notice.at, T + 1000)


def test_a_jobs_time_limit_is_kept_and_a_limit_that_is_not_a_time_is_refused() -> None:
    limited = {"type": "job_start", "job": "a", "nodes": ["n1"], "gpus": 8, "time": T, "expected_end": T + 3600}
    assert event_problem(limited) is None
    schedule = Schedule.from_events([limited, {"type": "job_start", "job": "b", "nodes": ["n2"], "time": T}])
    assert schedule.jobs["a"].expected_end == T + 3600
    assert schedule.jobs["b"].expected_end == math.inf  # no limit said
    for bad in ("soon", None, True, math.nan):
        problem = event_problem({**limited, "expected_end": bad})
        assert problem is not None and problem.startswith("expected_end must be a number"), problem


def test_a_job_from_a_checkpoint_taken_before_limits_were_said_has_none() -> None:
    import pickle

    from vocab.schedule import Job

    job = Job("a", ("n1",), 8, T, expected_end=T + 60)
    assert pickle.loads(pickle.dumps(job)) == job
    old = Job("a", ("n1",), 8, T)
    del old.expected_end  # as a Job pickled before the slot existed
    back = pickle.loads(pickle.dumps(old))
    assert back.expected_end == math.inf and back.job == "a" and back.start == T
    assert NodeJobs(Schedule(jobs={"a": back})).job("a") is not None
