"""`aiops bench rca` at small sizes: one row per size, the bursts it feeds are the ones the
detectors would report, and each burst's incident names its root (no timing assertions)."""

from __future__ import annotations

import argparse
import io

import pytest
from rich.console import Console

from aiops.cli import main
from benchmarks.rca import _RcaScenario, bench_rca, rca_tables
from rca.graph import TopologyGraph
from telemetry_gen.topology import build_fat_tree


def test_bench_rca_has_a_row_per_size_and_finds_the_roots() -> None:
    out = io.StringIO()
    args = argparse.Namespace(sizes=[256, 1024], repeat=2, background_ticks=5, seed=1)
    rows = bench_rca(args, Console(file=out, width=200))
    assert [r.gpus for r in rows] == [256, 1024]
    for r in rows:
        assert r.root_ok, (r.leaf, r.leaf_root, r.storm_origin, r.storm_root)
        assert r.leaf_anomalies > 0 and r.storm_anomalies > 0
        assert r.entities > 0 and r.edges > 0
    graphs, latency = rca_tables(rows)
    assert graphs.row_count == latency.row_count == 2
    text = out.getvalue()
    assert "root ok" in text and "1,024" in text  # wide enough for one-line headers
    assert text.count(" yes ") == 2


def test_bench_rca_bursts_are_the_ones_the_graph_expects() -> None:
    topology = build_fat_tree(1024)
    graph = TopologyGraph.from_json(topology.to_json())
    sc = _RcaScenario.build(topology, background_ticks=3, seed=1)
    assert graph.kind(sc.leaf) == "leaf" and graph.kind(sc.origin) == "nic"
    assert sorted(sc.leaf_nics) == sorted(graph.dependents(sc.leaf, ["nic"]))
    assert len(sc.leaf_nics) == 32
    assert sc.spine_ports and all(graph.far_switch(p) == sc.leaf for p in sc.spine_ports)
    assert all(graph.kind(graph.parent(p) or "") == "spine" for p in sc.spine_ports)
    assert sc.origin not in sc.storm_nics
    assert len(sc.storm_nics) + 1 == sum(1 for n in topology.ids["nic"] if n.endswith("-nic5"))
    assert {graph.plane(e) for e in sc.storm_nics + sc.storm_ports_tx + sc.storm_ports_rx} == {graph.plane(sc.origin)}
    burst = {a.entity for a in sc.leaf_down(0.0)} | {a.entity for a in sc.storm(0.0)}
    assert all(a.entity not in burst for tick in sc.trickle for a in tick), "the trickle avoids the bursts"


def test_cli_bench_rca(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "rca", "--sizes", "256", "--repeat", "1", "--background-ticks", "3"]) == 0
    out = capsys.readouterr().out
    assert "IncidentEngine.process" in out and "yes" in out and " no" not in out
