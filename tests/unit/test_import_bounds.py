"""The topology importers' doors (issue 44, finding 6): every name through the id grammar, every
count, file and JSON depth bounded, duplicates reported; each hostile file of
tests/data/hostile/{ibnetdiscover,lldp,inventory-csv,netbox} refused with one line that names the
file, the place and the rule (exit status 2, nothing written), or imported with a finding.

Where memory is the attack (`gpus=50000000`, `n[0-999999999]`) the command runs in a child
process limited to 2 GiB of address space: before the bounds it grew to 21 GB, or ran 42 s into a
MemoryError."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiops.cli import main
from context.fabric import build
from context.hostlist import expand
from context.ibnetdiscover import read
from context.inventory import merge
from context.inventory import read as read_inventory
from context.lldp import fabric_from_lldp, read_neighbours
from vocab.bounds import MAX_HOSTS, json_depth

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests" / "data" / "hostile"
GIB = 1 << 30

_LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from aiops.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _limited(args: list[str], limit: int = 2 * GIB) -> subprocess.CompletedProcess[str]:
    """`aiops ...` in a child whose address space is capped: an importer that builds what a number
    in its input asks for dies of MemoryError (a traceback) instead of taking the machine."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", _LIMITED.format(limit=limit), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
        check=False,
    )


def _refused(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The command refuses: exit 2, nothing written, one line on stderr (returned)."""
    out = tmp_path / "topology.json"
    assert main(["topology", "import", *args, "--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def _fabric(tmp_path: Path) -> Path:
    """A small clean fabric for inventories to merge into: gpu001 and gpu002 on leaf01."""
    f = tmp_path / "fabric.txt"
    f.write_text(
        "".join(
            f"CA 10{h} 1 0x0c42a1030000000{h} 4x NDR - SW 10 {h} 0x0000000000001000 ( 'gpu00{h} mlx5_0' - 'leaf01' )\n"
            for h in (1, 2)
        )
    )
    return f


# --- hostlists ---------------------------------------------------------------------------------


def test_a_hostlist_of_a_billion_hosts_is_refused_by_its_count_before_one_is_built() -> None:
    """Before: `n[0-999999999]` ran 42 s into a MemoryError. Now it is counted (arithmetic) and
    refused at once, within 2 GiB."""
    code = (
        "from context.hostlist import expand\ntry:\n    expand('n[0-999999999]')\nexcept ValueError as e:\n    print(e)"
    )
    done = subprocess.run(
        [sys.executable, "-c", f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({GIB}, {GIB}))\n{code}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert "1,000,000,000 hosts" in done.stdout and "[bound hosts]" in done.stdout
    # products of groups count too, and the bound is inclusive
    with pytest.raises(ValueError, match=r"1,000,000 hosts"):
        expand("r[0-999]n[0-999]")
    assert len(expand(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS
    with pytest.raises(ValueError, match="runs backwards"):
        expand("n[9-1]")


def test_json_depth_is_measured_without_recursion() -> None:
    assert json_depth('{"a": [1, {"b": "]]]]["}]}') == 3  # brackets in strings are text
    assert json_depth(b"[" * 1_000_000) == 1_000_000
    assert json_depth('"\\"[["') == 0


# --- ibnetdiscover -----------------------------------------------------------------------------


def test_a_switch_guid_described_twice_is_a_finding_not_a_silent_win() -> None:
    """Before: the second block replaced the first (evil-leaf won, gpu666 joined the fabric)."""
    topology = build(read(HOSTILE / "ibnetdiscover" / "duplicate-switch-guid.txt"))
    dup = [f for f in topology.findings if f.kind == "duplicate_guid"]
    assert [f.entity for f in dup] == ["0xb8cef603006dba00"]
    assert "duplicate-switch-guid.txt:12" in dup[0].message and "first on line 5" in dup[0].message
    ids = {n["id"] for n in topology.nodes}
    assert "leaf01" in ids and "evil-leaf" not in ids and "gpu666" not in ids


def test_host_names_from_node_descriptions_pass_the_node_grammar_or_are_findings() -> None:
    """Before: `n[0000-0015] mlx5_0` made a node `n[0000-0015]` (sixteen nodes to Slurm)."""
    topology = build(read(HOSTILE / "ibnetdiscover" / "hostlist-node-descriptions.txt"))
    nodes = sorted(n["id"] for n in topology.nodes if n["kind"] == "node")
    assert nodes == ["gpu001"]
    refused = {f.entity: f.message for f in topology.findings if f.kind == "invalid_name"}
    assert len(refused) == 5 and all(e.startswith("H-") for e in refused)
    text = " ".join(refused.values())
    for rule in ("ids.node.hostlist", "ids.first", "ids.node.charset"):
        assert f"[rule {rule}]" in text
    assert "'n[0000-0015]'" in text


def test_a_port_number_past_eight_bits_is_refused_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = HOSTILE / "ibnetdiscover" / "port-out-of-range.txt"
    err = _refused(["--ibnetdiscover", str(path)], tmp_path, capsys)
    assert f"{path}:1: port 70,000 is over 254" in err and "[bound port]" in err


def test_a_fabric_file_over_its_size_bound_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import context.ibnetdiscover as ib

    monkeypatch.setattr(ib, "MAX_FABRIC_BYTES", 1024)  # the bound's logic, at a size a test can write
    big = tmp_path / "big.txt"
    big.write_text("# padding\n" * 200)
    err = _refused(["--ibnetdiscover", str(big)], tmp_path, capsys)
    assert f"{big}: 2,000 bytes" in err and "[bound file_size]" in err


def test_a_node_name_map_naming_a_guid_twice_is_a_finding(tmp_path: Path) -> None:
    from context.ibnetdiscover import read_node_name_map

    m = tmp_path / "map"
    m.write_text('0x0c42a10300000001 "gpu001 mlx5_0"\n0x0c42a10300000001 "gpu999 mlx5_0"\n')
    names = read_node_name_map(m)
    topology = build(read(_fabric(tmp_path)), names)
    assert names[0x0C42A10300000001] == "gpu001 mlx5_0"
    assert [(f.kind, f.entity) for f in topology.findings if f.kind == "duplicate_guid"] == [
        ("duplicate_guid", "0x0c42a10300000001")
    ]


# --- LLDP --------------------------------------------------------------------------------------


def test_lldp_json_nested_100000_deep_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: RecursionError (a traceback). The corpus file nests 10,000 deep; 100,000 is made here."""
    for path in (HOSTILE / "lldp" / "deep-nesting.json", tmp_path / "deep.json"):
        if path.parent == tmp_path:
            path.write_text('{"lldp": ' + "[" * 100_000 + "]" * 100_000 + "}")
        err = _refused(["--lldp", str(path)], tmp_path, capsys)
        assert str(path) in err and "[bound json_depth]" in err


def test_lldp_host_and_switch_names_outside_the_grammar_are_left_out_with_findings() -> None:
    neighbours = read_neighbours(HOSTILE / "lldp" / "hostile-names.json")
    topology = build(fabric_from_lldp(neighbours))
    assert not [n for n in topology.nodes if n["kind"] in ("node", "nic", "leaf")]
    refused = [f for f in topology.findings if f.kind == "invalid_name"]
    assert len(refused) == 3  # the host gpu[001-999], switches n[0-15] and "leaf 07; reboot"
    assert all(f.entity.startswith("R-") for f in refused)  # never the refused name as an id


# --- inventory CSV and NetBox ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "place", "rule"),
    [
        ("inventory-csv/gpus-50000000.csv", ":2, column gpus", "[bound gpus]"),
        ("inventory-csv/hostlist-node-name.csv", ":2, column device", "[rule ids.node.hostlist]"),
        ("inventory-csv/option-node-name.csv", ":2, column device", "[rule ids.first]"),
        ("inventory-csv/rack-name-with-shell.csv", ":2, column rack", "[rule ids.entity.charset]"),
        ("inventory-csv/position-nan.csv", ":2, column position", "[bound position]"),
        ("inventory-csv/nul-byte.csv", ":2, column device", "[rule ids.ascii]"),
        ("netbox/results-not-objects.json", ": results[0]", "not a device object"),
        ("netbox/custom-fields-list.json", ": results[0].custom_fields", "not an object"),
        ("netbox/position-abc.json", ": results[0].position", "is not a rack unit"),
        ("netbox/rack-string.json", ": results[0].rack", "not an object"),
        ("netbox/gpus-50000000.json", ": results[0].custom_fields.gpus", "[bound gpus]"),
        ("netbox/hostlist-name.json", ": results[0].name", "[rule ids.node.hostlist]"),
        ("netbox/deep-config-context.json", "", "[bound json_depth]"),
    ],
)
def test_hostile_inventories_are_refused_naming_the_file_the_place_and_the_rule(
    file: str, place: str, rule: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: tracebacks (results [1, 2], custom_fields a list, position abc), a rack given as a
    string silently dropped, `gpus=50000000` built, host lists taken for node names."""
    path = HOSTILE / file
    err = _refused(["--ibnetdiscover", str(_fabric(tmp_path)), "--inventory", str(path)], tmp_path, capsys)
    assert f"{path}{place}" in err and rule in err, err


def test_gpus_50000000_is_refused_within_2_gib(tmp_path: Path) -> None:
    """Before: `aiops topology import` grew to 21 GB building 50 million GPUs."""
    out = tmp_path / "topology.json"
    inventory = HOSTILE / "inventory-csv" / "gpus-50000000.csv"
    done = _limited(
        [
            "topology",
            "import",
            "--ibnetdiscover",
            str(_fabric(tmp_path)),
            "--inventory",
            str(inventory),
            "--out",
            str(out),
        ]
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "[bound gpus]" in done.stderr
    assert not out.exists()


@pytest.mark.parametrize("file", ["inventory-csv/duplicate-device.csv", "netbox/duplicate-device.json"])
def test_a_device_listed_twice_is_a_finding_and_the_first_row_stands(tmp_path: Path, file: str) -> None:
    topology = build(read(_fabric(tmp_path)))
    merge(topology, read_inventory(HOSTILE / file))
    dup = [f for f in topology.findings if f.kind == "duplicate_device"]
    assert [f.entity for f in dup] == ["gpu001"] and str(HOSTILE / file) in dup[0].message
    assert sum(1 for n in topology.nodes if n.get("node") == "gpu001" and n["kind"] == "gpu") == 8


def test_the_whole_hostile_topology_corpus_is_listed_in_the_manifest() -> None:
    listed = {line.split("\t")[0] for line in (HOSTILE / "MANIFEST.tsv").read_text().splitlines()}
    for door in ("ibnetdiscover", "lldp", "inventory-csv", "netbox"):
        for path in (HOSTILE / door).iterdir():
            assert f"{door}/{path.name}" in listed, path
            assert path.stat().st_size < 50_000, path


def test_the_manifest_corpus_never_gives_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every file of the four doors through the command: a clean exit or one line, never a traceback."""
    for door, flag in (("ibnetdiscover", "--ibnetdiscover"), ("lldp", "--lldp")):
        for path in sorted((HOSTILE / door).iterdir()):
            status = main(["topology", "import", flag, str(path), "--out", str(tmp_path / "t.json")])
            err = capsys.readouterr().err
            assert status in (0, 2) and "Traceback" not in err, (path, err)
    for door in ("inventory-csv", "netbox"):
        for path in sorted((HOSTILE / door).iterdir()):
            args = ["--ibnetdiscover", str(_fabric(tmp_path)), "--inventory", str(path)]
            status = main(["topology", "import", *args, "--out", str(tmp_path / "t.json")])
            err = capsys.readouterr().err
            assert status in (0, 2) and "Traceback" not in err, (path, err)
