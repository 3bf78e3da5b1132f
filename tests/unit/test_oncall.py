"""The on-call extras of an incident page (show/oncall.py, show/templates/_oncall.html): what
changed near the root, the commands to look at it, the root against its peers, what the predictor
said. Each checked on concrete cases with numbers worked out by hand, on missing inputs, on their
bounds, and on hostile ids (a command quotes every value; the page escapes every text).

The cluster: 64 nodes (n00000-n00063) of 8 GPUs in 2 pods of 32, racks of 4 (rack0000 holds
n00000-n00003, rack0001 n00004-n00007), 8 rails, a leaf per rail per pod (leaf-p0-r2 holds NIC 2
of n00000-n00031)."""

from __future__ import annotations

import re
import shlex
from html import unescape
from typing import Any

import pytest

from detectors.anomaly import Anomaly
from rca.graph import TopologyGraph
from rca.symptoms import symptom_of
from show import oncall
from show.oncall import (
    LOOKBACK_S,
    MAX_EARLIER,
    MAX_EVENTS,
    MAX_PEERS,
    MAX_PREDICTIONS,
    PEER_KINDS,
    OnCall,
    commands_for,
    early_sign,
    oncall_for,
    peer_comparison,
    peer_keys,
    peer_metrics,
    predictor_evidence,
    what_changed,
)
from show.page import _ENV
from telemetry_gen.topology import build_fat_tree
from vocab import registry
from vocab.schedule import Schedule
from vocab.thresholds import MIN_USEFUL_LEAD_S, WINDOW_S

T = 1_700_000_000.0
SM = "DCGM_FI_DEV_SM_CLOCK"
POWER = "DCGM_FI_DEV_POWER_USAGE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
HOSTILE = "n1;rm -rf /"


@pytest.fixture(scope="module")
def graph() -> TopologyGraph:
    return TopologyGraph.from_json(build_fat_tree(512).to_json())


def record(entity: str = "n00001-gpu3", kind: str = "gpu_straggler", **more: Any) -> dict[str, Any]:
    """An incident record as rca/incidents.py Incident.record() writes it, opened at T."""
    out: dict[str, Any] = {
        "incident_id": "inc-20231114T221320Z-0000000001",
        "opened": T,
        "updated": T + 60,
        "resolved": None,
        "status": "open",
        "severity": "minor",
        "root_cause": {"entity": entity, "kind": kind, "confidence": 0.9},
        "candidates": [{"entity": entity, "kind": kind, "score": 1.0}],
        "affected": [entity],
        "affected_count": 1,
        "jobs": [],
        "job_gpus": {},
        "gpus_hit": 0,
        "evidence": [],
        "evidence_count": 0,
        "action": registry.action(kind),
        "warned": None,
        "merged_into": None,
        "no_data_since": None,
        "no_data_entities": [],
        "episodes": [{"opened": T, "resolved": None}],
    }
    out.update(more)
    return out


def drain(node: str, at: float, reason: str = "bad DIMM") -> dict[str, Any]:
    return {"type": "node_state", "time": at, "nodes": [node], "state": "drain", "reason": reason}


def job_start(job: str, nodes: list[str], at: float, gpus_by_node: dict[str, list[int]] | None = None) -> Any:
    e: dict[str, Any] = {"type": "job_start", "time": at, "job": job, "nodes": nodes}
    if gpus_by_node is not None:
        e |= {"gpus_by_node": gpus_by_node, "gpus": sum(map(len, gpus_by_node.values()))}
    else:
        e["gpus"] = 8 * len(nodes)
    return e


# ------------------------------------------------------------------ what changed


def test_events_near_the_root_newest_first_each_with_how_it_is_near(graph: TopologyGraph) -> None:
    events = [
        job_start("j1", ["n00000", "n00001"], T - 7200),
        drain("n00002", T - 600),  # rack0000, like n00001: same rack
        drain("n00004", T - 500),  # rack0001, but under the same leaves (pod 0): same leaf
        drain("n00040", T - 400),  # pod 1, rack0010: nothing to do with it
        {"type": "job_end", "time": T + 30, "job": "j1", "reason": "NODE_FAIL"},  # names no node: its start did
        {
            "type": "maintenance",
            "time": T - 9000,
            "nodes": ["n00003"],
            "start": T - 8000,
            "end": T - 4400,
            "name": "fw",
        },
    ]
    changed = what_changed(record(), graph, events, [])
    assert changed is not None and changed.onset == T and changed.since == T - LOOKBACK_S and changed.until is None
    assert changed.events is not None
    rows = [(c.when, c.what, c.entity, c.relation, c.during) for c in changed.events]
    assert rows == [
        (T + 30, "job j1 ended: NODE_FAIL; 1 more of its nodes are near the root", "n00001", "same node", True),
        (T - 500, "node drained: bad DIMM", "n00004", "same leaf", False),
        (T - 600, "node drained: bad DIMM", "n00002", "same rack", False),
        (
            T - 7200,
            "job j1 started (2 nodes, 16 GPUs); 1 more of its nodes are near the root",
            "n00001",
            "same node",
            False,
        ),
        (T - 8000, "maintenance fw for 60 min", "n00003", "same rack", False),
    ]
    assert changed.incidents == () and changed.events_left_out == 0


def test_the_window_runs_from_a_day_before_onset_to_the_resolution(graph: TopologyGraph) -> None:
    since = T - LOOKBACK_S
    events = [drain("n00001", since - 1), drain("n00001", since), drain("n00001", T + 100), drain("n00001", T + 101)]
    changed = what_changed(record(resolved=T + 100), graph, events, None)
    assert changed is not None and changed.events is not None
    assert [c.when for c in changed.events] == [T + 100, since]
    assert changed.incidents is None  # none were read: the page says so, not "none"


def test_events_are_bounded_and_the_rest_counted(graph: TopologyGraph) -> None:
    events = [drain("n00001", T - 60 * k) for k in range(MAX_EVENTS + 7)]
    changed = what_changed(record(), graph, events, [])
    assert changed is not None and changed.events is not None
    assert len(changed.events) == MAX_EVENTS and changed.events_left_out == 7
    assert changed.events[0].when == T and changed.events[-1].when == T - 60 * (MAX_EVENTS - 1)


def test_an_event_the_schedule_would_refuse_is_not_shown(graph: TopologyGraph) -> None:
    events: list[Any] = [
        drain(HOSTILE, T - 60),  # a node id the grammar refuses
        {"type": "node_state", "time": T - 60, "nodes": ["n00001"], "state": "exploded"},
        "not an event",
        drain("n00001", T - 30, reason="<script>alert(1)</script>" + "x" * 500),
    ]
    changed = what_changed(record(), graph, events, [])
    assert changed is not None and changed.events is not None
    [row] = changed.events
    assert row.what.startswith("node drained: <script>") and len(row.what) < 160  # cut, escaped by the page


def incident(iid: str, entity: str, opened: float, **more: Any) -> dict[str, Any]:
    return record(
        entity,
        "gpu_hbm_ecc",
        **{"incident_id": iid, "opened": opened, "updated": opened, "severity": "critical", **more},
    )


def test_earlier_incidents_on_the_same_root_node_rack_or_leaf(graph: TopologyGraph) -> None:
    earlier = [
        incident("a", "n00001-gpu3", T - 86400 * 3, resolved=T - 86400 * 3 + 1800, status="resolved"),
        incident("b", "n00001-gpu5", T - 7200),  # the same node
        incident("c", "n00002-gpu0", T - 3600),  # the same rack
        incident("d", "n00005-nic2", T - 1800),  # another rack, the same leaves
        incident("e", "n00040-gpu0", T - 900),  # pod 1: not near
        incident("f", "n00001-gpu3", T + 60),  # after this one opened: not earlier
        incident("g", "n00001-psu0", T - 600, merged_into="b"),  # folded into b, which is listed
        incident("h", "not-in-the-topology", T - 300),
        record(),  # itself
    ]
    changed = what_changed(record(), graph, None, earlier)
    assert changed is not None and changed.incidents is not None and changed.events is None
    rows = [(c.incident_id, c.relation, c.entity) for c in changed.incidents]
    assert rows == [
        ("d", "same leaf", "n00005-nic2"),
        ("c", "same rack", "n00002-gpu0"),
        ("b", "same node", "n00001-gpu5"),
        ("a", "same root", "n00001-gpu3"),
    ]
    assert changed.incidents[-1].what == "gpu_hbm_ecc (critical, resolved after 30 min)"


def test_a_network_root_names_its_leaf_before_its_rack(graph: TopologyGraph) -> None:
    # n00002 shares n00001's rack and (NIC 2 on leaf-p0-r2) its leaf: for a NIC the leaf comes first
    earlier = [incident("x", "n00002-nic2", T - 600)]
    nic = what_changed(record("n00001-nic2", "ib_link_errors"), graph, [drain("n00002", T - 60)], earlier)
    gpu = what_changed(record("n00001-gpu3"), graph, [drain("n00002", T - 60)], earlier)
    assert nic is not None and gpu is not None and nic.events and gpu.events and nic.incidents and gpu.incidents
    assert (nic.events[0].relation, nic.incidents[0].relation) == ("same leaf", "same leaf")
    assert (gpu.events[0].relation, gpu.incidents[0].relation) == ("same rack", "same rack")


def test_a_history_of_states_counts_each_incident_once_at_its_latest(graph: TopologyGraph) -> None:
    states = [incident("b", "n00001-gpu5", T - 7200, updated=T - 7200 + k, status="open") for k in range(5)]
    states.append(incident("b", "n00001-gpu5", T - 7200, updated=T - 3600, resolved=T - 3600, status="resolved"))
    changed = what_changed(record(), graph, None, states)
    assert changed is not None and changed.incidents is not None
    [row] = changed.incidents
    assert row.what == "gpu_hbm_ecc (critical, resolved after 60 min)"


def test_earlier_incidents_are_bounded_newest_first(graph: TopologyGraph) -> None:
    earlier = [incident(f"i{k:02d}", "n00001-gpu3", T - 3600 * (k + 1)) for k in range(MAX_EARLIER + 3)]
    changed = what_changed(record(), graph, None, earlier)
    assert changed is not None and changed.incidents is not None
    assert [c.incident_id for c in changed.incidents] == [f"i{k:02d}" for k in range(MAX_EARLIER)]
    assert changed.incidents_left_out == 3


def test_nothing_is_near_without_a_topology_that_knows_the_root(graph: TopologyGraph) -> None:
    assert what_changed(record(), None, [], []) is None
    assert what_changed(record("nowhere-gpu0"), graph, [], []) is None


def test_a_spine_root_reaches_the_nodes_below_it(graph: TopologyGraph) -> None:
    events = [drain("n00040", T - 60), drain("n00001", T - 120)]  # pod 1 and pod 0, both under rail 2's spines
    changed = what_changed(record("spine-r2-s0", "spine_congestion"), graph, events, [])
    assert changed is not None and changed.events is not None
    assert [(c.entity, c.relation) for c in changed.events] == [("n00040", "same spine"), ("n00001", "same spine")]


# ------------------------------------------------------------------ commands


def lines(entity: str, kind: str, graph: TopologyGraph) -> list[str]:
    found = commands_for(record(entity, kind), graph)
    assert found is not None and found.refused is None
    return [c.line for c in found.lines]


def test_a_gpu_gets_its_node_and_index_filled_in(graph: TopologyGraph) -> None:
    since = int(T - 3600)
    assert lines("n00001-gpu3", "gpu_hbm_ecc", graph) == [
        "ssh n00001 'nvidia-smi -q -i 3'",
        f"ssh n00001 'journalctl -k --no-pager --since @{since}' | grep -i xid",
        "ssh n00001 'dcgmi diag -r 2 -i 3'",
        "ssh n00001 'nvidia-smi -q -d ECC,ROW_REMAPPER -i 3'",
        "scontrol show node n00001",
        "scontrol update NodeName=n00001 State=DRAIN 'Reason=aiops inc-20231114T221320Z-0000000001: gpu_hbm_ecc'",
    ]
    found = commands_for(record("n00001-gpu3", "gpu_nvlink"), graph)
    assert found is not None
    assert [c.acts for c in found.lines].count(True) == 1 and found.lines[-1].acts  # the drain, and only it
    assert "ssh n00001 'nvidia-smi nvlink -e -i 3'" in [c.line for c in found.lines]


def test_a_nic_gets_its_node_and_the_switch_side_with_placeholders(graph: TopologyGraph) -> None:
    found = commands_for(record("n00001-nic2-optic", "optic_degradation"), graph)
    assert found is not None
    by_line = {c.line: c for c in found.lines}
    assert "ssh n00001 ibstat" in by_line
    assert by_line["ssh n00001 'mlxlink -d <ca> -m'"].fill[0][0] == "<ca>"
    assert "ibnetdiscover -p | grep -wF -- n00001" in by_line
    port = by_line["perfquery -x <lid> <port>"]
    assert [name for name, _ in port.fill] == ["<lid>", "<port>"] and "leaf-p0-r2:p1" in port.what
    assert "ibportstate <lid> <port> query" in by_line
    assert "n00001-nic2, rail 2" in by_line["ssh n00001 ibstat"].what


def test_a_switch_and_a_port(graph: TopologyGraph) -> None:
    assert lines("leaf-p0-r2", "leaf_down", graph) == [
        "ibswitches | grep -wF -- leaf-p0-r2",
        "iblinkinfo -l | grep -wF -- leaf-p0-r2",
        "perfquery -x -a <lid>",
    ]
    port = lines("leaf-p0-r2:p1", "switch_congestion", graph)
    assert port[:2] == ["ibswitches | grep -wF -- leaf-p0-r2", "iblinkinfo -l | grep -wF -- leaf-p0-r2"]
    assert "perfquery -x <lid> <port>" in port and "scontrol" not in " ".join(port)  # a switch has no node


def test_a_cooling_loop_lists_its_racks_nodes(graph: TopologyGraph) -> None:
    assert lines("rack0000-cdu", "rack_cooling", graph) == [
        "sinfo -N -l -n n00000,n00001,n00002,n00003",
        "ssh n00000 'ipmitool sdr type Temperature'",
    ]


def hostile_graph(node: str, switch: str = "leaf;reboot") -> TopologyGraph:
    """A node and a switch named by a hostile inventory (TopologyGraph takes any string as an id)."""
    gpu, nic, optic, port, link = f"{node}/gpu", f"{node}/nic", f"{node}/optic", f"{switch}:p0", "cable"
    return TopologyGraph(
        [
            {"id": "r1", "kind": "rack"},
            {"id": node, "kind": "node"},
            {"id": gpu, "kind": "gpu"},
            {"id": nic, "kind": "nic"},
            {"id": optic, "kind": "optic"},
            {"id": switch, "kind": "leaf"},
            {"id": port, "kind": "port"},
            {"id": link, "kind": "link"},
        ],
        [
            {"source": "r1", "target": node, "relation": "contains"},
            {"source": node, "target": gpu, "relation": "contains"},
            {"source": node, "target": nic, "relation": "contains"},
            {"source": nic, "target": optic, "relation": "contains"},
            {"source": switch, "target": port, "relation": "contains"},
            {"source": optic, "target": link, "relation": "connects"},
            {"source": link, "target": port, "relation": "connects"},
        ],
    )


def shell_words(line: str) -> list[str]:
    """`line` as a POSIX shell splits it: words, and operators (";", "|", "&&") as words of their own."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def test_a_hostile_id_comes_out_shell_quoted_and_never_drained() -> None:
    g = hostile_graph(HOSTILE)
    for entity, kind in (
        (f"{HOSTILE}/gpu", "gpu_fault"),
        (f"{HOSTILE}/nic", "nic_link_flap"),
        ("leaf;reboot", "leaf_down"),
    ):
        found = commands_for(record(entity, kind), g)
        assert found is not None and found.lines and found.caution is not None
        for c in found.lines:
            words = shell_words(c.line)
            assert not {";", "&", "&&", "||"} & set(words), c.line  # a ";" only inside a quoted word
            assert ";" not in c.line or HOSTILE in words or "leaf;reboot" in words, c.line  # whole, one word
        assert not any(c.acts for c in found.lines)  # Slurm reads names its own way: no drain of this one
    gpu = commands_for(record(f"{HOSTILE}/gpu", "gpu_fault"), g)
    assert gpu is not None
    assert gpu.lines[0].line == "ssh 'n1;rm -rf /' 'nvidia-smi -q -i <index>'"  # no index in an id of that shape
    assert shlex.split(gpu.lines[0].line) == ["ssh", HOSTILE, "nvidia-smi -q -i <index>"]
    assert "scontrol show node 'n1;rm -rf /'" in [c.line for c in gpu.lines]
    leaf = commands_for(record("leaf;reboot", "leaf_down"), g)
    assert leaf is not None and leaf.lines[0].line == "ibswitches | grep -wF -- 'leaf;reboot'"


def test_quoting_also_holds_inside_the_remote_shell() -> None:
    # ssh hands the remote shell one string: a value in it is quoted for that shell, then the whole
    # string for the local one; a quote in an id cannot close either
    g = hostile_graph("n1'$(reboot)'")
    found = commands_for(record("n1'$(reboot)'/gpu", "gpu_fault"), g)
    assert found is not None
    words = shlex.split(found.lines[0].line)
    assert words[:2] == ["ssh", "n1'$(reboot)'"] and shlex.split(words[2]) == ["nvidia-smi", "-q", "-i", "<index>"]


def test_an_id_a_tool_would_read_as_an_option_gets_no_command() -> None:
    g = hostile_graph("-oProxyCommand=reboot")
    found = commands_for(record("-oProxyCommand=reboot/gpu", "gpu_fault"), g)
    assert found is not None and found.lines == () and found.refused is not None
    assert "option" in found.refused


def test_a_name_slurm_reads_as_every_node_is_shown_but_not_drained() -> None:
    g = hostile_graph("ALL")
    found = commands_for(record("ALL/gpu", "gpu_fault"), g)
    assert found is not None and found.lines and not any(c.acts for c in found.lines)
    assert found.caution is not None and "no drain" in found.caution


def test_every_command_of_every_kind_parses(graph: TopologyGraph) -> None:
    roots = {"gpu": "n00001-gpu3", "nic": "n00001-nic2", "optic": "n00001-nic2-optic", "leaf": "leaf-p0-r2"}
    roots |= {"spine": "spine-r2-s0", "psu": "n00001-psu0", "cooling": "rack0000-cdu", "node": "n00001"}
    roots |= {"switch": "leaf-p0-r2"}
    for kind, spec in registry.KINDS.items():
        found = commands_for(record(roots[spec.root], kind), graph)
        assert found is not None and found.lines and found.caution is None, kind
        for c in found.lines:
            for part in c.line.split(" | "):
                assert shlex.split(part), (kind, c.line)
            assert c.source and c.what
            placeholders = set(re.findall(r"<[a-z-]+>", c.line))
            assert placeholders == {name for name, _ in c.fill}, (kind, c.line)


def test_no_topology_no_commands() -> None:
    assert commands_for(record(), None) is None


# ------------------------------------------------------------------ against its peers


def test_the_kinds_found_by_their_peers_and_what_they_compare() -> None:
    assert peer_metrics("gpu_straggler") == (SM, POWER)
    assert peer_metrics("gpu_thermal") == (TEMP,)
    assert peer_metrics("gpu_hbm_ecc") == () == peer_metrics("no_such_kind")
    for kind in PEER_KINDS:  # a kind renamed in faults.toml, or a peer rule dropped, shows here
        assert registry.KINDS[kind].root == "gpu" and peer_metrics(kind), kind


def test_the_peers_are_the_other_gpus_of_its_job_its_node_first(graph: TopologyGraph) -> None:
    held = {"n00000": [0, 1], "n00001": [2, 3, 4], "n00002": [5]}
    schedule = Schedule.from_events([job_start("j1", ["n00000", "n00001", "n00002"], T - 3600, held)])
    keys = peer_keys(record(), graph, schedule)
    order = ["n00001-gpu3", "n00001-gpu2", "n00001-gpu4", "n00000-gpu0", "n00002-gpu5", "n00000-gpu1"]
    assert keys == [(e, SM) for e in order] + [(e, POWER) for e in order]


def test_the_peers_read_are_bounded_and_spread_over_the_job(graph: TopologyGraph) -> None:
    nodes = [f"n0000{k}" for k in range(8)]
    schedule = Schedule.from_events([job_start("big", nodes, T - 3600)])  # 64 GPUs, by node only
    keys = [e for e, m in peer_keys(record(), graph, schedule) if m == SM]
    mates = [f"n00001-gpu{k}" for k in (0, 1, 2, 4, 5, 6, 7)]
    others = [f"{n}-gpu0" for n in nodes if n != "n00001"] + ["n00000-gpu1", "n00002-gpu1"]
    assert keys == ["n00001-gpu3", *mates, *others] and len(keys) == 1 + MAX_PEERS


def test_without_a_job_the_peers_are_its_node_mates(graph: TopologyGraph) -> None:
    keys = peer_keys(record(), graph, None)
    assert [e for e, m in keys if m == SM] == ["n00001-gpu3", *[f"n00001-gpu{k}" for k in (0, 1, 2, 4, 5, 6, 7)]]
    assert peer_keys(record(kind="gpu_hbm_ecc"), graph, None) == []
    assert peer_keys(record(), None, None) == []


def test_the_root_against_its_peers_in_numbers(graph: TopologyGraph) -> None:
    series: dict[tuple[str, str], list[tuple[float, float]]] = {
        # before the detector's window ahead of the opening (not counted), then 1500 MHz three times
        ("n00001-gpu3", SM): [(T - WINDOW_S - 1, 1980.0), (T - WINDOW_S, 1510.0), (T + 30, 1500.0), (T + 60, 1490.0)],
        ("n00001-gpu0", SM): [(T, 1900.0), (T + 30, 1900.0)],
        ("n00001-gpu1", SM): [(T, 1940.0), (T + 30, 1960.0)],  # its level: 1950
        ("n00001-gpu2", SM): [(T, 2000.0)],
        ("n00001-gpu4", SM): [(T + 30, 2050.0), (T + 700, 100.0)],  # past the ten minutes: not counted
        ("n00001-gpu5", SM): [],  # silent: no level
    }
    peers = peer_comparison(record(), graph, None, series)
    assert peers is not None and peers.cohort.startswith("its node's other GPUs") and peers.cohort_size == 7
    assert (peers.start, peers.end) == (T - WINDOW_S, T + oncall.PEER_SPAN_S) == oncall.peer_span(record())
    sm, power = peers.metrics
    # levels 1900, 1950, 2000, 2050: median 1975; p10 at rank 0.3 = 1915, p90 at rank 2.7 = 2035
    assert (sm.root_median, sm.peers_median, sm.p10, sm.p90) == (1500.0, 1975.0, 1915.0, 2035.0)
    assert sm.off_pct == pytest.approx((1500 - 1975) / 1975 * 100) == pytest.approx(-24.05, abs=0.01)
    assert (sm.peers_with_data, sm.root_samples, sm.unit) == (4, 3, "MHz")
    assert (power.root_median, power.peers_median, power.off_pct, power.peers_with_data) == (None, None, None, 0)


def test_a_resolved_incident_is_compared_while_it_lasted(graph: TopologyGraph) -> None:
    series = {("n00001-gpu3", TEMP): [(T, 80.0), (T + 200, 95.0)], ("n00001-gpu0", TEMP): [(T, 60.0), (T + 200, 60.0)]}
    peers = peer_comparison(record(kind="gpu_thermal", resolved=T + 100), graph, None, series)
    assert peers is not None and peers.end == T + 100
    [temp] = peers.metrics
    assert (temp.root_median, temp.peers_median) == (80.0, 60.0) and temp.off_pct == pytest.approx(100 / 3)


def test_no_comparison_where_it_does_not_apply_or_nothing_was_read(graph: TopologyGraph) -> None:
    assert peer_comparison(record(kind="gpu_hbm_ecc"), graph, None, {}) is None
    assert peer_comparison(record(), graph, None, None) is None
    assert peer_comparison(record("n00001-nic2", "gpu_straggler"), graph, None, {}) is None  # no GPU root


# ------------------------------------------------------------------ what the predictor said


def prediction(entity: str, at: float, probability: float, **more: Any) -> dict[str, Any]:
    """As detectors/anomaly.py Prediction.to_json writes it."""
    out = {
        "entity": entity,
        "at": at,
        "kind": "optic_degradation",
        "probability": probability,
        "horizon_s": 21600.0,
        "expected_in_s": 7200.0,
        "action": "replace the optic",
        "update": False,
    }
    return out | more


def test_the_predictions_on_the_root_from_the_warning_to_the_opening(graph: TopologyGraph) -> None:
    warned = T - 7200
    r = record("n00001-nic2", "optic_degradation", warned=warned)
    predictions = [
        prediction("n00001-nic2-optic", warned - 60, 0.9),  # before the warning: another episode
        prediction("n00001-nic2-optic", warned, 0.35),  # the optic is part of the NIC
        prediction("n00001-nic2", warned + 1800, 0.6, update=True),
        prediction("n00001-nic3-optic", warned + 1800, 0.99),  # another NIC's
        prediction("n00001-nic2", T + 1, 0.99),  # after it opened
        {"entity": "n00001-nic2", "at": "soon"},  # malformed: skipped
    ]
    view = predictor_evidence(r, predictions, graph)
    assert view is not None
    assert [(p.entity, p.probability, p.update) for p in view.predictions] == [
        ("n00001-nic2-optic", 0.35, False),
        ("n00001-nic2", 0.6, True),
    ]
    assert (view.first_probability, view.latest_probability) == (0.35, 0.6)
    assert (view.warned, view.lead_s, view.useful, view.min_useful_lead_s) == (warned, 7200.0, True, MIN_USEFUL_LEAD_S)
    # without the topology only the root's own predictions are known to be its
    alone = predictor_evidence(r, predictions)
    assert alone is not None and [p.entity for p in alone.predictions] == ["n00001-nic2"]


def test_whether_the_lead_was_useful_is_the_one_rule() -> None:
    just = predictor_evidence(record(warned=T - MIN_USEFUL_LEAD_S), [])
    short = predictor_evidence(record(warned=T - MIN_USEFUL_LEAD_S + 1), [])
    assert just is not None and just.useful and short is not None and not short.useful
    assert predictor_evidence(record(warned=None), []) is None
    assert predictor_evidence(record(warned="yesterday"), []) is None


def test_many_predictions_show_the_first_and_the_latest() -> None:
    r = record("n00001-nic2", "optic_degradation", warned=T - 3600)
    predictions = [prediction("n00001-nic2", T - 3600 + 100 * k, 0.30 + 0.01 * k) for k in range(30)]
    view = predictor_evidence(r, predictions)
    assert view is not None and len(view.predictions) == MAX_PREDICTIONS and view.predictions_left_out == 30 - 12
    shown = [round(p.probability, 2) for p in view.predictions]
    assert shown == [0.30, 0.31, 0.32, 0.33, 0.34, 0.35, 0.54, 0.55, 0.56, 0.57, 0.58, 0.59]
    assert view.first_probability == 0.30 and view.latest_probability == pytest.approx(0.59)


def test_the_early_signs_among_the_evidence() -> None:
    evidence = [
        {"at": T - 3600, "entity": "n00001-nic2-optic", "metric": "rx_power_dbm", "detector": "warn:sag", "value": 2.1},
        {"at": T - 600, "entity": "n00001-gpu3", "metric": TEMP, "detector": "warn:job", "value": 84.0},
        {"at": T - 60, "entity": "n00001-gpu3", "metric": TEMP, "detector": "peer:job", "value": 97.0},  # a failure
        {"at": T, "entity": "n00001-nic2", "metric": "symbol_error", "detector": "rule:counter", "value": 12.0},
    ]
    view = predictor_evidence(record("n00001-nic2", "optic_degradation", warned=T - 3600, evidence=evidence), None)
    assert view is not None and view.predictions == () and view.first_probability is None
    assert [(s.entity, s.family, s.kind) for s in view.early_signs] == [
        ("n00001-nic2-optic", "optic_rx", "optic_degradation"),
        ("n00001-gpu3", "warm", "gpu_thermal"),
    ]


@pytest.mark.parametrize("metric", ["rx_power_dbm", TEMP, SM, "symbol_error", "supply_temp_c", "port_xmit_wait"])
@pytest.mark.parametrize("detector", ["warn:sag", "warn:job", "peer:job", "stat:drift", "rule:counter"])
def test_the_page_reads_early_signs_as_the_engine_does(metric: str, detector: str) -> None:
    # the page may not import the engine's symptoms (they import detection): the two readings agree
    family = symptom_of(Anomaly(T, "e", metric, detector, 1.0, 1.0, 0.0)).family
    assert early_sign({"metric": metric, "detector": detector}) == (family if family in registry.EARLY_SIGNS else None)


# ------------------------------------------------------------------ the bundle and the page


def render(on_call: OnCall, **more: Any) -> str:
    return _ENV.get_template("_oncall.html").render(oncall=on_call, **more)


def test_nothing_given_says_not_known_here() -> None:
    on_call = oncall_for(record(kind="gpu_hbm_ecc"), None, None, None, None, None, None, None)
    assert (on_call.changed, on_call.commands, on_call.peers, on_call.predictor, on_call.grafana) == (
        None,
        None,
        None,
        None,
        (),
    )
    text = unescape(re.sub(r"<[^>]+>", " ", render(on_call)))
    assert text.count("Not known here: no topology was read.") == 2
    assert "Does not apply: a gpu_hbm_ecc is not found by comparing a GPU with its peers." in text
    assert "No warning came before it" in text


def test_a_straggler_whose_peers_were_not_read(graph: TopologyGraph) -> None:
    on_call = oncall_for(record(warned=T - 600), graph, None, [], [], None, None, "https://grafana.example/")
    assert on_call.missing["peers"] == "Not known here: its peers' series were not read."
    assert on_call.missing["predictions"].startswith("Not known here: the predictions were not read")
    assert on_call.predictor is not None and not on_call.predictor.useful
    assert on_call.grafana == (
        (
            "Incidents",
            "https://grafana.example/d/aiops-incidents/incidents?var-incident=inc-20231114T221320Z-0000000001",
        ),
        (
            "Cluster telemetry",
            "https://grafana.example/d/aiops-cluster-telemetry/cluster-telemetry?var-node=n00001&var-rack=rack0000",
        ),
    )
    html = render(on_call)
    assert "No job, drain or maintenance on those nodes in that span." in html
    assert "None on the same root, node, switch or rack." in html
    assert 'data-useful="no"' in html and "too short to act on" in html


def test_the_page_shows_every_part_escaped(graph: TopologyGraph) -> None:
    schedule = Schedule.from_events([job_start("j1", ["n00001"], T - 3600)])  # after the warning: held at the opening
    events = [drain("n00002", T - 600, reason="<script>alert(1)</script>")]
    earlier = [incident("inc-old", "n00001-gpu5", T - 7200)]
    series = {("n00001-gpu3", SM): [(T, 1500.0)], **{(f"n00001-gpu{k}", SM): [(T, 2000.0)] for k in (0, 1, 2)}}
    r = record(
        warned=T - 7200, evidence=[{"at": T - 900, "entity": "n00001-gpu3", "metric": TEMP, "detector": "warn:job"}]
    )
    predictions = [prediction("n00001-gpu3", T - 7200, 0.4, kind="gpu_thermal")]
    on_call = oncall_for(r, graph, schedule, events, earlier, series, predictions, None)
    html = render(on_call, incident_href=lambda i: f"{i}.html")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script" not in html
    assert ' style="' not in html  # the page's CSP allows page.css, no style attribute
    assert '<a href="inc-old.html"><code>inc-old</code></a>' in html
    assert "<pre><code>ssh n00001 &#39;nvidia-smi -q -i 3&#39;</code></pre>" in html
    assert 'class="cmd acts"' in html and "Changes the cluster:" in html
    assert "job j1&#39;s other GPUs" in html and "25.0% below" in html  # 1500 against 2000
    assert 'data-useful="yes"' in html and "gpu_thermal (warm)" in html and "40%" in html
    for section in ("oncall-changed", "oncall-commands", "oncall-peers", "oncall-predictor"):
        assert f'id="{section}"' in html


def test_a_hostile_root_is_escaped_on_the_page_and_quoted_in_its_commands() -> None:
    g = hostile_graph(HOSTILE, switch="<b>leaf</b>")
    html = render(oncall_for(record(f"{HOSTILE}/nic", "nic_link_flap"), g, None, [], [], None, None, None))
    assert "ssh &#39;n1;rm -rf /&#39; ibstat" in html
    assert "<b>leaf</b>" not in html
    assert "Check these ids before running anything" in html


def test_the_commands_are_copied_whole_and_wrap_without_a_script() -> None:
    css = (oncall.__file__.rsplit("/", 1)[0]) + "/templates/page.css"
    with open(css) as f:
        style = f.read()
    assert ".cmd pre code{user-select:all" in style and "white-space:pre-wrap" in style
    assert "overflow-wrap:anywhere" in style.split(".cmd pre{")[1].split("}")[0]
