"""The faults operators chase that raise no Xid and trip no error counter (issue 29), each alone
on a generated cluster with a healthy fleet's everyday noise: one incident, at the injected root,
of the injected kind, with the registry's action and the evidence that names it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from aiops.pipeline import run_folder
from rca.evaluate import latest_states
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation
from vocab import registry

pytestmark = pytest.mark.slow

# per kind, the metrics one of which the first state's evidence must show
EVIDENCE = {
    "gpu_pcie_downtrained": {"DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH"},
    "gpu_nvlink_down": {"nvlink_links_up"},
    "nvswitch_fabric_manager": {"DCGM_FI_DEV_FABRIC_MANAGER_STATUS"},
    "gpu_lost": {"silent"},
    "gpu_row_remap_pending": {"DCGM_FI_DEV_ROW_REMAP_PENDING"},
    "ib_link_degraded": {"link_width", "link_rate_gbps"},
    "ib_link_errors": {"link_error_recovery", "symbol_error", "port_rcv_errors"},
}


def _states(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "incidents.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", sorted(EVIDENCE))
def test_one_quiet_fault_is_one_incident_of_its_kind_with_its_action(tmp_path: Path, kind: str) -> None:
    gen = Generation(GenConfig(realism="typical", gpus=256, hours=2, interval=30, seed=2901, faults=f"{kind}=1"))
    [fault] = cast(list[dict[str, Any]], gen.truth())
    write_folder(gen, tmp_path / "run")
    run_folder(tmp_path / "run", tmp_path / "out", 30)
    states = [s for s in _states(tmp_path / "out") if s["status"] != "warning"]
    latest = [dict(i) for i in latest_states(states)]
    assert len(latest) == 1, [(i["root_cause"], i["opened"] - fault["onset"]) for i in latest]
    [incident] = latest
    first = next(s for s in states if s["incident_id"] == incident["incident_id"])
    assert first["root_cause"]["entity"] == fault["root"], first["candidates"]
    assert first["root_cause"]["kind"] == kind
    assert incident["action"] == registry.action(kind)
    assert incident["severity"] in ("minor", "major", "critical")
    assert fault["onset"] <= incident["opened"] <= fault["onset"] + 90, "opened within three ticks of onset"
    assert EVIDENCE[kind] & {e["metric"] for e in first["evidence"]}, first["evidence"]
    if fault["jobs"]:
        assert set(fault["jobs"]) & set(incident["jobs"]), "the blast radius names the job it hit"


def test_a_fabric_manager_failure_hits_the_job_on_its_node(tmp_path: Path) -> None:
    """The node's GPUs cannot reach each other over NVLink: the job on the node hangs, and the
    incident names it with the node's eight GPUs."""
    gen = Generation(
        GenConfig(realism="clean", gpus=256, hours=2, interval=30, seed=2902, faults="nvswitch_fabric_manager=1")
    )
    [fault] = cast(list[dict[str, Any]], gen.truth())
    write_folder(gen, tmp_path / "run")
    run_folder(tmp_path / "run", tmp_path / "out", 30)
    [incident] = [dict(i) for i in latest_states(_states(tmp_path / "out"))]
    assert incident["root_cause"]["entity"] == fault["root"]
    assert fault["jobs"], "a job ran on the node"
    gpus = {f"{fault['root']}-gpu{g}" for g in range(8)}
    assert gpus <= set(incident["affected"])
    assert set(fault["jobs"]) <= set(incident["jobs"])
