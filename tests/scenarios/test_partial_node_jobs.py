"""Jobs that hold part of a node (a 4-GPU job on an 8-GPU node, two jobs sharing one, 28 GPUs on
four nodes), with and without the GPU indices from the scheduler: the GPUs no job holds open no
incident, and every fault is still found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiops.pipeline import run_folder
from rca.evaluate import evaluate_paths, latest_states
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation

pytestmark = pytest.mark.slow

FAULTS = "gpu_straggler=2,gpu_thermal=2,psu_failure=1,gpu_hbm_ecc=1,nic_link_flap=1"


def _held_gpus(events: list[dict[str, Any]], t: float) -> set[str]:
    """Every GPU some job held at t, as the generator planned it (its events with indices)."""
    ended = {e["job"]: e["time"] for e in events if e["type"] == "job_end"}
    held: set[str] = set()
    for e in events:
        if e["type"] in ("job_start", "job_running") and e.get("started", e["time"]) <= t < ended.get(e["job"], 1e18):
            held |= {f"{n}-gpu{i}" for n, ix in e["gpus_by_node"].items() for i in ix}
    return held


@pytest.mark.parametrize("indices", [True, False], ids=["gpu-indices", "nodes-only"])
def test_unheld_gpus_open_no_incident_and_every_fault_is_found(tmp_path: Path, indices: bool) -> None:
    config = GenConfig(gpus=512, hours=3, interval=30, seed=41, faults=FAULTS, job_shapes="gpus")
    gen = Generation(config)
    write_folder(gen, tmp_path / "run")
    planned = gen.workload.events(gpu_indices=True)
    partial = [e for e in planned if e["type"] != "job_end" and e["gpus"] % 8]  # type: ignore[operator]
    assert partial, "the history should hold jobs that do not fill their nodes"
    if not indices:
        stripped = [{k: v for k, v in e.items() if k != "gpus_by_node"} for e in gen.events()]
        assert stripped == [{k: v for k, v in e.items() if k != "gpus_by_node"} for e in planned]
        events_file = tmp_path / "run" / "events.jsonl"
        events_file.write_text("".join(json.dumps(e) + "\n" for e in stripped))
    run_folder(tmp_path / "run", tmp_path / "out", 30)
    result = evaluate_paths(tmp_path / "run" / "truth.jsonl", tmp_path / "out")
    table = result.format_table()
    assert result.overall.recall == 1.0, table
    assert result.false_positive_count == 0, (table, result.false_positives[:3])
    lines = (tmp_path / "out" / "incidents.jsonl").read_text().splitlines()
    injected = {str(f["root"]) for f in gen.truth()}
    for incident in latest_states(json.loads(line) for line in lines if line.strip()):
        root = incident["root_cause"]["entity"]
        if "-gpu" in root and root not in injected:  # a GPU blamed for no fault: not an idle one
            assert root in _held_gpus(planned, incident["opened"]), incident
