"""A generated run with the incidents the page tests look at (a leaf down, a PFC storm, a rack's
cooling, a PSU), run once per test session: its input, its output and its truth."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiops.pipeline import run_folder
from rca.evaluate import latest_states
from telemetry_gen.emit import write_folder
from telemetry_gen.faults import KINDS as FAULT_KINDS
from telemetry_gen.generator import GenConfig, Generation

KINDS = ("leaf_down", "pfc_storm", "rack_cooling", "psu_failure")
# every kind the generator injects (one of each on a fat tree: `--faults all=1`)
ALL_KINDS = tuple(FAULT_KINDS)


@dataclass
class ShownRun:
    input: Path
    out: Path
    truth: list[dict[str, Any]]
    incidents: list[dict[str, Any]]  # the latest state of each

    def of_kind(self, kind: str) -> dict[str, Any]:
        return next(i for i in self.incidents if i["root_cause"]["kind"] == kind and i["status"] != "warning")

    def of_fault(self, kind: str) -> dict[str, Any] | None:
        """The incident of the injected fault of this kind: one of its kind, else one rooted at
        the fault's root (None: the engine found none)."""
        found = [i for i in self.incidents if i["status"] != "warning"]
        roots = {f["root"] for f in self.truth if f["kind"] == kind}
        return next((i for i in found if i["root_cause"]["kind"] == kind), None) or next(
            (i for i in found if i["root_cause"]["entity"] in roots), None
        )


def make_run(folder: Path, config: GenConfig | None = None) -> ShownRun:
    gen = Generation(
        config
        or GenConfig(realism="clean", gpus=256, hours=2, interval=30, seed=5, faults=",".join(f"{k}=1" for k in KINDS))
    )
    write_folder(gen, folder / "in")
    run_folder(folder / "in", folder / "out", 30)
    lines = (folder / "out" / "incidents.jsonl").read_text().splitlines()
    incidents = [dict(i) for i in latest_states(json.loads(line) for line in lines if line.strip())]
    truth = [json.loads(line) for line in (folder / "in" / "truth.jsonl").read_text().splitlines() if line]
    return ShownRun(folder / "in", folder / "out", truth, incidents)


@pytest.fixture(scope="session")
def shown_run(tmp_path_factory: pytest.TempPathFactory) -> ShownRun:
    return make_run(tmp_path_factory.mktemp("shown-run"))


@pytest.fixture(scope="session")
def all_kinds_run(tmp_path_factory: pytest.TempPathFactory) -> ShownRun:
    """One fault of every kind on 512 GPUs over 4 hours (about a minute to generate and run)."""
    config = GenConfig(realism="clean", gpus=512, hours=4, interval=30, seed=4903, faults="all=1")
    return make_run(tmp_path_factory.mktemp("all-kinds-run"), config)
