"""The topology from the fabric as the site's own tools describe it: `ibnetdiscover` output
recorded at real sites (../shared/datasets/real-formats/ibnetdiscover), checked against the
site's own Slurm topology.conf; roles and rails from the fabric's shape; cabling findings; broken
input refused with its file and line, and nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aiops.cli import main
from context.fabric import build
from context.hostlist import expand
from context.ibnetdiscover import FabricFormatError, read, read_node_name_map
from rca.graph import TopologyGraph

REAL = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "real-formats" / "ibnetdiscover"
X5 = REAL / "psmn_X5"
PORTS = REAL / "treydock_infiniband_exporter" / "ibnetdiscover"


def _topology_conf(path: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The site's own topology.conf: each switch's hosts, and each switch's switches."""
    nodes: dict[str, set[str]] = {}
    switches: dict[str, set[str]] = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = dict(f.split("=", 1) for f in line.split())
        if "Nodes" in fields:
            nodes[fields["SwitchName"]] = set(expand(fields["Nodes"]))
        if "Switches" in fields:
            switches[fields["SwitchName"]] = set(fields["Switches"].split(","))
    return nodes, switches


def test_the_psmn_fabric_gives_the_sites_own_leaf_to_host_grouping() -> None:
    """X5.topofile (ibnetdiscover, 2020) with the site's GUID map: every leaf of the site's
    topology.conf (made by its own converter) carries exactly the hosts it lists there, and every
    switch above the leaves is cabled to exactly the switches its `Switches=` line lists."""
    topology = build(read(X5 / "X5.topofile"), read_node_name_map(X5 / "X5.map"))
    site_nodes, site_switches = _topology_conf(X5 / "X5.topology.conf")
    assert site_nodes and len(site_switches) == 5
    for leaf, hosts in site_nodes.items():
        assert set(topology.leaf_hosts[leaf]) == hosts, leaf
    switch_ids = {n["id"] for n in topology.nodes if n["kind"] in ("leaf", "spine")}
    cabled: dict[str, set[str]] = {s: set() for s in switch_ids}
    for link in topology.links:  # the switches themselves are joined once per cabled pair
        if link["relation"] == "connects" and {link["source"], link["target"]} <= switch_ids:
            cabled[link["source"]].add(link["target"])
            cabled[link["target"]].add(link["source"])
    above_leaves = {n["id"] for n in topology.nodes if n["kind"] == "spine"}
    assert {s: cabled[s] for s in above_leaves} == site_switches
    # the site's hand-kept list of the switches above the leaves
    above = {line.strip() for line in (X5 / "X5.spine").read_text().splitlines() if line.strip()[:2] == "S-"}
    roles = {n["id"]: n["role"] for n in topology.nodes if n["kind"] in ("leaf", "spine")}
    assert {s for s, r in roles.items() if r in ("spine", "core")} == above
    assert topology.counts["switches"] == {"leaf": 6, "spine": 4, "core": 1}
    assert topology.counts["hcas"] == 89 and topology.counts["cables"] == 159
    TopologyGraph(topology.nodes, topology.links)  # the daemons can load it


def test_hosts_come_from_node_descriptions_and_aggregation_nodes_are_not_hosts() -> None:
    osc = build(read(PORTS / "test.out"))  # `ibnetdiscover -p` at OSC
    assert sorted(n["id"] for n in osc.nodes if n["kind"] == "node") == ["o0001", "o0002", "p0001"]
    assert {n["id"] for n in osc.nodes if n["kind"] == "nic"} == {"o0001-nic0", "o0002-nic0", "p0001-nic0"}
    sharp = build(read(PORTS / "test2.out"))  # an HDR site with a SHARP aggregation node
    assert [n["id"] for n in sharp.nodes if n["kind"] == "node"] == ["worker20"]
    assert sharp.counts["aggregation_nodes"] == 1
    switches = {n["id"] for n in sharp.nodes if n["kind"] in ("leaf", "spine")}
    assert "5FB0405-leaf-IB01" in switches  # descriptions are trimmed of their spaces


def test_an_hca_without_a_host_name_keeps_a_guid_id_and_is_reported() -> None:
    topology = build(read(REAL / "jabl_ibtopotool_docs" / "1.topo"))  # man ibnetdiscover, 2007
    nics = {n["id"] for n in topology.nodes if n["kind"] == "nic"}
    assert nics and all(n.startswith("H-") for n in nics)
    # every unnamed HCA in one finding, with where each is cabled
    (unnamed,) = [f for f in topology.findings if f.kind == "unnamed_hcas"]
    assert unnamed.message.startswith(f"{len(nics)} HCAs have no host name")
    assert len(unnamed.evidence) == len(nics) and "node-name map" in unnamed.fix
    # the dual-port HCA cabled twice is two links, not one id twice
    TopologyGraph(topology.nodes, topology.links)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('vendid=0x2c9\nSwitch\t36 "S-0008f10500200b50"\t# "x" lid 9\n[1]\t"S-0008f1', ":3: not a line"),
        ("hello, world\n", ":1: not ibnetdiscover output"),
        ("", "empty"),
        ('[1]\t"S-0008f10500108c5c"[15]\t# "x" lid 16 4xQDR\n', "not ibnetdiscover output"),
    ],
    ids=["truncated", "not-ibnetdiscover", "empty", "port-without-node"],
)
def test_broken_input_is_refused_with_its_file_and_line_and_nothing_is_written(
    tmp_path: Path, text: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "fabric.txt"
    broken.write_text(text)
    with pytest.raises(FabricFormatError, match=problem):
        read(broken)
    out = tmp_path / "topology.json"
    assert main(["topology", "import", "--ibnetdiscover", str(broken), "--out", str(out)]) == 2
    assert not out.exists() and str(broken) in capsys.readouterr().err


IBSIM_NETS = sorted((REAL / "ibsim_net_examples").glob("net*"))


@pytest.mark.parametrize("path", IBSIM_NETS, ids=[p.name for p in IBSIM_NETS])
def test_ibsims_own_fabric_files_are_refused_as_what_they_are(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shared folder holds ibsim's example fabrics beside the real dumps: they begin as a dump
    does (`Switch 8 "Switch1"`) but are ibsim's input, nodes named without GUIDs. Before, the import
    stopped at "node 'Switch1' has no GUID"; now it says what the file is and what to import."""
    assert len(IBSIM_NETS) == 5
    with pytest.raises(FabricFormatError, match="this is an ibsim topology file, not ibnetdiscover output"):
        read(path)
    out = tmp_path / "topology.json"
    assert main(["topology", "import", "--ibnetdiscover", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and "ibsim-run ibnetdiscover" in err and not out.exists()


@pytest.mark.parametrize(
    ("text", "line", "sign"),
    [
        # ibsim's node type for an HCA (ibnetdiscover prints `Ca`), first in the file
        ('Hca\t1\t"h1"\t# "gpu01 mlx5_0"\n[1]\t"sw1"[1]\n', 1, "an `Hca` node"),
        # GUIDs given, as ibsim reads them from ibnetdiscover output, but a link width option added
        (
            'switchguid=0x8f10500200b50\nSwitch\t8 "S-0008f10500200b50"\t# "leaf"\n'
            '[1]\t"H-0002c9030000a001"[1]\tw=1\n',
            3,
            "a link option",
        ),
        ('include "more.net"\n', 1, "ibsim's directive 'include'"),
    ],
    ids=["hca", "width-option", "include"],
)  # fmt: skip
def test_the_other_marks_of_an_ibsim_file_are_recognised(tmp_path: Path, text: str, line: int, sign: str) -> None:
    (tmp_path / "net").write_text(text)
    said = f"net:{line}: this is an ibsim topology file, not ibnetdiscover output ({sign}"
    with pytest.raises(FabricFormatError, match=re.escape(said)):
        read(tmp_path / "net")


UNNAMED = "MT4129 ConnectX7   Mellanox Technologies"  # a ConnectX-7's description before rdma-ndd names it


def _rail_fabric(
    hosts: int = 4,
    rails: int = 4,
    moved: tuple[int, int, int] | None = None,
    half: int | None = None,
    unnamed_host: int | None = None,
    swapped: tuple[int, int, int] | None = None,
    missing: tuple[int, int] | None = None,
) -> str:
    """`ibnetdiscover -p` of a rail-optimised fabric: HCA r of every host on rail r's leaf (HCA
    GUID 0x3000 + 16 * host + rail), two spines above; `moved` = (host, rail, to leaf): one cable
    on another rail's leaf; `half`: that host's rail-0 cable trained at 2x; `unnamed_host`: that
    host's HCAs describe themselves without a host name; `swapped` = (host, rail a, rail b): that
    host's two cables swapped between the two rails' leaves; `missing` = (host, rail): no such HCA."""
    lines = []
    leaf = [0x1000 + r for r in range(rails)]
    spine = [0x2000, 0x2001]
    crossed = {(swapped[0], swapped[1]): swapped[2], (swapped[0], swapped[2]): swapped[1]} if swapped else {}
    for h in range(hosts):
        for r in range(rails):
            if (h, r) == missing:
                continue
            to = moved[2] if moved and (h, r) == moved[:2] else crossed.get((h, r), r)
            width = "2x" if half == h and r == 0 else "4x"
            hca = 0x3000 + 16 * h + r
            port = h + 1 + (20 if moved and (h, r) == moved[:2] else 0)
            description = UNNAMED if h == unnamed_host else f"gpu{h:03d} mlx5_{r}"
            lines.append(
                f"CA {100 + h} 1 0x{hca:016x} {width} NDR - SW {10 + to} {port} 0x{leaf[to]:016x} "
                f"( '{description}' - 'leaf-r{to}' )"
            )
    for r in range(rails):
        for s, guid in enumerate(spine):
            lines.append(
                f"SW {10 + r} {40 + s} 0x{leaf[r]:016x} 4x NDR - SW {50 + s} {r + 1} 0x{guid:016x} "
                f"( 'leaf-r{r}' - 'spine-{s}' )"
            )
    return "\n".join(lines) + "\n"


def test_a_clean_rail_optimised_fabric_has_no_findings(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text(_rail_fabric())
    topology = build(read(tmp_path / "f.txt"))
    assert topology.findings == []
    assert topology.counts["rail_optimised"] and topology.counts["rails"] == 4
    assert {n["id"]: n["rail"] for n in topology.nodes if n["kind"] == "leaf"} == {f"leaf-r{r}": r for r in range(4)}
    assert {n["id"] for n in topology.nodes if n["kind"] == "nic"} == {
        f"gpu{h:03d}-nic{r}" for h in range(4) for r in range(4)
    }


def test_a_cable_on_another_rails_leaf_and_a_link_at_half_width_are_reported_with_their_fix(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text(_rail_fabric(moved=(2, 3, 1), half=1))
    findings = {(f.kind, f.entity): f for f in build(read(tmp_path / "f.txt")).findings}
    # one finding per physical problem: the moved cable (its leaf is not blamed again as "mixed")
    assert set(findings) == {("wrong_rail", "gpu002-nic3"), ("degraded_link", "link-gpu001-nic0")}
    assert "leaf of rail 3" in findings[("wrong_rail", "gpu002-nic3")].fix
    assert "leaf-r1 port 23" in findings[("wrong_rail", "gpu002-nic3")].message
    assert findings[("wrong_rail", "gpu002-nic3")].evidence  # the dump's line of that cable
    assert "2xNDR" in findings[("degraded_link", "link-gpu001-nic0")].message


def test_a_sites_node_name_map_gives_hcas_without_a_name_their_host_and_rail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpu002's four HCAs describe themselves without a host name (rdma-ndd not running) and the
    cabling cannot place a host with none named: the site's node-name map, infiniband-diags' format
    (`GUID "name"`, what `ibnetdiscover --node-name-map` reads), names each `gpu002 mlx5_N`, and
    each HCA gets that host and rail N, with nothing left to report."""
    (tmp_path / "f.txt").write_text(_rail_fabric(unnamed_host=2))
    without = build(read(tmp_path / "f.txt"))
    assert [f.kind for f in without.findings] == ["unnamed_hcas"]
    assert "4 host unknown" in without.findings[0].message
    (tmp_path / "node-name-map").write_text(
        '# GUID  "name"  (the site\'s map, one line per HCA)\n'
        + "".join(f'0x{0x3000 + 16 * 2 + r:016x} "gpu002 mlx5_{r}"\n' for r in (3, 1, 0, 2))
    )
    names = read_node_name_map(tmp_path / "node-name-map")
    topology = build(read(tmp_path / "f.txt"), names)
    nics = {n["id"]: n for n in topology.nodes if n["kind"] == "nic"}
    assert {(n["node"], n["rail"], n["guid"]) for i, n in nics.items() if i.startswith("gpu002")} == {
        ("gpu002", r, f"0x{0x3000 + 16 * 2 + r:016x}") for r in range(4)
    }
    assert topology.findings == []
    # and the command takes the map the same way
    out = tmp_path / "topology.json"
    argv = ["topology", "import", "--ibnetdiscover", str(tmp_path / "f.txt"), "--node-name-map"]
    assert main([*argv, str(tmp_path / "node-name-map"), "--out", str(out)]) == 0
    assert "no findings" in capsys.readouterr().out
    assert {"gpu002-nic0", "gpu002-nic3"} <= {n["id"] for n in json.loads(out.read_text())["nodes"]}


def test_findings_are_ranked_by_what_they_cost_in_the_report_and_on_the_first_screen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three problems of different cost (`context.fabric.COSTS`): a swapped pair (a crossed rail
    halves a rail-optimised all-reduce), a missing HCA (the host leaves large jobs), a link at half
    width. They are found in the order swap, link, HCA and are alphabetically swap, link, HCA too:
    only the ranking puts the missing HCA before the slow link."""
    fabric = tmp_path / "f.txt"
    fabric.write_text(_rail_fabric(swapped=(1, 0, 2), missing=(3, 1), half=0))
    order = [("crossed_cables", "gpu001"), ("missing_hca", "gpu003"), ("degraded_link", "link-gpu000-nic0")]
    report = build(read(fabric)).report()
    assert [(f["kind"], f["entity"]) for f in report["findings"]] == order
    assert list(report["summary"]["problems"]) == [kind for kind, _ in order]
    report_file = tmp_path / "report.json"
    argv = ["topology", "import", "--ibnetdiscover", str(fabric), "--out", str(tmp_path / "t.json")]
    assert main([*argv, "--report", str(report_file)]) == 0
    screen = capsys.readouterr().out.splitlines()
    assert screen[1] == "problems: 1 crossed_cables, 1 missing_hca, 1 degraded_link; notes: none"
    assert [line.split()[:3] for line in screen[2:]] == [[f"{n}.", k, e + ":"] for n, (k, e) in enumerate(order, 1)]
    assert [f["kind"] for f in json.loads(report_file.read_text())["findings"]] == [kind for kind, _ in order]


def _quotes_of_the_dump(evidence: tuple[str, ...] | list[str]) -> list[str]:
    """Each `file:line: text` of a finding's evidence checked against the file; the texts."""
    texts = []
    for quote in evidence:
        m = re.fullmatch(r"(.+?):(\d+): (.*)", quote)
        assert m, quote
        assert Path(m[1]).read_text().splitlines()[int(m[2]) - 1].strip()[:200] == m[3], quote
        texts.append(m[3])
    return texts


def test_missing_hca_no_uplink_and_duplicate_guid_quote_the_dump_lines_that_made_them(tmp_path: Path) -> None:
    """As the cabling findings do: `file:line: the line`, each checked against the file."""
    # a host short of an HCA (-p format): the lines of the HCAs it has
    (tmp_path / "f.txt").write_text(_rail_fabric(missing=(3, 1)))
    (missing,) = build(read(tmp_path / "f.txt")).findings
    assert missing.kind == "missing_hca"
    quoted = _quotes_of_the_dump(missing.evidence)
    assert [q.split("'")[1] for q in quoted] == ["gpu003 mlx5_0", "gpu003 mlx5_2", "gpu003 mlx5_3"]
    # a leaf without uplinks (OSC's trimmed -p excerpt): its cables' lines, none to a switch
    (no_uplink,) = build(read(PORTS / "test.out")).findings
    assert no_uplink.kind == "no_uplink" and no_uplink.evidence
    assert all("ib-i4l1s01" in q and "- SW" in q for q in _quotes_of_the_dump(no_uplink.evidence))
    # a GUID described twice (topology format): the first description and the second
    text = _ibdiagnet_quantum2()
    block = text[text.index("vendid=0x2c9\ndevid=0x1021\nsysimgguid=0xa088c20300000020") :]
    (tmp_path / "twice.txt").write_text(text + "\n" + block)
    (twice,) = build(read(tmp_path / "twice.txt")).findings
    assert _quotes_of_the_dump(twice.evidence) == ['Ca  1 "H-a088c20300000020"  # "gpu02 mlx5_0"'] * 2
    first, again = (int(q.split(":")[1]) for q in twice.evidence)
    assert f"line {first})" in twice.message and f"twice.txt:{again}:" in twice.message
    # one GUID on two kinds of node (-p format): the line that made it a CA and the one a switch
    clash = "SW 99 30 0x0000000000003000 4x NDR - SW 10 30 0x0000000000001000 ( 'cloned' - 'leaf-r0' )\n"
    (tmp_path / "clash.txt").write_text(_rail_fabric() + clash)
    (dup,) = [f for f in build(read(tmp_path / "clash.txt")).findings if f.kind == "duplicate_guid"]
    assert [q[:2] for q in _quotes_of_the_dump(dup.evidence)] == ["CA", "SW"]
    assert dup.evidence[-1].endswith(clash.strip())
    # a node-name map naming a GUID twice: both lines of the map
    (tmp_path / "map").write_text('0x3000 "gpu000 mlx5_0"\n# a comment\n0x3000 "gpu999 mlx5_0"\n')
    mapped = build(read(tmp_path / "f.txt"), read_node_name_map(tmp_path / "map"))
    (named_twice,) = [f for f in mapped.findings if f.kind == "duplicate_guid"]
    assert _quotes_of_the_dump(named_twice.evidence) == ['0x3000 "gpu000 mlx5_0"', '0x3000 "gpu999 mlx5_0"']


def test_the_command_writes_the_topology_and_the_report(tmp_path: Path) -> None:
    out, report = tmp_path / "topology.json", tmp_path / "report.json"
    argv = ["topology", "import", "--ibnetdiscover", str(X5 / "X5.topofile"), "--node-name-map", str(X5 / "X5.map")]
    assert main([*argv, "--out", str(out), "--report", str(report)]) == 0
    written = json.loads(out.read_text())
    assert TopologyGraph(written["nodes"], written["links"]).ids
    summary = json.loads(report.read_text())
    assert summary["counts"]["switches"] == {"leaf": 6, "spine": 4, "core": 1}
    assert all({"kind", "entity", "message", "fix"} <= set(f) for f in summary["findings"])


def test_slurm_host_lists_expand_as_slurm_does() -> None:
    assert expand("sl390lin[1-3,7]") == ["sl390lin1", "sl390lin2", "sl390lin3", "sl390lin7"]
    assert expand("cn[008-010],gpu1") == ["cn008", "cn009", "cn010", "gpu1"]
    with pytest.raises(ValueError, match="malformed"):
        expand("cn[1-")


LLDP = REAL.parent / "lldp"


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        # lldpd on a SONiC switch, `lldpctl -f json` (objects keyed by name), its host merged in
        ("sonic-dbsyncd/lldpctl.json", ("arc-switch1025", "Ethernet0", "switch13", "Ethernet1")),
        # lldpd 1.0.11, `-f json0` (every value wrapped in a list)
        (
            "starlingx/1.0.11/lldp_show_neighbor_detail.json",
            ("lldp_show_neighbor_detail", "ens801f0", "yow-stx-quanta-7", "0/31"),
        ),
        # a peer that sends no chassis name: its id names it
        ("sonic-dbsyncd/interface_only.json", ("interface_only", "Ethernet0", "00:11:22:33:44:55", "Ethernet1")),
    ],
)  # fmt: skip
def test_lldp_neighbours_are_read_from_both_of_lldpds_json_shapes(file: str, expected: tuple[str, ...]) -> None:
    from context.lldp import read_neighbours

    seen = {(n.host, n.interface, n.switch, n.port) for n in read_neighbours(LLDP / file)}
    assert expected in seen


def test_a_roce_fabric_from_lldp_gets_leaves_and_rails_from_its_shape(tmp_path: Path) -> None:
    """Two hosts' lldpcli files, each NIC on its rail's leaf: hosts, NICs and rails as from
    ibnetdiscover; a host file with no neighbours adds nothing."""
    from context.lldp import fabric_from_lldp, read_neighbours

    template = json.loads((LLDP / "sonic-dbsyncd" / "lldpctl.json").read_text())
    for host in ("gpu001", "gpu002"):
        body = [
            {f"ens{r + 1}f0np0": {"chassis": {f"leaf-r{r}": {"id": {"type": "mac", "value": f"00:00:00:00:00:0{r}"}}},
                                  "port": {"id": {"type": "ifname", "value": f"Ethernet{host[-1]}"}}, "via": "LLDP"}}
            for r in range(2)
        ]  # fmt: skip
        (tmp_path / f"{host}.json").write_text(json.dumps({"lldp": {"interface": body}}))
    (tmp_path / "quiet.json").write_text(json.dumps({"lldp": {}}))
    assert template["lldp"]["interface"]  # the shape above is the real file's
    topology = build(fabric_from_lldp(read_neighbours(tmp_path)))
    assert {n["id"]: n["rail"] for n in topology.nodes if n["kind"] == "leaf"} == {"leaf-r0": 0, "leaf-r1": 1}
    assert sorted(n["id"] for n in topology.nodes if n["kind"] == "nic") == [
        "gpu001-nic0", "gpu001-nic1", "gpu002-nic0", "gpu002-nic1",
    ]  # fmt: skip
    assert topology.findings == []  # (hosts' LLDP shows no uplinks: none is reported missing)


def test_the_inventory_adds_racks_cooling_gpus_and_psus_and_says_who_is_missing(tmp_path: Path) -> None:
    from context.inventory import merge
    from context.inventory import read as read_inventory

    (tmp_path / "f.txt").write_text(_rail_fabric(hosts=2))
    (tmp_path / "inventory.csv").write_text(
        "device,role,rack,position,psus,cooling,gpus,nvswitches\n"
        "gpu000,node,rack01,10,2,rack01-cdu,8,4\n"
        "gpu007,node,rack01,14,2,rack01-cdu,8,4\n"  # in the inventory, not on the fabric
        "leaf-r0,leaf,rack01,40,,,,\n"
    )
    topology = build(read(tmp_path / "f.txt"))
    merge(topology, read_inventory(tmp_path / "inventory.csv"))
    graph = TopologyGraph(topology.nodes, topology.links)
    assert (
        graph.kind("gpu000-gpu7") == "gpu"
        and graph.kind("gpu000-psu1") == "psu"
        and graph.kind("rack01-cdu") == "cooling"
    )
    assert graph.ancestor("gpu000-gpu3", "rack") == "rack01"
    found = {(f.kind, f.entity) for f in topology.findings}
    assert found == {("not_on_fabric", "gpu007"), ("not_in_inventory", "gpu001")}
    assert topology.counts["racks"] == 1 and topology.counts["gpus"] == 16


def test_a_netbox_device_export_is_read_as_the_csv_is(tmp_path: Path) -> None:
    """NetBox's REST shape (/api/dcim/devices/, as its API documents it; no recorded export is in
    shared/): `role` (NetBox 4) or `device_role` (3.x), the rack, counts in custom fields."""
    from context.inventory import read as read_inventory

    page = {"count": 2, "next": None, "results": [
        {"id": 1, "name": "gpu000", "role": {"slug": "gpu-server"}, "rack": {"id": 3, "name": "rack01"},
         "position": 10.0, "custom_fields": {"gpus": 8, "psus": 2, "nvswitches": 4, "cooling": "rack01-cdu"}},
        {"id": 2, "name": "leaf-r0", "device_role": {"slug": "leaf"}, "rack": {"name": "rack01"}, "position": 40,
         "custom_fields": {}},
    ]}  # fmt: skip
    (tmp_path / "devices.json").write_text(json.dumps(page))
    devices = read_inventory(tmp_path / "devices.json")
    assert [(d.name, d.role, d.rack, d.gpus, d.psus) for d in devices] == [
        ("gpu000", "node", "rack01", 8, 2), ("leaf-r0", "leaf", "rack01", 0, 0),
    ]  # fmt: skip
    (tmp_path / "bad.csv").write_text(
        "device,role,rack,position,psus,cooling,gpus,nvswitches\ngpu000,node,r1,,two,,,\n"
    )
    with pytest.raises(FabricFormatError, match=r"bad.csv:2, column psus: psus 'two' is not a count"):
        read_inventory(tmp_path / "bad.csv")


def test_a_dry_run_against_the_topology_in_use_says_what_would_change_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = tmp_path / "before.txt", tmp_path / "after.txt"
    before.write_text(_rail_fabric(hosts=3))
    after.write_text(_rail_fabric(hosts=4, moved=(2, 3, 1)))  # a host added, a cable moved
    in_use = tmp_path / "topology.json"
    assert main(["topology", "import", "--ibnetdiscover", str(before), "--out", str(in_use)]) == 0
    written = in_use.read_text()
    capsys.readouterr()
    argv = ["topology", "import", "--ibnetdiscover", str(after), "--out", str(in_use), "--dry-run"]
    assert main([*argv, "--against", str(in_use)]) == 0
    printed = capsys.readouterr().out
    assert in_use.read_text() == written  # nothing written
    assert "+ gpu003" in printed and "+ gpu003-nic0" in printed
    assert "~ link-gpu002-nic3" in printed  # its cable, now on another leaf
    assert "- leaf-r3:p2" in printed  # the port the moved cable left (physical port 3)


def test_the_importers_findings_become_notices_when_a_run_loads_the_topology(tmp_path: Path) -> None:
    recorded, out = tmp_path / "recorded", tmp_path / "out"
    assert (
        main(["gen", "--gpus", "64", "--hours", "0.1", "--interval", "30", "--seed", "3", "--out", str(recorded)]) == 0
    )
    data = json.loads((recorded / "topology.json").read_text())
    finding = {"kind": "wrong_rail", "entity": "n00001-nic3", "message": "n00001-nic3 (rail 3) is cabled to "
               "leaf-p0-r2, a leaf of rail 2", "fix": "move its cable to a leaf of rail 3"}  # fmt: skip
    data["graph"] = {**data.get("graph", {}), "findings": [finding]}
    (recorded / "topology.json").write_text(json.dumps(data))
    assert main(["run", "--input", str(recorded), "--out", str(out), "--no-predict"]) == 0
    notices = [json.loads(line) for line in (out / "notices.jsonl").read_text().splitlines()]
    fabric = [n for n in notices if n["kind"] == "fabric"]
    assert [(n["subject"], n["status"], n["detail"]["fix"]) for n in fabric] == [
        ("n00001-nic3", "wrong_rail", ["move its cable to a leaf of rail 3"])
    ]


# every recorded dump, and what its site would read in its report (kind -> count)
REAL_DUMPS = {
    # 2020 QDR fabric with DDR adapters (the README's quirk): slower links are one note, not 23
    # faults; 3 HCAs the site's map does not name
    "psmn_X5/X5.topofile": {"slow_links": 1, "unnamed_hcas": 1},
    # man ibnetdiscover (2007): a dual-port HCA cabled twice, HCAs without host names
    "jabl_ibtopotool_docs/1.topo": {"unnamed_hcas": 1},
    "jabl_ibtopotool_docs/2.topo": {},
    # NVIDIA's UFM lab (2016): FDR fabric with QDR/SDR adapters
    "jabl_ibtopotool_docs/3.topo": {"slow_links": 1},
    "jabl_ibtopotool_docs/4.topo": {},
    # OSC's `-p` excerpt, trimmed by the exporter's authors to two leaves: ib-i4l1s01's uplinks
    # were cut with the rest of the fabric, and the excerpt says so truly
    "treydock_infiniband_exporter/ibnetdiscover/test.out": {"no_uplink": 1},
    # the exporter's hand-assembled `-p` lines: one SHARP aggregation node's port 1 on leaf
    # ...bf6 port 81 (its own switch, GUID + 8) and again on spine ...ec1a port 81; a port holds
    # one cable, and the excerpt says two (issue 64, finding 9)
    "treydock_infiniband_exporter/ibnetdiscover/test2.out": {"duplicate_port": 1},
    "treydock_infiniband_exporter/ibnetdiscover/test3.out": {},
}


@pytest.mark.parametrize("name", sorted(REAL_DUMPS))
def test_every_recorded_dump_imports_with_the_findings_its_site_would_recognise(name: str) -> None:
    names = read_node_name_map(X5 / "X5.map") if name.startswith("psmn") else {}
    topology = build(read(REAL / name), names)
    TopologyGraph(topology.nodes, topology.links)
    assert topology.report()["summary"]["problems"] | topology.report()["summary"]["notes"] == REAL_DUMPS[name]


def _ibdiagnet_quantum2() -> str:
    """A Quantum-2 leaf in split mode as ibdiagnet's ibnetdiscover-format file prints it (its port
    label ASIC/Cage/Port/Split in parentheses, two spaces before the comment), written from the
    line the issue quotes from a real file (`[1](1/1/1) "S-…"[63]  # "…" lid 13 4xNDR`): not a
    recording. Its `#` header is a stand-in: no document found shows ibdiagnet's (what was
    searched is in docs/cluster-context.md). Two hosts on the two halves of cage 1, an uplink on
    cage 33."""
    return """#
# This file was generated by ibdiagnet: ibnetdiscover format; ports of Quantum-2 switches are
# labelled ASIC/Cage/Port[/Split]
#

vendid=0x2c9
devid=0xd2f2
sysimgguid=0xb83fd20300a1b2c0
switchguid=0xb83fd20300a1b2c0(b83fd20300a1b2c0)
Switch  129 "S-b83fd20300a1b2c0"  # "MF0;leaf-01:MQM9700/U1" enhanced port 0 lid 13 lmc 0
[1](1/1/1/1) "H-a088c20300000010"[1](a088c20300000010)  # "gpu01 mlx5_0" lid 101 2xNDR
[2](1/1/1/2) "H-a088c20300000020"[1](a088c20300000020)  # "gpu02 mlx5_0" lid 102 2xNDR
[127](1/33/1) "S-b83fd20300a1b300"[63](1/32/1)  # "MF0;spine-01:MQM9700/U1" lid 14 4xNDR

vendid=0x2c9
devid=0xd2f2
sysimgguid=0xb83fd20300a1b300
switchguid=0xb83fd20300a1b300(b83fd20300a1b300)
Switch  65 "S-b83fd20300a1b300"  # "MF0;spine-01:MQM9700/U1" enhanced port 0 lid 14 lmc 0
[63](1/32/1) "S-b83fd20300a1b2c0"[127](1/33/1)  # "MF0;leaf-01:MQM9700/U1" lid 13 4xNDR

vendid=0x2c9
devid=0x1021
sysimgguid=0xa088c20300000010
caguid=0xa088c20300000010
Ca  1 "H-a088c20300000010"  # "gpu01 mlx5_0"
[1](a088c20300000010) "S-b83fd20300a1b2c0"[1](1/1/1/1)  # lid 101 lmc 0 "MF0;leaf-01:MQM9700/U1" lid 13 2xNDR

vendid=0x2c9
devid=0x1021
sysimgguid=0xa088c20300000020
caguid=0xa088c20300000020
Ca  1 "H-a088c20300000020"  # "gpu02 mlx5_0"
[1](a088c20300000020) "S-b83fd20300a1b2c0"[2](1/1/1/2)  # lid 102 lmc 0 "MF0;leaf-01:MQM9700/U1" lid 13 2xNDR
"""


def test_a_quantum2_split_port_fabric_as_ibdiagnet_prints_it_keeps_its_port_labels(tmp_path: Path) -> None:
    (tmp_path / "ibdiagnet2.ibnetdiscover").write_text(_ibdiagnet_quantum2())
    fabric = read(tmp_path / "ibdiagnet2.ibnetdiscover")
    assert fabric.labels[(0xB83FD20300A1B2C0, 1)] == "1/1/1/1" and fabric.labels[(0xB83FD20300A1B300, 63)] == "1/32/1"
    topology = build(fabric)
    TopologyGraph(topology.nodes, topology.links)
    ports = {n["id"] for n in topology.nodes if n["kind"] == "port"}
    assert ports == {"leaf-01:1/1/1/1", "leaf-01:1/1/1/2", "leaf-01:1/33/1", "spine-01:1/32/1"}
    links = {n["id"]: n for n in topology.nodes if n["kind"] == "link"}
    assert links["link-gpu02-nic0"]["split"] == 2 and links["link-gpu02-nic0"]["width"] == "2x"
    assert topology.findings == []  # split ports at 2x on every host link: nothing degraded


def test_a_guid_described_twice_is_one_finding_ranked_among_the_problems(tmp_path: Path) -> None:
    """ibsim refuses two nodes with one GUID, so this is a rendered dump: the same CA block twice
    (two captures concatenated, or a cloned GUID)."""
    text = _ibdiagnet_quantum2()
    block = text[text.index("vendid=0x2c9\ndevid=0x1021\nsysimgguid=0xa088c20300000020") :]
    (tmp_path / "twice.txt").write_text(text + "\n" + block)
    report = build(read(tmp_path / "twice.txt")).report()
    assert [(f["kind"], f["entity"]) for f in report["findings"]] == [("duplicate_guid", "0xa088c20300000020")]
    assert report["summary"]["problems"] == {"duplicate_guid": 1}


# --- ibdiagnet 2.10 CA ports: label and GUID (issue 64, finding 8) ------------------------------

IBDIAGNET = Path(__file__).resolve().parents[1] / "data" / "ibdiagnet" / "ibdiagnet2.ibnetdiscover"


def test_ibdiagnet_ca_ports_with_a_label_and_a_guid_import_and_sharp_nodes_are_no_hosts() -> None:
    """Before: the first CA record (`[1](1)(b0cf0e0300e5b948) "S-…"[65]`, a SHARP aggregation
    node) was refused and the whole import failed."""
    fabric = read(IBDIAGNET)
    assert len(fabric.nodes) == 10 and len(fabric.cables) == 9  # 3 switches, 3 SHARP nodes, 4 HCAs
    # a CA's label is its port number again: only the switches' ASIC/Cage/Port labels are kept
    assert fabric.labels[(0xB0CF0E0300E5B940, 1)] == "1/1/1" and (0xA088C2030000A010, 1) not in fabric.labels
    topology = build(fabric)
    TopologyGraph(topology.nodes, topology.links)
    counts = topology.report()["counts"]
    assert counts["hosts"] == 2 and counts["hcas"] == 4 and counts["aggregation_nodes"] == 3
    assert counts["rail_optimised"] and counts["rails"] == 2
    hosts = {n["id"] for n in topology.nodes if n["kind"] == "node"}
    assert hosts == {"gpu01", "gpu02"}
    nics = {n["id"] for n in topology.nodes if n["kind"] == "nic"}
    assert nics == {"gpu01-nic0", "gpu01-nic1", "gpu02-nic0", "gpu02-nic1"}
    # the SHARP node a node-name map renamed ("leaf-02 sharp") is known by its GUID and its box:
    # no host, no unnamed HCA, no finding; no SHARP GUID anywhere in the graph
    assert topology.findings == []
    shown = json.dumps(topology.nodes) + json.dumps(topology.links)
    assert not re.search(r"b0cf0e0300e5[bcd]148", shown)
    ports = {n["id"] for n in topology.nodes if n["kind"] == "port"}
    assert {"leaf-02:1/1/1", "leaf-02:1/2/1", "leaf-02:1/17/1", "spine-01:1/1/1", "spine-01:1/2/1"} <= ports


@pytest.mark.parametrize(
    ("line", "label"),
    [
        ('[1](1)(b0cf0e0300e5b948) "S-b0cf0e0300e5b940"[65] # lid 25 lmc 0 "Quantum-2" lid 24 4xNDR', None),
        ('[1](b0cf0e0300e5b948) "S-b0cf0e0300e5b940"[65] # lid 25 lmc 0 "Quantum-2" lid 24 4xNDR', None),
        ('[1](1/2/1) "S-b0cf0e0300e5b940"[65] # lid 25 lmc 0 "Quantum-2" lid 24 4xNDR', "1/2/1"),
        ('[1](1/2/1)(b0cf0e0300e5b948) "S-b0cf0e0300e5b940"[65] # "Quantum-2" lid 24 4xNDR', "1/2/1"),
    ],
)
def test_a_ca_port_takes_a_label_a_guid_or_both(line: str, label: str | None, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text(f'caguid=0xb0cf0e0300e5b948\nCa  1 "H-b0cf0e0300e5b948"  # "x"\n{line}\n')
    fabric = read(tmp_path / "f.txt")
    assert [(c.a, c.b) for c in fabric.cables] == [((0xB0CF0E0300E5B948, 1), (0xB0CF0E0300E5B940, 65))]
    assert fabric.labels.get((0xB0CF0E0300E5B948, 1)) == label


@pytest.mark.parametrize("given", ["(1)(zz)", "(1/2/3/4/5)(b0cf)", "(b0cf)(b0cf)", "(1)(2)(b0cf)"])
def test_parentheses_that_are_not_a_label_then_a_guid_are_refused_with_the_line(given: str, tmp_path: Path) -> None:
    ca = 'caguid=0x10\nCa  1 "H-0000000000000010"  # "x"\n'
    (tmp_path / "f.txt").write_text(f'{ca}[1]{given} "S-0000000000000020"[1]\n')
    with pytest.raises(FabricFormatError, match=r"f\.txt:3: "):
        read(tmp_path / "f.txt")


# --- duplicates in every format are findings (issue 64, finding 9) ------------------------------

HOSTILE_FABRICS = Path(__file__).resolve().parents[1] / "data" / "hostile"


@pytest.mark.parametrize(
    ("file", "kind", "said"),
    [
        ("ibnetdiscover/ports-duplicate-switch-guid.txt", "duplicate_guid", ":5: switch GUID 0x0000000000001000 is"),
        ("ibnetdiscover/ports-port-cabled-twice.txt", "duplicate_port", ":4: port 33 of 'leaf01'"),
        ("ibnetdiscover/topology-port-cabled-twice.txt", "duplicate_port", ": port 33 of 'MF0;leaf01:MQM9700/U1'"),
        ("lldp/port-cabled-twice.json", "duplicate_port", "lldp: port 1 of 'leaf01'"),
    ],
)
def test_a_guid_under_another_name_or_a_port_cabled_twice_is_a_finding_in_every_format(
    file: str, kind: str, said: str
) -> None:
    """Before: the one-line format let a known switch GUID through under another name, and every
    format took a port cabled to two peers as two cables, with no finding."""
    from context.lldp import fabric_from_lldp, read_neighbours

    path = HOSTILE_FABRICS / file
    fabric = fabric_from_lldp(read_neighbours(path)) if file.startswith("lldp/") else read(path)
    topology = build(fabric)
    (finding,) = [f for f in topology.findings if f.kind in ("duplicate_guid", "duplicate_port")]
    assert finding.kind == kind and said in finding.message, finding.message
    ports = [end for c in fabric.cables for end in (c.a, c.b)]
    assert len(ports) == len(set(ports))  # the first cable stands, each port on one cable


def test_the_same_cable_from_its_two_ends_is_no_duplicate(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text(
        "SW 10 33 0x1000 4x NDR - SW 20 1 0x2000 ( 'leaf01' - 'spine01' )\n"
        "SW 20 1 0x2000 4x NDR - SW 10 33 0x1000 ( ' spine01 ' - 'leaf01' )\n"
    )
    fabric = read(tmp_path / "f.txt")
    assert len(fabric.cables) == 1 and fabric.notes == []
