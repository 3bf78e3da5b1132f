"""Acting on incidents: dry run unless a policy says execute, the breaker, attempt limits,
exclusions and approval each tried past their limit, nothing planned or done twice (a repeated
state, a restart, a SIGKILL between planning and doing), resume when the incident resolves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from act.audit import AuditLog, Row
from act.executors import Actor, parse_node
from act.loop import ActLoop
from act.planner import Planner
from act.policy import ActConfig, PolicyError, load, parse

RACK_OF = {f"n{i:05d}": f"rack{i // 4:04d}" for i in range(64)}


class Recorder:
    """An executor of our own protocol that remembers what it was asked to do (the real ones,
    Slurm and site commands, are tested against a real slurmctld and real processes)."""

    def __init__(self, took: bool | None = None) -> None:
        self.done: list[tuple[str, str]] = []
        self.took = took

    def run(self, row: Row) -> str:
        self.done.append((row.action, row.target))
        return "ok"

    def confirmed(self, row: Row) -> bool | None:
        return self.took


def state(
    n: int, kind: str = "gpu_hbm_ecc", status: str = "open", node: int | None = None, **extra: Any
) -> dict[str, Any]:
    node = n if node is None else node
    return {
        "incident_id": f"INC-{n}",
        "status": status,
        "severity": "critical",
        "root_cause": {"entity": f"n{node:05d}-gpu3", "kind": kind, "confidence": 0.9},
        "job_gpus": {} if status == "warning" else {"job-1": 8},  # a warning hits no job yet
        **extra,
    }


def setup(policies: dict[str, Any], path: Path | None = None) -> tuple[Planner, Actor, Recorder, list[str]]:
    config = parse(policies)
    audit = AuditLog(path)
    planner = Planner(
        config,
        audit,
        node_of=lambda e: e.split("-")[0] if e.startswith("n") else None,
        scope_size=lambda scope: 4 if scope else 64,
        scope_of=RACK_OF.get,
    )
    recorder, pages = Recorder(), list[str]()
    return (
        planner,
        Actor(audit, {"drain": recorder, "resume": recorder, "reboot": recorder}, pages.append),
        recorder,
        pages,
    )


DRAIN = {"name": "drain-hbm", "match": {"kinds": ["gpu_hbm_ecc"]}, "action": {"type": "drain"}, "execute": True}
LOOSE = {"max_nodes": 100, "max_fraction": 1.0}


def test_nothing_is_executed_unless_a_policy_says_execute() -> None:
    for policies, executed in (
        ({"policies": [DRAIN]}, False),  # the file's dry_run defaults to true
        ({"dry_run": False, "policies": [{**DRAIN, "execute": False}]}, False),
        ({"dry_run": False, "policies": [{k: v for k, v in DRAIN.items() if k != "execute"}]}, False),
        ({"dry_run": False, "policies": [DRAIN]}, True),
    ):
        planner, actor, recorder, _ = setup(policies)
        plans = planner.consider(state(1), 100.0)
        actor.take(plans)
        assert [p.execute for p in plans] == [executed]
        assert recorder.done == ([("drain", "n00001")] if executed else [])
        row = actor.audit.rows()[0]
        assert row.state == ("done" if executed else "held") and row.reason.startswith("aiops INC-1:")


def test_the_breaker_stops_at_its_limit_and_pages() -> None:
    planner, actor, recorder, pages = setup(
        {"dry_run": False, "breaker": {"max_nodes": 2, "max_fraction": 1.0}, "policies": [DRAIN]}
    )
    for n in range(4):
        actor.take(planner.consider(state(n), 100.0 + n))
    assert recorder.done == [("drain", "n00000"), ("drain", "n00001")]
    assert len(pages) == 2 and all("breaker" in p for p in pages)
    # the window passes: the breaker counts only what was taken out within it
    actor.take(planner.consider(state(9), 100.0 + 3600 + 10))
    assert recorder.done[-1] == ("drain", "n00009")


def test_the_breaker_counts_a_share_of_a_rack() -> None:
    # at most 25 % of a rack of 4: one node per rack
    planner, actor, recorder, pages = setup(
        {"dry_run": False, "breaker": {"max_nodes": 10, "max_fraction": 0.25, "per": "rack"}, "policies": [DRAIN]}
    )
    for n in (0, 1, 4):  # n00000 and n00001 share rack0000; n00004 is in rack0001
        actor.take(planner.consider(state(n), 100.0))
    assert recorder.done == [("drain", "n00000"), ("drain", "n00004")]
    assert "rack rack0000" in pages[0]


def test_a_node_that_keeps_failing_goes_to_a_person() -> None:
    planner, actor, recorder, pages = setup(
        {"dry_run": False, "breaker": LOOSE, "attempts": {"max": 2}, "policies": [DRAIN]}
    )
    for n in range(3):  # three incidents on one node, each repaired and put back in service
        actor.take(planner.consider(state(n, node=7), 100.0 + 10 * n))
        actor.take(planner.consider(state(n, node=7, status="resolved"), 105.0 + 10 * n))
    assert recorder.done == [("drain", "n00007"), ("resume", "n00007")] * 2
    assert "a person takes it from here" in pages[0]


def test_exclusions_and_approval_hold_the_action() -> None:
    planner, actor, recorder, _ = setup(
        {
            "dry_run": False,
            "breaker": LOOSE,
            "exclude": ["n0000[0-3]"],
            "policies": [
                DRAIN,
                {
                    **DRAIN,
                    "name": "reboot-fell-off",
                    "match": {"kinds": ["gpu_fell_off_bus"]},
                    "action": {"type": "reboot"},
                    "approval": True,
                },
                {
                    **DRAIN,
                    "name": "drain-thermal",
                    "match": {"kinds": ["gpu_thermal"]},
                    "action": {"type": "drain", "max_job_gpus": 512},
                },
            ],
        }
    )
    decisions = []
    for s in (state(2), state(8, "gpu_fell_off_bus"), state(9, "gpu_thermal", job_gpus={"big": 2048})):
        plans = planner.consider(s, 100.0)
        actor.take(plans)
        decisions += [p.row.decision for p in plans]
    assert decisions == ["excluded", "awaiting_approval", "awaiting_approval"]
    assert recorder.done == []


def test_a_part_outside_a_node_is_not_drained() -> None:
    planner, actor, recorder, _ = setup({"dry_run": False, "breaker": LOOSE, "policies": [{**DRAIN, "match": {}}]})
    leaf = state(1, "leaf_down")
    leaf["root_cause"]["entity"] = "leaf-p0-r1"
    plans = planner.consider(leaf, 100.0)
    actor.take(plans)
    assert [p.row.decision for p in plans] == ["blocked"] and recorder.done == []


def test_nothing_is_planned_twice_even_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "actions.sqlite"
    config = {"dry_run": False, "breaker": LOOSE, "policies": [DRAIN]}
    planner, actor, recorder, _ = setup(config, path)
    for _ in range(3):  # the same state, repeated
        actor.take(planner.consider(state(1), 100.0))
    actor.audit.close()
    planner, actor, again, _ = setup(config, path)  # a restart replaying the incidents topic
    actor.settle()
    actor.take(planner.consider(state(1), 100.0))
    assert recorder.done == [("drain", "n00001")] and again.done == []


@pytest.mark.parametrize(("took", "runs", "state_after"), [(True, 0, "done"), (False, 1, "done"), (None, 0, "failed")])
def test_killed_between_planning_and_doing(tmp_path: Path, took: bool | None, runs: int, state_after: str) -> None:
    """The daemon died with the action `executing`: read back, it is done once or not at all
    (then done now); an action that cannot be read back is never run again, a person is paged."""
    path = tmp_path / "actions.sqlite"
    config = {"dry_run": False, "breaker": LOOSE, "policies": [DRAIN]}
    planner, actor, _, _ = setup(config, path)
    (plan,) = planner.consider(state(1), 100.0)
    actor.audit.move(plan.row.plan_id, "executing")  # ... and SIGKILL here
    actor.audit.close()
    _, actor, recorder, pages = setup(config, path)
    recorder.took = took
    actor.settle()
    assert len(recorder.done) == runs
    assert actor.audit.rows()[0].state == state_after
    assert bool(pages) == (took is None)


def test_planned_but_not_started_runs_once_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "actions.sqlite"
    config = {"dry_run": False, "breaker": LOOSE, "policies": [DRAIN]}
    planner, actor, _, _ = setup(config, path)
    planner.consider(state(1), 100.0)  # planned (committed) ... and SIGKILL before taking it
    actor.audit.close()
    _, actor, recorder, _ = setup(config, path)
    actor.settle()
    actor.settle()
    assert recorder.done == [("drain", "n00001")]


def test_resume_after_the_incident_resolves() -> None:
    planner, actor, recorder, _ = setup({"dry_run": False, "breaker": LOOSE, "policies": [DRAIN]})
    actor.take(planner.consider(state(1), 100.0))
    actor.take(planner.consider(state(1, status="resolved"), 900.0))
    actor.take(planner.consider(state(1, status="resolved"), 901.0))
    assert recorder.done == [("drain", "n00001"), ("resume", "n00001")]
    assert actor.audit.out_of_service(0.0) == set()


def test_predictions_match_on_probability() -> None:
    policy = {**DRAIN, "match": {"source": "prediction", "kinds": ["gpu_hbm_ecc"], "min_probability": 0.8}}
    planner, _, _, _ = setup({"policies": [policy]})
    low = state(1, status="warning")
    low["root_cause"]["confidence"] = 0.6
    assert planner.consider(low, 100.0) == [] and planner.consider(state(2), 100.0) == []  # not a prediction
    assert len(planner.consider(state(3, status="warning"), 100.0)) == 1


def test_a_bad_policy_file_says_where(tmp_path: Path) -> None:
    for body, message in (
        ("policies:\n  - name: a\n    match: {kinds: [gpu_hbm]}\n    action: {type: drain}\n", "unknown fault kinds"),
        ("policies:\n  - name: a\n    match: {}\n    action: {type: power_off}\n", "policies.0.action.type"),
        ("policies:\n  - name: a\n    match: {}\n    action: {type: drain}\n    exec: true\n", "policies.0.exec"),
        ("breaker: {max_fraction: 2}\n", "breaker.max_fraction"),
    ):
        path = tmp_path / "actions.yml"
        path.write_text(body)
        with pytest.raises(PolicyError, match=message):
            load(path)
    assert load(Path(__file__).resolve().parents[2] / "config" / "actions.yml").dry_run is True
    assert isinstance(parse(None), ActConfig)


def loop_with(policies: dict[str, Any], jobs: dict[str, int]) -> tuple[ActLoop, Recorder]:
    recorder = Recorder()
    loop = ActLoop(
        parse(policies),
        AuditLog(),
        {"drain": recorder},
        lambda message, subject: None,
        node_of=lambda e: e.split("-")[0],
        scope_size=lambda scope: 64,
        jobs_on=lambda node, t: jobs,
    )
    return loop, recorder


CHECKPOINTED = {**DRAIN, "match": {"source": "prediction"}, "action": {"type": "drain", "when": "checkpoint"}}


def test_a_predicted_failure_is_drained_right_after_the_jobs_next_checkpoint() -> None:
    loop, recorder = loop_with({"dry_run": False, "breaker": LOOSE, "policies": [CHECKPOINTED]}, {"job-7": 256})
    busy, dip = {"job-7": 96.0}, {"job-7": 4.0}
    for t in range(0, 300, 10):
        loop.tick(float(t), busy)
    loop.offer([state(1, status="warning")], 300.0)
    assert recorder.done == [] and loop.audit.rows()[0].state == "waiting"
    for t in range(310, 900, 10):  # mid-interval: the job computes on; nothing is done
        loop.tick(float(t), busy)
    assert recorder.done == []
    loop.tick(900.0, dip)  # the whole job stops to write its checkpoint
    loop.tick(910.0, dip)
    assert recorder.done == []  # not during the write either
    loop.tick(920.0, busy)  # the write is over
    assert recorder.done == [("drain", "n00001")]
    row = loop.audit.rows()[0]
    assert (row.state, row.acted_at) == ("done", 920.0)


def test_no_checkpoint_within_the_deadline_acts_anyway() -> None:
    policy = {**CHECKPOINTED, "action": {"type": "drain", "when": "checkpoint", "max_wait_s": 600}}
    loop, recorder = loop_with({"dry_run": False, "breaker": LOOSE, "policies": [policy]}, {"job-7": 256})
    loop.tick(0.0, {"job-7": 96.0})
    loop.offer([state(1, status="warning")], 0.0)
    for t in range(10, 600, 10):
        loop.tick(float(t), {"job-7": 96.0})
    assert recorder.done == []
    loop.tick(600.0, {"job-7": 96.0})
    assert recorder.done == [("drain", "n00001")]


def test_a_node_without_a_job_is_drained_at_once() -> None:
    loop, recorder = loop_with({"dry_run": False, "breaker": LOOSE, "policies": [CHECKPOINTED]}, {})
    loop.offer([state(1, status="warning")], 0.0)
    assert recorder.done == [("drain", "n00001")]


def test_plans_waiting_for_a_checkpoint_count_against_the_breaker() -> None:
    loop, _ = loop_with(
        {"dry_run": False, "breaker": {"max_nodes": 2, "max_fraction": 1.0}, "policies": [CHECKPOINTED]}, {"job-7": 8}
    )
    loop.offer([state(n, status="warning") for n in range(4)], 0.0)
    assert [r.decision for r in loop.audit.rows()] == ["at_checkpoint", "at_checkpoint", "blocked", "blocked"]


def test_scontrol_show_node_as_slurm_22_05_writes_it() -> None:
    recorded = Path(__file__).resolve().parents[1] / "data" / "slurm-22.05-live" / "scontrol-show-node.txt"
    node = parse_node(recorded.read_text().split("\n\n")[0])
    assert node["Reason"] == "ECC memory error"
    assert "DRAIN" in node["State"]


def test_a_ticket_goes_to_a_webhook_with_the_plan() -> None:
    from act.executors import Webhook
    from tests.http_endpoint import Endpoint

    endpoint = Endpoint("/tickets")
    try:
        ticket = {**DRAIN, "name": "ticket-leaf", "match": {"kinds": ["leaf_down"]}, "action": {"type": "ticket"}}
        config = parse({"dry_run": False, "policies": [ticket]})
        audit = AuditLog()
        planner = Planner(config, audit, node_of=lambda e: None, scope_size=lambda s: 64)
        actor = Actor(audit, {"ticket": Webhook(endpoint.url)}, lambda m: None)
        leaf = state(1, "leaf_down")
        leaf["root_cause"]["entity"] = "leaf-p0-r1"
        actor.take(planner.consider(leaf, 100.0))
        (body,) = endpoint.bodies
        assert (body["action"], body["target"], body["incident_id"]) == ("ticket", "leaf-p0-r1", "INC-1")
        endpoint.plan = [503]
        actor.take(planner.consider({**leaf, "incident_id": "INC-2"}, 200.0))
        assert [r.state for r in audit.rows()] == ["done", "failed"]
    finally:
        endpoint.close()
