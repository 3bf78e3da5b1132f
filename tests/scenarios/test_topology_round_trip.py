"""The importers against a topology whose truth is known: `aiops gen --site-formats` writes its
1,024-GPU fat-tree as a site's tools would describe it (ibnetdiscover -p, lldpcli JSON per host
and leaf, an inventory CSV), and importing that gives back the generated topology, entity for
entity and edge for edge; `aiops run` on the imported topology opens the same incidents."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aiops.cli import main

pytestmark = pytest.mark.slow

GEN = ["--gpus", "1024", "--hours", "1", "--interval", "30", "--seed", "41"]
FAULTS = ["--faults", "leaf_down=1,psu_failure=1,rack_cooling=1,nic_link_flap=1"]


def _shape(path: Path) -> tuple[dict[str, str], set[tuple[str, str, str]]]:
    data = json.loads(path.read_text())
    kinds = {n["id"]: n["kind"] for n in data["nodes"]}
    return kinds, {(e["source"], e["relation"], e["target"]) for e in data["links"]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("roundtrip") / "recorded"
    assert main(["gen", *GEN, *FAULTS, "--out", str(folder), "--site-formats"]) == 0
    return folder


@pytest.mark.parametrize("fabric", ["ibnetdiscover", "lldp"])
def test_importing_the_generated_site_gives_back_its_topology(recorded: Path, tmp_path: Path, fabric: str) -> None:
    site = recorded / "site"
    source = site / "fabric.ibnetdiscover" if fabric == "ibnetdiscover" else site / "lldp"
    out = tmp_path / "topology.json"
    argv = ["topology", "import", f"--{fabric}", str(source), "--inventory", str(site / "inventory.csv")]
    assert main([*argv, "--out", str(out), "--report", str(tmp_path / "report.json")]) == 0
    assert _shape(out) == _shape(recorded / "topology.json")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["findings"] == []  # a clean fabric: nothing to report
    assert report["counts"]["switches"] == {"leaf": 32, "spine": 16, "core": 0}


def test_a_run_on_the_imported_topology_opens_the_same_incidents(recorded: Path, tmp_path: Path) -> None:
    imported = tmp_path / "imported"
    shutil.copytree(recorded, imported, ignore=shutil.ignore_patterns("site", "truth.jsonl"))
    site = recorded / "site"
    argv = ["topology", "import", "--ibnetdiscover", str(site / "fabric.ibnetdiscover")]
    assert main([*argv, "--inventory", str(site / "inventory.csv"), "--out", str(imported / "topology.json")]) == 0
    for folder, out in ((recorded, tmp_path / "on-generated"), (imported, tmp_path / "on-imported")):
        assert main(["run", "--input", str(folder), "--out", str(out), "--no-predict"]) == 0
    generated = (tmp_path / "on-generated" / "incidents.jsonl").read_text()
    assert generated.strip()
    assert (tmp_path / "on-imported" / "incidents.jsonl").read_text() == generated
