"""The incident engine tick by tick: one incident per root, inhibition of explained symptoms,
resolution, maintenance silences, warnings that escalate, blast radius and the record's fields."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from detectors.anomaly import Anomaly, Prediction
from rca.graph import TopologyGraph
from rca.incidents import FLAP_WINDOW_S, QUIET_S, WARNING_S, Incident, IncidentEngine
from rca.symptoms import Symptom
from telemetry_gen.topology import build_fat_tree
from tests.unit.rca_anomalies import anomaly, node
from vocab.schedule import Schedule

# 256 GPUs: 32 nodes in one pod, 8 racks of 4, leaves leaf-p0-r0..7, one spine per rail.
# Node n00005 is in rack0001 and on port :p5 of every leaf.
T = 1_700_000_000.0
TICK = 30.0
NODE = "n00005"
GPU = "n00005-gpu2"
NIC = "n00005-nic3"
OPTIC = "n00005-nic3-optic"
LEAF = "leaf-p0-r3"
PORT = "leaf-p0-r3:p5"


@pytest.fixture(scope="module")
def graph() -> TopologyGraph:
    return TopologyGraph.from_json(build_fat_tree(256).to_json())


@pytest.fixture
def engine(graph: TopologyGraph) -> IncidentEngine:
    return IncidentEngine(graph)


# ---------------------------------------------------------------------- anomalies, as detectors/stack.py names them


def link_downed(at: float, entity: str) -> Anomaly:
    return anomaly(at, entity, "link_downed", "rule:error_counter", "switch_port" if ":" in entity else "nic")


def flapping(at: float, nic: str = NIC, port: str = PORT) -> list[Anomaly]:
    return [link_downed(at, nic), link_downed(at, port)]


def leaf_down(at: float) -> list[Anomaly]:
    return [link_downed(at, f"{node(n)}-nic3") for n in range(32)]


def xid(at: float, gpu: str = GPU, code: int = 79, suggests: str = "gpu_fell_off_bus") -> Anomaly:
    detail = {"xid": str(code), "severity": "critical", "suggests": suggests}
    return anomaly(at, gpu, "DCGM_FI_DEV_XID_ERRORS", "rule:xid", "gpu", float(code), None, detail)


def ecc(at: float, gpu: str = GPU) -> Anomaly:
    return anomaly(at, gpu, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "rule:error_counter", "gpu", 2.0)


def gpu_temp(at: float, over: float, gpu: str = GPU) -> Anomaly:
    detector = "warn:job" if over < 18.0 else "peer:job"  # as detectors/stack.py tells them apart
    return anomaly(at, gpu, "DCGM_FI_DEV_GPU_TEMP", detector, "gpu", 62.0 + over, 62.0)


def sag(at: float, optic: str = OPTIC) -> Anomaly:
    return anomaly(at, optic, "rx_power_dbm", "warn:sag", "optic", -6.2, -4.0)


def silent(at: float, entity: str) -> Anomaly:
    return anomaly(at, entity, "silent", "rule:silent", "switch", None, None, {"last_seen": f"{at - 60:.0f}"})


def prediction(at: float, entity: str = GPU, kind: str = "gpu_hbm_ecc", horizon_s: float = 6 * 3600.0) -> Prediction:
    return Prediction(entity, at, kind, 0.83, horizon_s, 2 * 3600.0, "drain the node at the next checkpoint")


def only(incidents: list[Incident]) -> Incident:
    assert len(incidents) == 1, [(i.incident_id, i.root.entity, i.status) for i in incidents]
    return incidents[0]


# ---------------------------------------------------------------------- one incident per root


def test_the_same_root_next_tick_updates_the_incident(engine: IncidentEngine) -> None:
    first = only(engine.process(T, [link_downed(T, NIC)]))
    assert (first.status, first.root.entity, first.root.kind) == ("open", NIC, "nic_link_flap")
    assert first.opened == first.updated == T and first.resolved is None
    # the other end of the same cable shows up: the same incident, updated
    second = only(engine.process(T + TICK, flapping(T + TICK)))
    assert second is first
    assert (second.opened, second.updated) == (T, T + TICK)
    assert list(second.affected) == [NIC, PORT]
    # and again: nothing new to say, nothing opened
    assert all(i is first for i in engine.process(T + 2 * TICK, flapping(T + 2 * TICK)))
    assert engine.stats.opened == 1
    assert list(engine.open) == [NIC]
    assert first.evidence_count == 5 and first.last_evidence == T + 2 * TICK


def test_repeated_evidence_keeps_an_incident_open(engine: IncidentEngine) -> None:
    incident = only(engine.process(T, flapping(T)))
    t = T
    while t < T + 2 * QUIET_S:
        t += TICK
        engine.process(t, flapping(t))
    assert incident.status == "open" and incident.resolved is None
    assert engine.stats.opened == 1


def test_one_incident_per_root_within_a_tick(engine: IncidentEngine) -> None:
    other = "n00017-gpu6"
    found = engine.process(T, [xid(T), xid(T, other), *flapping(T), link_downed(T, NIC)])
    assert sorted(i.root.entity for i in found) == sorted([GPU, other, NIC])
    assert len({i.incident_id for i in found}) == 3
    assert sorted(engine.open) == sorted([GPU, other, NIC])


@pytest.mark.parametrize(
    ("anomalies", "kind"),
    [
        pytest.param([xid(T), ecc(T)], "gpu_fell_off_bus", id="xid-and-ecc"),
        pytest.param(
            [gpu_temp(T, 25.0), anomaly(T, GPU, "DCGM_FI_DEV_SM_CLOCK", "peer:job", "gpu", 1200.0, 1980.0)],
            "gpu_thermal",
            id="hot-and-throttled",
        ),
    ],
)
def test_one_incident_per_gpu_showing_two_families(engine: IncidentEngine, anomalies: list[Anomaly], kind: str) -> None:
    incident = only(engine.process(T, anomalies))
    assert (incident.root.entity, incident.root.kind) == (GPU, kind)
    assert engine.process(T + QUIET_S, []) == [incident]
    assert incident.status == "resolved"


def test_symptoms_of_an_open_root_are_inhibited(engine: IncidentEngine) -> None:
    incident = only(engine.process(T, leaf_down(T)))
    assert (incident.root.entity, incident.root.kind, incident.severity) == (LEAF, "leaf_down", "critical")
    # next tick the leaf itself goes silent and the NICs keep failing, their ports join in
    ports = [link_downed(T + TICK, f"{LEAF}:p{i}") for i in range(32)]
    later = engine.process(T + TICK, [silent(T + TICK, LEAF), *leaf_down(T + TICK), *ports])
    assert later == [incident]  # updated (new entities: the ports), not reopened
    assert incident.updated == T + TICK and incident.opened == T
    assert engine.stats.opened == 1
    assert list(engine.open) == [LEAF]
    assert Symptom(LEAF, "silent") in incident.symptoms
    assert engine.stats.attached == 1 + 32 + 32
    assert len(incident.affected) == 1 + 32 + 32  # the leaf, its NICs and its ports


def test_quiet_incident_resolves_and_a_new_fault_is_a_new_incident(engine: IncidentEngine) -> None:
    first = only(engine.process(T, [xid(T)]))
    assert engine.process(T + QUIET_S - 1, []) == []
    assert first.status == "open"
    resolved = only(engine.process(T + QUIET_S, []))
    assert resolved is first
    assert (first.status, first.resolved, first.updated) == ("resolved", T + QUIET_S, T + QUIET_S)
    assert engine.open == {} and engine.stats.resolved == 1
    # past the flap window (sooner, the same incident reopens: test_rca_silence_and_flaps.py)
    later = T + QUIET_S + FLAP_WINDOW_S + 600
    again = only(engine.process(later, [xid(later)]))
    assert again.incident_id != first.incident_id
    assert (again.status, again.root.entity, again.opened) == ("open", GPU, later)
    assert first.status == "resolved"  # the old one stays closed


# ---------------------------------------------------------------------- maintenance


def test_maintenance_silences_a_drained_node_during_its_window_only(graph: TopologyGraph) -> None:
    end = T + 3600
    schedule = Schedule.from_events([{"type": "maintenance", "nodes": [NODE], "start": T, "end": end}])
    engine = IncidentEngine(graph, schedule)
    assert engine.process(T + 60, [xid(T + 60), ecc(T + 60, "n00005-gpu5")]) == []
    assert engine.process(T + 90, flapping(T + 90)) == []  # its NIC, and the leaf port facing it
    assert engine.process(T + 120, [], [prediction(T + 120)]) == []
    assert engine.stats.silenced == 2 + 2 and engine.open == {}
    # a node that is not drained is not silenced
    other = only(engine.process(T + 150, [xid(T + 150, "n00006-gpu1")]))
    assert other.root.entity == "n00006-gpu1"
    # after the window the drained node's faults are incidents again
    [after] = [i for i in engine.process(end, [xid(end)]) if i is not other]
    assert other.status == "resolved"  # quiet since T + 150
    assert (after.status, after.root.entity, after.opened) == ("open", GPU, end)


# ---------------------------------------------------------------------- warnings


def test_prediction_opens_a_warning_that_becomes_the_failures_incident(engine: IncidentEngine) -> None:
    warning = only(engine.process(T, [], [prediction(T)]))
    assert (warning.status, warning.severity) == ("warning", "warning")
    assert (warning.root.entity, warning.root.kind) == (GPU, "gpu_hbm_ecc")
    record = warning.record().to_dict()
    assert record["root_cause"]["confidence"] == 0.83 and record["resolved"] is None
    assert engine.process(T + TICK, []) == []
    failure_at = T + 2 * 3600
    incident = only(engine.process(failure_at, [ecc(failure_at)]))
    assert incident.incident_id == warning.incident_id
    assert (incident.status, incident.warned, incident.opened) == ("open", T, failure_at)
    assert (incident.root.entity, incident.root.kind, incident.severity) == (GPU, "gpu_hbm_ecc", "critical")
    assert incident.record().to_dict()["root_cause"]["confidence"] == 1.0
    assert engine.stats.opened == 1 and engine.stats.warnings == 1


def test_a_warning_said_again_surer_carries_the_higher_probability(engine: IncidentEngine) -> None:
    """The predictor says a warning again when its probability has risen: the open warning takes
    it (and is a change, so acting decides again); a lower one changes nothing."""
    from dataclasses import replace

    warning = only(engine.process(T, [], [prediction(T)]))
    surer = replace(prediction(T + TICK), probability=0.97, update=True)
    again = only(engine.process(T + TICK, [], [surer]))
    assert again is warning and again.record().to_dict()["root_cause"]["confidence"] == 0.97
    assert again.updated == T + TICK and again.status == "warning"
    assert engine.process(T + 2 * TICK, [], [replace(prediction(T + 2 * TICK), probability=0.9, update=True)]) == []
    assert warning.record().to_dict()["root_cause"]["confidence"] == 0.97 and engine.stats.warnings == 1


def test_a_warning_without_failure_ends_at_its_horizon(engine: IncidentEngine) -> None:
    warning = only(engine.process(T, [], [prediction(T, horizon_s=3600.0)]))
    assert engine.process(T + 3600 - 1, []) == []
    assert only(engine.process(T + 3600, [])) is warning
    assert (warning.status, warning.resolved) == ("warning", T + 3600)  # judged as a prediction, not an incident
    assert engine.open == {}


def test_a_prediction_for_an_open_incident_adds_no_warning(engine: IncidentEngine) -> None:
    incident = only(engine.process(T, [xid(T)]))
    assert engine.process(T + TICK, [], [prediction(T + TICK)]) == []
    assert engine.open == {GPU: incident} and engine.stats.warnings == 0


@pytest.mark.parametrize(
    ("early", "failure", "root", "kind"),
    [
        pytest.param(
            [sag(T)],
            flapping(T + 3 * 3600),
            OPTIC,
            "optic_degradation",
            id="sagging-optic-then-link-errors",
        ),
        pytest.param(
            [gpu_temp(T, 7.0)],
            [gpu_temp(T + 1800, 24.0)],
            GPU,
            "gpu_thermal",
            id="warm-gpu-then-hot",
        ),
    ],
)
def test_early_sign_warning_escalates(
    engine: IncidentEngine, early: list[Anomaly], failure: list[Anomaly], root: str, kind: str
) -> None:
    warning = only(engine.process(early[0].at, early))
    assert (warning.status, warning.severity) == ("warning", "warning")
    assert (warning.root.entity, warning.root.kind) == (root, kind)
    assert warning.last_evidence == early[0].at + WARNING_S
    incident = only(engine.process(failure[0].at, failure))
    assert incident.incident_id == warning.incident_id
    assert (incident.status, incident.root.entity, incident.root.kind) == ("open", root, kind)
    assert (incident.warned, incident.opened) == (early[0].at, failure[0].at)
    assert engine.stats.opened == 1


def test_reroot_onto_a_warned_entity_keeps_the_incident_tracked(engine: IncidentEngine) -> None:
    # the NIC side errors first, the optic's sag shows a tick later, then the port side
    nic_incident = only(engine.process(T, [link_downed(T, NIC)]))
    only(engine.process(T + TICK, [sag(T + TICK)]))  # a warning for the optic
    changed = engine.process(T + 2 * TICK, flapping(T + 2 * TICK))
    [moved] = [i for i in changed if i.status == "open"]
    assert moved is nic_incident and moved.root.entity == OPTIC  # re-ranked onto the optic
    [warning] = [i for i in changed if i.status == "warning"]  # the optic's warning is closed:
    assert warning.resolved == T + 2 * TICK and moved.warned == warning.opened  # this is what it warned of
    t = T + 2 * TICK
    while t < T + 2 * TICK + QUIET_S + WARNING_S:
        t += 300
        engine.process(t, [])
    assert engine.open == {}
    assert nic_incident.status == "resolved"  # not left open forever


# ---------------------------------------------------------------------- blast radius and severity


def blast_schedule() -> Schedule:
    pod = [node(n) for n in range(32)]
    return Schedule.from_events(
        [
            {"type": "job_start", "time": T - 7200, "job": "train-a", "nodes": pod[:16]},
            {"type": "job_start", "time": T - 7200, "job": "train-b", "nodes": pod[16:24], "gpus": 60},
            # ended five minutes before the first evidence: not hit (the page names it)
            {"type": "job_start", "time": T - 7200, "job": "eval-c", "nodes": pod[24:28]},
            {"type": "job_end", "time": T - 300, "job": "eval-c"},
            # ended well before: not hit
            {"type": "job_start", "time": T - 7200, "job": "old-d", "nodes": pod[28:]},
            {"type": "job_end", "time": T - 700, "job": "old-d"},
            # not started yet: not hit
            {"type": "job_start", "time": T + 600, "job": "next-e", "nodes": pod[28:]},
            {"type": "job_start", "time": T - 100, "job": "far-f", "nodes": ["n00999"]},
            {"type": "node_drain", "time": T - 50, "nodes": pod[:1]},  # other news is ignored
        ]
    )


def test_blast_radius_of_a_leaf_lists_the_jobs_on_its_nodes(graph: TopologyGraph) -> None:
    engine = IncidentEngine(graph, blast_schedule())
    incident = only(engine.process(T, leaf_down(T)))
    assert incident.jobs == ["train-a", "train-b"]
    assert incident.gpus_hit == 16 * 8 + 60
    assert incident.severity == "critical"
    assert incident.action.startswith("restore the leaf switch")


def test_blast_radius_of_a_gpu_is_its_nodes_jobs(graph: TopologyGraph) -> None:
    engine = IncidentEngine(graph, blast_schedule())
    gpu = only(engine.process(T, [xid(T, "n00020-gpu4")]))
    assert (gpu.jobs, gpu.gpus_hit) == (["train-b"], 60)
    idle = only(engine.process(T, [xid(T, "n00029-gpu0")]))  # old-d ended 700 s ago, next-e not started
    assert (idle.jobs, idle.gpus_hit) == ([], 1)


def test_blast_radius_leaves_out_a_job_that_ended_before_onset(graph: TopologyGraph) -> None:
    engine = IncidentEngine(graph, blast_schedule())
    incident = only(engine.process(T, [xid(T, "n00025-gpu1")]))
    assert (incident.jobs, incident.gpus_hit) == ([], 1)  # eval-c ended 300 s before


def test_blast_radius_is_the_jobs_on_the_broken_parts_not_one_that_ended_before_onset(graph: TopologyGraph) -> None:
    # the rack-cooling page that said "48 GPUs hit" for a 32-GPU rack: a job on the affected
    # GPUs at onset counts, and so does one put on them while the incident was open (it runs on
    # a broken part: a fabric manager down hangs it, tests/scenarios/test_quiet_faults.py); one
    # that had ended before the onset does not
    pod = [node(n) for n in range(4)]
    schedule = Schedule.from_events(
        [
            {"type": "job_start", "time": T - 3600, "job": "at-onset", "nodes": pod[:2], "gpus": 16},
            {"type": "job_start", "time": T - 3600, "job": "done", "nodes": pod[2:], "gpus": 16},
            {"type": "job_end", "time": T - 60, "job": "done"},
            {"type": "job_start", "time": T + 2 * TICK, "job": "came-later", "nodes": pod[2:], "gpus": 16},
        ]
    )
    engine = IncidentEngine(graph, schedule)
    incident = only(engine.process(T, leaf_down(T)))  # the leaf's hosts: pod among them
    assert (incident.jobs, incident.gpus_hit) == (["at-onset"], 16)
    for k in range(1, 13):  # still open, and updated, while came-later runs on the leaf's hosts
        engine.process(T + k * TICK, leaf_down(T + k * TICK))
    assert incident.status == "open" and incident.updated > T + 2 * TICK
    assert (incident.jobs, incident.gpus_hit) == (["at-onset", "came-later"], 32)


def test_blast_radius_of_a_gpu_counts_only_the_job_holding_that_gpu(graph: TopologyGraph) -> None:
    pod = [node(n) for n in range(2)]
    schedule = Schedule.from_events(
        [
            {
                "type": "job_start",
                "time": T - 600,
                "job": "left",
                "nodes": pod,
                "gpus": 8,
                "gpus_by_node": {pod[0]: [0, 1, 2, 3], pod[1]: [0, 1, 2, 3]},
            },
            {
                "type": "job_start",
                "time": T - 600,
                "job": "right",
                "nodes": pod[:1],
                "gpus": 4,
                "gpus_by_node": {pod[0]: [4, 5, 6, 7]},
            },
        ]
    )
    engine = IncidentEngine(graph, schedule)
    incident = only(engine.process(T, [xid(T, f"{pod[0]}-gpu5")]))
    assert (incident.jobs, incident.gpus_hit) == (["right"], 4)


@pytest.mark.parametrize(
    ("anomalies", "severity"),
    [
        pytest.param(leaf_down(T), "critical", id="leaf-down"),
        pytest.param([xid(T)], "critical", id="gpu-fell-off-bus"),
        pytest.param(flapping(T), "major", id="nic-flap"),
        pytest.param([gpu_temp(T, 25.0)], "minor", id="hot-gpu"),
    ],
)
def test_severity(engine: IncidentEngine, anomalies: list[Anomaly], severity: str) -> None:
    assert only(engine.process(T, anomalies)).severity == severity


# ---------------------------------------------------------------------- the record

FIELDS = {
    "incident_id",
    "opened",
    "updated",
    "resolved",
    "status",
    "severity",
    "root_cause",
    "candidates",
    "affected",
    "jobs",
    "evidence",
    "action",
}


def test_incident_json_has_every_design_field(graph: TopologyGraph) -> None:
    engine = IncidentEngine(graph, blast_schedule())
    incident = only(engine.process(T, [*flapping(T), sag(T)]))
    body: dict[str, Any] = json.loads(incident.to_json())
    assert set(body) >= FIELDS
    assert body["incident_id"] == incident.incident_id and body["status"] == "open"
    assert body["opened"] == body["updated"] == T and body["resolved"] is None
    assert body["severity"] == "major"
    assert set(body["root_cause"]) == {"entity", "kind", "confidence"}
    assert body["root_cause"]["entity"] == OPTIC and body["root_cause"]["kind"] == "optic_degradation"
    assert 0.0 < body["root_cause"]["confidence"] <= 1.0
    assert body["candidates"] and all(set(c) == {"entity", "kind", "score"} for c in body["candidates"])
    assert body["candidates"][0]["entity"] == OPTIC
    assert [c["entity"] for c in body["candidates"]] == [OPTIC, NIC, LEAF]
    scores = [c["score"] for c in body["candidates"]]
    assert scores == sorted(scores, reverse=True)
    assert set(body["affected"]) == {OPTIC, NIC, PORT}
    assert body["jobs"] == ["train-a"]
    assert {(e["entity"], e["metric"], e["detector"]) for e in body["evidence"]} == {
        (NIC, "link_downed", "rule:error_counter"),
        (PORT, "link_downed", "rule:error_counter"),
        (OPTIC, "rx_power_dbm", "warn:sag"),  # the early sign is the incident's evidence, not a warning
    }
    assert all(e["at"] == T for e in body["evidence"])
    assert body["action"].startswith("replace the optic")
    engine.process(T + QUIET_S, [])
    closed: dict[str, Any] = json.loads(incident.to_json())
    assert closed["status"] == "resolved" and closed["resolved"] == T + QUIET_S


def test_evidence_is_capped_but_counted(engine: IncidentEngine) -> None:
    incident = only(engine.process(T, leaf_down(T)))
    body = incident.record().to_dict()
    assert len(body["evidence"]) == 12 and body["evidence_count"] == 32
    assert body["affected_count"] == 33


def test_an_engine_failure_does_not_stop_the_pipeline(graph: TopologyGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    from aiops.pipeline import Pipeline
    from ingest.lineprotocol import lines_to_bytes
    from telemetry_gen.generator import GenConfig, Generation

    gen = Generation(GenConfig(realism="clean", gpus=256, hours=0.1, interval=30, seed=3, faults="psu_failure=1"))
    pipeline = Pipeline(graph, 30, gen.events())

    def broken(*_: object) -> list[Incident]:
        raise RuntimeError("a bug in the engine")

    monkeypatch.setattr(pipeline.engine, "process", broken)
    for tick in gen.ticks():
        pipeline.feed(b"".join(lines_to_bytes(lines) for _, lines in gen.sim.lines(tick)))
    pipeline.finish()
    assert pipeline.engine_errors == pipeline.detect.stats.ticks > 0  # every tick failed, none stopped it


def test_gpus_warm_because_their_rack_cooling_failed_are_its_evidence_not_warnings(engine: IncidentEngine) -> None:
    supply = anomaly(T, "rack0000-cdu", "supply_temp_c", "stat:drift", "cooling", 44.0, 30.0)
    warm = [gpu_temp(T, 12.0, f"{node(n)}-gpu{g}") for n in range(4) for g in (1, 5)]
    changed = engine.process(T, [supply, *warm])
    assert [i.status for i in changed] == ["open"]  # one incident, no warnings
    [incident] = changed
    assert incident.root.entity == "rack0000-cdu" and len(incident.affected) == 1 + len(warm)
    later = engine.process(T + TICK, [gpu_temp(T + TICK, 12.0, f"{node(2)}-gpu7")])  # a tick later too
    assert all(i is incident for i in later)


def test_nics_that_report_a_tick_before_their_leaf_are_the_leafs_incident(engine: IncidentEngine) -> None:
    early = engine.process(T, [link_downed(T, f"{node(n)}-nic3") for n in (4, 9)])
    assert [i.root.entity for i in early] == [f"{node(4)}-nic3", f"{node(9)}-nic3"]  # a tick later: one leaf
    rest = engine.process(T + TICK, [link_downed(T + TICK, f"{node(n)}-nic3") for n in range(32) if n not in (4, 9)])
    open_now = {id(i): i for i in engine.open.values() if i.status == "open"}
    assert len(open_now) == 1
    [leaf] = open_now.values()
    assert leaf.root.entity == LEAF and leaf.opened == T and leaf is early[0] and leaf in rest
    assert len([e for e in leaf.affected if e.endswith("-nic3")]) == 32
    folded = early[1]  # the other early NIC: closed, pointing at the leaf's incident
    assert folded.status == "resolved" and folded.merged_into == leaf.incident_id and folded in rest


def test_an_entity_the_topology_does_not_know_is_counted_never_an_incident(engine: IncidentEngine) -> None:
    """A typo'd, stale or hostile id (a 1 MB tag that got through, a host renamed last week) pages
    no one; a real root in the same tick still opens its incident."""
    stranger = "n99999-gpu0"
    changed = engine.process(T, [xid(T, gpu=stranger), xid(T)])
    assert [i.root.entity for i in changed] == [GPU]
    prediction = Prediction("rack9999-cdu", T, "rack_cooling", 0.9, 6 * 3600.0, 3600.0, "check the loop")
    assert engine.process(T + TICK, [], [prediction]) == []
    assert engine.stats.outside_topology == 2
    assert all(i.root.entity != stranger for i in engine.open.values())


def test_ids_outside_the_topology_are_said_with_what_to_do_about_pod_names(
    engine: IncidentEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """An older gpu-operator's dcgm-exporter sets Hostname to its pod's name: every GPU is outside
    the topology, and one WARNING line was all a site saw (issue 65). It now says what to do."""
    with caplog.at_level(logging.WARNING, logger="rca.incidents"):
        engine.process(T, [xid(T, gpu="nvidia-dcgm-exporter-7xk2p-gpu3")])
    (line,) = [r.getMessage() for r in caplog.records if "outside the topology" in r.getMessage()]
    assert "nvidia-dcgm-exporter-7xk2p-gpu3" in line and "__meta_kubernetes_pod_node_name" in line
