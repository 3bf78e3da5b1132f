"""The per-node remediation state machine: a node the service drained is put right and checked
before it goes back, or handed to a person with everything that was tried.

    suspect -> (cordoned) -> drained -> remediating -> validating -> returned
                                |            ^  |          |
                                |            |  +----------+-> escalated (a person, with the history)
                                +-> validating (a node drained on a prediction: checked at once)

- suspect: a drain is planned for the node (waiting for the job's checkpoint, for approval, or
  held by a dry run); nothing more happens until the drain is done.
- cordoned: the drain waits for the job's checkpoint and the site has a cordon executor: the node
  was cordoned when the drain was planned (act.planner.Planner._cordon), so no new work lands
  on it meanwhile; its job runs on. In Slurm the cordon is the DRAIN itself (a DRAINING node's
  jobs run on) and the drain at the checkpoint repeats it; the requeue is what moves the job.
  If the incident resolves first, the drain is cancelled (act.loop) and the cordon resumed
  with the incident: the record closes as returned, never drained.
- drained: the drain is done. A node drained on a *prediction* is validated at once: a false
  prediction costs minutes, not the hours until its warning lapses; the prediction stays open as
  a watch (its incident is not touched). A node drained on a *failure* goes up its kind's ladder.
- remediating: the ladder's next rung (LADDERS: a GPU reset, then a reboot), done through the
  executors (a site command, with its timeout) as an audited plan, so a restart never runs it
  twice (act.executors.Actor.settle marks an interrupted site command failed: the next rung).
- validating: every health check the site names (`remediation.checks`: e.g. `dcgmi diag -r 2`
  and an NCCL all-reduce across the node's GPUs, through ssh), each pass/fail with its output
  kept as a `check` row of the audit log; after a reboot, only once the node has had
  `reboot_wait_s` to come back. A check changes nothing, so one a kill interrupted is run again.
- returned: all checks passed; the node is resumed (the plan id the planner's own resume would
  have, so the incident resolving later does not resume it twice).
- escalated: the ladder is spent, an action or the resume failed, or the node was remediated
  `attempts.max` times within `attempts.window_s`: a person is paged with every step and check,
  and a `ticket` plan is made for the node (done if the site has a ticket executor).

Every state change is committed to the `remediation` table of the audit log before the step it
leads to is taken; `RemediationMachine.step` picks up after a kill wherever the table says."""

from __future__ import annotations

import json
import logging
import math
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from act.audit import AuditLog, RemediationRecord, Row, plan_id, planned
from act.executors import Actor
from act.policy import ActConfig
from vocab.ids import InvalidIdError, check_node

log = logging.getLogger(__name__)

STATES = ("suspect", "cordoned", "drained", "remediating", "validating", "returned", "escalated")
OPEN = ("suspect", "cordoned", "drained", "remediating", "validating")
# before the drain is done: the machine has not taken the node, its incident resolving resumes it
BEFORE_DRAIN = ("suspect", "cordoned")

# The ladder per kind: what is tried, cheapest first, before a person. Read from NVIDIA's Xid
# catalog (vocab/xid_catalog.tsv, the immediate action of the Xid each kind shows):
# - a GPU off the bus (Xid 79) or lost: RESTART_BM, a reset cannot reach it: reboot;
# - HBM uncorrectable errors (Xid 48 WORKFLOW_XID_48, Xid 64 RESET_GPU: the reset applies the
#   row remaps), remaps pending, NVLink errors (Xid 74 WORKFLOW_NVLINK_ERR: reset first), a GSP
#   timeout or an unspecified GPU fault (Xid 119 RESET_GPU): reset, then reboot;
# - the NVSwitch fabric manager (Xid 45 WORKFLOW_XID_45, "restart the fabric manager"): a reboot
#   restarts it with the node;
# - a PSU, an optic, a NIC's cable, a GPU's thermal interface, a PCIe link trained low: hardware,
#   nothing a command fixes: straight to a person.
# A kind not listed gets DEFAULT_LADDER. A site overrides any of them (`remediation.ladders`).
LADDERS: dict[str, tuple[str, ...]] = {
    "gpu_fell_off_bus": ("reboot",),
    "gpu_lost": ("reboot",),
    "gpu_hbm_ecc": ("reset_gpu", "reboot"),
    "gpu_row_remap_pending": ("reset_gpu", "reboot"),
    "gpu_nvlink": ("reset_gpu", "reboot"),
    "gpu_nvlink_down": ("reset_gpu", "reboot"),
    "gpu_fault": ("reset_gpu", "reboot"),
    "nvswitch_fabric_manager": ("reboot",),
    "psu_failure": (),
    "optic_degradation": (),
    "nic_link_flap": (),
    "ib_link_degraded": (),
    "ib_link_errors": (),
    "gpu_thermal": (),
    "gpu_pcie_downtrained": (),
}
DEFAULT_LADDER: tuple[str, ...] = ("reset_gpu", "reboot")


Record = RemediationRecord


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    output: str


class CommandCheck:
    """A site's health check: an argv, `{node}` filled in, run without a shell; exit 0 passes."""

    def __init__(self, argv: Sequence[str], timeout_s: float) -> None:
        self.argv, self.timeout_s = list(argv), timeout_s

    def __call__(self, node: str) -> CheckResult:
        argv = [part.replace("{node}", node) for part in self.argv]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return CheckResult(False, f"{shlex.join(argv)}: {exc}")
        out = (done.stdout.strip() + ("\n" + done.stderr.strip() if done.stderr.strip() else ""))[-500:]
        return CheckResult(done.returncode == 0, f"{shlex.join(argv)} -> {done.returncode}: {out}")


Check = Callable[[str], CheckResult]


def _reason_fields(reason: str) -> tuple[str, str]:
    """(kind, root) from a planner's reason "aiops <incident>: <kind> on <root> (<policy>)"; only
    for rows planned before the machine was told them (an upgrade with drains in flight)."""
    try:
        body = reason.split(": ", 1)[1]
        kind, rest = body.split(" on ", 1)
        return kind, rest.rsplit(" (", 1)[0]
    except (IndexError, ValueError):
        return "", ""


class RemediationMachine:
    def __init__(
        self,
        config: ActConfig,
        audit: AuditLog,
        actor: Actor,
        page: Callable[[str], None],
        checks: Sequence[Check] | None = None,
        jobs_on: Callable[[str, float], dict[str, int]] = lambda node, t: {},
    ) -> None:
        settings = config.remediation
        assert settings is not None
        self.config, self.settings, self.audit, self.actor, self.page = config, settings, audit, actor, page
        self.checks: list[Check] = (
            list(checks)
            if checks is not None
            else [CommandCheck(argv, settings.check_timeout_s) for argv in settings.checks]
        )
        self.live = settings.execute and not config.dry_run
        self._sources = {p.name: p.match.source for p in config.policies}
        self.jobs_on = jobs_on  # the jobs the scheduler says run on a node
        # a job's state as the scheduler tells it (SlurmCli.job_state): when a requeued job runs again
        self.job_state: Callable[[str], str | None] | None = None
        # whether a spare is one now, as the scheduler tells it (drained with the spare's reason);
        # None: the pool is taken on the policy file's word (a site command or webhook cannot say)
        self.spare_ready: Callable[[str], bool] | None = None

    # ------------------------------------------------------------------ what it is told

    def suspect(self, row: Row, state: dict[str, Any], t: float) -> None:
        """A drain was planned: the node is suspect until it is done."""
        if row.action != "drain" or row.decision in ("blocked", "excluded", "already_done"):
            return  # nothing will be drained for it (the planner paged where a person must hear)
        root = state.get("root_cause") or {}
        source = "prediction" if state.get("status") == "warning" else "incident"
        self._open(row, str(root.get("kind", "")), str(root.get("entity", "")), source, t)
        self._cordoned(row, t)

    def _cordoned(self, drain: Row, t: float) -> None:
        """The drain waits for its job's checkpoint and the node was cordoned meanwhile."""
        cordon = self.audit.get(plan_id(drain.incident_id, drain.policy, "cordon", drain.target))
        rec = self.audit.remediation_get(drain.target, drain.incident_id, drain.policy)
        if cordon is not None and rec is not None and rec.state == "suspect":
            step = {"at": t, "step": "cordon", "target": drain.target, "result": cordon.state}
            self._move(rec, "cordoned" if cordon.state == "done" else "suspect", t, step=step)

    def _open(self, row: Row, kind: str, root: str, source: str, t: float) -> None:
        self.audit.remediation_add(
            Record(row.target, row.incident_id, kind, root, source, row.policy, "suspect", -1, t, t, None, None, ())
        )

    def owns(self, node: str, incident: str, policy: str) -> bool:
        """Whether the machine returns the node this drain took out (the incident resolving must not)."""
        rec = self.audit.remediation_get(node, incident, policy)
        return self.live and rec is not None and rec.state not in BEFORE_DRAIN

    # ------------------------------------------------------------------ each tick

    def step(self, t: float) -> None:
        for row in self.audit.rows("done"):  # drains it was not told of (an unplanned one, an upgrade)
            if row.action == "drain" and self.audit.remediation_get(row.target, row.incident_id, row.policy) is None:
                kind, root = _reason_fields(row.reason)
                source = self._sources.get(row.policy, "incident")
                self._open(row, kind, root, "prediction" if source == "prediction" else "incident", t)
        for first in self.audit.remediation_open():
            self._jobs_back(first, t)
            rec: Record | None = self.audit.remediation_get(first.node, first.incident_id, first.policy)
            for _ in range(4 * (len(STATES) + len(DEFAULT_LADDER))):  # as far as it can go now
                if rec is None or rec.state not in OPEN or rec.next_at > t:
                    break
                try:
                    self._advance(rec, t)
                except Exception:  # one node's trouble must not stop the others
                    log.exception("remediation of %s for %s failed at %s", rec.node, rec.incident_id, rec.state)
                    break
                after = self.audit.remediation_get(rec.node, rec.incident_id, rec.policy)
                if after == rec:
                    break  # waiting (a drain not done yet, a step to settle)
                rec = after

    def _advance(self, rec: Record, t: float) -> None:
        if rec.state in BEFORE_DRAIN:
            drain = self.audit.get(plan_id(rec.incident_id, rec.policy, "drain", rec.node))
            if drain is not None and drain.decision == "cancelled":  # the incident resolved first
                why = "the incident resolved before the checkpoint: never drained (a cordon resumed with it)"
                self._move(rec, "returned", t, closed=True, note=why)
                return
            if drain is None or drain.state != "done":
                return
            at = drain.acted_at if drain.acted_at is not None else t
            if not self.live:
                return  # dry run: the node stays drained until its incident resolves, as before
            steps = self._requeue(rec, t)
            if any(h.get("result") == "done" for h in steps):  # a job needs the room at once
                steps += self._spare(rec, t)
            if rec.source == "prediction":
                note = "drained on a prediction: checked at once"
                self._move(rec, "validating", t, drained_at=at, note=note, steps=steps)
            else:
                self._move(rec, "remediating", t, rung=0, drained_at=at, steps=steps)
            return
        if rec.state == "remediating":
            self._remediate(rec, t)
        elif rec.state == "validating":
            self._validate(rec, t)

    def _requeue(self, rec: Record, t: float) -> list[dict[str, Any]]:
        """The jobs still running on the drained node (a drain at a checkpoint leaves them running:
        Slurm lets a DRAINING node's jobs finish) requeued, where the site has a requeue executor
        (Slurm's `scontrol requeue`): each restarts elsewhere, from the checkpoint just written."""
        if "requeue" not in self.actor.executors:
            return []
        steps = []
        for job in sorted(self.jobs_on(rec.node, t)):
            row = self._planned(rec, "requeue", job, f"aiops {rec.incident_id}: {rec.node} drained", t)
            done = self.audit.get(row.plan_id) or self._carry_out(row, t)
            steps.append({"at": t, "step": "requeue", "target": job, "result": done.state if done else "?"})
        return steps

    def _spare(self, rec: Record, t: float) -> list[dict[str, Any]]:
        """The first free spare of the site's pool (`remediation.spares`) resumed in the drained
        node's place, so the requeued job finds room at once. A spare is taken once resumed for
        any node (it is a node in service from then on; a person refills the pool); one this
        service drained, one the policy file excludes, and one the scheduler does not show drained
        with the spare's reason (a person repairing it) are not free; one whose resume failed is
        passed over for the next. An empty pool is said to a person, once per drain."""
        if not self.settings.spares:
            return []
        policy = f"{rec.policy}:spare"
        mine = f"spare for {rec.node}"
        rows = self.audit.rows()
        for_it = [
            r for r in rows if r.policy == policy and r.incident_id == rec.incident_id and r.reason.endswith(mine)
        ]
        chosen = next((r for r in for_it if r.state != "failed"), None)
        if chosen is not None:  # resumed for this drain before (a restart): nothing twice
            return [{"at": t, "step": "spare", "target": chosen.target, "result": chosen.state}]
        taken = {r.target for r in rows if r.policy.endswith(":spare") and r.action == "resume" and r.state == "done"}
        unavailable = taken | self.audit.out_of_service(-math.inf) | {r.target for r in for_it} | {rec.node}
        steps: list[dict[str, Any]] = []
        for spare in self.settings.spares:
            if (
                spare in unavailable
                or self.config.excluded(spare) is not None
                or (self.spare_ready is not None and not self.spare_ready(spare))
            ):
                continue
            reason = f"aiops {rec.incident_id}: {mine}"
            done = self._carry_out(planned(rec.incident_id, policy, "resume", spare, reason, t, node=spare), t)
            steps.append({"at": t, "step": "spare", "target": spare, "result": done.state if done else "?"})
            if done is not None and done.state == "done":
                return steps
        self.page(
            f"no spare left for {rec.node} ({rec.incident_id}): the pool {', '.join(self.settings.spares)} is used up "
            "or none would resume; a person refills it"
        )
        return [*steps, {"at": t, "step": "spare", "target": "", "result": "none left"}]

    def _jobs_back(self, rec: Record, t: float) -> None:
        """A requeued job seen RUNNING again: when, in the node's history (its incident's MTTR)."""
        if self.job_state is None:
            return
        seen = {h["target"] for h in rec.history if h.get("step") == "job_running"}
        waiting = [h["target"] for h in rec.history if h.get("step") == "requeue" and h.get("result") == "done"]
        for job in waiting:
            if job not in seen and self.job_state(job) == "RUNNING":
                self._move(rec, rec.state, rec.next_at, step={"at": t, "step": "job_running", "target": job})
                rec = self.audit.remediation_get(rec.node, rec.incident_id, rec.policy) or rec

    def _planned(self, rec: Record, action: str, target: str, reason: str, t: float) -> Row:
        """A step of the node's way back (a requeue, a rung, a check, a ticket) as a plan of its
        own, under the drain's incident and `<policy>:remediation`."""
        return planned(rec.incident_id, f"{rec.policy}:remediation", action, target, reason, t, node=rec.node)

    def _carry_out(self, row: Row, t: float) -> Row | None:
        """A plan logged and run at once (executing is committed before the command runs): its
        row as it ended (done, failed, held; executing if a kill cut it short)."""
        self.audit.add(row)
        self.actor.run(row, t)
        return self.audit.get(row.plan_id)

    def _ladder(self, kind: str) -> tuple[str, ...]:
        return tuple(self.settings.ladders.get(kind, LADDERS.get(kind, DEFAULT_LADDER)))

    def _remediate(self, rec: Record, t: float) -> None:
        ladder = self._ladder(rec.kind)
        if rec.rung == 0:
            window = self.config.attempts.window_s
            times = self.audit.remediation_count(rec.node, t - window)
            if times > self.config.attempts.max:  # this record counts itself
                self._escalate(
                    rec, t, f"{rec.node} remediated {times - 1} times in {window / 3600:g} h: a person takes it"
                )
                return
        if rec.rung >= len(ladder):
            why = "the ladder is spent" if ladder else f"{rec.kind or 'this kind'} needs hardware: nothing to try"
            self._escalate(rec, t, why)
            return
        action = ladder[rec.rung]
        target = rec.root if action == "reset_gpu" and rec.root else rec.node
        reason = f"aiops {rec.incident_id}: {rec.kind} on {rec.root}: {action} (rung {rec.rung + 1} of {len(ladder)})"
        plan = self._planned(rec, action, target, reason, t)
        row = self.audit.get(plan.plan_id) or self._carry_out(plan, t)
        assert row is not None
        if row.state in ("planned", "executing"):
            return  # a restart settles it first (act.executors.Actor.settle)
        step = {"at": t, "step": action, "target": target, "result": row.state, "detail": row.detail[-300:]}
        if row.state == "done":
            wait = self.settings.reboot_wait_s if action == "reboot" else 0.0
            self._move(rec, "validating", t + wait, rung=rec.rung + 1, step=step)
        else:  # failed, refused, held: the next rung
            self._move(rec, "remediating", t, rung=rec.rung + 1, step=step)

    def _validate(self, rec: Record, t: float) -> None:
        pid = plan_id(rec.incident_id, f"{rec.policy}:remediation", "check", f"{rec.node}@{rec.rung}")
        row = self.audit.get(pid)
        if row is None or row.state in ("planned", "executing"):  # a check changes nothing: run again
            if row is None:
                reason = f"aiops {rec.incident_id}: health check of {rec.node}"
                self.audit.add(self._planned(rec, "check", f"{rec.node}@{rec.rung}", reason, t))
            self.audit.move(pid, "executing", at=t)
            passed, outputs = self._run_checks(rec.node)
            self.audit.move(pid, "done" if passed else "failed", "\n".join(outputs)[-2000:])
            row = self.audit.get(pid)
            assert row is not None
        passed = row.state == "done"
        step = {"at": t, "step": "check", "passed": passed, "detail": row.detail[-500:]}
        if passed:
            self._return(rec, t, step)
        else:
            self._move(rec, "remediating", t, rung=max(rec.rung, 0), step=step)

    def _run_checks(self, node: str) -> tuple[bool, list[str]]:
        try:
            check_node(node)
        except InvalidIdError as exc:
            return False, [f"refused: {exc}"]
        if not self.checks:
            return False, ["no health check configured: a person decides"]
        outputs, passed = [], True
        for check in self.checks:
            result = check(node)
            outputs.append(("pass " if result.passed else "FAIL ") + result.output)
            passed = passed and result.passed
            if not passed:
                break  # the first failure says enough; the rest would cost minutes each
        return passed, outputs

    def _return(self, rec: Record, t: float, step: dict[str, Any]) -> None:
        # the plan id the planner's own resume would have: the incident resolving does not resume it twice
        row = self.audit.get(plan_id(rec.incident_id, rec.policy, "resume", rec.node))
        if row is None:
            why = "healthy (every check passed)"
            if rec.source == "prediction" and rec.rung <= 0:
                why += "; the prediction stays open as a watch"
            reason = f"aiops {rec.incident_id}: {rec.node} {why}"
            row = self._carry_out(planned(rec.incident_id, rec.policy, "resume", rec.node, reason, t, node=rec.node), t)
            assert row is not None
        if row.state == "done":
            self._move(rec, "returned", t, step=step, closed=True)
        elif row.state == "failed":
            self._escalate(rec, t, f"the resume failed: {row.detail}", step)
        # executing: settled on the next start

    def _escalate(self, rec: Record, t: float, why: str, step: dict[str, Any] | None = None) -> None:
        history = [*rec.history, *([step] if step else [])]
        tried = "; ".join(
            f"{h['step']} {'passed' if h.get('passed') else 'failed' if h['step'] == 'check' else h.get('result', '')}"
            for h in history
            if "step" in h
        )
        self._move(rec, "escalated", t, step=step, closed=True, note=why)
        reason = f"aiops {rec.incident_id}: {rec.kind} on {rec.root}: {why}; tried: {tried or 'nothing'}"
        ticket = self._planned(rec, "ticket", rec.node, reason, t)
        if self.audit.get(ticket.plan_id) is None:
            if "ticket" in self.actor.executors:
                self._carry_out(ticket, t)
            else:
                self.audit.add(ticket)
                self.audit.move(ticket.plan_id, "held", "no ticket executor: paged instead")
        self.page(f"{rec.node} for {rec.incident_id} needs a person: {why}; tried: {tried or 'nothing'}")

    def _move(
        self,
        rec: Record,
        state: str,
        next_at: float,
        rung: int | None = None,
        drained_at: float | None = None,
        step: dict[str, Any] | None = None,
        closed: bool = False,
        note: str | None = None,
        steps: Sequence[dict[str, Any]] = (),
    ) -> None:
        entry = dict(step or {})
        if note:
            entry["note"] = note
        history = (*rec.history, *({"state": rec.state, **s} for s in steps))
        history = (*history, {"state": state, **entry}) if entry or state != rec.state else history
        self.audit.remediation_put(
            replace(
                rec,
                state=state,
                rung=rec.rung if rung is None else rung,
                next_at=math.inf if closed else next_at,
                drained_at=drained_at if drained_at is not None else rec.drained_at,
                closed_at=next_at if closed else None,
                history=history,
            )
        )


def history_json(rec: Record) -> str:
    return json.dumps(list(rec.history), sort_keys=True)


__all__ = ["DEFAULT_LADDER", "LADDERS", "OPEN", "STATES", "CheckResult", "CommandCheck", "Record", "RemediationMachine"]
