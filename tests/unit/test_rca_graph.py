"""The topology graph: validation errors that name the culprit, what depends on what, helpers, planes."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rca.graph import GraphError, TopologyGraph
from telemetry_gen.topology import Topology, build_dragonfly, build_fat_tree, build_torus

GPUS = 1024  # 128 nodes, 4 pods of 32, 8 rails, 2 spines per rail
PODS = 4
RAILS = 8
SPINES_PER_RAIL = 2


@pytest.fixture(scope="module")
def topo_json() -> dict[str, Any]:
    return build_fat_tree(GPUS).to_json()


@pytest.fixture(scope="module")
def graph(topo_json: dict[str, Any]) -> TopologyGraph:
    return TopologyGraph.from_json(topo_json)


def node(n: int) -> str:
    return f"n{n:05d}"


def pod_nodes(pod: int) -> list[str]:
    return [node(pod * 32 + i) for i in range(32)]


# ---------------------------------------------------------------------- validation


def tiny() -> dict[str, Any]:
    """A valid two-entity topology to break in one place at a time."""
    return {
        "nodes": [
            {"id": "rack0000", "kind": "rack"},
            {"id": "n00000", "kind": "node"},
            {"id": "rack0000-cdu", "kind": "cooling"},
        ],
        "links": [
            {"source": "rack0000", "target": "n00000", "relation": "contains"},
            {"source": "rack0000-cdu", "target": "rack0000", "relation": "cools"},
        ],
    }


def _with(change: str) -> dict[str, Any]:
    data = tiny()
    if change == "unknown-kind":
        data["nodes"].append({"id": "n00000-tpu0", "kind": "tpu"})
    elif change == "duplicate-id":
        data["nodes"].append({"id": "n00000", "kind": "node"})
    elif change == "unknown-target":
        data["links"].append({"source": "rack0000", "target": "n09999", "relation": "contains"})
    elif change == "unknown-source":
        data["links"].append({"source": "rack0077-cdu", "target": "rack0000", "relation": "cools"})
    elif change == "unknown-relation":
        data["links"].append({"source": "rack0000-cdu", "target": "n00000", "relation": "feeds"})
    elif change == "no-id":
        data["nodes"].append({"kind": "gpu"})
    elif change == "no-nodes":
        del data["nodes"]
    elif change == "no-links":
        del data["links"]
    return data


@pytest.mark.parametrize(
    ("change", "named"),
    [
        pytest.param("unknown-kind", ["n00000-tpu0", "tpu"], id="unknown-kind"),
        pytest.param("duplicate-id", ["n00000", "twice"], id="duplicate-id"),
        pytest.param("unknown-target", ["n09999", "rack0000"], id="edge-to-unknown-entity"),
        pytest.param("unknown-source", ["rack0077-cdu"], id="edge-from-unknown-entity"),
        pytest.param("unknown-relation", ["feeds", "rack0000-cdu", "n00000"], id="unknown-relation"),
        pytest.param("no-id", ["no id", "gpu"], id="entity-without-id"),
        pytest.param("no-nodes", ['"nodes"'], id="missing-nodes"),
        pytest.param("no-links", ['"links"'], id="missing-links"),
    ],
)
def test_invalid_topology_names_the_culprit(change: str, named: list[str]) -> None:
    with pytest.raises(GraphError) as raised:
        TopologyGraph.from_json(_with(change))
    for word in named:
        assert word in str(raised.value)


def test_the_tiny_topology_itself_is_valid() -> None:
    g = TopologyGraph.from_json(tiny())
    assert len(g) == 3
    assert g.cooling_of("n00000") == "rack0000-cdu"


def test_json_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "topology.json"
    path.write_text("[1, 2, 3]\n")
    with pytest.raises(GraphError, match='"nodes" and "links"'):
        TopologyGraph.load(path)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "topology.json"
    with pytest.raises(GraphError) as raised:
        TopologyGraph.load(path)
    assert str(path) in str(raised.value)


def test_non_json_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "topology.json"
    path.write_text("nodes: [rack0000]\n")
    with pytest.raises(GraphError) as raised:
        TopologyGraph.load(path)
    assert str(path) in str(raised.value) and "not JSON" in str(raised.value)


def test_binary_file_is_a_graph_error(tmp_path: Path) -> None:
    path = tmp_path / "topology.json"
    path.write_bytes(gzip.compress(json.dumps(tiny()).encode()))
    with pytest.raises(GraphError) as raised:
        TopologyGraph.load(path)
    assert str(path) in str(raised.value)


def test_load_reads_what_the_generator_writes(tmp_path: Path) -> None:
    topology = build_fat_tree(64)
    path = tmp_path / "topology.json"
    topology.write(path)
    g = TopologyGraph.load(path)
    assert len(g) == topology.entity_count
    assert g.kind("leaf-p0-r3") == "leaf" and g.kind("n00001-nic3-optic") == "optic"


def test_the_real_topology_breaks_on_one_bad_edge(topo_json: dict[str, Any]) -> None:
    data = copy.deepcopy(topo_json)
    data["links"][1234]["target"] = "leaf-p9-r9"
    with pytest.raises(GraphError, match=r"edge #1234 .*'leaf-p9-r9'"):
        TopologyGraph.from_json(data)


def test_unknown_entity_in_a_query_is_named(graph: TopologyGraph) -> None:
    with pytest.raises(GraphError, match="n99999-gpu0"):
        graph.depends_on("n99999-gpu0")
    assert "n99999-gpu0" not in graph


# ---------------------------------------------------------------------- depends_on


@pytest.mark.parametrize("n", [0, 37, 127])
def test_gpu_depends_on_its_node_nvswitches_psus_rack_and_cooling(graph: TopologyGraph, n: int) -> None:
    gpu, rack = f"{node(n)}-gpu5", f"rack{n // 4:04d}"
    up = graph.depends_on(gpu)
    expected = {node(n), rack, f"{rack}-cdu", f"{node(n)}-psu0", f"{node(n)}-psu1"}
    expected |= {f"{node(n)}-nvsw{s}" for s in range(4)}
    assert set(up) == expected
    assert len(up) == len(expected)  # no repeats
    assert up[0] == node(n)  # nearest first
    assert up.index(rack) < up.index(f"{rack}-cdu")


@pytest.mark.parametrize(("n", "rail"), [(0, 0), (37, 3), (127, 7)])
def test_nic_depends_on_its_cable_leaf_and_spines_nearest_first(graph: TopologyGraph, n: int, rail: int) -> None:
    nic, pod = f"{node(n)}-nic{rail}", n // 32
    leaf, port = f"leaf-p{pod}-r{rail}", f"leaf-p{pod}-r{rail}:p{n % 32}"
    spines = [f"spine-r{rail}-s{s}" for s in range(SPINES_PER_RAIL)]
    optic, link = f"{nic}-optic", f"link-{nic}"
    up = graph.depends_on(nic)
    fabric = [e for e in up if graph.kind(e) in ("optic", "link", "port", "leaf", "spine")]
    assert set(fabric) == {optic, link, port, leaf, *spines}  # no other leaf, no other rail's spine
    assert set(up) - set(fabric) == {node(n), f"rack{n // 4:04d}", f"rack{n // 4:04d}-cdu"} | {
        f"{node(n)}-psu{p}" for p in range(2)
    }
    pos = {e: i for i, e in enumerate(up)}
    assert pos[node(n)] < pos[leaf] and pos[optic] < pos[link] < pos[port] < pos[leaf]
    assert all(pos[leaf] < pos[s] for s in spines)
    assert set(graph.depends_on(nic, max_depth=1)) == {node(n), optic}


def test_leaf_depends_on_the_spines_of_its_rail_only(graph: TopologyGraph) -> None:
    up = graph.depends_on("leaf-p2-r6")
    switches = {e for e in up if graph.kind(e) in ("leaf", "spine")}
    assert switches == {"spine-r6-s0", "spine-r6-s1"}


# ---------------------------------------------------------------------- dependents


@pytest.mark.parametrize(("pod", "rail"), [(0, 0), (1, 3), (3, 7)])
def test_leaf_dependents_are_its_32_nics_and_their_cables(graph: TopologyGraph, pod: int, rail: int) -> None:
    leaf = f"leaf-p{pod}-r{rail}"
    nics = {f"{n}-nic{rail}" for n in pod_nodes(pod)}
    assert set(graph.dependents(leaf, ["nic"])) == nics
    assert set(graph.dependents(leaf, ["optic"])) == {f"{n}-optic" for n in nics}
    assert set(graph.dependents(leaf, ["link"])) == {f"link-{n}" for n in nics}
    downlinks = {f"{leaf}:p{i}" for i in range(32)}
    uplinks = {f"{leaf}:u{s}" for s in range(SPINES_PER_RAIL)}
    assert set(graph.dependents(leaf, ["port"])) == downlinks | uplinks
    assert graph.dependents(leaf, ["gpu", "node", "spine", "leaf"]) == []


@pytest.mark.parametrize("n", [0, 37, 127])
def test_psu_dependents_are_its_node_and_the_nodes_gpus(graph: TopologyGraph, n: int) -> None:
    for psu in (f"{node(n)}-psu0", f"{node(n)}-psu1"):
        assert set(graph.dependents(psu, ["gpu"])) == {f"{node(n)}-gpu{i}" for i in range(8)}
        assert graph.dependents(psu, ["node"]) == [node(n)]
        assert graph.dependents(psu, ["psu", "leaf", "rack"]) == []


@pytest.mark.parametrize("rack", [0, 9, 31])
def test_cooling_dependents_are_the_nodes_of_its_rack(graph: TopologyGraph, rack: int) -> None:
    cdu = f"rack{rack:04d}-cdu"
    assert set(graph.dependents(cdu, ["node"])) == {node(4 * rack + i) for i in range(4)}
    assert set(graph.dependents(cdu, ["rack"])) == {f"rack{rack:04d}"}
    assert len(graph.dependents(cdu, ["gpu"])) == 32


@pytest.mark.parametrize(("rail", "s"), [(0, 0), (3, 1), (7, 1)])
def test_spine_dependents_are_every_nic_of_its_rail(graph: TopologyGraph, rail: int, s: int) -> None:
    spine = f"spine-r{rail}-s{s}"
    assert set(graph.dependents(spine, ["nic"])) == {f"{node(n)}-nic{rail}" for n in range(GPUS // 8)}
    assert set(graph.dependents(spine, ["leaf"])) == {f"leaf-p{p}-r{rail}" for p in range(PODS)}
    assert graph.dependents(spine, ["spine"]) == []


def test_leaves_nics_and_optics(graph: TopologyGraph) -> None:
    assert graph.dependents("n00037-nic3") == []
    assert graph.dependents("n00037-nic3-optic") == ["n00037-nic3"]
    assert graph.dependents("n00037-gpu2") == []


# ---------------------------------------------------------------------- helpers


def test_nic_and_port_round_trip_for_every_nic(graph: TopologyGraph) -> None:
    nics = [e for e in graph.ids if graph.kind(e) == "nic"]
    assert len(nics) == GPUS
    for nic in nics:
        n, rail = int(nic[1:6]), int(nic.rsplit("nic", 1)[1])
        port = graph.port_of_nic(nic)
        assert port == f"leaf-p{n // 32}-r{rail}:p{n % 32}"
        assert graph.nic_of_port(port) == nic
        assert graph.switch_of(nic) == graph.switch_of(port) == graph.parent(port) == f"leaf-p{n // 32}-r{rail}"


def test_far_switch_of_every_switch_to_switch_port(graph: TopologyGraph) -> None:
    ports = [e for e in graph.ids if graph.kind(e) == "port"]
    uplinks = [p for p in ports if ":u" in p]
    spine_ports = [p for p in ports if p.startswith("spine-")]
    assert len(uplinks) == len(spine_ports) == PODS * RAILS * SPINES_PER_RAIL
    for port in uplinks:  # leaf-pP-rR:uS
        leaf, s = port.split(":u")
        rail = leaf.rsplit("-r", 1)[1]
        assert graph.far_switch(port) == f"spine-r{rail}-s{s}"
        assert graph.nic_of_port(port) is None
    for port in spine_ports:  # spine-rR-sS:pP
        spine, pod = port.split(":p")
        assert graph.far_switch(port) == f"leaf-p{pod}-r{spine.split('-')[1][1:]}"
        assert graph.nic_of_port(port) is None
    assert graph.far_switch("leaf-p1-r3:p5") is None  # a downlink ends at a NIC


@pytest.mark.parametrize(
    ("entity", "cdu"),
    [
        ("n00037", "rack0009-cdu"),
        ("n00037-gpu7", "rack0009-cdu"),
        ("n00037-nic3", "rack0009-cdu"),
        ("n00037-psu1", "rack0009-cdu"),
        ("rack0009", "rack0009-cdu"),
        ("n00127-nvsw3", "rack0031-cdu"),
        ("leaf-p1-r3", None),
        ("spine-r3-s0", None),
    ],
)
def test_cooling_of(graph: TopologyGraph, entity: str, cdu: str | None) -> None:
    assert graph.cooling_of(entity) == cdu


def test_psus_and_node_of(graph: TopologyGraph) -> None:
    for n in range(GPUS // 8):
        assert graph.psus_of(node(n)) == [f"{node(n)}-psu0", f"{node(n)}-psu1"]
    assert graph.node_of("n00037-nic3-optic") == "n00037"
    assert graph.node_of("n00037") == "n00037"
    assert graph.node_of("leaf-p1-r3:p5") is None
    assert graph.ancestor("n00037-gpu2", "rack") == "rack0009"


def test_planes_are_rails(graph: TopologyGraph) -> None:
    planes: dict[int, set[int]] = {}
    for entity in graph.ids:
        kind = graph.kind(entity)
        if kind == "nic":
            rail = int(entity.rsplit("nic", 1)[1])
        elif kind in ("leaf", "spine", "port"):
            rail = int(entity.split(":")[0].split("-r")[1].split("-")[0])
        else:
            continue
        planes.setdefault(rail, set()).add(graph.plane(entity))
    assert sorted(planes) == list(range(RAILS))
    assert all(len(p) == 1 for p in planes.values()), planes  # one plane per rail
    ids = [next(iter(p)) for p in planes.values()]
    assert len(set(ids)) == RAILS and -1 not in ids  # different rails differ
    assert graph.plane("n00037-gpu2") == -1 and graph.plane("rack0009-cdu") == -1


# ---------------------------------------------------------------------- other topologies


@pytest.mark.parametrize("build", [build_torus, build_dragonfly, build_fat_tree], ids=lambda b: b.__name__)
def test_every_topology_loads(build: Callable[[int], Topology]) -> None:
    topology = build(256)
    g = TopologyGraph.from_json(topology.to_json())
    assert len(g) == topology.entity_count
    assert g.cooling_of("n00005-gpu1") == "rack0001-cdu"
    assert set(g.depends_on("n00005-gpu1")) >= {"n00005", "n00005-psu0", "rack0001", "rack0001-cdu"}


def test_torus_nics_are_cabled_without_switches() -> None:
    g = TopologyGraph.from_json(build_torus(256).to_json())
    links = [e for e in g.ids if g.kind(e) == "link"]
    assert links and all(len(g.peers(link)) == 2 for link in links)
    assert all(g.kind(p) == "optic" for link in links for p in g.peers(link))
    assert g.port_of_nic("n00005-nic0") is None
    assert g.switch_of("n00005-nic0") is None
    assert g.plane("n00005-nic0") == -1


def test_dragonfly_routers_form_one_plane() -> None:
    g = TopologyGraph.from_json(build_dragonfly(1024).to_json())
    routers = [e for e in g.ids if g.kind(e) == "leaf"]
    assert len(routers) == 32
    assert len({g.plane(r) for r in routers}) == 1
    for nic in ("n00000-nic0", "n00005-nic3", "n00127-nic7"):
        port = g.port_of_nic(nic)
        assert port is not None and g.nic_of_port(port) == nic
        assert g.plane(nic) == g.plane(routers[0])
    assert set(g.dependents("leaf-g0-r1", ["nic"])) >= {f"{node(n)}-nic{r}" for n in range(4, 8) for r in range(8)}


def test_dragonfly_router_ports_belong_to_their_router() -> None:
    g = TopologyGraph.from_json(build_dragonfly(256).to_json())
    assert g.parent("leaf-g0-r0:x1") == "leaf-g0-r0"
    assert g.far_switch("leaf-g0-r0:x1") == "leaf-g0-r1"
    assert g.far_switch("leaf-g0-r1:x0") == "leaf-g0-r0"
    assert g.plane("leaf-g0-r0:x1") == g.plane("leaf-g0-r0") != -1


@pytest.mark.parametrize("build", [build_fat_tree, build_dragonfly, build_torus])
def test_the_switch_a_nic_is_cabled_to_is_the_one_walking_up_from_it_finds(build: Callable[[int], Topology]) -> None:
    """NIC -> switch is read from the cables at load (a plane-wide storm asks it of every NIC);
    it must name the switch the dependency walk names, the way it was found before."""
    g = TopologyGraph.from_json(build(512).to_json())
    nics = [e for e in g.ids if g.kind(e) == "nic"]
    assert nics
    for nic in nics:
        walked = next((up for up in g.depends_on(nic, max_depth=4) if g.kind(up) in ("leaf", "spine")), None)
        assert g.switch_of(nic) == walked, nic
