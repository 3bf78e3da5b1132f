"""Every acting mode over one tape: the policies of each (none, failures, predictions,
validation), a health check that passes as the generator's truth says (`TruthCheck`), and an
acting loop per mode, each with its own audit log and executors that only record what they
were asked to do."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from act.audit import RemediationRecord, Row
from act.costs import drain_break_even
from act.executors import Executor
from act.policy import ActConfig, parse
from act.remediation import CheckResult
from aiops.acting import act_loop
from benchmarks.goodput.histories import Tape
from vocab import registry

MODES = ("none", "failures", "predictions", "validation")
# failures that kill their job and sit in a node (a drain is the remedy; a leaf is routed around)
IN_A_NODE = {"gpu", "node", "psu", "nic", "optic", "nvswitch"}
FAILURE_KINDS = sorted(k for k, v in registry.KINDS.items() if v.kills_job and v.root in IN_A_NODE)


# the shipped policy's (config/actions.yml): a larger job is not killed on a prediction; its node
# is cordoned and the drain waits for a person (act.planner), so the job's next restart leaves it out
PREDICTED_MAX_JOB_GPUS = 1024
# the predicted kinds a drain can pay for (those that kill their job: act/costs.py), and the
# smallest job's break-even with the remediation loop (a wrong drain's node out for a check)
PREDICTED_KILLING = sorted(k for k, v in registry.KINDS.items() if v.precursor and drain_break_even(k, 8) < 1.0)
DRAIN_AT = round(drain_break_even(PREDICTED_KILLING[0], 8), 2)


def policies(mode: str, max_nodes: int, max_fraction: float) -> ActConfig:
    rules: list[dict[str, Any]] = [
        {
            "name": "drain-failed",
            "match": {"source": "incident", "kinds": FAILURE_KINDS},
            "action": {"type": "drain"},
            "execute": True,
        }
    ]
    if mode in ("predictions", "validation"):
        # the threshold follows the cost model (act/costs.py): a kind that kills its job is worth
        # a drain at the next checkpoint above the break-even of the smallest job (8 GPUs: 0.57); one
        # that does not (a thermal slowdown, a cooling loop) saves nothing the model counts by a
        # drain, so its warnings are watched, not acted on
        rules.append(
            {
                "name": "drain-predicted",
                "match": {"source": "prediction", "kinds": PREDICTED_KILLING, "min_probability": DRAIN_AT},
                "action": {"type": "drain", "when": "checkpoint", "max_job_gpus": PREDICTED_MAX_JOB_GPUS},
                "execute": True,
            }
        )
    if mode == "validation":
        rules.append(
            {
                "name": "remediate-degraded",
                # parts that degrade without stopping the job and that a reset or reboot puts right:
                # cordoned now, remediated once the node's jobs end (no restart for them)
                "match": {"source": "incident", "kinds": DEGRADED_FIXABLE},
                "action": {"type": "drain", "when": "job_end", "max_wait_s": 24 * 3600.0},
                "execute": True,
            }
        )
    config: dict[str, Any] = {
        "dry_run": False,
        "breaker": {"max_nodes": max_nodes, "max_fraction": max_fraction},
        "policies": rules,
    }
    if mode == "validation":  # the checks are the generator's truth (TruthCheck), set in run_modes
        config["remediation"] = {"execute": True, "checks": [["truth"]], "reboot_wait_s": REBOOT_S}
    return parse(config)


# What each step of the remediation ladder takes, for the clocks (stated operational figures,
# not measured here): a reboot of an HGX node 10 min (POST, BMC, driver, fabric manager; the
# machine waits `reboot_wait_s` for it), a GPU reset 1 min (nvidia-smi -r once the GPU is idle),
# a health check 5 min (dcgmi diag -r 2, "medium", minutes on 8 GPUs, then an NCCL all-reduce)
REBOOT_S, RESET_S, CHECK_S = 600.0, 60.0, 300.0
# What puts each kind right, as the generator's truth stands for it (a health check fails from
# the fault's precursor, or its onset, until it is put right): read from NVIDIA's Xid catalog's
# immediate action for the Xid each kind shows (vocab/xid_catalog.tsv): Xid 48/64 (HBM) and 74
# (NVLink), 119 (GSP) RESET_GPU; Xid 79 (off the bus) RESTART_BM; Xid 45 (fabric manager) a
# restart of the fabric manager, which a reboot does. A reboot also does what a reset does.
# Anything else (a PSU, an optic, a cable, a thermal interface) is hardware: a person.
RESET_FIXES = frozenset({"gpu_hbm_ecc", "gpu_row_remap_pending", "gpu_nvlink", "gpu_nvlink_down", "gpu_fault"})
REBOOT_FIXES = RESET_FIXES | {"gpu_fell_off_bus", "gpu_lost", "nvswitch_fabric_manager"}
DEGRADED_FIXABLE = sorted(
    k for k in REBOOT_FIXES if not registry.KINDS[k].kills_job and registry.KINDS[k].root in IN_A_NODE
)


class TruthCheck:
    """A health check that passes or fails as the generator's truth says: a node fails from the
    start (precursor or onset) of a fault in it until a step that fixes the fault's kind was done
    on it after that start, or, for a kind no step fixes, for good."""

    def __init__(self, faults: list[dict[str, Any]], node_of: Callable[[str], str | None]) -> None:
        self.faults: dict[str, list[dict[str, Any]]] = {}
        for f in faults:
            node = node_of(f["root"])
            if node is not None:
                self.faults.setdefault(node, []).append(f)
        self.done: dict[str, list[tuple[float, str]]] = {}  # node -> (when, step)
        self.now = 0.0

    @staticmethod
    def start(f: dict[str, Any]) -> float:
        pre = f.get("precursor_start")
        return float(pre) if pre is not None else float(f["onset"])

    @classmethod
    def fixed(cls, f: dict[str, Any], steps: Sequence[tuple[float, str]], by: float) -> bool:
        """Whether a reset or reboot done on the fault's node after its start, by `by`, fixes its kind."""
        return any(
            cls.start(f) <= at <= by and f["kind"] in (RESET_FIXES if step == "reset_gpu" else REBOOT_FIXES)
            for at, step in steps
            if step in ("reset_gpu", "reboot")
        )

    def step(self, node: str, action: str) -> None:
        self.done.setdefault(node, []).append((self.now, action))

    def __call__(self, node: str) -> CheckResult:
        for f in self.faults.get(node, []):
            if self.start(f) > self.now:
                continue
            fixed = self.fixed(f, self.done.get(node, []), self.now)
            if not fixed:
                return CheckResult(False, f"{f['kind']} on {f['root']}")
        return CheckResult(True, "healthy")


class _Recorder:
    """Does nothing but tell the truth's health check which steps were done on which node."""

    def __init__(self, check: TruthCheck | None = None) -> None:
        self.check = check

    def run(self, row: Row) -> str:
        if self.check is not None and row.node is not None:
            self.check.step(row.node, row.action)
        return "recorded"

    def confirmed(self, row: Row) -> bool | None:
        return True


def run_modes(tape: Tape, args: argparse.Namespace, work: Path) -> dict[str, tuple[list[Row], list[RemediationRecord]]]:
    """Every acting mode over one tape, each with its own audit log; what each planned and did."""
    from rca.graph import TopologyGraph

    graph = TopologyGraph.from_json(tape.topology)

    def node_of(entity: str) -> str | None:
        return graph.node_of(entity) if entity in graph else None

    def jobs_on(node: str, t: float) -> dict[str, int]:
        return {
            i: j.gpus for i, j in zip(tape.job_ids, tape.jobs, strict=True) if node in j.nodes and j.start <= t < j.end
        }

    def job_ends(node: str, t: float) -> dict[str, float]:
        return {
            i: j.limit_end
            for i, j in zip(tape.job_ids, tape.jobs, strict=True)
            if node in j.nodes and j.start <= t < j.end and math.isfinite(j.limit_end)
        }

    out: dict[str, tuple[list[Row], list[RemediationRecord]]] = {"none": ([], [])}
    for mode in MODES[1:]:
        check = TruthCheck(tape.truth, node_of)
        recorder = _Recorder(check)
        executors: dict[str, Executor] = dict.fromkeys(("drain", "resume", "reset_gpu", "reboot", "ticket"), recorder)
        config = policies(mode, args.max_nodes, args.max_fraction)
        path = work / f"{mode}-{tape.seed}.sqlite"
        path.unlink(missing_ok=True)
        loop = act_loop(config, graph, path, lambda message, subject: None, executors, jobs_on, job_ends=job_ends)
        if loop.remediation is not None:
            loop.remediation.checks = [check]
        for what, t, payload in tape.calls:
            check.now = t
            if what == "tick":
                loop.tick(t, payload)
            else:
                loop.offer(payload, t)
        out[mode] = (loop.audit.rows(), loop.audit.remediation_all())
        loop.audit.close()
    return out


__all__ = ["CHECK_S", "MODES", "REBOOT_FIXES", "RESET_S", "TruthCheck", "policies", "run_modes"]
