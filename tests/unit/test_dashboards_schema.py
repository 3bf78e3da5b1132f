"""Every dashboard decodes with Grafana's own schema as grafana-foundation-sdk models it (pinned to
the release built for Grafana 11.6), and a re-encode keeps every key: a typo such as `fieldConfg`
or a field the schema does not know is lost in the round trip, and fails here. Also: the
datasource every panel names is the provisioned one, panel ids and refIds are unique."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "dashboards" / "json").glob("*.json"))
SDK = pytest.importorskip("grafana_foundation_sdk.models.dashboard", reason="grafana-foundation-sdk (dev dependency)")


def _keys(value: Any, path: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(f"{path}/{k}")
            out |= _keys(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out |= _keys(v, f"{path}[{i}]")
    return out


def _encoded(obj: Any) -> Any:
    return obj.to_json() if hasattr(obj, "to_json") else str(obj)


# An annotation's `target` is the data source's own query: the schema types it as the built-in
# Grafana source's (limit, matchAny, tags, type; its comment says it "should be a regular
# DataQuery"), so the SDK keeps only those. Grafana's InfluxDB source reads an InfluxQL annotation
# from these keys (InfluxQuery in public/app/plugins/datasource/influxdb/types.ts, and the columns
# its annotation editor and migrations.ts fill in); anything else is a typo.
INFLUXQL_ANNOTATION_KEYS = frozenset(
    {"refId", "query", "rawQuery", "queryType", "fromAnnotations", "name", "resultFormat"}
    | {"textColumn", "tagsColumn", "titleColumn", "timeEndColumn", "limit", "matchAny", "tags", "type"}
)


def _annotation_target_keys(board: dict[str, Any]) -> tuple[set[str], list[str]]:
    """The keys under annotation targets (left to the check above), and those InfluxQL does not know."""
    under, unknown = set(), []
    for i, annotation in enumerate(board.get("annotations", {}).get("list", [])):
        target = annotation.get("target")
        if isinstance(target, dict) and annotation.get("datasource", {}).get("type") == "influxdb":
            under |= _keys(target, f"/annotations/list[{i}]/target")
            unknown += [f"{annotation.get('name')}: {k}" for k in target if k not in INFLUXQL_ANNOTATION_KEYS]
    return under, unknown


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_a_dashboard_survives_grafanas_schema(path: Path) -> None:
    board = json.loads(path.read_text())
    again = json.loads(json.dumps(SDK.Dashboard.from_json(board).to_json(), default=_encoded))
    annotation_keys, unknown = _annotation_target_keys(board)
    lost = sorted(k for k in _keys(board) - _keys(again) - annotation_keys if k != "/id")  # a null id is left out
    assert lost == [], f"{path.name}: keys Grafana's schema does not know: {lost[:10]}"
    assert unknown == [], f"{path.name}: annotation keys InfluxQL does not know: {unknown}"


def test_an_annotation_typo_is_caught() -> None:
    board = json.loads((ROOT / "dashboards" / "json" / "gpus.json").read_text())
    target = board["annotations"]["list"][0]["target"]
    target["textColum"] = target.pop("textColumn")
    assert _annotation_target_keys(board)[1] == ["Incidents: textColum"]


def test_telemetry_dashboards_draw_incidents_and_predictions() -> None:
    for name in ("overview", "gpus", "fabric", "cluster-telemetry"):
        board = json.loads((ROOT / "dashboards" / "json" / f"{name}.json").read_text())
        drawn = {a["name"]: a["target"]["query"] for a in board["annotations"]["list"] if a.get("enable")}
        assert '"aiops_incident"' in drawn["Incidents"] and '"aiops_prediction"' in drawn["Predictions"], name


def test_a_typo_is_caught() -> None:
    board = json.loads(FILES[0].read_text())
    board["panels"][1]["fieldConfg"] = board["panels"][1].pop("fieldConfig")
    again = json.loads(json.dumps(SDK.Dashboard.from_json(board).to_json(), default=_encoded))
    assert "/panels[1]/fieldConfg" in _keys(board) - _keys(again)


def _panels(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in items:
        out.append(p)
        out += _panels(p.get("panels", []))
    return out


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_datasources_ids_and_refids(path: Path) -> None:
    provisioned = yaml.safe_load((ROOT / "dashboards" / "provisioning" / "datasources" / "influxdb.yaml").read_text())
    uids = {d["uid"] for d in provisioned["datasources"]}
    board = json.loads(path.read_text())
    panels = _panels(board["panels"])
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"{path.name}: panel ids repeat"
    for p in panels:
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), f"{path.name} {p['title']}: refIds repeat"
        for ds in [p.get("datasource"), *(t.get("datasource") for t in p.get("targets", []))]:
            if ds is not None:
                assert ds["uid"] in uids, f"{path.name} {p['title']}: datasource {ds} is not provisioned"
    uids_seen = [json.loads(f.read_text())["uid"] for f in FILES]
    assert len(uids_seen) == len(set(uids_seen))
