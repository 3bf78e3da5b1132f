"""The HTTP API, served by uvicorn on a free port and asked over HTTP: filters, the bearer token,
acknowledge and resolve, silences that hold back notifications, and /metrics counting what the
notifier could not deliver."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.api import ApiServer, build_app
from aiops.daemon_metrics import DaemonMetrics
from aiops.incident_index import IncidentIndex
from notify.config import parse
from notify.service import Notifier
from tests.http_endpoint import Endpoint
from tests.unit.test_notify import RECORD

TOKEN = "s3cret-token-for-tests"


def _record(n: int, **changes: Any) -> dict[str, Any]:
    root = {**RECORD["root_cause"], **changes.pop("root", {})}
    return {**RECORD, "incident_id": f"inc-{n}", "root_cause": root, **changes}


RECORDS = [
    _record(1, opened=1000.0, updated=1000.0),
    _record(
        2, opened=1100.0, updated=1200.0, severity="warning", root={"entity": "n00001-gpu3", "kind": "gpu_thermal"}
    ),
    _record(3, opened=1300.0, updated=1500.0, status="resolved", resolved=1500.0),
    _record(4, opened=2000.0, updated=2000.0, root={"entity": "leaf-p1-r0"}),
]


class Api:
    def __init__(self, tmp_path: Path, token: str | None = TOKEN) -> None:
        self.hook = Endpoint(default=400)  # a robot whose token was revoked
        config = parse(
            {
                "receivers": [{"name": "chat", "kind": "webhook", "url": self.hook.url}],
                "routes": [{"receiver": "chat", "group_wait": "0s"}],
            }
        )
        self.notifier = Notifier(config, tmp_path / "outbox.sqlite")
        self.index = IncidentIndex(tmp_path / "incidents.sqlite")
        self.index.add([json.dumps(r).encode() for r in RECORDS])
        self.metrics = DaemonMetrics()
        self.to_close: deque[str] = deque()
        app = build_app(self.index, self.metrics, self.notifier, token, self.to_close.append)
        self.server = ApiServer(app, "127.0.0.1", 0)
        self.server.start()
        self.base = f"http://127.0.0.1:{self.server.port}"

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
            exc.close()
        type_ = "json"
        try:
            return status, json.loads(raw)
        except ValueError:
            type_ = "text"
        return status, raw.decode() if type_ == "text" else raw

    def ids(self, **query: Any) -> list[str]:
        status, body = self.call("GET", "/api/incidents?" + urllib.parse.urlencode(query))
        assert status == 200, body
        return [i["incident_id"] for i in body]

    def close(self) -> None:
        self.server.stop()
        self.notifier.stop()
        self.index.close()
        self.hook.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    a = Api(tmp_path)
    yield a
    a.close()


def test_incidents_filter_by_status_severity_kind_entity_and_time(api: Api) -> None:
    assert api.ids() == ["inc-4", "inc-3", "inc-2", "inc-1"]  # newest change first
    assert api.ids(status="resolved") == ["inc-3"]
    assert api.ids(severity="warning") == ["inc-2"]
    assert api.ids(kind="gpu_thermal") == ["inc-2"]
    assert api.ids(entity="leaf-p1-*") == ["inc-4"]
    assert api.ids(since=1200, until=2000) == ["inc-3", "inc-2"]
    assert api.ids(limit=1) == ["inc-4"]
    status, one = api.call("GET", "/api/incidents/inc-2")
    assert status == 200 and one["root_cause"]["entity"] == "n00001-gpu3"
    assert api.call("GET", "/api/incidents/inc-99")[0] == 404
    assert api.call("GET", "/api/incidents?limit=0")[0] == 422


def test_a_later_state_replaces_an_earlier_one_never_the_reverse(api: Api) -> None:
    later = _record(1, opened=1000.0, updated=3000.0, status="resolved", resolved=3000.0)
    api.index.add([json.dumps(later).encode()])
    api.index.add([json.dumps(RECORDS[0]).encode()])  # replayed after a restart: older
    assert api.call("GET", "/api/incidents/inc-1")[1]["status"] == "resolved"


def test_mutations_need_the_bearer_token(api: Api) -> None:
    ack = {"by": "alice", "comment": "looking"}
    assert api.call("POST", "/api/incidents/inc-1/ack", ack)[0] == 401
    assert api.call("POST", "/api/incidents/inc-1/ack", ack, token="wrong")[0] == 401
    assert (
        api.call("POST", "/api/silences", {"match": {"kind": "leaf_down"}, "comment": "x", "created_by": "a"})[0] == 401
    )
    status, body = api.call("POST", "/api/incidents/inc-1/ack", ack, token=TOKEN)
    assert status == 200 and body["acknowledged"]["by"] == "alice"
    assert api.call("GET", "/api/incidents/inc-1")[0] == 200  # reads are open


def test_without_a_configured_token_mutations_are_refused(tmp_path: Path) -> None:
    a = Api(tmp_path, token=None)
    try:
        status, body = a.call("POST", "/api/incidents/inc-1/ack", {"by": "alice"}, token="anything")
        assert status == 403 and "no API token" in body["detail"]
    finally:
        a.close()


def test_resolve_hands_the_incident_to_the_engine_once(api: Api) -> None:
    status, body = api.call("POST", "/api/incidents/inc-1/resolve", {"by": "bob", "comment": "reseated"}, TOKEN)
    assert status == 200 and body["resolved_by_operator"]["by"] == "bob"
    assert list(api.to_close) == ["inc-1"]
    assert api.index.operator_resolved() == ["inc-1"]  # a restart before the engine closes it asks again
    assert api.call("POST", "/api/incidents/inc-3/resolve", {"by": "bob"}, TOKEN)[0] == 409
    assert api.call("POST", "/api/incidents/inc-99/resolve", {"by": "bob"}, TOKEN)[0] == 404


def test_a_silence_made_through_the_api_holds_back_notifications_until_it_expires(api: Api) -> None:
    status, made = api.call(
        "POST",
        "/api/silences",
        {"match": {"kind": ["leaf_down"]}, "starts": 0, "ends": 10_000, "comment": "swap", "created_by": "alice"},
        TOKEN,
    )
    assert status == 201 and made["status"] == "expired"  # 0..10,000 s of 1970, in wall time
    status, made = api.call(
        "POST",
        "/api/silences",
        {"match": {"kind": ["leaf_down"]}, "duration_s": 3600, "comment": "leaf swap", "created_by": "alice"},
        TOKEN,
    )
    assert status == 201 and made["status"] == "active"
    assert [s["id"] for s in api.call("GET", "/api/silences")[1]][-1] == made["id"]

    router = api.notifier.router
    opened = _record(10, opened=made["starts"] + 1, updated=made["starts"] + 1)
    api.notifier.offer([json.dumps(opened).encode()], made["starts"] + 1)
    assert router.stats.silenced == 1 and router.stats.notifications == 0

    status, expired = api.call("DELETE", f"/api/silences/{made['id']}", token=TOKEN)
    assert status == 200 and expired["status"] == "expired"
    router_silences = api.notifier.outbox.silences
    router_silences._cache = None  # (re-read at most once a second; the test does not wait)
    later = expired["ends"] + 1
    api.notifier.offer([json.dumps(_record(11, opened=later, updated=later)).encode()], later)
    assert router.stats.notifications == 1
    assert api.call("DELETE", "/api/silences/sil-nope", token=TOKEN)[0] == 404
    assert api.call("POST", "/api/silences", {"match": {}, "comment": "all", "created_by": "a"}, TOKEN)[0] == 422


def test_metrics_count_refused_notifications_and_the_outbox(api: Api) -> None:
    api.metrics.took(1000)
    api.metrics.ticks, api.metrics.lag, api.metrics.assigned = 7, 42, True
    opened = _record(20, opened=5000.0, updated=5000.0)
    api.notifier.offer([json.dumps(opened).encode()], 5000.0)
    assert api.notifier.outbox.depth() == 1
    api.notifier.outbox.deliver_due()  # the webhook answers 400: not retried, counted
    assert api.hook.requests == 1
    status, text = api.call("GET", "/metrics")
    assert status == 200
    metrics = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert metrics['aiops_notification_failures_total{reason="refused_4xx"}'] == 1
    assert metrics["aiops_outbox_depth"] == 0
    assert metrics["aiops_notifications_unrouted_total"] == 0  # (counting them: tests/unit/test_notify.py)
    assert metrics["aiops_values_total"] == 1000
    assert metrics["aiops_consumer_lag_messages"] == 42
    assert metrics["aiops_ticks_total"] == 7
    assert metrics['aiops_open_incidents{severity="critical",status="open"}'] == 2
    assert metrics['aiops_open_incidents{severity="warning",status="open"}'] == 1


def test_probes_and_openapi(api: Api) -> None:
    assert api.call("GET", "/healthz")[0] == 200
    assert api.call("GET", "/readyz")[0] == 503  # not yet in its group
    api.metrics.assigned = True
    assert api.call("GET", "/readyz") == (200, {"status": "active"})
    api.metrics.heartbeat -= 1000
    assert api.call("GET", "/healthz")[0] == 503
    status, spec = api.call("GET", "/openapi.json")
    assert status == 200 and "/api/incidents/{incident_id}/resolve" in spec["paths"]
