"""Doing what a plan says, and settling what a SIGKILL interrupted.

- Slurm, through its CLI as a site's admin host runs it: `scontrol update NodeName=N State=DRAIN
  Reason="..."` and `State=RESUME`; `scontrol show node -o N` to read the state back. (slurmrestd
  22.05's v0.0.38 has no node update; v0.0.39 and later take `POST /slurm/v0.0.NN/node/{name}`.)
  Before the update the scheduler is asked what N means (`scontrol show node -o N`): only where
  it answers exactly one record, named N, is N updated. A name Slurm expands (`ALL`, a slurm.conf
  NodeSet, which 22.05.8's `show node` answers "not found" while `update` drains the whole set)
  never reaches an update: the plan is held (`blocked`) and paged, so the breaker only ever
  admits the one node it counted.
  What changed is read back, not assumed: exactly one record for N in the state asked for, and
  the whole cluster's drained nodes before and after, so that an update which changed more than
  N (however it came to) is counted against the breaker and paged.
- A site command (reset a GPU, reboot a node, open a ticket, route around a link) as an argv
  template, `{node}`, `{target}`, `{incident}` and `{reason}` filled in, never through a shell:
  the service holds no BMC credentials, the site's command does. `{node}` is the node the
  topology places the target in (the plan's row carries it), never a piece of the target's id.

Every name an executor puts on a command line or in a URL is one the id grammar (vocab.ids)
accepts: Slurm reads "n[0000-0015]" or "n1 n2,n3" as many nodes, a command reads "-rf" as an
option. `Actor.run` checks before any executor starts, and each executor checks again (they are
called directly too); a refused name is held (decision `blocked`) with the rule, and paged.

`Actor.run` marks a plan `executing` (committed) before the executor starts and `done`/`failed`
after. `Actor.settle` on start finds what was `executing` when the daemon died: a drain or resume
is read back from Slurm (done if the node is in the state with our reason, else planned again and
redone, the operation being idempotent); a site command cannot be read back, so it is never run
twice: it is marked failed, "interrupted", and a person is paged."""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from act.audit import AuditLog, Row, plan_id
from act.planner import IN_A_NODE, NODE_ACTIONS, Plan
from act.policy import command_fields
from vocab.ids import InvalidIdError, check_entity, check_job, check_node, node_refusal, shown

log = logging.getLogger(__name__)


class ActionError(RuntimeError):
    """An action that did not happen (or not as planned); the message says why. `nodes`: the
    nodes the scheduler reports the attempt changed, where it was read back (an update that
    failed its check may still have changed some)."""

    def __init__(self, message: str, nodes: frozenset[str] | None = None) -> None:
        super().__init__(message)
        self.nodes = nodes


class RefusedError(ActionError):
    """A name the grammar refuses: nothing was run."""


@dataclass(frozen=True)
class Acted:
    """What an executor that can read back did: the detail for the audit log, and the nodes the
    scheduler reports the action changed (the planned node, and any other it took with it)."""

    detail: str
    nodes: frozenset[str]


class Executor(Protocol):
    # what happened, for the audit log (with the nodes changed, where read back); raises ActionError
    def run(self, row: Row) -> str | Acted: ...

    def confirmed(self, row: Row) -> bool | None: ...  # whether it took effect (None: cannot say)


def node_of_row(row: Row) -> str | None:
    """The node a plan acts on, as the topology named it when it was planned; for a drain or a
    resume logged before rows named their node, the target (which was the node)."""
    if row.node is not None:
        return row.node
    return row.target if row.action in NODE_ACTIONS else None


def acted_on(row: Row) -> str:
    """The one node `row` acts on, checked by the grammar; RefusedError otherwise."""
    node = node_of_row(row)
    if node is None:
        raise RefusedError(f"{row.action} {shown(row.target)}: the topology places it in no node")
    if row.action in NODE_ACTIONS and node != row.target:
        # a drain's target is its node; anything else is a row not written by the planner
        raise RefusedError(f"{row.action} of {shown(row.target)} names node {shown(node)}: not one node")
    try:
        return check_node(node)
    except InvalidIdError as exc:
        raise RefusedError(f"{row.action} {shown(row.target)}: {exc}") from None


def refusal(row: Row) -> str | None:
    """Why no executor may act on `row`, or None: its target outside the grammar, or a node (the
    topology's, on the row) outside it or missing for an action on a node or a part of one."""
    try:
        if row.action in IN_A_NODE or row.node is not None:
            acted_on(row)  # first: a node's own rule says more than an entity's
        if row.action == "requeue":
            check_job(row.target)  # a job id, not an entity
            return None
        check_entity(row.target)
    except InvalidIdError as exc:
        return f"refused: {exc}"
    except RefusedError as exc:
        return f"refused: {exc}"
    return None


def parse_node(text: str) -> dict[str, str]:
    """`scontrol show node` (one line with -o, or the indented block): Key=Value pairs, the
    Reason last and running to the end (it holds spaces), without its " [user@time]" stamp."""
    flat = " ".join(text.split())
    head, _, reason = flat.partition(" Reason=")
    fields = dict(part.split("=", 1) for part in head.split() if "=" in part)
    if reason:
        fields["Reason"] = reason.rsplit(" [", 1)[0]
    return fields


class SlurmCli:
    def __init__(self, env: Mapping[str, str] | None = None, scontrol: str = "scontrol") -> None:
        self.env = {**os.environ, **(env or {})}
        self.scontrol = scontrol

    def _completed(self, *argv: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.scontrol, *argv], env=self.env, capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ActionError(f"scontrol {shlex.join(argv)}: {exc}") from None

    def _run(self, *argv: str) -> str:
        done = self._completed(*argv)
        if done.returncode != 0:
            # scontrol says some refusals on stdout ("Node x not found"), others on stderr
            said = (done.stderr.strip() or done.stdout.strip())[-300:]
            raise ActionError(f"scontrol {shlex.join(argv)} failed ({done.returncode}): {said}")
        return done.stdout

    def node(self, node: str) -> dict[str, str]:
        """The one record Slurm holds for `node` (`scontrol show node -o NODE`); ActionError when
        it answers none, several, or another node's (a name it read as a host list)."""
        if problem := node_refusal(node):
            raise RefusedError(f"node {shown(node)}: {problem}")
        records = [parse_node(line) for line in self._run("show", "node", "-o", node).splitlines() if line.strip()]
        names = [r.get("NodeName", "?") for r in records]
        if names != [node]:
            raise ActionError(
                f"scontrol show node -o {node} answered {len(records)} records ({', '.join(names[:5])}), not {node}'s"
            )
        return records[0]

    def names(self, name: str) -> list[str]:
        """The nodes Slurm's `show node` reads `name` as ([] where it knows no such node): asked
        before an update, so that a name it expands is refused rather than acted on."""
        if problem := node_refusal(name):
            raise RefusedError(f"node {shown(name)}: {problem}")
        done = self._completed("show", "node", "-o", name)
        if done.returncode != 0:
            # 22.05.8 answers a name it holds no record under with "Node NAME not found", exit 1
            if f"Node {name} not found" in done.stdout + done.stderr:
                return []
            said = (done.stderr.strip() or done.stdout.strip())[-300:]
            raise ActionError(f"scontrol show node -o {name} failed ({done.returncode}): {said}")
        return [parse_node(line).get("NodeName", "?") for line in done.stdout.splitlines() if line.strip()]

    def _one_node(self, node: str, action: str) -> None:
        """RefusedError unless Slurm reads `node` as that one node and no other."""
        names = self.names(node)
        if names != [node]:
            listed = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            means = f"{len(names)} nodes ({listed})" if names else "no node"
            raise RefusedError(
                f"{action} {node}: `scontrol show node -o {node}` reads it as {means}, not as that one node; "
                "nothing was updated"
            )

    def drained(self) -> dict[str, str]:
        """Every node Slurm has drained or is draining, with its reason (`scontrol show node -o`,
        all nodes): the census an update is judged by."""
        out = {}
        for line in self._run("show", "node", "-o").splitlines():
            fields = parse_node(line) if line.strip() else {}
            if "DRAIN" in fields.get("State", "") and "NodeName" in fields:
                out[fields["NodeName"]] = fields.get("Reason", "")
        return out

    def job(self, job: str) -> dict[str, str]:
        """The one record Slurm holds for a job (`scontrol show job -o JOB`)."""
        try:
            check_job(job)
        except InvalidIdError as exc:
            raise RefusedError(str(exc)) from None
        records = [parse_node(line) for line in self._run("show", "job", "-o", job).splitlines() if line.strip()]
        if len(records) != 1:
            raise ActionError(f"scontrol show job -o {job} answered {len(records)} records")
        return records[0]

    def job_state(self, job: str) -> str | None:
        """A job's state (RUNNING, PENDING, ...), None where Slurm no longer knows it."""
        try:
            return self.job(job).get("JobState")
        except ActionError:
            return None

    def requeue(self, row: Row) -> str:
        """`scontrol requeue JOB` for a job still running on a drained node (right after its
        checkpoint: it loses only its restart); Slurm refuses a job submitted with --no-requeue
        (or under JobRequeue=0 without --requeue), and the plan fails with its words. Read back:
        the job is no longer RUNNING."""
        job = row.target
        if not re.fullmatch(r"[0-9]+(_[0-9]+)?", job):  # a Slurm job id (an array's task: 123_4)
            raise RefusedError(f"requeue {shown(job)}: not a Slurm job id")
        before = self.job(job).get("JobState", "")
        self._run("requeue", job)
        after = self.job(job).get("JobState", "")
        if after == "RUNNING":
            raise ActionError(f"requeue {job}: read back, Slurm still shows it RUNNING")
        return f"job {job} requeued ({before} -> {after}, read back)"

    def run(self, row: Row) -> Acted | str:
        if row.action == "requeue":
            return self.requeue(row)
        return self._node_action(row)

    def _node_action(self, row: Row) -> Acted:
        node = acted_on(row)
        if row.action not in ("drain", "resume", "cordon"):
            raise ActionError(f"Slurm does not {row.action}")
        self._one_node(node, row.action)  # asked first: a name Slurm expands is never updated
        before = self.drained()
        # Slurm's DRAIN is a cordon: no new job lands, the running ones go on (DRAINING); a cordon
        # and the drain after the checkpoint are the same update, with the same reason
        if row.action in ("drain", "cordon"):
            self._run("update", f"NodeName={node}", "State=DRAIN", f"Reason={row.reason}")
        else:
            self._run("update", f"NodeName={node}", "State=RESUME")
        after = self.drained()
        if row.action in ("drain", "cordon"):  # drained with our reason now, and not before
            changed = {n for n, why in after.items() if why == row.reason and before.get(n) != row.reason}
        else:  # drained before, not now
            changed = set(before) - set(after)
        try:
            took = self._took(row, self.node(node))
        except ActionError as exc:  # what changed is known all the same: the breaker counts it
            raise ActionError(str(exc), frozenset(changed)) from None
        nodes = frozenset(changed | ({node} if took else set()))
        if not took:
            raise ActionError(f"{row.action} {node}: read back, Slurm does not show it {row.action}ed", nodes)
        return Acted(f"{node} {row.action}ed (read back)", nodes)

    @staticmethod
    def _took(row: Row, state: Mapping[str, str]) -> bool | None:
        flags = state.get("State", "")
        if row.action in ("drain", "cordon"):
            return "DRAIN" in flags and state.get("Reason", "") == row.reason
        if row.action == "resume":
            return "DRAIN" not in flags
        return None

    def confirmed(self, row: Row) -> bool | None:
        if row.action == "requeue":
            return None if (state := self.job_state(row.target)) is None else state != "RUNNING"
        return self._took(row, self.node(acted_on(row)))


class SiteCommand:
    def __init__(self, argv: Sequence[str], timeout_s: float = 300.0) -> None:
        if not argv:
            raise ValueError("a site command needs at least the program")
        self.argv, self.timeout_s = list(argv), timeout_s
        self.fields = command_fields(self.argv)  # ValueError for "{node[0]}" and the like

    def names_node(self) -> bool:
        return "node" in self.fields

    def run(self, row: Row) -> str:
        try:
            target = check_entity(row.target)
        except InvalidIdError as exc:
            raise RefusedError(str(exc)) from None
        # the topology's node (carried on the row), checked; a command that names it cannot run
        # without one, and a target's id is never cut apart to guess it
        node = acted_on(row) if self.names_node() or row.node is not None else ""
        values = {
            "node": node,
            "target": target,
            "incident": row.incident_id,
            "reason": row.reason,
            "action": row.action,
        }
        try:
            argv = [part.format_map(values) for part in self.argv]
        except (KeyError, ValueError, IndexError, AttributeError) as exc:
            raise ActionError(
                f"the site command {self.argv!r} names {exc}, which is not one of {sorted(values)}"
            ) from None
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ActionError(f"{shlex.join(argv)}: {exc}") from None
        if done.returncode != 0:
            raise ActionError(f"{shlex.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-300:]}")
        return f"{shlex.join(argv)}: {done.stdout.strip()[-300:]}"

    def confirmed(self, row: Row) -> bool | None:
        return None  # a reboot or a reset cannot be read back: never run twice on a guess


class Webhook:
    """POSTs the plan as JSON ({"plan_id", "incident_id", "action", "target", "reason", "policy"})
    to a site's endpoint (a ticketing system, a fabric manager's route-around hook); any 2xx is
    done. The plan id lets the receiver drop a repeat."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url, self.timeout_s = url, timeout_s

    def run(self, row: Row) -> str:
        import requests

        body = {
            "plan_id": row.plan_id,
            "incident_id": row.incident_id,
            "action": row.action,
            "target": row.target,
            "reason": row.reason,
            "policy": row.policy,
        }
        try:
            response = requests.post(self.url, json=body, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise ActionError(f"POST {self.url}: {exc}") from None
        if not 200 <= response.status_code < 300:
            raise ActionError(f"POST {self.url}: {response.status_code} {response.text[:200]}")
        return f"POST {self.url}: {response.status_code}"

    def confirmed(self, row: Row) -> bool | None:
        return None  # the receiver alone knows; it is told the plan id to drop a repeat


class Actor:
    """Runs the plans a Planner made that may run, with the executor for each action type."""

    def __init__(self, audit: AuditLog, executors: Mapping[str, Executor], page: Callable[[str], None]) -> None:
        self.audit, self.executors, self.page = audit, executors, page

    def take(self, plans: Sequence[Plan], at: float | None = None) -> None:
        for plan in plans:
            row = plan.row
            log.info(
                "plan %s: %s %s for %s: %s %s",
                row.plan_id,
                row.action,
                row.target,
                row.incident_id,
                row.decision,
                row.detail,
            )
            if plan.page:
                self.page(plan.page)
            if row.decision == "at_checkpoint":
                self.audit.move(row.plan_id, "waiting", row.detail)  # act.loop runs it after the checkpoint
                continue
            if not plan.execute:
                self.audit.move(row.plan_id, "held", row.detail)
                continue
            self.run(row, at if at is not None else row.event_time)

    def run(self, row: Row, at: float | None = None) -> None:
        refused = refusal(row)
        if refused:  # no executor sees a name the grammar refuses
            self._refuse(row, refused)
            return
        executor = self.executors.get(row.action)
        if executor is None:
            self.audit.move(row.plan_id, "failed", f"no executor configured for {row.action}")
            self.page(f"{row.action} {row.target} for {row.incident_id}: no executor configured")
            return
        self.audit.move(row.plan_id, "executing", at=at)  # committed before anything is done
        try:
            result = executor.run(row)
        except RefusedError as exc:
            self._refuse(row, f"refused: {exc}")
            return
        except Exception as exc:  # whatever went wrong, it is recorded, paged, and not left "executing"
            self.audit.move(row.plan_id, "failed", str(exc))
            self.page(f"{row.action} {row.target} for {row.incident_id} failed: {exc}")
            if isinstance(exc, ActionError) and exc.nodes:
                self._overreach(row, exc.nodes, at, planned_done=False)
            return
        if isinstance(result, Acted):
            self.audit.move(row.plan_id, "done", result.detail)
            self._overreach(row, result.nodes, at, planned_done=True)
        else:
            self.audit.move(row.plan_id, "done", result)

    def _refuse(self, row: Row, why: str) -> None:
        self.audit.move(row.plan_id, "held", why, decision="blocked")
        self.page(f"{row.action} {shown(row.target)} for {row.incident_id} not done: {why}")

    def _overreach(self, row: Row, nodes: frozenset[str], at: float | None, planned_done: bool) -> None:
        """The scheduler reports that an action changed nodes its plan does not account for: each
        is logged as taken out of service by this incident (the breaker counts it; the
        incident's resolution resumes it), and a person is told. A plan that failed its read-back
        accounts for none of them, not even its own node."""
        extra = sorted(nodes - {node_of_row(row)}) if planned_done else sorted(nodes)
        if not extra:
            return
        if row.action in ("drain", "reboot"):
            for other in extra:
                why = (
                    f"{row.action}ed along with {row.target} by one {row.action}: not planned as such,"
                    " read back from the scheduler"
                )
                self.audit.add(
                    Row(
                        plan_id(row.incident_id, row.policy, f"{row.action}, read back", other),
                        row.incident_id,
                        row.policy,
                        row.action,
                        other,
                        row.reason,
                        "unplanned",
                        "done",
                        None,
                        why,
                        row.event_time,
                        at if at is not None else row.event_time,
                        node=other,
                    )
                )
        listed = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
        self.page(
            f"{row.action} {row.target} for {row.incident_id} changed {len(nodes)} nodes, not one: "
            f"{listed} (counted against the breaker); check them by hand"
        )

    def settle(self) -> None:
        """What was under way when the daemon stopped: planned to run but not started (run it
        now), or executing (done once, or not at all and done now; never twice)."""
        for row in self.audit.rows("planned"):
            if row.decision == "execute":
                self.run(row)
            else:
                self.audit.move(row.plan_id, "held", row.detail)
        for row in self.audit.rows("executing"):
            if row.action == "check":
                continue  # a health check changes nothing: act.remediation runs it again
            executor = self.executors.get(row.action)
            try:
                took = executor.confirmed(row) if executor is not None else None
            except ActionError as exc:
                took = None
                log.warning("cannot read back %s %s: %s", row.action, row.target, exc)
            if took:
                self.audit.move(row.plan_id, "done", "confirmed after a restart")
            elif took is False:
                self.run(row)  # it did not happen: now, once
            else:
                self.audit.move(row.plan_id, "failed", "interrupted: unknown whether it ran; not run again")
                self.page(f"{row.action} {row.target} for {row.incident_id} was interrupted: check it by hand")


__all__ = [
    "Acted",
    "ActionError",
    "Actor",
    "Executor",
    "RefusedError",
    "SiteCommand",
    "SlurmCli",
    "Webhook",
    "acted_on",
    "node_of_row",
    "parse_node",
    "refusal",
]
