"""Doing what a plan says, and settling what a SIGKILL interrupted.

- Slurm, through its CLI as a site's admin host runs it: `scontrol update NodeName=N State=DRAIN
  Reason="..."` and `State=RESUME`; `scontrol show node -o N` to read the state back. (slurmrestd
  22.05's v0.0.38 has no node update; v0.0.39 and later take `POST /slurm/v0.0.NN/node/{name}`.)
- A site command (reset a GPU, reboot a node, open a ticket, route around a link) as an argv
  template, `{node}`, `{target}`, `{incident}` and `{reason}` filled in, never through a shell:
  the service holds no BMC credentials, the site's command does.

`Actor.run` marks a plan `executing` (committed) before the executor starts and `done`/`failed`
after. `Actor.settle` on start finds what was `executing` when the daemon died: a drain or resume
is read back from Slurm (done if the node is in the state with our reason, else planned again and
redone, the operation being idempotent); a site command cannot be read back, so it is never run
twice: it is marked failed, "interrupted", and a person is paged."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from act.audit import AuditLog, Row
from act.planner import Plan

log = logging.getLogger(__name__)


class ActionError(RuntimeError):
    """An action that did not happen; the message says why."""


class Executor(Protocol):
    def run(self, row: Row) -> str: ...  # what happened, for the audit log; raises ActionError

    def confirmed(self, row: Row) -> bool | None: ...  # whether it took effect (None: cannot say)


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

    def _run(self, *argv: str) -> str:
        try:
            done = subprocess.run(
                [self.scontrol, *argv], env=self.env, capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ActionError(f"scontrol {shlex.join(argv)}: {exc}") from None
        if done.returncode != 0:
            raise ActionError(f"scontrol {shlex.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def node(self, node: str) -> dict[str, str]:
        return parse_node(self._run("show", "node", "-o", node))

    def run(self, row: Row) -> str:
        if row.action == "drain":
            self._run("update", f"NodeName={row.target}", "State=DRAIN", f"Reason={row.reason}")
            return f"{row.target} drained"
        if row.action == "resume":
            self._run("update", f"NodeName={row.target}", "State=RESUME")
            return f"{row.target} resumed"
        raise ActionError(f"Slurm does not {row.action}")

    def confirmed(self, row: Row) -> bool | None:
        state = self.node(row.target)
        flags = state.get("State", "")
        if row.action == "drain":
            return "DRAIN" in flags and state.get("Reason", "") == row.reason
        if row.action == "resume":
            return "DRAIN" not in flags
        return None


class SiteCommand:
    def __init__(self, argv: Sequence[str], timeout_s: float = 300.0) -> None:
        if not argv:
            raise ValueError("a site command needs at least the program")
        self.argv, self.timeout_s = list(argv), timeout_s

    def run(self, row: Row) -> str:
        values = {
            "node": row.target.split("-")[0],
            "target": row.target,
            "incident": row.incident_id,
            "reason": row.reason,
            "action": row.action,
        }
        try:
            argv = [part.format_map(values) for part in self.argv]
        except (KeyError, ValueError) as exc:
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
        executor = self.executors.get(row.action)
        if executor is None:
            self.audit.move(row.plan_id, "failed", f"no executor configured for {row.action}")
            self.page(f"{row.action} {row.target} for {row.incident_id}: no executor configured")
            return
        self.audit.move(row.plan_id, "executing", at=at)  # committed before anything is done
        try:
            detail = executor.run(row)
        except Exception as exc:  # whatever went wrong, it is recorded, paged, and not left "executing"
            self.audit.move(row.plan_id, "failed", str(exc))
            self.page(f"{row.action} {row.target} for {row.incident_id} failed: {exc}")
            return
        self.audit.move(row.plan_id, "done", detail)

    def settle(self) -> None:
        """What was under way when the daemon stopped: planned to run but not started (run it
        now), or executing (done once, or not at all and done now; never twice)."""
        for row in self.audit.rows("planned"):
            if row.decision == "execute":
                self.run(row)
            else:
                self.audit.move(row.plan_id, "held", row.detail)
        for row in self.audit.rows("executing"):
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


__all__ = ["ActionError", "Actor", "Executor", "SiteCommand", "SlurmCli", "Webhook", "parse_node"]
