"""`aiops bench goodput`'s figures: every seed's history recorded, acted on in every mode and
costed, then summed into one table (GPU-hours lost, wrong drains, ETTR, self-healing, MTTR) and
the JSON report `--out` writes."""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from act.audit import RemediationRecord, Row
from aiops.progress_bar import Progress
from benchmarks.goodput.cost import LLAMA3_RATE, ModeCost, Outcome, big_job_ettr, cost_of, fleet_ettr, outcomes
from benchmarks.goodput.histories import Tape, record
from benchmarks.goodput.runner import MODES, REBOOT_FIXES, run_modes

COLUMNS = (
    "mode",
    "fleet GPU-h lost /1k GPU-days",
    "saved",
    "wrong drains",
    "wrong GPU-h",
    "returned broken",
    "ETTR {big}k job",
    "per seed",
    "fleet ETTR",
    "per seed ",
    "self-healed",
    "of fixable",
    "MTTR job",
    "MTTR node back",
    "to a person",
)


@dataclass
class Measured:
    """What every mode cost over the seeds' histories: summed, and per seed where the table
    shows each seed's figure."""

    totals: dict[str, ModeCost] = field(default_factory=lambda: {m: ModeCost() for m in MODES})
    outcomes: dict[str, list[Outcome]] = field(default_factory=lambda: {m: [] for m in MODES})
    seed_ettr: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: {m: [] for m in MODES})
    per_seed: dict[str, dict[str, float]] = field(default_factory=dict)  # seed -> mode -> GPU-hours lost
    gpu_days: float = 0.0
    faults: int = 0


def measure(args: argparse.Namespace) -> Measured:
    """Each seed's history recorded (or read from `--cache`), acted on in every mode, costed."""
    measured = Measured()
    with (
        tempfile.TemporaryDirectory(prefix="aiops-goodput-") as work,
        Progress(
            len(args.seeds) * round(args.hours * 3600 / args.interval), "aiops bench goodput", "ticks"
        ) as progress,
    ):
        for seed in args.seeds:
            tape = record(seed, args, progress.advance)
            _cost_seed(measured, seed, tape, run_modes(tape, args, Path(work)), args)
    return measured


def _cost_seed(
    measured: Measured,
    seed: int,
    tape: Tape,
    acted: dict[str, tuple[list[Row], list[RemediationRecord]]],
    args: argparse.Namespace,
) -> None:
    from rca.graph import TopologyGraph

    graph = TopologyGraph.from_json(tape.topology)

    def node_of(entity: str) -> str | None:
        return graph.node_of(entity) if entity in graph else None

    seed_met: list[Outcome] = []
    t0 = min((t for _, t, _ in tape.calls), default=0.0)
    measured.faults += len(tape.truth)
    seed_days = args.gpus * args.hours / 24
    for mode in MODES:
        rows, records = acted[mode]
        c = cost_of(
            mode if mode != "validation" else "predictions",
            tape.truth,
            rows,
            tape.jobs,
            node_of,
            args.restart_s,
            args.human_s,
            args.horizon_h * 3600,
            tape.write_s,
            tape.per_node,
            tape.t_end,
            records,
        )
        measured.totals[mode].add(c, seed)
        seed_outs = outcomes(mode, tape.truth, rows, records, node_of, t0, args)
        if mode == "failures":  # the faults as a job meets them (MODES puts it before predictions)
            seed_met = seed_outs
        measured.outcomes[mode] += seed_outs
        measured.per_seed.setdefault(str(seed), {})[mode] = c.gpu_s / 3600
        measured.seed_ettr[mode].append(
            (big_job_ettr(seed_outs, c.wrong, seed_days, args, met=seed_met), fleet_ettr(c.gpu_s, seed_days))
        )
    measured.gpu_days += seed_days


def _table(args: argparse.Namespace, measured: Measured) -> Table:
    table = Table(
        title=f"aiops bench goodput: {len(args.seeds)} histories of {args.gpus:,} GPUs × {args.hours:g} h "
        f"at {args.interval:g} s (seeds {', '.join(map(str, args.seeds))}), {measured.faults} faults "
        f"({args.faults or 'the Llama 3 rate'}), {measured.gpu_days:,.0f} GPU-days",
        caption=(
            f"fleet: GPU-hours lost per 1,000 GPU-days, each interrupted job's GPUs × (time since its last checkpoint"
            f" + {args.restart_s:g} s restart); none: a person drains a failed node {args.human_s:g} s after. "
            "Returned broken: nodes put back with a job-killing fault no step fixed, the next job on each failing "
            "at its start (a restart). "
            f"ETTR: one {args.big_gpus:,}-GPU job, checkpoint every {args.big_ckpt_s / 60:g} min, restart "
            f"{args.restart_s / 60:g} min, spares, at the Llama 3 rate ({LLAMA3_RATE:.2f} per 1,000 GPU-days); "
            "per seed, in seed order. Fleet ETTR: 1 - GPU-time lost / the fleet's GPU-time (every GPU, busy or not). "
            f"Self-heal: faults in a node put right and returned with no person (all; of kinds a reset or reboot "
            "fixes). MTTR: median onset -> the job running again; -> the node back, checked, with no person; "
            "faults that went to a person (a drained node waits for one without remediation), and the median time"
            " until then"
        ),
    )
    for col in COLUMNS:
        table.add_column(col.format(big=args.big_gpus // 1000), justify="right")
    return table


def _median(values: list[float]) -> float | None:
    v = sorted(values)
    return v[len(v) // 2] if v else None


def _minutes(v: float | None) -> str:
    return f"{v / 60:.1f} min" if v is not None else "-"


def _per_kind(outs: list[Outcome]) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for o in outs:
        k = kinds.setdefault(o.kind, {"faults": 0, "healed": 0, "ahead": 0, "job_back_s": [], "node_or_person_s": []})
        k["faults"] += 1
        k["healed"] += int(o.healed)
        k["ahead"] += int(o.ahead)
        if o.job_back_s is not None:
            k["job_back_s"].append(round(o.job_back_s))
        k["node_or_person_s"].append(round(o.node_back_s if o.node_back_s is not None else (o.person_s or 0.0)))
    return kinds


def _mode(mode: str, measured: Measured, args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    """One mode's row of the table, and its figures in the report."""
    t, outs, gpu_days = measured.totals[mode], measured.outcomes[mode], measured.gpu_days
    per = 1000.0 / gpu_days
    base = measured.totals["none"].gpu_s
    saved = 1 - t.gpu_s / base if base else 0.0
    ettr = big_job_ettr(outs, t.wrong, gpu_days, args, met=measured.outcomes["failures"])
    fleet = fleet_ettr(t.gpu_s, gpu_days)
    big_seeds, fleet_seeds = [b for b, _ in measured.seed_ettr[mode]], [f for _, f in measured.seed_ettr[mode]]
    fixable = [o for o in outs if o.kind in REBOOT_FIXES]
    healed = sum(o.healed for o in outs)
    healed_fixable = sum(o.healed for o in fixable)
    job = _median([o.job_back_s for o in outs if o.job_back_s is not None])
    node = _median([o.node_back_s for o in outs if o.node_back_s is not None])
    person = _median([o.person_s for o in outs if o.person_s is not None])
    row = [
        mode,
        f"{t.gpu_s / 3600 * per:,.1f}",
        f"{saved:.0%}" if mode != "none" else "",
        f"{t.wrong}",
        f"{t.wrong_gpu_s / 3600 * per:,.1f}",
        f"{t.returned_broken}",
        f"{ettr:.2%}",
        " / ".join(f"{v:.1%}" for v in big_seeds),
        f"{fleet:.2%}",
        " / ".join(f"{v:.2%}" for v in fleet_seeds),
        f"{healed}/{len(outs)}",
        f"{healed_fixable}/{len(fixable)}",
        _minutes(job),
        _minutes(node),
        f"{sum(o.person_s is not None for o in outs)}, {_minutes(person)}",
    ]
    figures = {
        "gpu_hours_per_1k_gpu_days": t.gpu_s / 3600 * per,
        "saved": saved,
        "interruptions": t.interruptions,
        "nodes_drained": len(t.nodes_out),
        "wrong_drains": t.wrong,
        "returned_broken": t.returned_broken,
        "blocked": t.blocked,
        "ettr_big_job": ettr,
        "ettr_big_job_per_seed": big_seeds,
        "ettr_fleet": fleet,
        "ettr_fleet_per_seed": fleet_seeds,
        "self_healed": healed,
        "faults_in_nodes": len(outs),
        "self_healed_fixable": healed_fixable,
        "fixable": len(fixable),
        "mttr_job_s": job,
        "mttr_node_back_s": node,
        "to_a_person": sum(o.person_s is not None for o in outs),
        "to_a_person_s": person,
        "per_kind": _per_kind(outs),
    }
    return row, figures


def bench_goodput(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """The bench: the table printed, the figures returned (what `--out` writes)."""
    measured = measure(args)
    report: dict[str, Any] = {"seeds": list(args.seeds), "gpus": args.gpus, "hours": args.hours, "modes": {}}
    if measured.per_seed:
        report["per_seed"] = measured.per_seed
    table = _table(args, measured)
    for mode in MODES:
        row, report["modes"][mode] = _mode(mode, measured, args)
        table.add_row(*row)
    console.print(table)
    report["gpu_days"], report["faults"] = measured.gpu_days, measured.faults
    return report


__all__ = ["Measured", "bench_goodput", "measure"]
