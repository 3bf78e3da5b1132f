"""Ranking root causes on the hard cases: a group suspect against its members, a cable's three
suspects, power and cooling against the GPUs they feed, and congestion spreading through a plane."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import pytest

from detectors.anomaly import Anomaly
from rca.graph import TopologyGraph
from rca.rank import Candidate, Context, Ranker
from rca.symptoms import SOFT, Symptom, symptom_of
from telemetry_gen.topology import build_fat_tree
from tests.unit.rca_anomalies import anomaly as anomaly_at
from tests.unit.rca_anomalies import node

anomaly = partial(anomaly_at, 1_000_000.0)  # one tick is enough to rank

# 1024 GPUs: 128 nodes in 4 pods of 32; node n00037 is in pod 1, rack 9, on leaf port :p5 of each
# of its rails' leaves; two spines per rail.
NODE = "n00037"
LEAF = "leaf-p1-r3"
PORT = "leaf-p1-r3:p5"
NIC = "n00037-nic3"
OPTIC = "n00037-nic3-optic"


@pytest.fixture(scope="module")
def graph() -> TopologyGraph:
    return TopologyGraph.from_json(build_fat_tree(1024).to_json())


@pytest.fixture(scope="module")
def ranker(graph: TopologyGraph) -> Ranker:
    return Ranker(graph)


# ---------------------------------------------------------------------- anomalies, as detectors/stack.py names them


def link_downed(entity: str) -> Anomaly:
    return anomaly(entity, "link_downed", "rule:error_counter", "switch_port" if ":" in entity else "nic")


def symbol_errors(entity: str) -> Anomaly:
    return anomaly(entity, "symbol_error", "rule:error_counter", "switch_port" if ":" in entity else "nic", 40.0)


def link_state_down(entity: str) -> Anomaly:
    return anomaly(entity, "link_state", "rule:state", "switch_port" if ":" in entity else "nic", 0.0, None)


def silent(entity: str, measurement: str = "switch") -> Anomaly:
    return anomaly(entity, "silent", "rule:silent", measurement, None, None, {"last_seen": "999940"})


def sag(optic: str) -> Anomaly:
    return anomaly(optic, "rx_power_dbm", "warn:sag", "optic", -6.1, -4.0)


def power_brake(gpu: str) -> Anomaly:
    return anomaly(gpu, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "rule:state", "gpu", 128.0, None)


def psu_failed(psu: str) -> Anomaly:
    return anomaly(psu, "status", "rule:state", "psu", 0.0, None)


def supply_hot(cdu: str) -> Anomaly:
    return anomaly(cdu, "supply_temp_c", "peer:all", "cooling", 31.0, 18.0)


def inlet_hot(n: str) -> Anomaly:
    return anomaly(n, "inlet_temp_c", "peer:all", "node", 38.0, 24.0)


def gpu_temp(gpu: str, over: float) -> Anomaly:
    detector = "warn:job" if over < 18.0 else "peer:job"  # as detectors/stack.py tells them apart
    return anomaly(gpu, "DCGM_FI_DEV_GPU_TEMP", detector, "gpu", 62.0 + over, 62.0)


def gpu_nvlink(gpu: str) -> Anomaly:
    return anomaly(gpu, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "rule:error_counter", "gpu", 12.0)


def nvswitch_nvlink(nvswitch: str) -> Anomaly:
    return anomaly(nvswitch, "nvlink_crc_errors", "rule:error_counter", "nvswitch", 30.0)


def pause(entity: str, direction: str) -> Anomaly:
    measurement = "switch_port" if ":" in entity else "nic"
    return anomaly(entity, f"{direction}_prio3_pause", "rule:rate", measurement, 4000.0, 0.0)


def xmit_wait(switch: str) -> Anomaly:
    return anomaly(switch, "port_xmit_wait", "peer:role", "switch", 2.0e6, 3.0e3)


def sm_clock_low(gpu: str) -> Anomaly:
    return anomaly(gpu, "DCGM_FI_DEV_SM_CLOCK", "peer:job", "gpu", 1100.0, 1980.0)


def flapping(nic: str, port: str) -> list[Anomaly]:
    """A bouncing link shows on both ends."""
    return [link_downed(nic), link_state_down(nic), link_downed(port), symbol_errors(port)]


def storm(origin: str, rail: int, victims: Iterable[int]) -> list[Anomaly]:
    """A NIC sending pause frames, and the pauses spreading over NICs and leaf ports of its rail."""
    out = [pause(origin, "tx")]
    for n in victims:
        out.append(pause(f"{node(n)}-nic{rail}", "rx"))
        out.append(pause(f"leaf-p{n // 32}-r{rail}:p{n % 32}", "tx" if n % 2 else "rx"))
    return out


# ---------------------------------------------------------------------- what the engine knows around the symptoms


def context(graph: TopologyGraph, symptoms: Iterable[Symptom]) -> Context:
    """As IncidentEngine builds it: every entity's families, pause senders and waiting spines by plane."""
    families: dict[str, set[str]] = {}
    ctx = Context(families)
    for s in symptoms:
        families.setdefault(s.entity, set()).add(s.family)
        if s.family == "pause_tx":
            ctx.talkers.setdefault(graph.plane(s.entity), set()).add(s.entity)
        elif s.family == "wait" and graph.kind(s.entity) == "spine":
            ctx.congested.setdefault(graph.plane(s.entity), set()).add(s.entity)
    return ctx


def ranked(graph: TopologyGraph, ranker: Ranker, anomalies: list[Anomaly]) -> list[Candidate]:
    symptoms = [symptom_of(a) for a in anomalies]
    return ranker.rank([s for s in symptoms if s.family not in SOFT], context(graph, symptoms))


def covered(graph: TopologyGraph, ranker: Ranker, anomalies: list[Anomaly]) -> list[Candidate]:
    symptoms = [symptom_of(a) for a in anomalies]
    roots = ranker.cover(symptoms, context(graph, symptoms))
    explained = set().union(*(root.explains for root, _ in roots)) if roots else set()
    assert explained == {s for s in symptoms if s.family not in SOFT}  # every hard symptom has a root
    return [root for root, _ in roots]


# ---------------------------------------------------------------------- the top candidate

PSUS = {f"{NODE}-psu0", f"{NODE}-psu1"}
GPUS = [f"{NODE}-gpu{i}" for i in range(8)]
LEAF_NICS = [(f"{node(32 + i)}-nic3", f"{LEAF}:p{i}") for i in range(32)]

TOP_CASES = [
    pytest.param(
        [link_downed(nic) for nic, _ in LEAF_NICS],
        {LEAF},
        "leaf_down",
        id="32-nics-down-is-their-leaf",
    ),
    pytest.param(
        [a for nic, port in LEAF_NICS for a in flapping(nic, port)] + [silent(LEAF)],
        {LEAF},
        "leaf_down",
        id="32-links-and-a-silent-leaf",
    ),
    pytest.param(
        [a for nic, port in LEAF_NICS[:20] for a in flapping(nic, port)],
        {LEAF},
        "leaf_down",
        id="20-of-32-links-is-the-leaf",
    ),
    pytest.param(flapping(NIC, PORT), {NIC}, "nic_link_flap", id="one-flapping-link-is-the-nic"),
    pytest.param([link_downed(NIC)], {NIC}, "nic_link_flap", id="nic-side-only"),
    pytest.param([symbol_errors(PORT)], {NIC, OPTIC}, None, id="port-side-only-is-its-cable"),
    pytest.param(
        [*flapping(NIC, PORT), sag(OPTIC)], {OPTIC}, "optic_degradation", id="link-errors-and-a-sagging-optic"
    ),
    pytest.param(
        [psu_failed(f"{NODE}-psu1"), *(power_brake(g) for g in GPUS)],
        {f"{NODE}-psu1"},
        "psu_failure",
        id="failed-psu-and-8-braking-gpus",
    ),
    pytest.param([power_brake(g) for g in GPUS], PSUS, "psu_failure", id="8-braking-gpus-without-psu-status"),
    pytest.param([sm_clock_low(g) for g in GPUS], PSUS, "psu_failure", id="a-whole-node-slow"),
    pytest.param([power_brake(GPUS[2])], {GPUS[2]}, "gpu_straggler", id="one-braking-gpu-is-the-gpu"),
    pytest.param(
        [supply_hot("rack0009-cdu"), *(inlet_hot(node(n)) for n in range(36, 40))],
        {"rack0009-cdu"},
        "rack_cooling",
        id="cdu-supply-and-4-inlets",
    ),
    pytest.param(
        [inlet_hot(node(n)) for n in range(36, 40)], {"rack0009-cdu"}, "rack_cooling", id="4-inlets-without-supply"
    ),
    pytest.param([gpu_temp(GPUS[6], 25.0)], {GPUS[6]}, "gpu_thermal", id="one-hot-gpu-is-the-gpu-not-cooling"),
    pytest.param(
        [gpu_nvlink(GPUS[3]), *(nvswitch_nvlink(f"{NODE}-nvsw{s}") for s in range(4))],
        {GPUS[3]},
        "gpu_nvlink",
        id="gpu-nvlink-and-its-nvswitches",
    ),
    pytest.param(
        storm(NIC, 3, [0, 5, 40, 41, 70, 99, 100, 127]), {NIC}, "pfc_storm", id="pfc-storm-origin-across-pods"
    ),
    pytest.param(
        [xmit_wait(LEAF), xmit_wait("leaf-p2-r3"), xmit_wait("spine-r3-s1")],
        {"spine-r3-s1"},
        "spine_congestion",
        id="leaf-waits-on-congested-spine",
    ),
    pytest.param([xmit_wait(LEAF)], {LEAF}, "switch_congestion", id="leaf-wait-alone-is-the-leaf"),
]


@pytest.mark.parametrize(("anomalies", "roots", "kind"), TOP_CASES)
def test_top_candidate(
    graph: TopologyGraph, ranker: Ranker, anomalies: list[Anomaly], roots: set[str], kind: str | None
) -> None:
    candidates = ranked(graph, ranker, anomalies)
    assert candidates, "no suspect at all"
    top = candidates[0]
    assert top.entity in roots, [(c.entity, c.kind, c.score) for c in candidates[:4]]
    if kind is not None:
        assert top.kind == kind
    if len(roots) == 1:  # the decision is the evidence's, not a tie broken by name
        assert len(candidates) == 1 or candidates[1].score < top.score
    # the root explains every symptomatic entity
    assert {s.entity for s in top.explains} == {a.entity for a in anomalies if symptom_of(a).family not in SOFT}


def test_scores_are_sorted_and_the_ranking_deterministic(graph: TopologyGraph, ranker: Ranker) -> None:
    anomalies = [*flapping(NIC, PORT), sag(OPTIC)]
    first = ranked(graph, ranker, anomalies)
    assert [c.score for c in first] == sorted((c.score for c in first), reverse=True)
    assert ranked(graph, ranker, list(reversed(anomalies))) == first
    assert [(c.entity, c.kind) for c in first] == [
        (OPTIC, "optic_degradation"),
        (NIC, "nic_link_flap"),
        (LEAF, "leaf_down"),
    ]


def test_a_leaf_with_one_bad_nic_is_far_behind(graph: TopologyGraph, ranker: Ranker) -> None:
    candidates = {(c.entity, c.kind): c.score for c in ranked(graph, ranker, flapping(NIC, PORT))}
    assert candidates[(LEAF, "leaf_down")] < candidates[(NIC, "nic_link_flap")] - 2.0


def test_warm_gpu_is_an_early_sign_with_no_suspect(graph: TopologyGraph, ranker: Ranker) -> None:
    assert symptom_of(gpu_temp(GPUS[6], 8.0)).family == "warm"
    assert covered(graph, ranker, [gpu_temp(GPUS[6], 8.0), sag(OPTIC)]) == []


# ---------------------------------------------------------------------- several roots at once

COVER_CASES = [
    pytest.param(
        flapping("n00040-nic3", f"{LEAF}:p8") + flapping("n00045-nic3", f"{LEAF}:p13"),
        {("n00040-nic3", "nic_link_flap"), ("n00045-nic3", "nic_link_flap")},
        id="two-flapping-nics-under-one-leaf",
    ),
    pytest.param(
        storm("n00037-nic3", 3, [1, 2, 33, 90, 91]) + storm("n00100-nic5", 5, [3, 4, 50, 51, 126]),
        {("n00037-nic3", "pfc_storm"), ("n00100-nic5", "pfc_storm")},
        id="two-storms-in-two-rails",
    ),
    pytest.param(
        [xmit_wait(LEAF), xmit_wait("spine-r3-s1"), xmit_wait("leaf-p1-r4")],
        {("spine-r3-s1", "spine_congestion"), ("leaf-p1-r4", "switch_congestion")},
        id="a-spine-explains-its-own-plane-only",
    ),
    pytest.param(
        [link_downed(nic) for nic, _ in LEAF_NICS] + [gpu_nvlink(GPUS[3])],
        {(LEAF, "leaf_down"), (GPUS[3], "gpu_nvlink")},
        id="leaf-down-and-an-unrelated-gpu",
    ),
    pytest.param(
        [psu_failed("n00037-psu0"), *(power_brake(g) for g in GPUS), *flapping("n00038-nic2", "leaf-p1-r2:p6")],
        {("n00037-psu0", "psu_failure"), ("n00038-nic2", "nic_link_flap")},
        id="psu-and-a-neighbours-nic",
    ),
]


@pytest.mark.parametrize(("anomalies", "roots"), COVER_CASES)
def test_cover_finds_each_root(
    graph: TopologyGraph, ranker: Ranker, anomalies: list[Anomaly], roots: set[tuple[str, str]]
) -> None:
    found = covered(graph, ranker, anomalies)
    assert {(c.entity, c.kind) for c in found} == roots
    assert len(found) == len(roots)


def test_each_storm_explains_its_own_rail(graph: TopologyGraph, ranker: Ranker) -> None:
    anomalies = storm("n00037-nic3", 3, [1, 2, 33, 90]) + storm("n00100-nic5", 5, [3, 4, 50, 51])
    for root in covered(graph, ranker, anomalies):
        rail = root.entity[-1]
        assert {graph.plane(s.entity) for s in root.explains} == {graph.plane(root.entity)}
        assert all(s.entity.endswith(f"nic{rail}") or f"-r{rail}:" in s.entity for s in root.explains)


def test_cover_alternatives_share_the_roots_evidence(graph: TopologyGraph, ranker: Ranker) -> None:
    symptoms = [symptom_of(a) for a in [*flapping(NIC, PORT), sag(OPTIC)]]
    [(root, rivals)] = ranker.cover(symptoms, context(graph, symptoms))
    assert root == rivals[0]
    assert [c.entity for c in rivals] == [OPTIC, NIC, LEAF]
    assert all(c.explains & root.explains for c in rivals)


def test_three_flapping_nics_under_a_leaf_are_three_nics(graph: TopologyGraph, ranker: Ranker) -> None:
    anomalies = [a for nic, port in LEAF_NICS[:3] for a in flapping(nic, port)]
    found = covered(graph, ranker, anomalies)
    assert {(c.entity, c.kind) for c in found} == {(nic, "nic_link_flap") for nic, _ in LEAF_NICS[:3]}


# ---------------------------------------------------------------------- the quiet faults (issue 29)


def fabric_failed(gpu: str) -> Anomaly:
    return anomaly(gpu, "DCGM_FI_DEV_FABRIC_MANAGER_STATUS", "rule:state", "gpu", 4.0, None)


def test_every_gpu_of_a_node_without_its_fabric_is_the_nodes_fabric_manager(
    graph: TopologyGraph, ranker: Ranker
) -> None:
    best = ranked(graph, ranker, [fabric_failed(f"{NODE}-gpu{g}") for g in range(8)])[0]
    assert (best.entity, best.kind) == (NODE, "nvswitch_fabric_manager")


def test_one_gpu_without_its_fabric_is_that_gpu(graph: TopologyGraph, ranker: Ranker) -> None:
    best = ranked(graph, ranker, [fabric_failed(f"{NODE}-gpu5")])[0]
    assert (best.entity, best.kind) == (f"{NODE}-gpu5", "gpu_fault")


def test_a_gpus_own_link_and_memory_states_name_their_kinds(graph: TopologyGraph, ranker: Ranker) -> None:
    gpu = f"{NODE}-gpu2"
    cases = {
        "DCGM_FI_DEV_PCIE_LINK_GEN": "gpu_pcie_downtrained",
        "DCGM_FI_DEV_PCIE_LINK_WIDTH": "gpu_pcie_downtrained",
        "nvlink_links_up": "gpu_nvlink_down",
        "DCGM_FI_DEV_ROW_REMAP_PENDING": "gpu_row_remap_pending",
    }
    for metric, kind in cases.items():
        best = ranked(graph, ranker, [anomaly(gpu, metric, "rule:state", "gpu", 1.0, None)])[0]
        assert (best.entity, best.kind) == (gpu, kind), metric
    # a GPU gone without Xid 79 is lost; with it, it fell off the bus
    assert ranked(graph, ranker, [silent(gpu, "gpu")])[0].kind == "gpu_lost"
    xid79 = anomaly(gpu, "DCGM_FI_DEV_XID_ERRORS", "rule:xid", "gpu", 79.0, None, {"suggests": "gpu_fell_off_bus"})
    assert ranked(graph, ranker, [xid79, silent(gpu, "gpu")])[0].kind == "gpu_fell_off_bus"


def test_a_link_that_stays_up_is_named_apart_from_one_that_goes_down(graph: TopologyGraph, ranker: Ranker) -> None:
    retrains = anomaly(NIC, "link_error_recovery", "rule:error_counter", "nic", 2.0, 2.0)
    best = ranked(graph, ranker, [retrains, symbol_errors(PORT)])[0]
    assert (best.entity, best.kind) == (NIC, "ib_link_errors")
    best = ranked(graph, ranker, [retrains, *flapping(NIC, PORT)])[0]
    assert (best.entity, best.kind) == (NIC, "nic_link_flap")
    narrow = anomaly(NIC, "link_width", "rule:state", "nic", 2.0, None)
    best = ranked(graph, ranker, [narrow])[0]
    assert (best.entity, best.kind) == (NIC, "ib_link_degraded")
    # a leaf gone still takes every cable under it, whatever each NIC's evidence names
    under = [f"{node(n)}-nic3" for n in range(32, 64)]
    down = [a for nic in under for a in (link_downed(nic), link_state_down(nic))]
    best = ranked(graph, ranker, [silent(LEAF), *down])[0]
    assert (best.entity, best.kind) == (LEAF, "leaf_down")
