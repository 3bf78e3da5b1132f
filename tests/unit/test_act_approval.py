"""Approval through the HTTP API and through a signed link: a plan a policy holds for approval is
done only after someone approves it, at the loop's next tick; the bearer token or the link's
signature is required; opening the link (or a chat client unfurling it) approves nothing; a plan
that is not awaiting approval cannot be approved."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from act.audit import AuditLog, Row
from act.loop import ActLoop, sign
from act.policy import parse
from aiops.api import ActionsApi, ApiServer, build_app
from aiops.daemon_metrics import DaemonMetrics
from aiops.incident_index import IncidentIndex

SECRET = b"k" * 32


class Recorder:
    def __init__(self) -> None:
        self.done: list[str] = []

    def run(self, row: Row) -> str:
        self.done.append(row.target)
        return "ok"

    def confirmed(self, row: Row) -> bool | None:
        return True


STATE = {
    "incident_id": "inc-1",
    "status": "open",
    "severity": "critical",
    "root_cause": {"entity": "n00007-gpu1", "kind": "gpu_fell_off_bus", "confidence": 1.0},
    "job_gpus": {"job-1": 8},
}


@pytest.fixture
def served() -> Iterator[tuple[ActLoop, Recorder, str, str]]:
    recorder = Recorder()
    policy = {"name": "reboot", "match": {"kinds": ["gpu_fell_off_bus"]}, "action": {"type": "reboot"}}
    config = parse({"dry_run": False, "policies": [{**policy, "execute": True, "approval": True}]})
    loop = ActLoop(config, AuditLog(), {"reboot": recorder}, lambda m, s: None, lambda e: e.split("-")[0], lambda s: 64)
    loop.offer([STATE], 100.0)
    (row,) = loop.audit.rows()
    assert (row.decision, row.state) == ("awaiting_approval", "held")
    api = ActionsApi(None, loop.approve, SECRET, audit=loop.audit)
    server = ApiServer(
        build_app(IncidentIndex(None), DaemonMetrics(), None, "tok", lambda i: None, None, api), "127.0.0.1", 0
    )
    server.start()
    try:
        yield loop, recorder, f"http://127.0.0.1:{server.port}", row.plan_id
    finally:
        server.stop()


def call(url: str, method: str = "GET", token: str | None = None, form: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = form.encode() if form is not None else (b"" if method == "POST" else None)
    if form is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request) as r:
            body = r.read().decode()
            return r.status, json.loads(body) if r.headers["content-type"].startswith("application/json") else body
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_approval_through_the_api_needs_the_token(served: tuple[ActLoop, Recorder, str, str]) -> None:
    loop, recorder, base, pid = served
    status, rows = call(f"{base}/api/actions")
    assert status == 200 and rows[0]["decision"] == "awaiting_approval"
    assert call(f"{base}/api/actions/{pid}/approve", "POST")[0] == 401
    assert call(f"{base}/api/actions/{pid}/approve", "POST", token="wrong")[0] == 401
    loop.tick(110.0, {})
    assert recorder.done == []  # nothing approved, nothing done
    status, answer = call(f"{base}/api/actions/{pid}/approve?by=alice", "POST", token="tok")
    assert status == 202 and answer["by"] == "alice (API token)"
    assert recorder.done == []  # done by the loop, at its next tick
    loop.tick(120.0, {})
    assert recorder.done == ["n00007"]
    row = loop.audit.get(pid)
    assert row is not None and (row.state, row.approved_by, row.acted_at) == ("done", "alice (API token)", 120.0)
    assert call(f"{base}/api/actions/{pid}/approve", "POST", token="tok")[0] == 409  # nothing left to approve


def test_a_signed_link_opens_a_page_and_only_its_form_approves(served: tuple[ActLoop, Recorder, str, str]) -> None:
    loop, recorder, base, pid = served
    assert call(f"{base}/actions/{pid}?sig={sign(b'other', pid)}")[0] == 403
    status, page = call(f"{base}/actions/{pid}?sig={sign(SECRET, pid)}")
    assert status == 200 and "n00007" in page and "<form method=post" in page
    loop.tick(110.0, {})
    assert recorder.done == []  # opening the link approved nothing
    assert call(f"{base}/actions/{pid}/approve?sig=bad", "POST", form="by=mallory")[0] == 403
    status, answer = call(f"{base}/actions/{pid}/approve?sig={sign(SECRET, pid)}", "POST", form="by=bob")
    assert status == 202 and answer["by"] == "bob (signed link)"
    loop.tick(120.0, {})
    assert recorder.done == ["n00007"]
