"""Incidents through a real Alertmanager (built from its Go module by scripts/services): it
receives our alerts, groups them by its own route, sends them on to a local webhook receiver, ends
them on resolve, and a silence made in Alertmanager silences them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from notify.config import parse
from notify.service import Notifier
from tests.http_endpoint import Endpoint
from tests.unit.test_notify import RECORD

pytestmark = pytest.mark.services

ALERTMANAGER = Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops")) / "bin" / "alertmanager"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def hook() -> Iterator[Endpoint]:
    """Alertmanager's webhook receiver: one message per group notification."""
    r = Endpoint()
    yield r
    r.close()


@pytest.fixture
def alertmanager(tmp_path: Path, hook: Endpoint) -> Iterator[str]:
    if not os.access(ALERTMANAGER, os.X_OK):
        pytest.fail(f"no Alertmanager at {ALERTMANAGER}: scripts/services up builds it")
    config = {
        "route": {
            "receiver": "local",
            "group_by": ["kind"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "local", "webhook_configs": [{"url": hook.url, "send_resolved": True}]}],
    }
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "am.log").open("w")
    process = subprocess.Popen(
        [
            str(ALERTMANAGER),
            f"--config.file={tmp_path / 'am.yml'}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # one instance: no gossip port
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait(lambda: _get(f"{url}/-/ready") is not None, 30, "alertmanager ready")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            body = response.read()
            return json.loads(body) if body.strip().startswith((b"[", b"{")) else body
    except OSError:
        return None


def _post(url: str, payload: Any) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def _wait(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _record(n: int, kind: str, status: str = "open") -> dict[str, Any]:
    now = time.time()
    return {
        **RECORD,
        "incident_id": f"inc-am-{n}",
        "opened": now - 60,
        "updated": now,
        "resolved": now if status == "resolved" else None,
        "status": status,
        "root_cause": {"entity": f"leaf-p0-r{n}", "kind": kind, "confidence": 0.9},
    }


def _notifier(
    url: str, tmp_path: Path, live: bool = True, severities: tuple[str, ...] = ("critical", "major")
) -> Notifier:
    match = {"severity": list(severities)} if severities else {}
    config = parse(
        {
            "receivers": [{"name": "site-am", "kind": "alertmanager", "url": url}],
            "routes": [{"receiver": "site-am", "match": match}],
            "public_url": "https://aiops.example",
            "cluster": "c1",
        }
    )
    return Notifier(config, tmp_path / "outbox.sqlite", live=live)


def _states(records: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(r).encode() for r in records]


def test_alertmanager_groups_routes_and_ends_our_alerts(alertmanager: str, hook: Endpoint, tmp_path: Path) -> None:
    notifier = _notifier(alertmanager, tmp_path)
    notifier.offer(_states([_record(1, "leaf_down"), _record(2, "leaf_down"), _record(3, "psu_failure")]), time.time())
    assert notifier.outbox.deliver_due() == 3

    # Alertmanager's route groups by kind: a message with both leaves, one with the PSU. (Alerts
    # that started longer ago than group_wait are flushed at once, so the first leaf may go out
    # alone; the group's next message, a group_interval later, holds both.)
    def group(kind: str) -> set[str]:
        messages = [m for m in hook.bodies if m["groupLabels"].get("kind") == kind and m["status"] == "firing"]
        return {a["labels"]["incident_id"] for a in messages[-1]["alerts"]} if messages else set()

    _wait(lambda: group("leaf_down") == {"inc-am-1", "inc-am-2"} and group("psu_failure") == {"inc-am-3"}, 30, "groups")
    assert {m["groupLabels"]["kind"] for m in hook.bodies} == {"leaf_down", "psu_failure"}
    leaves = [m for m in hook.bodies if m["groupLabels"]["kind"] == "leaf_down"][-1]
    alert = next(a for a in leaves["alerts"] if a["labels"]["incident_id"] == "inc-am-1")
    wanted = {"alertname": "AiopsIncident", "kind": "leaf_down", "severity": "critical", "entity": "leaf-p0-r1"}
    assert {**wanted, "cluster": "c1"}.items() <= alert["labels"].items()
    assert alert["annotations"]["action"] == RECORD["action"]
    assert "leaf_down at leaf-p0-r1" in alert["annotations"]["summary"]
    assert alert["annotations"]["incident_url"] == "https://aiops.example/incidents/inc-am-1"
    assert alert["generatorURL"] == "https://aiops.example/incidents/inc-am-1"

    # a resolve ends the alert: Alertmanager says so to the receiver (send_resolved)
    hook.bodies.clear()
    notifier.offer(_states([_record(3, "psu_failure", "resolved")]), time.time())
    notifier.outbox.deliver_due()
    _wait(lambda: any(m["status"] == "resolved" for m in hook.bodies), 30, "the resolve")
    resolved = next(m for m in hook.bodies if m["status"] == "resolved")
    assert [a["labels"]["incident_id"] for a in resolved["alerts"]] == ["inc-am-3"]
    firing = {a["labels"]["incident_id"] for a in _get(f"{alertmanager}/api/v2/alerts?active=true")}
    assert firing == {"inc-am-1", "inc-am-2"}
    notifier.stop()


def test_a_silence_made_in_alertmanager_silences_our_alerts(alertmanager: str, hook: Endpoint, tmp_path: Path) -> None:
    now = time.time()
    _post(
        f"{alertmanager}/api/v2/silences",
        {
            "matchers": [{"name": "kind", "value": "psu_failure", "isRegex": False, "isEqual": True}],
            "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 60)),
            "endsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 3600)),
            "createdBy": "oncall",
            "comment": "PSU swap in rack 3",
        },
    )
    notifier = _notifier(alertmanager, tmp_path)
    notifier.offer(_states([_record(1, "leaf_down"), _record(3, "psu_failure")]), time.time())
    notifier.outbox.deliver_due()
    _wait(lambda: any(m["groupLabels"].get("kind") == "leaf_down" for m in hook.bodies), 30, "the leaf")
    alerts = {a["labels"]["incident_id"]: a["status"] for a in _get(f"{alertmanager}/api/v2/alerts")}
    assert alerts["inc-am-3"]["state"] == "suppressed" and alerts["inc-am-3"]["silencedBy"]
    assert alerts["inc-am-1"]["state"] == "active"
    # the leaf's group went out after group_wait; the silenced PSU never does
    time.sleep(3)
    sent = {a["labels"]["incident_id"] for m in hook.bodies for a in m["alerts"]}
    assert sent == {"inc-am-1"}
    notifier.stop()


def test_open_alerts_are_posted_again_before_they_expire_and_survive_a_restart(
    alertmanager: str, tmp_path: Path
) -> None:
    notifier = _notifier(alertmanager, tmp_path)
    clock = [time.time()]
    notifier.outbox.alerts.clock = lambda: clock[0]
    notifier.offer(_states([_record(1, "leaf_down")]), clock[0])
    notifier.outbox.deliver_due()
    first_end = _get(f"{alertmanager}/api/v2/alerts")[0]["endsAt"]
    assert notifier.outbox.deliver_due() == 0  # nothing new, not yet due again
    notifier.stop()

    # a restarted daemon (same outbox) carries the open alert on, a resend period later
    again = _notifier(alertmanager, tmp_path)
    clock[0] += 61
    again.outbox.alerts.clock = lambda: clock[0]
    assert again.outbox.deliver_due() == 1
    later_end = _get(f"{alertmanager}/api/v2/alerts")[0]["endsAt"]
    assert later_end > first_end  # Alertmanager moved its expiry on: still firing
    again.stop()


def test_an_offline_run_skips_alertmanager_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    notifier = _notifier("http://127.0.0.1:9", tmp_path, live=False)  # nothing listens there
    notifier.offer(_states([_record(1, "leaf_down")]), time.time())
    assert notifier.outbox.deliver_due() == 0
    assert notifier.summary()["alerts_skipped_offline"] == 1
    assert "Alertmanager keeps wall-clock time" in caplog.text
    notifier.stop()


def test_a_warning_that_comes_true_ends_its_predicted_alert_and_fires_the_incident(
    alertmanager: str, tmp_path: Path
) -> None:
    notifier = _notifier(alertmanager, tmp_path, severities=())
    warning = {**_record(5, "gpu_thermal"), "status": "warning", "severity": "warning"}
    notifier.offer(_states([warning]), time.time())
    notifier.outbox.deliver_due()
    came_true = {**_record(5, "gpu_thermal"), "updated": warning["updated"] + 30}
    notifier.offer(_states([came_true]), time.time())
    notifier.outbox.deliver_due()
    active = {a["labels"]["severity"] for a in _get(f"{alertmanager}/api/v2/alerts?active=true")}
    assert active == {"critical"}, "the predicted alert must end when the incident takes its place"

    # the horizon passes for a warning: status stays "warning" in the record, `resolved` is set
    over = {
        **came_true,
        "status": "resolved",
        "resolved": came_true["updated"] + 60,
        "updated": came_true["updated"] + 60,
    }
    notifier.offer(_states([over]), time.time())
    notifier.outbox.deliver_due()
    notifier.outbox.deliver_due()
    assert _get(f"{alertmanager}/api/v2/alerts?active=true") == []
    # a replay of an older state (after a restart) does not fire it again
    notifier.offer(_states([came_true]), time.time())
    assert notifier.outbox.deliver_due() == 0
    notifier.stop()


def test_an_alertmanager_that_fails_is_retried_with_backoff_without_holding_up_chat(tmp_path: Path) -> None:
    failing, chat = Endpoint(default=500), Endpoint()
    try:
        config = parse(
            {
                "receivers": [
                    {"name": "site-am", "kind": "alertmanager", "url": failing.url},
                    {"name": "chat", "kind": "webhook", "url": chat.url},
                ],
                "routes": [{"receiver": "site-am", "continue": True}, {"receiver": "chat", "group_wait": "0s"}],
            }
        )
        notifier = Notifier(config, tmp_path / "outbox.sqlite", live=True)
        clock = [1_900_000_000.0]
        notifier.outbox.clock = notifier.outbox.alerts.clock = lambda: clock[0]
        notifier.offer(_states([_record(1, "leaf_down")]), time.time())
        assert notifier.outbox.deliver_due() == 1  # chat took its message; Alertmanager answered 500
        assert failing.requests == 1 and len(chat.bodies) == 1
        notifier.outbox.deliver_due()
        assert failing.requests == 1, "no new attempt inside the backoff"
        clock[0] += 1.5
        notifier.outbox.deliver_due()
        assert failing.requests == 2
        assert notifier.outbox.alerts.stats.failures == 2
        notifier.stop()
    finally:
        failing.close()
        chat.close()
