"""Issue 66, parts 1 and 6: silence is a state, and a flapping root is one incident.

An incident whose entity stopped reporting stays open as "no data since HH:MM" and resolves only
on evidence of health (the entity back and quiet) or a person's word; an incident that resolves
and recurs on the same root and kind within FLAP_WINDOW_S reopens, its episodes in its record.
The engine hears who reports from the detectors' presence records (presence:gone / presence:back),
with the findings, so an engine fed by split detection hears them too. Every test drives the
engine with explicit event times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiops.daemon_state import Checkpoint, CheckpointStore
from aiops.pipeline import Pipeline
from detectors.anomaly import PRESENCE_BACK, PRESENCE_GONE, REPORTING, Anomaly
from rca.evaluate import evaluate_run
from rca.graph import TopologyGraph
from rca.incidents import FLAP_WINDOW_S, QUIET_S, Incident, IncidentEngine
from telemetry_gen.topology import build_fat_tree
from tests.unit.rca_anomalies import anomaly
from tests.unit.test_detectors import T0, gpu_line, tick

T = 1_700_000_000.0
TICK = 30.0
GPU = "n00005-gpu2"


@pytest.fixture(scope="module")
def graph() -> TopologyGraph:
    return TopologyGraph.from_json(build_fat_tree(256).to_json())


@pytest.fixture
def engine(graph: TopologyGraph) -> IncidentEngine:
    return IncidentEngine(graph)


def went(at: float, last_seen: float, entity: str = GPU) -> Anomaly:
    """detectors/stack/presence.py: the entity stopped reporting (said once, for any GPU)."""
    return Anomaly(at, entity, REPORTING, PRESENCE_GONE, 0.0, 0.0, None, "gpu", {"last_seen": f"{last_seen:.0f}"})


def back(at: float, last_seen: float, entity: str = GPU) -> Anomaly:
    """... and it reports again."""
    return Anomaly(at, entity, REPORTING, PRESENCE_BACK, 0.0, 1.0, None, "gpu", {"last_seen": f"{last_seen:.0f}"})


def xid79(at: float, gpu: str = GPU) -> Anomaly:
    detail = {"xid": "79", "severity": "critical", "suggests": "gpu_fell_off_bus"}
    return anomaly(at, gpu, "DCGM_FI_DEV_XID_ERRORS", "rule:xid", "gpu", 79.0, None, detail)


def gone(at: float, last_seen: float, gpu: str = GPU) -> Anomaly:
    return anomaly(at, gpu, "silent", "rule:silent", "gpu", None, None, {"last_seen": f"{last_seen:.0f}"})


def slow(at: float, gpu: str = GPU) -> Anomaly:
    """A GPU's SM clock below its job's: the straggler rule crossed."""
    return anomaly(at, gpu, "DCGM_FI_DEV_SM_CLOCK", "peer:job", "gpu", 1700.0, 1980.0)


def states_of(incidents: list[Incident], into: dict[str, dict[str, Any]]) -> None:
    for i in incidents:
        into[i.incident_id] = json.loads(i.to_json())


# ---------------------------------------------------------------------- silence is a state


def test_a_gpu_that_stops_reporting_stays_open_with_no_data_since_and_resolves_when_back_healthy(
    engine: IncidentEngine,
) -> None:
    incident = next(iter(engine.process(T, [xid79(T)])))
    assert (incident.root.entity, incident.root.kind) == (GPU, "gpu_fell_off_bus")
    returns = T + 2 * 3600.0  # silent for two hours
    t = T + TICK
    while t < returns:
        engine.process(t, [gone(t, T), went(t, T)] if t == T + 2 * TICK else [])
        record = incident.record().to_dict()
        assert record["status"] == "open" and record["resolved"] is None, t - T
        if t >= T + 2 * TICK:
            assert record["no_data_since"] == T and record["no_data_entities"] == [GPU]
        t += TICK
    # it reports again, and nothing is wrong with it: healthy after a quiet period of its samples
    changed = engine.process(t, [back(t, T)])
    assert changed == [incident] and incident.record().to_dict()["no_data_since"] is None
    t += TICK
    while t < returns + QUIET_S:
        engine.process(t, [])
        assert incident.status == "open", t - returns
        t += TICK
    changed = engine.process(t, [])
    assert changed == [incident] and (incident.status, incident.resolved) == ("resolved", returns + QUIET_S)
    assert incident.record().to_dict()["episodes"] == [{"opened": T, "resolved": returns + QUIET_S}]


def test_silence_is_known_from_the_presence_record_alone(engine: IncidentEngine) -> None:
    """An idle GPU that falls off the bus: no `silent` anomaly (the detectors expect nothing of
    an idle GPU), but its samples stopped all the same."""
    incident = next(iter(engine.process(T, [xid79(T)])))
    for k in range(1, 200):  # 100 minutes
        engine.process(T + k * TICK, [went(T + k * TICK, T)] if k == 2 else [])
    assert incident.status == "open" and incident.record().to_dict()["no_data_since"] == T
    assert engine.stats.anomalies == 1  # a presence record is no anomaly


def test_an_entity_silent_before_its_incident_opened_is_no_data_from_the_start(engine: IncidentEngine) -> None:
    engine.process(T, [went(T, T - 60)])
    incident = next(iter(engine.process(T + TICK, [xid79(T + TICK)])))
    assert incident.record().to_dict()["no_data_since"] == T - 60


def test_a_person_closes_a_silent_incident(engine: IncidentEngine) -> None:
    incident = next(iter(engine.process(T, [xid79(T)])))
    engine.process(T + 2 * TICK, [went(T + 2 * TICK, T)])
    engine.process(T + 3600, [])
    assert incident.status == "open"
    assert engine.close(incident.incident_id, T + 3660) is incident
    assert (incident.status, incident.resolved) == ("resolved", T + 3660)


def test_back_but_not_well_stays_open_until_a_quiet_period_after_its_last_evidence(engine: IncidentEngine) -> None:
    incident = next(iter(engine.process(T, [xid79(T)])))
    engine.process(T + 2 * TICK, [gone(T + 2 * TICK, T), went(T + 2 * TICK, T)])
    engine.process(T + 3 * 3600, [])
    assert incident.status == "open" and incident.record().to_dict()["no_data_since"] == T
    returns = T + 4 * 3600
    hot = anomaly(returns, GPU, "DCGM_FI_DEV_GPU_TEMP", "peer:job", "gpu", 90.0, 62.0)
    engine.process(returns, [back(returns, T), hot])
    assert incident.record().to_dict()["no_data_since"] is None
    engine.process(returns + 600, [anomaly(returns + 600, GPU, "DCGM_FI_DEV_GPU_TEMP", "peer:job", "gpu", 90.0, 62.0)])
    engine.process(returns + 600 + QUIET_S - TICK, [])
    assert incident.status == "open"
    engine.process(returns + 600 + QUIET_S, [])
    assert (incident.status, incident.resolved) == ("resolved", returns + 600 + QUIET_S)


@pytest.mark.parametrize("job", ["j1", "idle"], ids=["a-jobs-gpu-the-detectors-say-silent", "an-idle-gpu"])
def test_the_data_path_tells_the_engine_which_gpus_report(job: str) -> None:
    """Line protocol through the detect loop and the pipeline: a GPU sends Xid 79 and stops
    reporting for two hours; its incident stays open, then resolves a quiet period after it is
    back."""
    graph = TopologyGraph.from_json(build_fat_tree(64).to_json())
    pipeline = Pipeline(graph, TICK)
    gpus = [f"n00003-gpu{g}" for g in range(8)]
    lost, fell, back = gpus[5], 60, 2 * 3600

    def lines(s: int) -> list[str]:
        return [
            gpu_line(g, job=job, node="n00003", xid=79 if (g, s) == (lost, fell) else 0)
            for g in gpus
            if g != lost or not fell < s < back
        ]

    latest: dict[str, dict[str, Any]] = {}
    for s in range(0, back + int(QUIET_S) + 300, int(TICK)):
        pipeline.detect.analyse(T0 + s, tick(s, lines(s)))  # type: ignore[union-attr]
        for record in pipeline.take()[1]:
            latest[record.incident_id] = record.to_dict()
        if fell + QUIET_S <= s < back:
            (state,) = latest.values()
            assert state["status"] == "open" and state["no_data_since"] == T0 + fell, s
    (state,) = latest.values()
    assert state["root_cause"]["entity"] == lost and state["root_cause"]["kind"] == "gpu_fell_off_bus"
    assert state["status"] == "resolved" and state["resolved"] == T0 + back + QUIET_S
    assert state["no_data_since"] is None


# ---------------------------------------------------------------------- flap damping


def crossings(engine: IncidentEngine, starts: list[float], until: float) -> dict[str, Any]:
    """The straggler rule crossed at each start, for three ticks; nothing in between."""
    states: dict[str, dict[str, Any]] = {}
    t = starts[0]
    while t <= until:
        hit = [slow(t)] if any(s <= t < s + 3 * TICK for s in starts) else []
        states_of(engine.process(t, hit), states)
        t += TICK
    return states


def test_a_rule_crossed_eight_times_in_four_hours_is_one_incident_with_eight_episodes(engine: IncidentEngine) -> None:
    starts = [T + k * 1800.0 for k in range(8)]  # every 30 minutes, 3.5 hours in all
    states = crossings(engine, starts, T + 4 * 3600.0 + 600)
    (record,) = states.values()
    assert record["root_cause"] == {**record["root_cause"], "entity": GPU, "kind": "gpu_straggler"}
    episodes = record["episodes"]
    assert [e["opened"] for e in episodes] == starts
    # each resolved a quiet period after its last evidence, the last one too
    assert [e["resolved"] for e in episodes] == [s + 2 * TICK + QUIET_S for s in starts]
    assert record["status"] == "resolved" and record["opened"] == starts[0]
    assert engine.stats.opened == 1 and engine.stats.reopened == 7


def test_the_reopened_incident_is_open_again_between_episodes(engine: IncidentEngine) -> None:
    first = next(iter(engine.process(T, [slow(T)])))
    engine.process(T + QUIET_S, [])
    assert first.status == "resolved"
    again = engine.process(T + 1800, [slow(T + 1800)])
    assert again == [first]
    record = first.record().to_dict()
    assert (record["status"], record["resolved"], record["opened"]) == ("open", None, T)
    assert record["episodes"] == [{"opened": T, "resolved": T + QUIET_S}, {"opened": T + 1800, "resolved": None}]


def test_a_recurrence_after_the_flap_window_is_a_new_incident(engine: IncidentEngine) -> None:
    first = next(iter(engine.process(T, [slow(T)])))
    engine.process(T + QUIET_S, [])
    later = T + QUIET_S + FLAP_WINDOW_S + 60
    (second,) = engine.process(later, [slow(later)])
    assert second is not first and second.opened == later and len(second.record().to_dict()["episodes"]) == 1


def test_another_kind_on_the_same_root_is_a_new_incident(engine: IncidentEngine) -> None:
    first = next(iter(engine.process(T, [slow(T)])))
    engine.process(T + QUIET_S, [])
    (second,) = engine.process(T + 1800, [xid79(T + 1800)])
    assert second is not first and second.root.kind == "gpu_fell_off_bus"


def test_after_a_persons_close_a_recurrence_is_a_new_incident(engine: IncidentEngine) -> None:
    first = next(iter(engine.process(T, [slow(T)])))
    engine.close(first.incident_id, T + 60)
    (second,) = engine.process(T + 600, [slow(T + 600)])
    assert second is not first


def test_silence_and_flap_memory_come_back_from_a_checkpoint(graph: TopologyGraph, tmp_path: Path) -> None:
    engine = IncidentEngine(graph)
    silent = next(iter(engine.process(T, [xid79(T)])))
    flapper = next(iter(engine.process(T, [slow(T, "n00009-gpu1")])))
    engine.process(T + 2 * TICK, [went(T + 2 * TICK, T)])
    engine.process(T + QUIET_S, [])
    assert silent.status == "open" and flapper.status == "resolved"
    store = CheckpointStore(tmp_path, "engine")
    store.save(Checkpoint({"engine": engine}, {}))
    loaded = store.load()
    assert loaded is not None
    restored: IncidentEngine = loaded.state["engine"]
    restored.attach(graph, engine.schedule)
    again = restored.process(T + 1800, [slow(T + 1800, "n00009-gpu1")])
    assert [i.incident_id for i in again] == [flapper.incident_id]
    assert restored.open[GPU].record().to_dict()["no_data_since"] == T
    restored.process(T + 1830, [back(T + 1830, T)])
    assert restored.open[GPU].record().to_dict()["no_data_since"] is None


# ---------------------------------------------------------------------- how the evaluation counts episodes


def test_an_episode_is_no_new_false_incident_and_an_episode_can_detect_a_fault(engine: IncidentEngine) -> None:
    starts = [T + k * 1800.0 for k in range(8)]
    states = crossings(engine, starts, T + 4 * 3600.0 + 600)
    records = list(states.values())
    alone = evaluate_run([], records, [])
    assert alone.false_positive_count == 1 and alone.overall.incidents == 1
    # a fault on that GPU whose onset is the fourth episode's: that episode detected it
    fault = {
        "fault_id": "f1",
        "kind": "gpu_straggler",
        "root": GPU,
        "onset": starts[3] - 30,
        "end": starts[3] + 300,
        "precursor_start": None,
        "affected": [GPU],
        "jobs": [],
    }
    scored = evaluate_run([fault], records, [])
    assert scored.overall.detected == 1 and scored.overall.ttd_p50_s == 30.0
    assert scored.false_positive_count == 0 and scored.overall.true_incidents == 1
