"""From incident states to plans: which policy matches, what it would do to which target, and
whether that may be done now (dry run, the breaker, attempt limits, exclusions, the blast radius,
approval). Every plan is written to the audit log before anything else happens; a plan already
there (the same incident, policy, action and target) is not planned again."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from act.audit import AuditLog, Row, plan_id, planned
from act.costs import WARNING_HORIZON_S, checkpoint_drain_pays
from act.policy import ActConfig, Policy
from vocab.ids import entity_refusal, node_refusal, shown

# a cordon is planned by the planner itself, never by a policy: with a drain that waits for the
# job's checkpoint, so that no new work lands on a suspect node in the meantime
NODE_ACTIONS = frozenset({"drain", "reboot", "resume", "cordon"})
# actions on a part of a node (a GPU reset): the site's command is told the node too, and the
# topology must know which one it is
IN_A_NODE = NODE_ACTIONS | {"reset_gpu"}


@dataclass(frozen=True)
class Plan:
    row: Row
    execute: bool  # do it now (not a dry run, nothing holds it)
    page: str | None = None  # what a person must hear (the breaker tripped, a node keeps failing)


def matches(policy: Policy, state: dict[str, Any]) -> bool:
    m = policy.match
    warning = state.get("status") == "warning"
    if (m.source == "incident" and warning) or (m.source == "prediction" and not warning):
        return False
    root = state.get("root_cause") or {}
    if m.kinds and root.get("kind") not in m.kinds:
        return False
    if m.severities and state.get("severity") not in m.severities:
        return False
    confidence = float(root.get("confidence") or 0.0)  # a warning's is the prediction's probability
    if confidence < (m.min_probability if warning else m.min_confidence):
        return False
    return not (m.entity and not fnmatch.fnmatchcase(str(root.get("entity", "")), m.entity))


# how a waiting drain's detail names its jobs (act.loop reads them back from the audit log)
AFTER_CHECKPOINT = "after the next checkpoint of "
AFTER_JOBS_END = "once these jobs end: "
# what follows the job ids in a waiting drain's detail: why it waits (job ids hold no ";")
WHY = "; "


class Planner:
    """`node_of(entity)` finds the node a root sits in (None for a switch, a link, a rack);
    `scope_of(node)` the rack or pod the breaker counts per, and `scope_size` its nodes."""

    def __init__(
        self,
        config: ActConfig,
        audit: AuditLog,
        node_of: Callable[[str], str | None],
        scope_size: Callable[[str | None], int],
        scope_of: Callable[[str], str | None] = lambda node: None,
        jobs_on: Callable[[str, float], dict[str, int]] = lambda node, t: {},
        job_ends: Callable[[str, float], dict[str, float]] = lambda node, t: {},
    ) -> None:
        self.config, self.audit = config, audit
        self.node_of, self.scope_size, self.scope_of = node_of, scope_size, scope_of
        self.jobs_on = jobs_on  # the jobs running on a node at t, and the GPUs each holds in all
        self.job_ends = job_ends  # when the scheduler ends each of them at the latest (time limits)
        # (node, incident, the policy that drained it) -> whether act.remediation returns that node
        # itself, once it is healthy, rather than when the incident resolves
        self.returns_itself: Callable[[str, str, str], bool] = lambda node, incident, policy: False
        # whether a node whose drain waits for a checkpoint is cordoned at once (the site has a
        # cordon executor: Slurm's DRAIN, Kubernetes' unschedulable)
        self.cordons = False

    def consider(self, state: dict[str, Any], t: float) -> list[Plan]:
        """The plans for one incident state, at event time t (new ones only)."""
        incident = str(state.get("incident_id"))
        if state.get("status") == "resolved":
            return self._resume(incident, state, t)
        plans = []
        for policy in self.config.policies:
            if policy.action.type == "resume" or not matches(policy, state):
                continue
            plan = self._plan(policy, incident, state, t)
            if plan is not None:
                plans.append(plan)
                if (
                    plan.row.action == "drain"
                    and self.cordons
                    and (plan.row.decision == "at_checkpoint" or self._cordons_while_waiting(policy, plan.row))
                ):
                    plans.append(self._cordon(plan.row, t))
        return plans

    # ------------------------------------------------------------------ internals

    def _plan(self, policy: Policy, incident: str, state: dict[str, Any], t: float) -> Plan | None:
        action = policy.action
        root = str((state.get("root_cause") or {}).get("entity", ""))
        # the node comes from the topology, never from the id's spelling ("a08-p1-dgx-04-c17-gpu3"
        # is in node "a08-p1-dgx-04-c17", which no cut at a hyphen finds)
        node = self.node_of(root) if root and not entity_refusal(root) else None
        # drain, reboot, resume: the node; reset_gpu, ticket, route_around: the root itself
        target = node if action.type in NODE_ACTIONS else root
        reason = f"aiops {incident}: {(state.get('root_cause') or {}).get('kind')} on {root} ({policy.name})"
        pid = plan_id(incident, policy.name, action.type, target or root)
        if self.audit.get(pid) is not None:
            return None  # planned before (a repeated state, a restart): nothing twice
        decision, detail, page = self._decide(policy, state, target, node, root, t)
        execute = decision == "execute"
        row = planned(
            incident, policy.name, action.type, target or root, reason, t, node=node, decision=decision, detail=detail
        )
        self.audit.add(row)
        return Plan(row, execute, page)

    def _cordons_while_waiting(self, policy: Policy, drain: Row) -> bool:
        """A drain that waits for a person only because its jobs are larger than the policy's
        `max_job_gpus` cordons the node meanwhile: the large job runs on (a cordon kills
        nothing), and when it restarts, as a 10,000-GPU job does several times a day, the
        scheduler leaves this node out (Slurm allocates no DRAIN node; Kubernetes schedules no pod
        on an unschedulable one), so the suspect is swapped at a restart the job takes anyway. A
        policy that asks for approval itself, or a dry run, cordons nothing."""
        return (
            drain.decision == "awaiting_approval"
            and policy.action.max_job_gpus is not None
            and not policy.approval
            and policy.execute
            and not self.config.dry_run
        )

    def _cordon(self, drain: Row, t: float) -> Plan:
        """The drain waits for the job's checkpoint (or, for a job over `max_job_gpus`, for a
        person); the node takes no new work from now on (the drain passed every check a cordon
        would: the breaker, approval, dry run)."""
        row = planned(
            drain.incident_id,
            drain.policy,
            "cordon",
            drain.target,
            drain.reason,  # the drain's own: Slurm's DRAIN reason, read back by both
            t,
            node=drain.node,
            detail=f"no new work until the drain ({drain.detail})",
        )
        self.audit.add(row)
        return Plan(row, True)

    @staticmethod
    def _refused(action: str, root: str, node: str | None) -> str | None:
        """Why the grammar refuses what this plan would act on, or None. A name outside it (a
        host list "n[0000-0015]" Slurm expands to 16 nodes, a "/" that changes a URL's path, an
        option "-rf") is acted on by no executor."""
        if problem := entity_refusal(root):
            return f"refused: the root {shown(root)} is not an entity id: {problem}"
        if node is not None and (problem := node_refusal(node)):
            return f"refused: {action} of node {shown(node)}, which is not one node's name: {problem}"
        return None

    def _decide(
        self, policy: Policy, state: dict[str, Any], target: str | None, node: str | None, root: str, t: float
    ) -> tuple[str, str, str | None]:
        """(decision, why, page): execute | at_checkpoint | dry_run | already_done | blocked | excluded |
        awaiting_approval."""
        action, config = policy.action, self.config
        if not root:
            return "blocked", f"the incident names no root cause: {action.type} needs one", None
        refused = self._refused(action.type, root, node)
        if refused:
            return "blocked", refused, refused
        if target is None:
            # a leaf, a spine, a link, a rack: draining "its" nodes would take out every node
            # behind it for one part; a person decides (or a route_around policy acts on it)
            return "blocked", f"{root} is not part of a node: {action.type} needs a node", None
        if node is None and action.type in IN_A_NODE:
            return "blocked", f"the topology places {root} in no node: {action.type} needs one", None
        excluded = config.excluded(target)
        if excluded:
            return "excluded", excluded, None
        done = self.audit.attempts(target, t - config.attempts.window_s)
        if done >= config.attempts.max:
            why = (
                f"{target} acted on {done} times in {config.attempts.window_s / 3600:g} h: a person takes it from here"
            )
            return "blocked", why, why
        if action.type == "drain" and target in self.audit.out_of_service(-math.inf):  # until resumed
            return "already_done", f"{target} is out of service already (drained by this service)", None
        if action.type in ("drain", "reboot"):
            tripped = self._breaker(target, t)
            if tripped:
                return "blocked", tripped, tripped
        # the jobs a drain interrupts: those the incident hit, or (a warning, which hits nothing
        # yet) those the scheduler says run on the node now
        jobs = {str(j): int(n) for j, n in (state.get("job_gpus") or {}).items()} or self.jobs_on(target, t)
        gpus = sum(jobs.values())
        if action.max_job_gpus is not None and gpus > action.max_job_gpus:
            return (
                "awaiting_approval",
                f"the jobs hit hold {gpus} GPUs, over {action.max_job_gpus}: approve first",
                None,
            )
        if policy.approval:
            return "awaiting_approval", "the policy asks for approval", None
        if config.dry_run or not policy.execute:
            why = (
                "dry run (the policy file's dry_run)" if config.dry_run else "dry run (the policy has no execute: true)"
            )
            return "dry_run", why, None
        if action.when == "checkpoint" and jobs and action.type in NODE_ACTIONS:
            ending = self._ending_first(state, jobs, target, t)
            if ending:
                return "at_checkpoint", f"{AFTER_JOBS_END}{', '.join(sorted(jobs))}{WHY}{ending}", None
            return "at_checkpoint", f"{AFTER_CHECKPOINT}{', '.join(sorted(jobs))}", None
        if action.when == "job_end" and jobs and action.type in NODE_ACTIONS:
            # waits as a checkpoint's drain does (act.loop), for the jobs' end instead
            return "at_checkpoint", f"{AFTER_JOBS_END}{', '.join(sorted(jobs))}", None
        return "execute", "", None

    def _ending_first(self, state: dict[str, Any], jobs: dict[str, int], node: str, t: float) -> str | None:
        """Why a drain on a prediction waits for its jobs to end rather than for their next
        checkpoint, or None. A job due to end (its time limit) before the predicted failure is
        likely to come gains nothing from a drain that restarts it (act/costs.py); the node is
        cordoned meanwhile, and drained once the jobs end (or at once, should the failure come)."""
        if state.get("status") != "warning":
            return None
        ends = self.job_ends(node, t)
        left = {j: ends[j] - t for j in jobs if j in ends}
        if not left or min(left.values()) >= WARNING_HORIZON_S:
            return None  # every job runs on past the warning's horizon: the failure, if it comes, finds them
        probability = float((state.get("root_cause") or {}).get("confidence") or 0.0)
        if checkpoint_drain_pays(probability, jobs, left):
            return None
        soonest = min(left.values())
        return (
            f"due to end within {max(soonest, 0.0) / 3600:.1f} h by their time limits, likely before the "
            "predicted failure: a drain now would restart them for nothing"
        )

    def _breaker(self, target: str, t: float) -> str | None:
        """Why taking `target` out of service would exceed the breaker, or None."""
        breaker = self.config.breaker
        out = self.audit.out_of_service(t - breaker.window_s)
        if target in out:
            return None
        scope = None if breaker.per == "cluster" else self.scope_of(target)
        in_scope = {n for n in out if scope is None or self.scope_of(n) == scope}
        size = max(self.scope_size(scope), 1)
        where = f"{breaker.per} {scope}" if scope else "the cluster"
        if len(in_scope) + 1 > breaker.max_nodes:
            return f"breaker: {len(in_scope)} nodes of {where} already out of service, at most {breaker.max_nodes}"
        if (len(in_scope) + 1) / size > breaker.max_fraction:
            return (
                f"breaker: {len(in_scope) + 1} of {size} nodes of {where} out of service would exceed "
                f"{breaker.max_fraction:.0%}"
            )
        return None

    def _resume(self, incident: str, state: dict[str, Any], t: float) -> list[Plan]:
        """The incident resolved: the nodes drained for it come back, under the policy that drained them."""
        plans = []
        by_name = {p.name: p for p in self.config.policies}
        for row in self.audit.rows("done"):
            if row.incident_id != incident or row.action not in ("drain", "reboot", "cordon"):
                continue
            if self.returns_itself(row.target, incident, row.policy):
                continue  # checked before it goes back (act.remediation), not on the incident's word
            drain = self.audit.get(plan_id(incident, row.policy, "drain", row.target))
            if row.action == "cordon" and drain is not None and drain.state == "waiting":
                continue  # its drain still waits for the jobs' end (act.loop): the node stays cordoned
            policy = by_name.get(row.policy)
            pid = plan_id(incident, row.policy, "resume", row.target)
            if self.audit.get(pid) is not None:
                continue
            execute = policy is not None and policy.execute and not self.config.dry_run
            decision = "execute" if execute else "dry_run"
            reason = f"aiops {incident} resolved: {row.target} back in service"
            node = row.node if row.node is not None else row.target  # a row from before rows named their node
            resume = planned(incident, row.policy, "resume", row.target, reason, t, node=node, decision=decision)
            self.audit.add(resume)
            plans.append(Plan(resume, execute))
        return plans


__all__ = ["AFTER_CHECKPOINT", "AFTER_JOBS_END", "WHY", "Plan", "Planner", "matches"]
