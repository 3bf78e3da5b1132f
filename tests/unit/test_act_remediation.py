"""The per-node remediation state machine (act/remediation.py) through the acting loop: a failed
part goes up its kind's ladder with a health check after each rung and comes back only when the
checks pass; a node drained on a prediction is checked at once and returned if healthy; a kind
only hardware fixes goes to a person with a ticket; a kill between any two steps resumes where
the audit log says and does nothing twice; a dry run does nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from act.audit import REMEDIATION_TABLE, AuditLog, RemediationRecord, Row
from act.executors import ActionError
from act.loop import ActLoop
from act.policy import PolicyError, parse
from act.remediation import CheckResult, CommandCheck, RemediationMachine

DRAIN = {"name": "drain-failed", "match": {"source": "incident"}, "action": {"type": "drain"}, "execute": True}
PREDICTED = {
    "name": "drain-predicted",
    "match": {"source": "prediction", "min_probability": 0.7},
    "action": {"type": "drain"},
    "execute": True,
}
REMEDIATE = {"execute": True, "checks": [["true"]], "reboot_wait_s": 600}


class Recorder:
    """Every executor's calls, in order; `fail` names actions that raise."""

    def __init__(self, calls: list[tuple[str, str]], fail: frozenset[str] = frozenset()) -> None:
        self.calls, self.fail = calls, fail

    def run(self, row: Row) -> str:
        self.calls.append((row.action, row.target))
        if row.action in self.fail:
            raise ActionError(f"{row.action} failed")
        return "ok"

    def confirmed(self, row: Row) -> bool | None:
        return True if row.action in ("drain", "resume") else None  # a site command cannot say


class Health:
    """A node's health as the checks see it: sick until the named action was done on it."""

    def __init__(self, calls: list[tuple[str, str]], fixed_by: str | None) -> None:
        self.calls, self.fixed_by, self.checked = calls, fixed_by, 0

    def __call__(self, node: str) -> CheckResult:
        self.checked += 1
        healthy = self.fixed_by == "nothing" or any(a == self.fixed_by for a, _ in self.calls)
        return CheckResult(healthy, f"dcgmi diag -r 2 on {node}: {'pass' if healthy else 'fail'}")


def state(kind: str, status: str = "open", incident: str = "INC-1", root: str = "n00001-gpu3") -> dict[str, Any]:
    return {
        "incident_id": incident,
        "status": status,
        "severity": "critical",
        "root_cause": {"entity": root, "kind": kind, "confidence": 0.9},
        "job_gpus": {},
    }


def loop(
    path: Path | None,
    calls: list[tuple[str, str]],
    fixed_by: str | None,
    remediation: dict[str, Any] | None = None,
    fail: frozenset[str] = frozenset(),
    dry_run: bool = False,
    breaker: dict[str, Any] | None = None,
) -> tuple[ActLoop, list[str], Health]:
    config = parse(
        {
            "dry_run": dry_run,
            "breaker": breaker or {"max_nodes": 100, "max_fraction": 1.0},
            "policies": [DRAIN, PREDICTED],
            "remediation": REMEDIATE if remediation is None else remediation,
        }
    )
    pages: list[str] = []
    recorder = Recorder(calls, fail)
    executors = dict.fromkeys(("drain", "resume", "reset_gpu", "reboot", "ticket"), recorder)
    act = ActLoop(
        config,
        AuditLog(path),
        executors,
        lambda message, subject: pages.append(message),
        node_of=lambda e: e.split("-")[0],
        scope_size=lambda scope: 64,
    )
    health = Health(calls, fixed_by)
    assert act.remediation is not None
    act.remediation.checks = [health]
    return act, pages, health


def machine(act: ActLoop) -> RemediationMachine:
    assert act.remediation is not None
    return act.remediation


def states_of(act: ActLoop) -> list[str]:
    return [h["state"] for h in machine(act).audit.remediation_all()[0].history]


def test_a_failed_gpu_is_reset_checked_rebooted_checked_and_returned() -> None:
    calls: list[tuple[str, str]] = []
    act, pages, health = loop(None, calls, fixed_by="reboot")
    act.offer([state("gpu_hbm_ecc")], 100.0)
    act.tick(100.0, {})
    assert calls == [("drain", "n00001"), ("reset_gpu", "n00001-gpu3"), ("reboot", "n00001")]
    (rec,) = machine(act).audit.remediation_all()
    assert rec.state == "validating" and rec.next_at == 700.0  # the node is given its reboot time
    act.tick(400.0, {})
    assert health.checked == 1  # the check after the reset only
    act.tick(700.0, {})
    assert calls[-1] == ("resume", "n00001")
    (rec,) = machine(act).audit.remediation_all()
    assert rec.state == "returned" and rec.closed_at == 700.0
    assert states_of(act) == ["remediating", "validating", "remediating", "validating", "returned"]
    checks = [r for r in machine(act).audit.rows() if r.action == "check"]
    assert [c.state for c in checks] == ["failed", "done"] and "dcgmi diag" in checks[0].detail
    # the incident resolving later resumes nothing more: the node is back already
    act.offer([state("gpu_hbm_ecc", status="resolved")], 900.0)
    act.tick(900.0, {})
    assert calls.count(("resume", "n00001")) == 1 and not pages


def test_a_node_drained_on_a_prediction_is_checked_at_once_and_returned_if_healthy() -> None:
    calls: list[tuple[str, str]] = []
    act, _, _ = loop(None, calls, fixed_by="nothing")
    act.offer([state("gpu_hbm_ecc", status="warning")], 100.0)
    act.tick(160.0, {})
    assert calls == [("drain", "n00001"), ("resume", "n00001")]  # no reset, no reboot: it was healthy
    (rec,) = machine(act).audit.remediation_all()
    assert rec.state == "returned" and rec.source == "prediction" and rec.closed_at == 160.0
    (resume,) = [r for r in machine(act).audit.rows() if r.action == "resume"]
    assert "watch" in resume.reason


def test_a_predicted_node_that_fails_its_check_goes_up_the_ladder() -> None:
    calls: list[tuple[str, str]] = []
    act, _, _ = loop(None, calls, fixed_by="reset_gpu")
    act.offer([state("gpu_hbm_ecc", status="warning")], 100.0)
    act.tick(100.0, {})
    assert calls == [("drain", "n00001"), ("reset_gpu", "n00001-gpu3"), ("resume", "n00001")]


def test_a_kind_only_hardware_fixes_goes_to_a_person_with_a_ticket() -> None:
    calls: list[tuple[str, str]] = []
    act, pages, _ = loop(None, calls, fixed_by=None)
    act.offer([state("psu_failure")], 100.0)
    act.tick(100.0, {})
    assert calls == [("drain", "n00001"), ("ticket", "n00001")]
    (rec,) = machine(act).audit.remediation_all()
    assert rec.state == "escalated"
    assert len(pages) == 1 and "needs hardware" in pages[0]


def test_a_spent_ladder_escalates_with_everything_tried() -> None:
    calls: list[tuple[str, str]] = []
    act, pages, _ = loop(None, calls, fixed_by=None)
    act.offer([state("gpu_hbm_ecc")], 100.0)
    act.tick(100.0, {})
    act.tick(700.0, {})
    assert [a for a, _ in calls] == ["drain", "reset_gpu", "reboot", "ticket"]
    assert "resume" not in [a for a, _ in calls]
    (page,) = pages
    assert "reset_gpu done" in page and "reboot done" in page and "check failed" in page
    # the incident resolving does not put an unhealthy node back either
    act.offer([state("gpu_hbm_ecc", status="resolved")], 900.0)
    assert "resume" not in [a for a, _ in calls]


def test_a_failed_step_moves_to_the_next_rung() -> None:
    calls: list[tuple[str, str]] = []
    act, _, _ = loop(None, calls, fixed_by="reboot", fail=frozenset({"reset_gpu"}))
    act.offer([state("gpu_hbm_ecc")], 100.0)
    act.tick(100.0, {})
    act.tick(700.0, {})
    assert [a for a, _ in calls] == ["drain", "reset_gpu", "reboot", "resume"]


def test_a_node_that_keeps_failing_goes_to_a_person() -> None:
    calls: list[tuple[str, str]] = []
    act, pages, _ = loop(None, calls, fixed_by="reset_gpu")
    for n, t in enumerate((100.0, 1000.0, 2000.0)):  # attempts.max is 2 in a day by default
        act.offer([state("gpu_hbm_ecc", incident=f"INC-{n}")], t)
        act.tick(t, {})
    assert [a for a, _ in calls].count("reset_gpu") == 2 and [a for a, _ in calls].count("drain") == 2
    assert [r.state for r in machine(act).audit.remediation_all()] == ["returned", "returned"]
    assert any("a person takes it from here" in p for p in pages)


def test_a_kill_between_any_two_steps_resumes_where_it_was_and_does_nothing_twice(tmp_path: Path) -> None:
    """The loop is rebuilt from the audit log after each tick (a kill and a start): the same
    steps, each once, as without the kills."""
    calls: list[tuple[str, str]] = []
    path = tmp_path / "actions.sqlite"
    act, _, _ = loop(path, calls, fixed_by="reboot")
    act.offer([state("gpu_hbm_ecc")], 100.0)
    for t in (100.0, 400.0, 700.0, 800.0):
        act.audit.close()
        act, _, _ = loop(path, calls, fixed_by="reboot")
        act.restore(t)
        act.tick(t, {})
    assert calls == [
        ("drain", "n00001"),
        ("reset_gpu", "n00001-gpu3"),
        ("reboot", "n00001"),
        ("resume", "n00001"),
    ]
    assert machine(act).audit.remediation_all()[0].state == "returned"


def test_a_site_command_a_kill_interrupted_is_not_run_again(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []
    path = tmp_path / "actions.sqlite"
    act, _, _ = loop(path, calls, fixed_by="reboot")
    act.offer([state("gpu_hbm_ecc")], 100.0)
    # the daemon dies with the reset under way: its row says executing, the record remediating
    audit = machine(act).audit
    audit.remediation_put(
        audit.remediation_all()[0].__class__(
            **{**audit.remediation_all()[0].__dict__, "state": "remediating", "rung": 0}
        )
    )
    from act.audit import plan_id

    reset = Row(
        plan_id("INC-1", "drain-failed:remediation", "reset_gpu", "n00001-gpu3"),
        "INC-1",
        "drain-failed:remediation",
        "reset_gpu",
        "n00001-gpu3",
        "r",
        "execute",
        "executing",
        None,
        "",
        100.0,
        100.0,
        node="n00001",
    )
    audit.add(reset)
    audit.close()
    act, pages, _ = loop(path, calls, fixed_by="reboot")
    act.restore(200.0)
    act.tick(200.0, {})
    act.tick(800.0, {})
    assert ("reset_gpu", "n00001-gpu3") not in calls  # unknown whether it ran: never twice
    assert [a for a, _ in calls] == ["drain", "reboot", "resume"]
    assert any("interrupted" in p for p in pages)


def test_a_check_a_kill_interrupted_is_run_again(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []
    path = tmp_path / "actions.sqlite"
    act, _, health = loop(path, calls, fixed_by="nothing")
    act.offer([state("gpu_hbm_ecc", status="warning")], 100.0)
    audit = machine(act).audit
    from act.audit import plan_id

    pid = plan_id("INC-1", "drain-predicted:remediation", "check", "n00001@-1")
    audit.remediation_put(
        audit.remediation_all()[0].__class__(**{**audit.remediation_all()[0].__dict__, "state": "validating"})
    )
    audit.add(
        Row(pid, "INC-1", "drain-predicted:remediation", "check", "n00001@-1", "r", "execute", "executing", None, "", 1)
    )
    audit.close()
    act, _, health = loop(path, calls, fixed_by="nothing")
    act.restore(200.0)
    act.tick(200.0, {})
    assert health.checked == 1 and calls[-1] == ("resume", "n00001")


def test_a_dry_run_plans_the_drain_and_does_nothing_more() -> None:
    calls: list[tuple[str, str]] = []
    act, _, health = loop(None, calls, fixed_by="nothing", dry_run=True)
    act.offer([state("gpu_hbm_ecc")], 100.0)
    act.tick(100.0, {})
    assert calls == [] and health.checked == 0
    calls2: list[tuple[str, str]] = []
    act, _, health = loop(None, calls2, fixed_by="nothing", remediation={**REMEDIATE, "execute": False})
    act.offer([state("gpu_hbm_ecc")], 100.0)
    act.tick(100.0, {})
    act.offer([state("gpu_hbm_ecc", status="resolved")], 500.0)
    assert calls2 == [("drain", "n00001"), ("resume", "n00001")] and health.checked == 0  # as before


def test_the_remediation_block_is_checked_on_load() -> None:
    with pytest.raises(PolicyError, match="checks"):
        parse({"remediation": {"execute": True}})
    with pytest.raises(PolicyError, match="may name"):
        parse({"remediation": {"checks": [["ssh", "{target}", "dcgmi"]]}})
    with pytest.raises(PolicyError, match="unknown fault kinds"):
        parse({"remediation": {"checks": [["true"]], "ladders": {"gpu_flaky": ["reboot"]}}})


def test_a_command_check_passes_on_exit_zero_and_keeps_its_output() -> None:
    passed = CommandCheck(["sh", "-c", "echo diag {node} ok", "x"], 10)("n00001")
    assert passed.passed and "diag n00001 ok" in passed.output  # {node} filled in, no shell on it
    failed = CommandCheck(["sh", "-c", "echo memory test failed >&2; exit 3"], 10)("n00001")
    assert not failed.passed and "-> 3" in failed.output and "memory test failed" in failed.output


def test_the_jobs_left_on_a_drained_node_are_requeued_and_their_return_recorded() -> None:
    calls: list[tuple[str, str]] = []
    config = parse({"dry_run": False, "policies": [DRAIN], "remediation": REMEDIATE})
    act = ActLoop(
        config,
        AuditLog(None),
        dict.fromkeys(("drain", "resume", "requeue", "reboot"), Recorder(calls)),
        lambda message, subject: None,
        node_of=lambda e: e.split("-")[0],
        scope_size=lambda scope: 64,
        jobs_on=lambda node, t: {"4242": 8},
    )
    states = {"4242": "PENDING"}
    machine(act).checks = [lambda node: CheckResult(True, "ok")]
    machine(act).job_state = states.get
    act.offer([state("gpu_fell_off_bus")], 100.0)
    act.tick(100.0, {})
    assert calls == [("drain", "n00001"), ("requeue", "4242"), ("reboot", "n00001")]
    act.tick(160.0, {})
    states["4242"] = "RUNNING"  # the scheduler started it again elsewhere
    act.tick(220.0, {})
    act.tick(700.0, {})
    (rec,) = machine(act).audit.remediation_all()
    (back,) = [h for h in rec.history if h.get("step") == "job_running"]
    assert back["at"] == 220.0 and back["target"] == "4242" and rec.state == "returned"


def test_a_prediction_returned_healthy_is_remediated_when_its_failure_opens_for_real() -> None:
    """A warning keeps its incident id when the failure it foresaw opens (rca/incidents.py): the
    prediction's round ended with the node returned healthy, and the failure's drain starts a
    round of its own, which remediates the node and resumes it."""
    calls: list[tuple[str, str]] = []
    act, pages, _ = loop(None, calls, fixed_by="nothing")
    failed_at: list[int] = []  # where in `calls` the part failed: sick until a reset after that

    def check(node: str) -> CheckResult:
        healthy = not failed_at or ("reset_gpu", "n00001-gpu3") in calls[failed_at[0] :]
        return CheckResult(healthy, f"dcgmi diag -r 2 on {node}: {'pass' if healthy else 'fail'}")

    machine(act).checks = [check]
    act.offer([state("gpu_hbm_ecc", status="warning")], 100.0)
    act.tick(100.0, {})
    assert calls == [("drain", "n00001"), ("resume", "n00001")]  # healthy yet: back at once
    failed_at.append(len(calls))
    act.offer([state("gpu_hbm_ecc")], 1000.0)  # the same incident id, now open
    act.tick(1000.0, {})
    assert calls[2:] == [("drain", "n00001"), ("reset_gpu", "n00001-gpu3"), ("resume", "n00001")]
    assert [(r.source, r.state) for r in machine(act).audit.remediation_all()] == [
        ("prediction", "returned"),
        ("incident", "returned"),
    ]
    act.offer([state("gpu_hbm_ecc", status="resolved")], 2000.0)
    act.tick(2000.0, {})
    assert calls.count(("resume", "n00001")) == 2 and not pages  # nothing resumed twice


def test_an_audit_log_keyed_by_node_and_incident_alone_is_rekeyed_with_its_records(tmp_path: Path) -> None:
    """A log written before a drain was a round of its own keeps every record, now keyed by
    (node, incident, policy), so a second drain for the same incident gets a record too."""
    import sqlite3

    path = tmp_path / "actions.sqlite"
    old = sqlite3.connect(path)
    old.executescript(
        REMEDIATION_TABLE.replace("PRIMARY KEY (node, incident_id, policy)", "PRIMARY KEY (node, incident_id)")
        + "INSERT INTO remediation VALUES ('n00001', 'INC-1', 'gpu_hbm_ecc', 'n00001-gpu3', 'prediction',"
        " 'drain-predicted', 'returned', -1, 1e300, 100, 100, 160, '[]', 0);"
    )
    old.close()
    audit = AuditLog(path)
    (kept,) = audit.remediation_all()
    assert (kept.node, kept.incident_id, kept.policy, kept.state) == ("n00001", "INC-1", "drain-predicted", "returned")
    second = RemediationRecord(
        **{**kept.__dict__, "policy": "drain-failed", "state": "suspect", "source": "incident", "opened_at": 1000.0}
    )
    assert audit.remediation_add(second)
    assert audit.remediation_get("n00001", "INC-1", "drain-failed") == second
    audit.close()
    assert [r.policy for r in AuditLog(path).remediation_all()] == ["drain-predicted", "drain-failed"]


def test_the_breaker_stops_new_drains_while_a_drained_node_is_remediated() -> None:
    """Remediation steps do not pass the breaker: each acts on a node the breaker counted when it
    was drained (a reboot of it counts once, that node), and the node counts until it is back,
    even once its drain is older than the breaker's window."""
    calls: list[tuple[str, str]] = []
    act, pages, _ = loop(
        None,
        calls,
        fixed_by="reboot",
        remediation={**REMEDIATE, "reboot_wait_s": 1800},
        breaker={"max_nodes": 1, "max_fraction": 1.0, "window_s": 600},
    )
    act.offer([state("gpu_fell_off_bus")], 100.0)
    act.tick(100.0, {})
    assert calls == [("drain", "n00001"), ("reboot", "n00001")]  # the reboot was not stopped
    assert act.audit.out_of_service(100.0 - 600) == {"n00001"}  # drained and rebooted: one node
    act.offer([state("gpu_fell_off_bus", incident="INC-2", root="n00002-gpu0")], 1000.0)  # window passed
    act.tick(1000.0, {})
    assert ("drain", "n00002") not in calls and any("breaker" in p for p in pages)
    act.tick(1900.0, {})  # n00001 checked healthy after its reboot, and back
    assert calls[-1] == ("resume", "n00001")
    act.offer([state("gpu_fell_off_bus", incident="INC-3", root="n00002-gpu0")], 2000.0)
    act.tick(2000.0, {})
    assert ("drain", "n00002") in calls


CHECKPOINTED = {**PREDICTED, "action": {"type": "drain", "when": "checkpoint"}}


def cordoning_loop(
    calls: list[tuple[str, str]],
    policies: tuple[dict[str, Any], ...] = (DRAIN, CHECKPOINTED),
    job_ends: dict[str, float] | None = None,
) -> ActLoop:
    """Drains (on a prediction, by default) at the job's next checkpoint, with a cordon executor
    (Slurm's or Kubernetes'), a job on the node, and healthy checks."""
    config = parse({"dry_run": False, "policies": list(policies), "remediation": REMEDIATE})
    act = ActLoop(
        config,
        AuditLog(None),
        dict.fromkeys(("drain", "resume", "cordon", "reset_gpu", "reboot"), Recorder(calls)),
        lambda message, subject: None,
        node_of=lambda e: e.split("-")[0],
        scope_size=lambda scope: 64,
        jobs_on=lambda node, t: {"job-7": 256},
        job_ends=lambda node, t: dict(job_ends or {}),
    )
    machine(act).checks = [lambda node: CheckResult(True, "ok")]
    return act


BUSY, DIP = {"job-7": 96.0}, {"job-7": 4.0}


def test_a_suspect_node_is_cordoned_at_once_and_drained_at_its_jobs_checkpoint() -> None:
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls)
    for t in range(0, 300, 10):
        act.tick(float(t), BUSY)
    act.offer([state("gpu_hbm_ecc", status="warning")], 300.0)
    assert calls == [("cordon", "n00001")]  # no new work from now on; the job runs on
    (rec,) = act.audit.remediation_all()
    assert rec.state == "cordoned" and act.audit.attempts("n00001", 0.0) == 0  # a cordon is no attempt
    assert act.audit.out_of_service(0.0) == {"n00001"}
    for t in range(310, 900, 10):
        act.tick(float(t), BUSY)
    assert calls == [("cordon", "n00001")]
    act.tick(900.0, DIP)
    act.tick(910.0, BUSY)  # the checkpoint written: drained, checked at once, returned
    assert calls == [("cordon", "n00001"), ("drain", "n00001"), ("resume", "n00001")]
    (rec,) = act.audit.remediation_all()
    assert [h["state"] for h in rec.history] == ["cordoned", "validating", "returned"]
    assert act.audit.attempts("n00001", 0.0) == 1


def test_a_cordoned_node_whose_incident_resolves_before_the_checkpoint_is_resumed_not_drained() -> None:
    calls: list[tuple[str, str]] = []
    at_checkpoint = {**DRAIN, "action": {"type": "drain", "when": "checkpoint"}}
    act = cordoning_loop(calls, (at_checkpoint,))
    act.tick(0.0, BUSY)
    act.offer([{**state("gpu_nvlink"), "job_gpus": {"job-7": 256}}], 10.0)
    assert calls == [("cordon", "n00001")]
    act.offer([state("gpu_nvlink", status="resolved")], 20.0)  # over before the job's checkpoint
    assert calls == [("cordon", "n00001"), ("resume", "n00001")]
    act.tick(30.0, DIP)
    act.tick(40.0, BUSY)  # the checkpoint comes: nothing is drained for a resolved incident
    assert calls == [("cordon", "n00001"), ("resume", "n00001")]
    assert act.audit.out_of_service(0.0) == set()
    (rec,) = act.audit.remediation_all()
    assert rec.state == "returned" and rec.drained_at is None
    assert act.audit.remediation_count("n00001", 0.0) == 0  # never drained: not a remediation


def test_a_suspect_under_a_job_too_large_to_drain_is_cordoned_and_waits_for_a_person() -> None:
    """A 10,000-GPU job is not killed on a prediction (the policy's max_job_gpus): the node is
    cordoned, so the job runs on and its next restart leaves the node out; the drain waits for a
    person. A dry run, or a policy that asks for approval itself, cordons nothing."""
    too_large = {**PREDICTED, "action": {"type": "drain", "when": "checkpoint", "max_job_gpus": 128}}
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, (DRAIN, too_large))  # the node's job holds 256 GPUs
    act.tick(0.0, BUSY)
    act.offer([state("gpu_hbm_ecc", status="warning")], 300.0)
    assert calls == [("cordon", "n00001")]
    drain = next(r for r in act.audit.rows() if r.action == "drain")
    assert drain.decision == "awaiting_approval" and "over 128" in drain.detail
    act.tick(900.0, DIP)
    act.tick(910.0, BUSY)  # its checkpoint drains nothing: the drain is a person's
    assert calls == [("cordon", "n00001")]
    act.offer([state("gpu_hbm_ecc", status="resolved")], 1000.0)  # the warning lapsed
    assert calls == [("cordon", "n00001"), ("resume", "n00001")]

    for extra in ({"approval": True}, {"execute": False}):
        calls = []
        act = cordoning_loop(calls, (DRAIN, {**too_large, **extra}))
        act.tick(0.0, BUSY)
        act.offer([state("gpu_hbm_ecc", status="warning")], 300.0)
        assert calls == [], extra


def test_a_degraded_part_is_cordoned_and_remediated_once_its_job_ends_not_at_its_checkpoint() -> None:
    """NVLink errors do not stop the job, and a reset puts them right: the node takes no new work
    from now on, its job runs to its end (no restart for it, not even at a checkpoint), and then
    the node is drained, reset, checked and returned."""
    at_job_end = {**DRAIN, "action": {"type": "drain", "when": "job_end", "max_wait_s": 12 * 3600}}
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, (at_job_end,))
    act.tick(0.0, BUSY)
    act.offer([{**state("gpu_nvlink"), "job_gpus": {"job-7": 256}}], 10.0)
    assert calls == [("cordon", "n00001")]
    drain = next(r for r in act.audit.rows() if r.action == "drain")
    assert drain.detail == "once these jobs end: job-7"
    act.tick(900.0, DIP)
    act.tick(910.0, BUSY)  # a checkpoint: the job goes on
    act.tick(5000.0, BUSY)
    assert calls == [("cordon", "n00001")]
    act.tick(5010.0, {})  # job-7 ended
    assert calls[:2] == [("cordon", "n00001"), ("drain", "n00001")]
    assert calls[-1] == ("resume", "n00001")  # checked healthy and back
    (rec,) = act.audit.remediation_all()
    assert rec.state == "returned" and rec.drained_at == 5010.0


def test_a_predicted_failure_waits_for_a_job_due_to_end_first_not_for_its_checkpoint() -> None:
    """The job's time limit runs out in 90 min; the failure is predicted within 6 h. A drain at its
    checkpoint would restart 256 GPUs that are likely gone before the failure comes: the node is
    cordoned, the job runs to its end (past the policy's one-hour wait, up to its limit), then the
    node is drained, checked and returned."""
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, job_ends={"job-7": 300.0 + 90 * 60})
    act.tick(0.0, BUSY)
    act.offer([state("gpu_hbm_ecc", status="warning")], 300.0)
    assert calls == [("cordon", "n00001")]
    drain = next(r for r in act.audit.rows() if r.action == "drain")
    assert drain.detail.startswith("once these jobs end: job-7; due to end within 1.5 h by their time limits")
    act.tick(900.0, DIP)
    act.tick(910.0, BUSY)  # a checkpoint: the job goes on
    assert calls == [("cordon", "n00001")]
    act.tick(5750.0, BUSY)  # past the policy's hour, and a little past its limit, in Slurm's kill
    assert calls == [("cordon", "n00001")]
    act.tick(5760.0, {})  # ended
    assert calls[:2] == [("cordon", "n00001"), ("drain", "n00001")] and calls[-1] == ("resume", "n00001")


def test_a_predicted_failure_is_drained_at_the_checkpoint_of_a_job_that_runs_on_past_it() -> None:
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, job_ends={"job-7": 300.0 + 20 * 3600})
    act.tick(0.0, BUSY)
    act.offer([state("gpu_hbm_ecc", status="warning")], 300.0)
    drain = next(r for r in act.audit.rows() if r.action == "drain")
    assert drain.detail == "after the next checkpoint of job-7"
    act.tick(900.0, DIP)
    act.tick(910.0, BUSY)
    assert calls[:2] == [("cordon", "n00001"), ("drain", "n00001")]


def test_a_job_that_runs_past_its_limit_is_drained_at_its_next_checkpoint_not_mid_interval() -> None:
    """Two hours left by its limit: the drain waits for its end, past the policy's hour, until the
    limit and the scheduler's kill (10 min) are over; the job runs on (its limit raised since):
    the drain goes back to waiting for a checkpoint, and is done right after the next one."""
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, job_ends={"job-7": 300.0 + 2 * 3600})
    act.tick(0.0, BUSY)
    act.offer([state("gpu_hbm_ecc", status="warning")], 300.0)
    act.tick(8099.0, BUSY)
    act.tick(8100.0, BUSY)  # the limit + 600 s: no longer waiting for its end
    assert calls == [("cordon", "n00001")]
    act.tick(8500.0, DIP)
    act.tick(8510.0, BUSY)  # its checkpoint
    assert calls[:2] == [("cordon", "n00001"), ("drain", "n00001")]


def test_a_failure_that_comes_while_its_predicted_drain_waits_is_drained_at_once() -> None:
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, job_ends={"job-7": 300.0 + 90 * 60})
    act.tick(0.0, BUSY)
    act.offer([state("gpu_hbm_ecc", status="warning")], 300.0)
    assert calls == [("cordon", "n00001")]
    act.offer([state("gpu_hbm_ecc")], 1200.0)  # the failure, under the warning's incident id
    assert calls[:2] == [("cordon", "n00001"), ("drain", "n00001")]
    drain = next(r for r in act.audit.rows() if r.action == "drain")
    assert (drain.state, drain.acted_at) == ("done", 1200.0)
    act.offer([state("gpu_hbm_ecc", status="resolved")], 5000.0)  # nothing cancelled, nothing resumed unchecked
    assert calls.count(("drain", "n00001")) == 1


def test_a_far_off_limit_changes_nothing_a_low_probability_prediction_is_drained_at_the_checkpoint() -> None:
    """At p = 0.3 (a policy that acts from 0.2) a drain never pays against a job's end by the cost
    model; a job whose limit is 20 days off is not waited for: the policy's checkpoint stands."""
    low = {**CHECKPOINTED, "match": {"source": "prediction", "min_probability": 0.2}}
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, (DRAIN, low), job_ends={"job-7": 300.0 + 20 * 24 * 3600})
    act.tick(0.0, BUSY)
    unsure = state("gpu_hbm_ecc", status="warning")
    unsure["root_cause"]["confidence"] = 0.3
    act.offer([unsure], 300.0)
    drain = next(r for r in act.audit.rows() if r.action == "drain")
    assert drain.detail == "after the next checkpoint of job-7"


def test_a_degraded_part_whose_incident_quiets_before_its_job_ends_is_still_reset_and_checked() -> None:
    """NVLink errors stop when the job's traffic moves off the link, not when the link is fixed:
    the node stays cordoned, and once the job ends it is drained, reset, checked and returned."""
    at_job_end = {**DRAIN, "action": {"type": "drain", "when": "job_end", "max_wait_s": 12 * 3600}}
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, (at_job_end,))
    act.tick(0.0, BUSY)
    act.offer([{**state("gpu_nvlink"), "job_gpus": {"job-7": 256}}], 10.0)
    act.offer([{**state("gpu_nvlink", status="resolved"), "job_gpus": {"job-7": 256}}], 1000.0)
    act.tick(1010.0, BUSY)
    assert calls == [("cordon", "n00001")]  # not resumed: its drain still waits
    act.tick(5010.0, {})  # job-7 ended
    assert calls[:2] == [("cordon", "n00001"), ("drain", "n00001")]
    assert calls[-1] == ("resume", "n00001")
    (rec,) = act.audit.remediation_all()
    assert rec.state == "returned" and rec.drained_at == 5010.0


def test_a_degraded_part_under_a_policy_for_any_source_is_still_checked_when_its_incident_quiets() -> None:
    at_job_end = {**DRAIN, "match": {}, "action": {"type": "drain", "when": "job_end", "max_wait_s": 12 * 3600}}
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, (at_job_end,))
    act.tick(0.0, BUSY)
    act.offer([{**state("gpu_nvlink"), "job_gpus": {"job-7": 256}}], 10.0)
    act.offer([{**state("gpu_nvlink", status="resolved"), "job_gpus": {"job-7": 256}}], 1000.0)
    act.tick(5010.0, {})
    assert calls[:2] == [("cordon", "n00001"), ("drain", "n00001")]


def test_a_warning_that_lapses_while_its_drain_waits_for_the_jobs_end_is_not_drained() -> None:
    calls: list[tuple[str, str]] = []
    act = cordoning_loop(calls, job_ends={"job-7": 300.0 + 90 * 60})
    act.tick(0.0, BUSY)
    act.offer([state("gpu_hbm_ecc", status="warning")], 300.0)
    act.offer([state("gpu_hbm_ecc", status="resolved")], 3000.0)
    act.tick(3010.0, BUSY)
    act.tick(6000.0, {})
    assert calls == [("cordon", "n00001"), ("resume", "n00001")]  # the cordon lifted, nothing drained


def spare_loop(
    path: Path, calls: list[tuple[str, str]], spares: list[str], fail: frozenset[str] = frozenset(), **more: Any
) -> tuple[ActLoop, list[str]]:
    """Drains on a failure, requeues the node's job (`job-7`), fills its place from `spares`."""
    config = parse(
        {
            "dry_run": False,
            "breaker": {"max_nodes": 100, "max_fraction": 1.0},
            "policies": [DRAIN],
            "remediation": {**REMEDIATE, "spares": spares},
            **more,
        }
    )
    pages: list[str] = []
    recorder = Recorder(calls, fail)
    act = ActLoop(
        config,
        AuditLog(path),
        dict.fromkeys(("drain", "resume", "reset_gpu", "reboot", "ticket", "requeue"), recorder),
        lambda message, subject: pages.append(message),
        node_of=lambda e: e.split("-")[0],
        scope_size=lambda scope: 64,
        jobs_on=lambda node, t: {"job-7": 8} if node.startswith("n") else {},
    )
    machine(act).checks = [lambda node: CheckResult(True, "ok")]
    return act, pages


def test_a_drained_nodes_place_is_filled_from_the_sites_spares_once_and_an_empty_pool_is_said(
    tmp_path: Path,
) -> None:
    calls: list[tuple[str, str]] = []
    path = tmp_path / "actions.sqlite"
    act, pages = spare_loop(path, calls, ["s00001", "s00002"])
    act.offer([state("gpu_hbm_ecc")], 0.0)
    act.tick(10.0, {})
    assert calls[:3] == [("drain", "n00001"), ("requeue", "job-7"), ("resume", "s00001")]  # the job finds room
    history = [(h["target"], h["result"]) for h in act.audit.remediation_all()[0].history if h.get("step") == "spare"]
    assert history == [("s00001", "done")]
    # a kill and a restart: the record goes on, and no second spare is taken for the same drain
    act.audit.close()
    act, pages = spare_loop(path, calls, ["s00001", "s00002"])
    act.restore(20.0)
    act.tick(20.0, {})
    assert [c for c in calls if c[1].startswith("s")] == [("resume", "s00001")]
    # the next drained node gets the other spare; the one after finds the pool used up
    act.offer([state("gpu_hbm_ecc", incident="INC-2", root="n00002-gpu1")], 30.0)
    act.tick(40.0, {})
    act.offer([state("gpu_hbm_ecc", incident="INC-3", root="n00003-gpu1")], 50.0)
    act.tick(60.0, {})
    assert [c for c in calls if c[1].startswith("s")] == [("resume", "s00001"), ("resume", "s00002")]
    assert any("no spare left for n00003" in p for p in pages)


def test_a_spare_not_shown_as_one_excluded_or_failing_to_resume_is_passed_over(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []
    spares = ["s00001", "s00002", "s00003", "s00004"]
    act, _ = spare_loop(tmp_path / "a.sqlite", calls, spares, exclude=["s00002"])
    machine(act).spare_ready = lambda node: node != "s00001"  # a person drained s00001 for repair
    act.offer([state("gpu_hbm_ecc")], 0.0)
    act.tick(10.0, {})
    assert [c for c in calls if c[1].startswith("s")] == [("resume", "s00003")]
    # a spare that will not resume: the next one is tried; none would: a person hears
    calls.clear()
    act, pages = spare_loop(tmp_path / "b.sqlite", calls, spares[2:], fail=frozenset({"resume"}))
    act.offer([state("gpu_hbm_ecc")], 0.0)
    act.tick(10.0, {})
    assert [c for c in calls if c[1].startswith("s")] == [("resume", "s00003"), ("resume", "s00004")]
    assert any("no spare left for n00001" in p for p in pages)


def test_a_node_that_ran_no_job_takes_no_spare(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []
    act, _ = spare_loop(tmp_path / "a.sqlite", calls, ["s00001"])
    act.offer([state("gpu_hbm_ecc", root="x00001-gpu3")], 0.0)  # jobs_on: none on x-nodes
    act.tick(10.0, {})
    assert [c for c in calls if c[1].startswith("s")] == []


def test_spares_must_be_node_names() -> None:
    with pytest.raises(PolicyError, match="spares"):
        parse({"remediation": {**REMEDIATE, "spares": ["s[01-16]"]}})
    with pytest.raises(PolicyError, match="named twice"):
        parse({"remediation": {**REMEDIATE, "spares": ["s1", "s1"]}})
