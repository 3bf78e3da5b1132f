"""Variables that scale (issue 49, point 6): no variable that picks nodes, GPUs, jobs, switches
or racks of the telemetry defaults to "All". At 10,000 GPUs "All" on such a variable is every
node's or every GPU's series in each panel on first load (~1,250 nodes, ~10,000 GPUs); the
variable defaults instead to the first value its query finds (Grafana selects the first option
when the saved dashboard holds no current value and "All" is not offered), and several can be
picked by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from aiops.dashboards_inventory import panels
from vocab.catalog import MEASUREMENTS

FILES = sorted((Path(__file__).resolve().parents[2] / "dashboards" / "json").glob("*.json"))
# tag keys naming one entity (or one job) each: as many values as the fleet has of them
PER_ENTITY = frozenset({"node", "gpu", "job", "switch", "rack", "nic", "nvswitch", "optic", "psu", "cooling", "entity"})
# what holds a series per entity: the telemetry, and the scheduler's jobs per node
PER_ENTITY_SERIES = frozenset({m.name for m in MEASUREMENTS} | {"aiops_job"})
KEY = re.compile(r'WITH KEY\s*=\s*"(\w+)"')
FROM = re.compile(r'FROM\s+"(\w+)"')


def _uses(query: str, name: str) -> bool:
    return re.search(rf"\$\{{?{name}\b|\[\[{name}\]\]", query) is not None


def unscaled(board: dict[str, Any]) -> list[str]:
    """The variables of `board` that pick entities of per-entity series and default to, or offer,
    every value."""
    queries = [t.get("query", "") for p in panels(board["panels"]) for t in p.get("targets", [])]
    found = []
    for v in board.get("templating", {}).get("list", []):
        query = v.get("query")
        query = query.get("query", "") if isinstance(query, dict) else str(query or "")
        key = KEY.search(query)
        if v.get("type") != "query" or key is None or key.group(1) not in PER_ENTITY:
            continue
        read = {m for q in queries if _uses(q, v["name"]) for m in FROM.findall(q)}
        if not read & PER_ENTITY_SERIES:
            continue  # it filters the service's own low-volume points (anomalies by rack): "All" is cheap
        saved = (v.get("current") or {}).get("value")
        values: list[Any] = saved if isinstance(saved, list) else [saved]
        if v.get("includeAll") or "$__all" in values:
            found.append(f"${v['name']} ({key.group(1)} of {', '.join(sorted(read & PER_ENTITY_SERIES))})")
    return found


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_no_per_entity_variable_defaults_to_all(path: Path) -> None:
    assert unscaled(json.loads(path.read_text())) == [], f"{path.name}: defaults to every entity"


def test_an_all_default_is_caught() -> None:
    board = json.loads(next(p for p in FILES if p.name == "gpus.json").read_text())
    node = next(v for v in board["templating"]["list"] if v["name"] == "node")
    node |= {"includeAll": True, "allValue": ".*", "current": {"text": ["All"], "value": ["$__all"]}}
    assert unscaled(board) == ["$node (node of gpu)"]
    # an "All" over the service's anomalies per rack (the overview's heatmaps) is no such variable
    overview = json.loads(next(p for p in FILES if p.name == "overview.json").read_text())
    assert [v["name"] for v in overview["templating"]["list"] if v.get("includeAll")] and unscaled(overview) == []
