"""The chat message's Grafana link opens a provisioned dashboard on the incident (issue 66, point
7): the dashboard its path names exists, every variable the link sets is one of that dashboard's,
the incident variable narrows the panels that read incidents, and the range the link gives holds
the incident however late the message is read."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiops.dashboards_inventory import panels
from notify.message import IncidentNote

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards" / "json"
OPENED = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _link(incident_id: str) -> str:
    record = {
        "incident_id": incident_id,
        "opened": OPENED,
        "updated": OPENED + 60,
        "status": "open",
        "severity": "major",
        "root_cause": {"entity": "n1-gpu0", "kind": "gpu_xid", "confidence": 1.0},
    }
    note = IncidentNote.from_record(record, public_url="https://aiops.example", grafana_url="https://grafana.example/")
    return dict(note.links)["Grafana"]


def _board(uid: str) -> dict[str, Any]:
    boards: list[dict[str, Any]] = [json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))]
    found = [b for b in boards if b.get("uid") == uid]
    assert found, f"no provisioned dashboard has the uid {uid!r}"
    return found[0]


def test_the_link_sets_only_the_dashboards_variables() -> None:
    incident = "inc-42/leaf-p0 r1&x"  # characters a URL or a regex would read
    url = urlsplit(_link(incident))
    assert (url.scheme, url.netloc) == ("https", "grafana.example")
    path = re.fullmatch(r"/d/(?P<uid>[\w-]+)(?:/[\w-]*)?", url.path)
    assert path is not None, url.path
    board = _board(path["uid"])
    params = parse_qs(url.query, keep_blank_values=True)
    names = {v["name"] for v in board.get("templating", {}).get("list", [])}
    asked = {k.removeprefix("var-") for k in params if k.startswith("var-")}
    assert asked and asked <= names, f"the link sets {sorted(asked - names)}, which {path['uid']} does not have"
    assert params["var-incident"] == [incident]  # decoded whole: the id is percent-encoded
    # the variable narrows every panel that reads incidents to the one the message is about
    for panel in panels(board["panels"]):
        for target in panel.get("targets", []):
            query = str(target.get("query", ""))
            if 'FROM "aiops_incident"' in query:
                assert re.search(r'"incident_id"\s*=~\s*/\^\$incident\$/', query), f"{panel['title']}: not by $incident"


def test_the_links_range_holds_the_incident() -> None:
    params = parse_qs(urlsplit(_link("inc-1")).query)
    assert int(params["from"][0]) <= OPENED * 1000 and params["to"] == ["now"]
