"""`aiops run --influx`: every incident state lands in InfluxDB for Grafana, the latest state of
each incident equal to the last line of incidents.jsonl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aiops.cli import main
from rca.evaluate import latest_states
from rca.influx import ANOMALY_MEASUREMENT, MEASUREMENT, anomaly_line, incident_line, prediction_line
from vocab.incident_record import IncidentRecord
from vocab.settings import InfluxSettings

if TYPE_CHECKING:
    from tests.conftest import influxql
else:
    try:
        from tests.conftest import influxql
    except ModuleNotFoundError:
        from conftest import influxql

pytestmark = pytest.mark.services


def test_incident_states_reach_influxdb(influx_settings: InfluxSettings, tmp_path: Path) -> None:
    gen = ["gen", "--gpus", "256", "--hours", "0.5", "--interval", "30", "--seed", "4"]
    assert main([*gen, "--faults", "psu_failure=1,leaf_down=1", "--out", str(tmp_path / "run")]) == 0
    out = tmp_path / "out"
    run = ["run", "--input", str(tmp_path / "run"), "--out", str(out), "--no-predict"]
    assert main([*run, "--influx", influx_settings.url, "--database", influx_settings.database]) == 0
    lines = (out / "incidents.jsonl").read_text().splitlines()
    states: list[dict[str, Any]] = [dict(s) for s in latest_states(json.loads(line) for line in lines)]
    assert states
    query = f'SELECT last("root"), last("state"), last("gpus_hit") FROM "{MEASUREMENT}" GROUP BY "incident_id"'
    body = influxql(influx_settings, query, influx_settings.database)
    stored = {
        s["tags"]["incident_id"]: tuple(s["values"][0][1:])
        for r in body["results"]  # type: ignore[attr-defined]
        for s in r.get("series", [])
    }
    # the record's own state, as every view says it (a leaf whose ports went silent: "no data")
    expected = {s["incident_id"]: (s["root_cause"]["entity"], s["state"], s["gpus_hit"]) for s in states}
    assert stored == expected

    # the anomalies too, each tagged with where its entity sits, so panels can filter them
    anomalies = [json.loads(line) for line in (out / "anomalies.jsonl").read_text().splitlines() if line]
    body = influxql(
        influx_settings,
        f'SELECT count("score") FROM "{ANOMALY_MEASUREMENT}" GROUP BY "entity", "node"',
        influx_settings.database,
    )
    counted = {
        (s["tags"]["entity"], s["tags"]["node"]): s["values"][0][1]
        for r in body["results"]  # type: ignore[attr-defined]
        for s in r.get("series", [])
    }
    per_entity: dict[str, int] = {}
    for a in anomalies:
        per_entity[a["entity"]] = per_entity.get(a["entity"], 0) + 1
    assert {e: n for (e, _), n in counted.items()} == per_entity
    gpus = [(e, node) for e, node in counted if "-gpu" in e]
    assert gpus and all(e.startswith(node + "-") for e, node in gpus)


@pytest.mark.parametrize(
    ("root", "action", "jobs"),
    [("leaf-p0-r3", 'say "drain", then wait', []), ("n 1,x=2", "back\\slash", ["job a", "job,b"])],
)
def test_incident_line_escapes_what_line_protocol_needs(root: str, action: str, jobs: list[str]) -> None:
    from ingest.lineprotocol import decode

    state = {
        "incident_id": "inc 1,x=y",
        "severity": "major",
        "status": "open",
        "root_cause": {"entity": root, "kind": "leaf_down", "confidence": 0.9},
        "affected": [root],
        "gpus_hit": 8,
        "jobs": jobs,
        "action": action,
        "opened": 1767225600.0,
        "updated": 1767225630.0,
    }
    batch = decode((incident_line(IncidentRecord.from_dict(state)) + "\n").encode())
    assert not batch.rejects, batch.rejects
    frame = batch.frames[MEASUREMENT]
    assert frame.tag("incident_id").tolist() == ["inc 1,x=y"]
    assert frame.fields["root"].values.tolist() == [root]
    assert frame.fields["action"].values.tolist() == [action]
    assert frame.fields["jobs"].values.tolist() == [",".join(jobs)]
    assert frame.time_ns.tolist() == [1767225630 * 10**9]


def test_anomaly_and_prediction_lines_decode_with_their_tags() -> None:
    from detectors.anomaly import Anomaly, Prediction
    from ingest.lineprotocol import decode

    where = {"node": "n 1", "rack": "rack0001", "pod": "", "plane": "3"}
    a = Anomaly(1767225600.0, "n 1-gpu0", "DCGM_FI_DEV_GPU_TEMP", "warn:job", 4.5, 88.0, float("nan"), "gpu")
    p = Prediction("n 1-gpu0", 1767225630.0, "gpu_thermal", 0.7, 21600.0, None, 'drain, then "check"')
    batch = decode((anomaly_line(a, where) + "\n" + prediction_line(p, where) + "\n").encode())
    assert not batch.rejects, batch.rejects
    anomaly = batch.frames[ANOMALY_MEASUREMENT]
    assert anomaly.tag("node").tolist() == ["n 1"] and anomaly.tag("detector").tolist() == ["warn:job"]
    assert "pod" not in anomaly.tags and "expected" not in anomaly.fields  # empty and NaN left out
    assert anomaly.fields["early"].values.tolist() == [1]
    prediction = batch.frames["aiops_prediction"]
    assert prediction.fields["action"].values.tolist() == ['drain, then "check"']
    assert "expected_in_s" not in prediction.fields
