"""The one incident record (vocab/incident_record.py): its rules for what views show, its wire form
with a schema version, and what it refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from notify.message import IncidentNote
from rca.influx import incident_line
from vocab.incident_record import (
    NO_DATA,
    RESOLVED,
    SCHEMA_VERSION,
    WARNING,
    IncidentRecord,
    RecordError,
    as_record,
    plan_line,
)

T = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def wire(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "incident_id": "inc-1",
        "opened": T,
        "updated": T + 60,
        "resolved": None,
        "status": "open",
        "severity": "critical",
        "root_cause": {"entity": "n00001-gpu3", "kind": "gpu_fell_off_bus", "confidence": 0.9},
        "gpus_hit": 8,
        "jobs": ["train-1"],
        "job_gpus": {"train-1": 8},
    }
    return {**base, **changes}


def test_a_silent_open_incident_is_no_data_everywhere_not_open_and_never_resolved() -> None:
    record = as_record(wire(no_data_since=T + 30, no_data_entities=["n00001-gpu3"]))
    assert record.state == NO_DATA and record.unresolved
    assert record.state_words == "no data since 00:00 UTC"
    note = IncidentNote.from_record(record)
    assert note.status == "open" and note.state == NO_DATA and "NO DATA since 00:00 UTC" in note.headline
    assert ',state="no data",' in incident_line(record) and ",open=1i,no_data=1i," in incident_line(record)


def test_a_warning_whose_horizon_passed_is_resolved_in_every_view() -> None:
    record = as_record(wire(status="warning", resolved=T + 600, updated=T + 600))
    assert record.state == RESOLVED and record.at == T + 600
    assert IncidentNote.from_record(record).status == "resolved"
    assert as_record(wire(status="warning")).state == WARNING


def test_the_wire_form_round_trips_and_carries_its_schema_and_state() -> None:
    record = as_record(
        wire(
            schema=SCHEMA_VERSION, episodes=[{"opened": T, "resolved": T + 900}, {"opened": T + 1800, "resolved": None}]
        )
    )
    d = json.loads(record.to_json())
    assert d["schema"] == SCHEMA_VERSION and d["state"] == "open"
    again = IncidentRecord.from_json(record.to_json())
    assert again == record and again.episode == 2 and again.episode_opened == T + 1800


def test_a_record_from_before_the_schema_version_reads_as_version_1() -> None:
    old = wire()
    assert "schema" not in old
    record = as_record(old)
    assert record.schema == 1 and record.state == "open" and record.episodes == () and record.no_data_since is None
    assert json.loads(record.to_json())["schema"] == SCHEMA_VERSION  # written as it reads now


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"schema": SCHEMA_VERSION + 1}, "this service reads up to"),
        ({"schema": "2"}, "schema is not a version number"),
        ({"root_cause": None}, "root_cause is missing"),
        ({"status": "maybe"}, "status is not one of"),
        ({"opened": float("nan")}, "opened is not a finite number"),
        ({"gpus_hit": True}, "gpus_hit is not a finite number"),
        ({"jobs": "train-1"}, "jobs is not a list of text"),
        ({"episodes": [1, 2]}, "episodes is not a list of objects"),
    ],
)
def test_a_record_that_is_not_one_is_refused_with_its_reason(changes: dict[str, Any], says: str) -> None:
    with pytest.raises(RecordError, match=says):
        as_record(wire(**changes))


def test_not_json_is_refused_with_its_reason() -> None:
    with pytest.raises(RecordError, match="not JSON"):
        IncidentRecord.from_json(b"{not json")


def test_a_plan_reads_the_same_in_every_view() -> None:
    plan = {"action": "drain_node", "target": "n00001", "decision": "dry_run", "state": "done", "approved_by": None}
    assert plan_line(plan) == "drain_node n00001: dry_run, done"
    assert plan_line({**plan, "approved_by": "ops"}).endswith("(approved by ops)")
    note = IncidentNote.from_record(as_record(wire()), plans=[plan])
    assert ("Plans", "drain_node n00001: dry_run, done") in note.facts()
