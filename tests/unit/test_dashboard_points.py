"""What the daemons write for the dashboards beside the telemetry: where an entity sits (rail and
pod from the topology), which job holds which node, and the service's own health."""

from __future__ import annotations

from aiops.pipeline import entity_tags
from rca.graph import TopologyGraph
from rca.influx import JOB_MEASUREMENT, NODE_MEASUREMENT, SERVICE_MEASUREMENT, job_lines, service_line
from telemetry_gen.topology import build_fat_tree


def test_rail_and_pod_come_from_the_topology() -> None:
    topology = build_fat_tree(2048)  # 256 nodes: 8 pods of 32 nodes, a leaf per rail per pod
    where = entity_tags(TopologyGraph.from_json(topology.to_json()))
    assert where("n00200-nic5")["rail"] == "5" and where("n00200-nic5")["pod"] == "pod6"
    assert where("n00200-nic5-optic")["rail"] == "5"  # an optic: through its NIC
    assert where("n00200-gpu3") == {"node": "n00200", "rack": "rack0050", "pod": "pod6"}  # no rail of its own
    assert where("leaf-p3-r2")["rail"] == "2" and where("leaf-p3-r2")["pod"] == "pod3"
    assert "pod" not in where("spine-r0-s0") and where("spine-r0-s0")["rail"] == "0"  # spines span pods
    assert where("no-such-entity") == {}


def test_a_topology_without_labels_gives_none() -> None:
    data = {
        "nodes": [{"id": "n1", "kind": "node"}, {"id": "n1-nic0", "kind": "nic"}, {"id": "sw", "kind": "leaf"}],
        "links": [
            {"source": "n1", "target": "n1-nic0", "relation": "contains"},
            {"source": "n1-nic0", "target": "sw", "relation": "connects"},
        ],
    }
    where = entity_tags(TopologyGraph.from_json(data))
    assert "rail" not in where("n1-nic0") and "pod" not in where("n1")


def test_jobs_become_one_point_per_node_they_hold_and_node_states_one_per_node() -> None:
    events = [
        {"type": "job_start", "job": "j1", "nodes": ["n1", "n2"], "gpus": 12, "time": 100.0},
        {
            "type": "job_running",
            "job": "j2",
            "nodes": ["n3"],
            "gpus": 4,
            "gpus_by_node": {"n3": [0, 1, 2, 3]},
            "time": 100.0,
        },
        {"type": "job_end", "job": "j1", "reason": "node failure, requeued", "time": 200.0},
        {"type": "maintenance", "nodes": ["n4"], "time": 150.0},  # not a job: nothing
        {"type": "node_state", "nodes": ["n5", "n6"], "state": "drain", "reason": "hbm ecc", "time": 160.0},
        {"type": "node_state", "nodes": ["n6"], "state": "ok", "time": 170.0},
    ]
    lines = job_lines(events)
    assert lines == [
        f"{JOB_MEASUREMENT},job=j1,node=n1 running=1i,gpus=6i 100000000000",
        f"{JOB_MEASUREMENT},job=j1,node=n2 running=1i,gpus=6i 100000000000",
        # the job's own series: what it holds in all, while it runs (the fleet's GPUs allocated)
        f"{JOB_MEASUREMENT},job=j1 running=1i,gpus=12i 100000000000",
        f"{JOB_MEASUREMENT},job=j2,node=n3 running=1i,gpus=4i 100000000000",
        f"{JOB_MEASUREMENT},job=j2 running=1i,gpus=4i 100000000000",
        f'{JOB_MEASUREMENT},job=j1 running=0i,gpus=0i,reason="node failure, requeued" 200000000000',
        f'{NODE_MEASUREMENT},node=n5 state="drain",reason="hbm ecc",drained=1i,down=0i 160000000000',
        f'{NODE_MEASUREMENT},node=n6 state="drain",reason="hbm ecc",drained=1i,down=0i 160000000000',
        f'{NODE_MEASUREMENT},node=n6 state="ok",reason="",drained=0i,down=0i 170000000000',
    ]


def test_the_service_line_holds_counters_and_gauges() -> None:
    line = service_line("host-1", "aiops-run", 1_000, 10, 42, 3.5, 0.25, 7)
    fields = "values=1000i,ticks=10i,lag=42i,tick_delay_s=3.5,analysis_s=0.25"
    assert line == f"{SERVICE_MEASUREMENT},instance=host-1,role=aiops-run {fields} 7"
    assert "tick_delay_s" not in service_line("h", "g", 0, 0, 0, None, 0.0, 7)  # nothing analysed yet
