"""The blast radius of a fabric fault follows the traffic (rca/blast.py): a spine's jobs are those
whose traffic crosses it (in a rail-optimised fat-tree, jobs spanning pods), a leaf's those with
GPUs under it; the engine's count, its severity and the page's count are the same one.

The cluster: 1,024 GPUs, 128 nodes in 4 pods of 32 (n00000-n00031 are pod 0), 8 rails, a leaf per
rail per pod (leaf-pP-rR), two spines per rail (spine-rR-s0/s1) joining that rail's 4 leaves."""

from __future__ import annotations

from typing import Any

import pytest

from detectors.anomaly import Anomaly
from rca.blast import AT_ONSET, radius
from rca.graph import TopologyGraph
from rca.incidents import IncidentEngine
from show.blast import blast_radius
from telemetry_gen.topology import build_fat_tree
from tests.unit.rca_anomalies import anomaly, node
from vocab import registry
from vocab.schedule import Schedule

T = 1_700_000_000.0
SPINE = "spine-r3-s1"
POD = 32  # nodes per pod


@pytest.fixture(scope="module")
def graph() -> TopologyGraph:
    return TopologyGraph.from_json(build_fat_tree(1024).to_json())


def pod(p: int, first: int = 0, count: int = POD) -> list[str]:
    return [node(p * POD + n) for n in range(first, first + count)]


def start(job: str, nodes: list[str], t: float = T - 3600, gpus_by_node: dict[str, list[int]] | None = None) -> Any:
    e: dict[str, Any] = {"type": "job_start", "time": t, "job": job, "nodes": nodes}
    if gpus_by_node is not None:
        e |= {"gpus_by_node": gpus_by_node, "gpus": sum(map(len, gpus_by_node.values()))}
    return e


# 640 GPUs in jobs that each stay inside one pod: their traffic turns round at their pod's leaves
IN_POD = [
    start("pod0-a", pod(0, 0, 16)),  # 128 GPUs
    start("pod0-b", pod(0, 16, 16)),  # 128 GPUs
    start("pod1", pod(1)),  # 256 GPUs
    start("pod2-a", pod(2, 0, 8)),  # 64 GPUs
    start("pod2-b", pod(2, 8, 8)),  # 64 GPUs
]


def congested(at: float, spine: str = SPINE) -> list[Anomaly]:
    """A spine waiting on its ports (port_xmit_wait against the other spines: detectors/stack.py)."""
    return [anomaly(at, spine, "port_xmit_wait", "peer:role", "switch", 2.0e6, 3.0e3)]


def spine_incident(graph: TopologyGraph, schedule: Schedule) -> Any:
    engine = IncidentEngine(graph, schedule)
    [incident] = engine.process(T, congested(T))
    assert (incident.root.entity, incident.root.kind) == (SPINE, "spine_congestion")
    return incident


def test_a_spine_congestion_counts_no_job_that_stays_inside_one_pod(graph: TopologyGraph) -> None:
    incident = spine_incident(graph, Schedule.from_events(IN_POD))
    # 640 GPUs run under the spine's leaves, none of their traffic goes up to it: no job hit, and
    # the severity stays the kind's own (before: every job on the rail, 640 GPUs, critical)
    assert (incident.jobs, incident.gpus_hit) == ([], 0)
    assert incident.severity == registry.severity("spine_congestion") == "major"


def test_a_job_spanning_two_pods_is_the_one_a_spine_counts(graph: TopologyGraph) -> None:
    span = start("span", pod(0, 30, 2) + pod(3, 0, 2))  # 2 nodes in pod 0, 2 in pod 3: 32 GPUs
    schedule = Schedule.from_events([*IN_POD, span])
    incident = spine_incident(graph, schedule)
    assert (incident.jobs, incident.gpus_hit) == (["span"], 32)
    assert incident.severity == "major"
    # the page counts the same job, from the record and the scheduler's events (show/blast.py)
    record = {"opened": T, "updated": T, "root_cause": {"entity": SPINE}, "affected": [SPINE], "evidence": []}
    blast = blast_radius(record, graph, schedule)
    assert [(j.job, j.when, j.gpus_affected, j.gpus_total) for j in blast.jobs] == [("span", AT_ONSET, 32, 32)]


def test_a_spine_counts_a_job_by_the_rails_it_uses_within_pods(graph: TopologyGraph) -> None:
    # a job on two nodes of one pod: its rail-3 traffic turns round at leaf-p0-r3, whatever GPUs
    # it holds; one that holds GPUs in pods 1 and 2 sends through the rail's spines
    schedule = Schedule.from_events(
        [
            start("one-pod", pod(0, 0, 2), gpus_by_node={node(0): [0, 1], node(1): [0, 1]}),
            start("two-pods", [node(40), node(70)], gpus_by_node={node(40): [3], node(70): [3]}),
        ]
    )
    blast = radius(graph, schedule, SPINE, [], T, T)
    assert [(j.job, j.gpus_total) for j in blast.counted(AT_ONSET)] == [("two-pods", 2)]


def test_a_leafs_jobs_are_those_with_gpus_under_it(graph: TopologyGraph) -> None:
    leaf = "leaf-p1-r3"  # the rail-3 leaf of pod 1: n00032-n00063
    schedule = Schedule.from_events(
        [
            start("under", pod(1, 0, 4)),  # 32 GPUs under it
            start("half-under", [node(60), node(70)], gpus_by_node={node(60): [0, 1], node(70): [0, 1]}),
            start("pod0", pod(0, 0, 4)),  # same rail, another pod's leaf
            start("span", pod(0, 4, 2) + pod(2, 0, 2)),  # crosses the rail's spines, not this leaf
        ]
    )
    # the record lists, besides the leaf's own NICs, a NIC of pod 0 that the incident took in:
    # the symptoms it holds do not widen the jobs its failure cuts off
    affected = [leaf, *(f"{n}-nic3" for n in pod(1)), f"{node(2)}-nic3"]
    record = {"opened": T, "updated": T, "root_cause": {"entity": leaf}, "affected": affected, "evidence": []}
    blast = blast_radius(record, graph, schedule)
    hits = {j.job: (j.gpus_affected, j.gpus_total) for j in blast.counted(AT_ONSET)}
    assert hits == {"under": (32, 32), "half-under": (2, 4)}


def three_tiers() -> TopologyGraph:
    """A fabric of one rail in three tiers, as the topology importer writes one (a core is a
    spine above spines; every switch-to-switch edge runs upward): two pods of two leaves with
    four hosts each, two spines per pod joining its leaves, one core above the four spines."""
    nodes: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []

    def cable(low: str, low_port: str, high: str, high_port: str) -> None:
        link = f"link-{low}-{high}"
        nodes.extend(
            [{"id": low_port, "kind": "port"}, {"id": high_port, "kind": "port"}, {"id": link, "kind": "link"}]
        )
        links.extend(
            [
                {"source": low, "target": low_port, "relation": "contains"},
                {"source": high, "target": high_port, "relation": "contains"},
                {"source": low_port, "target": link, "relation": "connects"},
                {"source": link, "target": high_port, "relation": "connects"},
                {"source": low, "target": high, "relation": "connects"},
            ]
        )

    nodes.append({"id": "core", "kind": "spine", "role": "core"})
    for p in range(2):
        for s in range(2):
            nodes.append({"id": f"spine-p{p}-s{s}", "kind": "spine"})
            cable(f"spine-p{p}-s{s}", f"spine-p{p}-s{s}:u0", "core", f"core:p{2 * p + s}")
        for leaf_n in range(2):
            leaf = f"leaf-p{p}-l{leaf_n}"
            nodes.append({"id": leaf, "kind": "leaf", "pod": p, "rail": 0})
            for s in range(2):
                cable(leaf, f"{leaf}:u{s}", f"spine-p{p}-s{s}", f"spine-p{p}-s{s}:p{leaf_n}")
            for h in range(4):
                host = f"h{p}{leaf_n}{h}"
                nic, optic, link, port = f"{host}-nic0", f"{host}-nic0-optic", f"link-{host}-nic0", f"{leaf}:p{h}"
                nodes.append({"id": host, "kind": "node"})
                nodes.extend({"id": f"{host}-gpu{i}", "kind": "gpu"} for i in range(8))
                links.extend({"source": host, "target": f"{host}-gpu{i}", "relation": "contains"} for i in range(8))
                nodes.extend(
                    [
                        {"id": nic, "kind": "nic", "rail": 0},
                        {"id": optic, "kind": "optic"},
                        {"id": link, "kind": "link"},
                        {"id": port, "kind": "port"},
                    ]
                )
                links.extend(
                    [
                        {"source": host, "target": nic, "relation": "contains"},
                        {"source": nic, "target": optic, "relation": "contains"},
                        {"source": optic, "target": link, "relation": "connects"},
                        {"source": link, "target": port, "relation": "connects"},
                        {"source": leaf, "target": port, "relation": "contains"},
                    ]
                )
    return TopologyGraph.from_json({"nodes": nodes, "links": links})


def test_in_three_tiers_a_pods_spine_carries_its_leaves_traffic_and_the_core_the_pods() -> None:
    g = three_tiers()
    schedule = Schedule.from_events(
        [
            start("one-leaf", ["h000", "h001"]),  # turns round at leaf-p0-l0
            start("one-pod", ["h002", "h010"]),  # leaf-p0-l0 to leaf-p0-l1: pod 0's spines
            start("two-pods", ["h003", "h110"]),  # pod 0 to pod 1: up through the core
        ]
    )

    def hit(root: str) -> list[str]:
        return sorted(j.job for j in radius(g, schedule, root, [], T, T).counted(AT_ONSET))

    assert hit("spine-p0-s0") == ["one-pod", "two-pods"]
    assert hit("spine-p1-s1") == ["two-pods"]
    assert hit("core") == ["two-pods"]
    assert hit("leaf-p0-l0") == ["one-leaf", "one-pod", "two-pods"]  # every job with GPUs under it
    assert hit("leaf-p1-l0") == []
