"""The report reads the run's audit log: a run that acted (`aiops run --actions`, its plans in
`actions.sqlite`, as act/audit.py writes them) shows each incident's plans, their decision and
who approved them, on the incident's page and in the incident list; a run that did not act says
so, and reading the log changes nothing in it."""

from __future__ import annotations

import html
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from act.audit import AuditLog, Row, plan_id, read_plans
from show.report import write_report

T = 1_767_225_600.0
DRY = "dry run (the policy has no execute: true)"


def _incident(ident: str, root: str, kind: str, opened: float) -> dict[str, Any]:
    return {
        "incident_id": ident,
        "opened": opened,
        "updated": opened + 60,
        "resolved": None,
        "status": "open",
        "severity": "major",
        "root_cause": {"entity": root, "kind": kind, "confidence": 0.9},
        "candidates": [{"entity": root, "kind": kind, "score": 0.9}],
        "affected": [root],
        "affected_count": 1,
        "jobs": [],
        "gpus_hit": 0,
        "evidence": [],
        "evidence_count": 0,
        "action": "drain the node at the next checkpoint",
    }


INCIDENTS = [
    _incident("inc-hbm", "n00003-gpu2", "gpu_hbm_ecc", T),
    _incident("inc-psu", "n00007-psu0", "psu_failure", T + 600),
    _incident("inc-quiet", "n00009-gpu0", "gpu_thermal", T + 1200),
]


def _plan(incident: str, policy: str, action: str, target: str, decision: str, t: float, node: str) -> Row:
    pid = plan_id(incident, policy, action, target)
    detail = DRY if decision == "dry_run" else ""
    return Row(pid, incident, policy, action, target, "why", decision, "planned", None, detail, t, node=node)


def acted_run(tmp_path: Path) -> Path:
    """A run's folder as `aiops run --actions` leaves it: its incidents, and the plans the policies
    made for them in its audit log (dry runs, and one a person approved and the site drained)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "incidents.jsonl").write_text("".join(json.dumps(i) + "\n" for i in INCIDENTS))
    log = AuditLog(run / "actions.sqlite")
    dry = [
        _plan("inc-hbm", "drain-hbm", "drain", "n00003", "dry_run", T + 30, "n00003"),
        _plan("inc-hbm", "page-critical", "page", "n00003-gpu2", "dry_run", T + 30, "n00003"),
        _plan("inc-psu", "drain-power", "drain", "n00007", "dry_run", T + 630, "n00007"),
    ]
    for row in dry:
        log.add(row)
        log.move(row.plan_id, "held", row.detail)
    approved = _plan("inc-psu", "reset-psu", "reboot", "n00007", "awaiting_approval", T + 640, "n00007")
    log.add(approved)
    log.move(approved.plan_id, "held", "waiting for a person")
    log.move(approved.plan_id, "planned", "approved by alice", approved_by="alice", decision="execute")
    log.move(approved.plan_id, "done", "rebooted by the site's command")
    log.close()
    return run


def _plans_card(page: str) -> list[dict[str, str]]:
    card = re.search(r'<div class="card" id="plans">(.*?)</div>', page, re.S)
    assert card is not None
    header = re.findall(r"<th>([^<]+)</th>", card.group(1))
    return [
        dict(
            zip(
                header,
                (html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", m)),
                strict=True,
            )
        )
        for m in re.findall(r"<tr data-plan=\"[^\"]+\">(.*?)</tr>", card.group(1), re.S)
    ]


def _list_rows(listing: str) -> dict[str, list[str]]:
    return {
        ident: [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for ident, row in re.findall(r'<tr data-id="([^"]+)"[^>]*>(.*?)</tr>', listing, re.S)
    }


def test_the_report_shows_each_incidents_plans_from_the_audit_log(tmp_path: Path) -> None:
    run = acted_run(tmp_path)
    out = tmp_path / "report"
    write_report(run, out)
    hbm = _plans_card((out / "incidents" / "inc-hbm.html").read_text())
    assert [(p["action"], p["target"], p["decision"], p["state"], p["approved by"]) for p in hbm] == [
        ("drain", "n00003", "dry_run", "held", "-"),
        ("page", "n00003-gpu2", "dry_run", "held", "-"),
    ]
    assert hbm[0]["detail"] == DRY
    psu = _plans_card((out / "incidents" / "inc-psu.html").read_text())
    assert [(p["action"], p["decision"], p["state"], p["approved by"]) for p in psu] == [
        ("drain", "dry_run", "held", "-"),
        ("reboot", "execute", "done", "alice"),
    ]
    quiet = html.unescape((out / "incidents" / "inc-quiet.html").read_text())
    assert not _plans_card(quiet)
    assert "No action policy planned anything for this incident (read from the run's actions.sqlite)" in quiet
    # the list: each incident's latest plan, its decision and state, who approved it, how many
    rows = _list_rows((out / "incidents.html").read_text())
    assert rows["inc-hbm"][-2:] == ["page n00003-gpu2 (2 plans)", "dry_run, held"]
    assert rows["inc-psu"][-2:] == ["reboot n00007 (2 plans)", "execute, done (approved by alice)"]
    assert rows["inc-quiet"][-1] == "recommended; no plan recorded"


def test_a_run_that_did_not_act_says_so(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "incidents.jsonl").write_text(json.dumps(INCIDENTS[0]) + "\n")
    write_report(run, tmp_path / "report")
    page = html.unescape((tmp_path / "report" / "incidents" / "inc-hbm.html").read_text())
    assert not _plans_card(page) and "acting was off" in page
    assert not (run / "actions.sqlite").exists()
    assert _list_rows((tmp_path / "report" / "incidents.html").read_text())["inc-hbm"][-1] == (
        "recommended; no plan recorded"
    )


def test_reading_the_log_changes_nothing_in_it(tmp_path: Path) -> None:
    run = acted_run(tmp_path)
    path = run / "actions.sqlite"
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    plans = read_plans(path)
    assert plans is not None and {k: len(v) for k, v in plans.items()} == {"inc-hbm": 2, "inc-psu": 2}
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert read_plans(run / "nothing.sqlite") is None
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(ValueError, match="cannot read the audit log"):
        read_plans(path)


def test_a_log_whose_writer_still_runs_is_read_through_its_journal(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "actions.sqlite")  # the writer keeps it open: its rows in the -wal
    try:
        log.add(_plan("inc-hbm", "drain-hbm", "drain", "n00003", "dry_run", T + 30, "n00003"))
        plans = read_plans(tmp_path / "actions.sqlite")
        assert plans is not None and [p.action for p in plans["inc-hbm"]] == ["drain"]
    finally:
        log.close()


def test_the_daemon_shows_the_same_plans_from_the_log_it_writes(tmp_path: Path) -> None:
    from aiops.api import ActionsApi, ApiServer, build_app
    from aiops.daemon_metrics import DaemonMetrics
    from aiops.incident_index import IncidentIndex

    run = acted_run(tmp_path)
    index = IncidentIndex(None)
    index.add([json.dumps(i).encode() for i in INCIDENTS])
    actions = ActionsApi(run / "actions.sqlite", lambda plan, who: None, b"k" * 32)
    server = ApiServer(build_app(index, DaemonMetrics(), None, "tok", lambda i: None, None, actions), "127.0.0.1", 0)
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        with urllib.request.urlopen(f"{base}/incidents/inc-psu") as r:
            psu = _plans_card(r.read().decode())
        with urllib.request.urlopen(f"{base}/incidents/inc-quiet") as r:
            quiet = html.unescape(r.read().decode())
        with urllib.request.urlopen(f"{base}/incidents") as r:
            rows = _list_rows(r.read().decode())
    finally:
        server.stop()
        index.close()
    assert [(p["action"], p["decision"], p["state"], p["approved by"]) for p in psu] == [
        ("drain", "dry_run", "held", "-"),
        ("reboot", "execute", "done", "alice"),
    ]
    assert "No action policy planned anything for this incident (read from the daemon's audit log)" in quiet
    assert rows["inc-psu"][-2:] == ["reboot n00007 (2 plans)", "execute, done (approved by alice)"]
