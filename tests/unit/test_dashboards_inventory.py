"""docs/dashboards.md is the inventory of every panel (dashboard, panel, what it reads, the
question it answers) as the dashboards make it (issue 49): a panel added, renamed or dropped
without `aiops dashboards inventory --out docs/dashboards.md` fails here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aiops.dashboards_inventory import InventoryError, markdown, missing, reads, rows

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "dashboards.md"
FILES = sorted((ROOT / "dashboards" / "json").glob("*.json"))


def test_every_panel_is_in_the_inventory() -> None:
    text = DOC.read_text()
    assert missing(text) == []
    assert text == markdown(), "docs/dashboards.md is stale: aiops dashboards inventory --out docs/dashboards.md"


def test_a_panel_left_out_is_named() -> None:
    text = DOC.read_text()
    panel = next(r for r in rows(FILES) if r.file == "fleet.json" and r.title == "GPUs idle")
    row = next(line for line in text.splitlines() if line.startswith(f"| {panel.panel_id} | GPUs idle |"))
    assert missing(text.replace(row + "\n", "")) == [f"fleet.json#{panel.panel_id} GPUs idle"]
    # the same row under another dashboard's section does not count
    other = text.replace(row + "\n", "").replace("## GPUs (`gpus.json`)\n", f"## GPUs (`gpus.json`)\n{row}\n")
    assert missing(other) == [f"fleet.json#{panel.panel_id} GPUs idle"]


def test_a_new_panel_makes_the_document_stale(tmp_path: Path) -> None:
    for f in FILES:
        shutil.copy(f, tmp_path / f.name)
    board = json.loads((tmp_path / "fleet.json").read_text())
    added = {**board["panels"][1], "id": 99, "title": "GPUs on fire", "description": "How many GPUs burn."}
    board["panels"].append(added)
    (tmp_path / "fleet.json").write_text(json.dumps(board))
    files = sorted(tmp_path.glob("*.json"))
    assert missing(DOC.read_text(), files) == ["fleet.json#99 GPUs on fire"]
    added["description"] = ""
    (tmp_path / "fleet.json").write_text(json.dumps(board))
    with pytest.raises(InventoryError, match="no description"):
        markdown(files)


def test_reads_names_the_innermost_fields_not_the_aliases() -> None:
    query = (
        'SELECT sum("w") FROM (SELECT mean("DCGM_FI_DEV_POWER_USAGE") AS "w" FROM "gpu" WHERE $timeFilter '
        'GROUP BY time($__interval), "gpu") WHERE $timeFilter GROUP BY time($__interval)'
    )
    assert reads([query]) == "gpu: DCGM_FI_DEV_POWER_USAGE"
    assert (
        reads(['SELECT "root", "kind" AS "k" FROM "aiops_incident" WHERE $timeFilter']) == "aiops_incident: root, kind"
    )
