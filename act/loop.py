"""The acting loop the daemon runs tick by tick, in event time: incident states in, plans made and
audited, actions done now or right after the affected jobs' next checkpoint.

`offer(states, t)` plans for each incident state; `tick(t, utilisation)` reads each job's
checkpoints from its mean GPU utilisation and runs what waited for them (or whose deadline
passed, or whose jobs ended). On a start, `restore()` settles what a SIGKILL interrupted and takes
the plans still waiting back (their checkpoint clock starts afresh: it relearns a job's dips
within one cadence)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from act.audit import AuditLog, Row
from act.checkpoints import CheckpointClock
from act.costs import WARNING_HORIZON_S
from act.executors import Actor, Executor
from act.planner import AFTER_CHECKPOINT, AFTER_JOBS_END, WHY, Planner
from act.policy import ActConfig, Policy
from act.remediation import RemediationMachine
from vocab.incident_record import IncidentRecord

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Waiting:
    row: Row
    jobs: tuple[str, ...]
    since: float
    deadline: float
    # waiting for the jobs' end (else their next checkpoint); None: as the row's detail says
    until_end: bool | None = None


# after a job's time limit, how long until the scheduler has ended it: Slurm signals the job and
# kills it KillWait (30 s by default) later; a job's own teardown (a last checkpoint) takes minutes
LIMIT_KILL_S = 600.0


class ActLoop:
    def __init__(
        self,
        config: ActConfig,
        audit: AuditLog,
        executors: Mapping[str, Executor],
        page: Callable[[str, str], None],
        node_of: Callable[[str], str | None],
        scope_size: Callable[[str | None], int],
        scope_of: Callable[[str], str | None] = lambda node: None,
        jobs_on: Callable[[str, float], dict[str, int]] = lambda node, t: {},
        job_ends: Callable[[str, float], dict[str, float]] = lambda node, t: {},
    ) -> None:
        self.config, self.audit = config, audit
        self.planner = Planner(config, audit, node_of, scope_size, scope_of, jobs_on, job_ends)
        self.job_ends = job_ends
        self.actor = Actor(audit, executors, lambda message: page(message, ""))
        self.planner.cordons = "cordon" in executors
        self.clock = CheckpointClock()
        # the node's way back after a drain: remediated, checked, returned or a person paged
        self.remediation: RemediationMachine | None = None
        if config.remediation is not None:
            self.remediation = RemediationMachine(
                config, audit, self.actor, lambda message: page(message, ""), jobs_on=jobs_on
            )
            self.planner.returns_itself = self.remediation.owns
        self.waiting: dict[str, Waiting] = {}
        # approvals asked for through the API (another thread): taken at the next tick, in order
        self.approvals: deque[tuple[str, str]] = deque()
        self._approvals_lock = threading.Lock()

    def approve(self, plan_id: str, who: str) -> None:
        """Asked from the API: the plan runs at the next tick if it is still awaiting approval."""
        with self._approvals_lock:
            self.approvals.append((plan_id, who))

    def _take_approvals(self, t: float) -> None:
        with self._approvals_lock:
            asked = list(self.approvals)
            self.approvals.clear()
        for pid, who in asked:
            row = self.audit.get(pid)
            if row is None or row.decision != "awaiting_approval" or row.state != "held":
                log.warning("approval of %s by %s ignored: %s", pid, who, "no such plan" if row is None else row.state)
                continue
            log.warning("%s %s for %s approved by %s", row.action, row.target, row.incident_id, who)
            self.audit.move(pid, "planned", f"approved by {who}", approved_by=who, decision="execute")
            self.actor.run(row, t)

    def restore(self, t: float) -> None:
        self.actor.settle()
        for row in self.audit.rows("waiting"):
            self.waiting[row.plan_id] = Waiting(row, self._jobs_of(row), t, t + self._max_wait(row, t))

    def offer(self, states: Sequence[IncidentRecord | bytes | dict[str, Any]], t: float) -> None:
        for raw in states:
            # the policies match on the record's wire form (act/policy.py: its fields by name)
            state = (
                raw.to_dict()
                if isinstance(raw, IncidentRecord)
                else json.loads(raw)
                if isinstance(raw, bytes | str)
                else raw
            )
            if state.get("status") == "resolved":
                self._cancel_waiting(str(state.get("incident_id")))
            elif state.get("status") == "open":
                self._failure_came(str(state.get("incident_id")), t)
            plans = self.planner.consider(state, t)
            self.actor.take(plans, t)
            if self.remediation is not None:
                for plan in plans:
                    self.remediation.suspect(plan.row, state, t)
            for plan in plans:
                if plan.row.decision == "at_checkpoint":
                    jobs = self._jobs_of(plan.row)
                    self.waiting[plan.row.plan_id] = Waiting(plan.row, jobs, t, t + self._max_wait(plan.row, t))

    def _failure_came(self, incident: str, t: float) -> None:
        """The failure a warning foresaw opened (a warning keeps its incident id): a drain planned
        on the warning and still waiting, for a checkpoint or the jobs' end, is done now. The
        failure's own policy finds the node out of service already (a waiting drain counts), so
        nothing else would drain it; its jobs are failing anyway."""
        for pid, w in list(self.waiting.items()):
            if w.row.incident_id == incident and self._planned_on_warning(w.row):
                del self.waiting[pid]
                log.info("%s %s for %s: the failure came first", w.row.action, w.row.target, incident)
                self.audit.move(pid, "planned", "the failure came before the wait was over", decision="execute")
                self.actor.run(w.row, t)

    def _planned_on_warning(self, row: Row) -> bool:
        if self.remediation is not None:
            rec = self.audit.remediation_get(row.target, row.incident_id, row.policy)
            if rec is not None:
                return rec.source == "prediction"
        policy = self._policy(row)
        return policy is not None and policy.match.source == "prediction"

    def _cancel_waiting(self, incident: str) -> None:
        """The incident resolved before its job's checkpoint: its drains waiting for one are not
        done (a drain then would leave a node out with nothing left to resume it); a node
        cordoned meanwhile is resumed with the incident's other nodes (Planner._resume).

        Except a drain waiting for its jobs' end for a part seen degraded (NVLink errors, a row
        remap pending), where the remediation machine checks the node before it returns: such a
        part stays degraded until a reset (NVIDIA's Xid catalog: Xid 74 RESET_GPU; a pending remap
        is applied at the next reset), and its incident quiets when its symptom does (the job's
        traffic moving off a link), not when it is fixed. It goes ahead once the jobs end; a part
        that is fine passes its check and is back in minutes. A warning that lapsed is cancelled:
        the failure it foresaw did not come."""
        for pid, w in list(self.waiting.items()):
            if w.row.incident_id == incident:
                if self._checked_after_jobs_end(w.row):
                    log.info(
                        "%s %s for %s: the incident quieted; checked once its jobs end",
                        w.row.action,
                        w.row.target,
                        incident,
                    )
                    continue
                del self.waiting[pid]
                log.info("%s %s for %s: the incident resolved first", w.row.action, w.row.target, incident)
                self.audit.move(pid, "held", "the incident resolved before the checkpoint", decision="cancelled")

    def tick(self, t: float, utilisation: dict[str, float]) -> None:
        """One tick's mean GPU utilisation per job: checkpoints read, what waited for them done."""
        self._take_approvals(t)
        self.clock.observe(t, utilisation)
        for pid, w in list(self.waiting.items()):
            until_end = w.row.detail.startswith(AFTER_JOBS_END) if w.until_end is None else w.until_end
            pending = [
                j
                for j in w.jobs
                if self.clock.known(j) and (until_end or (self.clock.last_checkpoint(j) or -1.0) <= w.since)
            ]
            if pending and t < w.deadline:
                continue
            if pending and until_end and WHY in w.row.detail:
                # a job due to end by its limit runs on past it (a limit raised since, an overrun):
                # the drain goes back to waiting for its next checkpoint, not mid-interval
                log.info(
                    "%s %s: %s ran past their limits; now at the next checkpoint",
                    w.row.action,
                    w.row.target,
                    ", ".join(pending),
                )
                self.waiting[pid] = Waiting(w.row, w.jobs, t, t + self._policy_wait(w.row), until_end=False)
                continue
            if pending:
                waited = "end" if until_end else "checkpoint"
                why = f"no {waited} of {', '.join(pending)} within {w.deadline - w.since:.0f} s: acting anyway"
            elif until_end:
                why = "the jobs ended"
            else:
                why = "after the job's checkpoint" if w.jobs else "no job to wait for"
            del self.waiting[pid]
            log.info("%s %s for %s: %s", w.row.action, w.row.target, w.row.incident_id, why)
            self.audit.move(pid, "planned", why, decision="execute")
            self.actor.run(w.row, t)
        if self.remediation is not None:
            self.remediation.step(t)

    def _checked_after_jobs_end(self, row: Row) -> bool:
        """A drain waiting for the jobs' end for a part seen degraded (an incident, not a warning),
        which the remediation machine will check before the node goes back."""
        if not row.detail.startswith(AFTER_JOBS_END) or self.remediation is None or not self.remediation.live:
            return False
        rec = self.audit.remediation_get(row.target, row.incident_id, row.policy)
        return rec is not None and rec.source == "incident"

    def _policy(self, row: Row) -> Policy | None:
        return next((p for p in self.config.policies if p.name == row.policy), None)

    def _policy_wait(self, row: Row) -> float:
        policy = self._policy(row)
        return policy.action.max_wait_s if policy is not None else 3600.0

    def _max_wait(self, row: Row, t: float) -> float:
        """How long a drain waits before acting anyway: the policy's `max_wait_s`. A drain on a
        prediction that waits for jobs due to end first (act.planner: its detail says why) waits
        until the scheduler ends them by their time limits (and its kill takes), at most the
        warning's horizon: past it the warning has lapsed or the failure come."""
        wait = self._policy_wait(row)
        if row.detail.startswith(AFTER_JOBS_END) and WHY in row.detail and row.node is not None:
            ends = self.job_ends(row.node, t)
            limits = [ends[j] for j in self._jobs_of(row) if j in ends]
            if limits:
                wait = max(wait, min(max(limits) - t + LIMIT_KILL_S, WARNING_HORIZON_S))
        return wait

    @staticmethod
    def _jobs_of(row: Row) -> tuple[str, ...]:
        for prefix in (AFTER_CHECKPOINT, AFTER_JOBS_END):
            if row.detail.startswith(prefix):
                named = row.detail.removeprefix(prefix).split(WHY, 1)[0]
                return tuple(j for j in named.split(", ") if j)
        return ()


def sign(secret: bytes, plan_id: str) -> str:
    """The signature of an approval link for one plan (HMAC-SHA256, hex): whoever holds the link
    may approve that plan and no other; the link opens a page, and only its form's POST acts (a
    chat client unfurling the link must not approve anything)."""
    return hmac.new(secret, f"approve:{plan_id}".encode(), hashlib.sha256).hexdigest()[:32]


def signed(secret: bytes, plan_id: str, signature: str) -> bool:
    return hmac.compare_digest(sign(secret, plan_id), signature)


__all__ = ["ActLoop", "Waiting", "sign", "signed"]
