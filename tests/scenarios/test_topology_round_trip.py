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


def test_a_cable_moved_to_another_rails_leaf_and_a_link_at_half_width_are_the_only_findings(
    recorded: Path, tmp_path: Path
) -> None:
    """The generated fabric, cabled wrong twice: n00005's rail-3 HCA on rail 2's leaf (a free port
    of it), and n00009's rail-0 link trained at 2x. Both are reported, with the entity and the fix,
    and nothing else is."""
    lines = (recorded / "site" / "fabric.ibnetdiscover").read_text().splitlines()
    rail2 = next(line for line in lines if line.endswith("- 'leaf-p0-r2' )") and line.startswith("CA"))
    leaf2_guid = rail2.split()[10]  # CA lid port guid width speed - SW lid port guid ( ... )
    out = []
    for original in lines:
        line = original
        if "( 'n00005 mlx5_3' - 'leaf-p0-r3' )" in line:
            fields = line.split()
            fields[9], fields[10] = "60", leaf2_guid  # port 60 of rail 2's leaf
            line = " ".join(fields[:11]) + " ( 'n00005 mlx5_3' - 'leaf-p0-r2' )"
        if "( 'n00009 mlx5_0' - " in line:
            line = line.replace(" 4x NDR ", " 2x NDR ", 1)
        out.append(line)
    fabric = tmp_path / "fabric.txt"
    fabric.write_text("\n".join(out) + "\n")
    report = tmp_path / "report.json"
    assert main(["topology", "import", "--ibnetdiscover", str(fabric), "--out", str(tmp_path / "t.json"),
                 "--report", str(report)]) == 0  # fmt: skip
    findings = {(f["kind"], f["entity"]): f for f in json.loads(report.read_text())["findings"]}
    # one finding per physical problem: the moved cable (its leaf is not blamed again as "mixed")
    assert set(findings) == {("wrong_rail", "n00005-nic3"), ("degraded_link", "link-n00009-nic0")}
    assert findings[("wrong_rail", "n00005-nic3")]["fix"] == "move its cable to a leaf of rail 3"
    assert "2xNDR" in findings[("degraded_link", "link-n00009-nic0")]["message"]
