"""The dashboards against Grafana 12's own dashboard schema (v1, the JSON model Grafana 12 loads
from files and the HTTP API), as its Apache-licensed @grafana/schema package declares it in
TypeScript (dist/types/raw/dashboard/x/dashboard_types.gen.d.ts, generated from the CUE kind).

grafana-foundation-sdk has no Python build for Grafana 12 (its releases stop at 11.6, see
test_dashboards_schema.py), so this reads the generated interfaces: every key our JSON sets on the
dashboard, a panel, a row, its grid position, field config, a template variable, an annotation, a
link or a datasource reference must be a property Grafana 12 declares there, and the schema
version must be one Grafana 12 migrates forward from (it upgrades older ones on load)."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_dashboards_schema import _panels

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "dashboards" / "json").glob("*.json"))
PACKAGE = "@grafana/schema@12.3.0"
CACHE = Path.home() / ".cache" / "aiops" / "npm" / "grafana-schema-12.3.0"
TYPES = CACHE / "package" / "dist" / "types" / "raw" / "dashboard" / "x" / "dashboard_types.gen.d.ts"
OLDEST_MIGRATED = 13  # Grafana's dashboard migrator upgrades any schemaVersion from 13 on


def _fetch() -> Path:
    """The package's types, fetched once through npm into the cache (set-up, like the services)."""
    if not TYPES.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "pack", PACKAGE, "--pack-destination", str(CACHE)],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"npm pack {PACKAGE} failed: {done.stderr[-500:]}"
        with tarfile.open(CACHE / done.stdout.strip().splitlines()[-1]) as archive:
            archive.extractall(CACHE, filter="data")
    return TYPES


@pytest.fixture(scope="module")
def interfaces() -> dict[str, set[str]]:
    """interface name -> the property names it declares (top level only)."""
    text = _fetch().read_text(encoding="utf-8")
    out: dict[str, set[str]] = {}
    for match in re.finditer(r"^export interface (\w+) \{\n(.*?)^\}", text, re.M | re.S):
        out[match.group(1)] = set(re.findall(r"^    '?([\w$]+)'?\??:", match.group(2), re.M))
    return out


def _unknown(obj: dict[str, Any], declared: set[str], where: str) -> list[str]:
    return [f"{where}.{k}" for k in obj if k not in declared]


def test_the_schema_is_read(interfaces: dict[str, set[str]]) -> None:
    assert {"panels", "templating", "annotations", "schemaVersion"} <= interfaces["Dashboard"]
    assert {"gridPos", "fieldConfig", "targets", "options"} <= interfaces["Panel"]
    assert "fieldConfg" not in interfaces["Panel"]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_key_is_one_grafana_12_declares(interfaces: dict[str, set[str]], path: Path) -> None:
    board = json.loads(path.read_text())
    unknown = _unknown(board, interfaces["Dashboard"], "dashboard")
    for n, panel in enumerate(_panels(board["panels"])):
        where = f"panels[{n}] {panel.get('title')!r}"
        unknown += _unknown(panel, interfaces["RowPanel" if panel["type"] == "row" else "Panel"], where)
        unknown += _unknown(panel.get("gridPos", {}), interfaces["GridPos"], f"{where}.gridPos")
        config = panel.get("fieldConfig", {})
        unknown += _unknown(config, interfaces["FieldConfigSource"], f"{where}.fieldConfig")
        unknown += _unknown(config.get("defaults", {}), interfaces["FieldConfig"], f"{where}.fieldConfig.defaults")
        if isinstance(panel.get("datasource"), dict):
            unknown += _unknown(panel["datasource"], interfaces["DataSourceRef"], f"{where}.datasource")
    for variable in board.get("templating", {}).get("list", []):
        unknown += _unknown(variable, interfaces["VariableModel"], f"variable {variable['name']}")
    for annotation in board.get("annotations", {}).get("list", []):
        unknown += _unknown(annotation, interfaces["AnnotationQuery"], f"annotation {annotation.get('name')}")
    for link in board.get("links", []):
        unknown += _unknown(link, interfaces["DashboardLink"], "link")
    assert unknown == [], f"{path.name}: keys Grafana 12 does not declare: {unknown[:10]}"
    assert OLDEST_MIGRATED <= board["schemaVersion"] <= 42, board["schemaVersion"]
