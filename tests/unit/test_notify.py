"""Notifications: each service's payload and signature, the routing file, and routing in event
time (one notification per open and per resolve, group waits, repeats, silences)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from notify.config import NotifyConfigError, load, parse
from notify.formats import build, dingtalk_sign, feishu_sign, webhook_sign
from notify.message import IncidentNote, Notification
from notify.router import Router

MINIMAL = """\
receivers:
  - name: oncall
    kind: dingtalk            # feishu | dingtalk | wecom | slack | teams | webhook | alertmanager | apprise
    url: http://127.0.0.1:9999/robot/send?access_token=abc
    secret: SECexample        # optional; signs the request where the service supports it
routes:
  - receiver: oncall
    match: {severity: [critical, warning]}
"""


def _openssl_hmac_b64(key: bytes, message: bytes) -> str:
    """An independent HMAC-SHA256 (OpenSSL's), base64: what the services compute on their side."""
    out = subprocess.run(
        ["openssl", "dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:" + key.hex(), "-binary"],
        input=message,
        capture_output=True,
        check=True,
    ).stdout
    return base64.b64encode(out).decode()


def test_dingtalk_sign_is_the_documented_algorithm() -> None:
    # DingTalk's worked example: secret "this is secret", string to sign "<timestamp ms>\n<secret>",
    # HMAC-SHA256 keyed by the secret, base64, then URL-encoded
    ts, secret = 1577808000000, "this is secret"
    expected = urllib.parse.quote_plus(_openssl_hmac_b64(secret.encode(), f"{ts}\n{secret}".encode()))
    assert dingtalk_sign(ts, secret) == expected


def test_feishu_sign_is_the_documented_algorithm() -> None:
    # Feishu's example timestamp 1599360473 (seconds): HMAC-SHA256 keyed by "<timestamp>\n<secret>"
    # over an empty message, base64 (key and message the other way round from DingTalk's)
    ts, secret = 1599360473, "demo-secret"
    assert feishu_sign(ts, secret) == _openssl_hmac_b64(f"{ts}\n{secret}".encode(), b"")


RECORD: dict[str, Any] = {
    "incident_id": "inc-20260101T000630Z-40ca3643a0",
    "opened": 1767225990.0,
    "updated": 1767225990.0,
    "resolved": None,
    "status": "open",
    "severity": "critical",
    "root_cause": {"entity": "leaf-p0-r2", "kind": "leaf_down", "confidence": 0.852},
    "jobs": ["job-00000", "job-00001"],
    "gpus_hit": 256,
    "affected_count": 34,
    "evidence": [
        {
            "at": 1767225990.0,
            "detector": "rule:error_counter",
            "entity": "n00000-nic2",
            "metric": "link_downed",
            "value": 1.0,
        }
    ],
    "action": "restore the leaf switch (power, console); reschedule the jobs on its nodes meanwhile",
}


def _note(key: str = "oncall:inc:open") -> Notification:
    incident = IncidentNote.from_record(RECORD, "https://aiops.example", "https://grafana.example")
    return Notification(key, "oncall", (incident,))


@pytest.mark.parametrize("kind", ["dingtalk", "feishu", "wecom", "slack", "teams", "webhook"])
def test_every_payload_says_what_where_what_it_hits_what_to_do_and_the_key(kind: str) -> None:
    req = build(kind, "http://127.0.0.1:1/hook?x=1", _note(), "SECx", now=1_800_000_000.0)
    text = req.body.decode()
    body = json.loads(text)
    for must in (
        "CRITICAL",
        "leaf_down",
        "leaf-p0-r2",
        "256 GPUs",
        "job-00000",
        "restore the leaf switch",
        "2026-01-01 00:06:30 UTC",
        "https://aiops.example/incidents/inc-20260101T000630Z-40ca3643a0",
        "oncall:inc:open",
    ):
        assert must in text, (kind, must)
    assert req.headers["Idempotency-Key"] == "oncall:inc:open"
    if kind == "dingtalk":
        assert body["msgtype"] == "markdown" and set(body["markdown"]) == {"title", "text"}
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(req.url).query)
        assert query["x"] == ["1"] and query["timestamp"] == ["1800000000000"]
        assert query["sign"] == [
            base64.b64encode(hmac.new(b"SECx", b"1800000000000\nSECx", hashlib.sha256).digest()).decode()
        ]
    elif kind == "feishu":
        assert body["msg_type"] == "interactive" and body["timestamp"] == "1800000000"
        assert body["sign"] == feishu_sign(1800000000, "SECx")
        assert body["card"]["header"]["template"] == "red"
    elif kind == "wecom":
        assert body["msgtype"] == "markdown" and len(body["markdown"]["content"].encode()) <= 4096
    elif kind == "slack":
        assert body["text"] and body["blocks"][0]["type"] == "header"
    elif kind == "teams":
        card = body["attachments"][0]
        assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert card["content"]["type"] == "AdaptiveCard" and card["content"]["version"] == "1.4"
    else:
        assert body["key"] == "oncall:inc:open" and body["incidents"][0]["root"] == "leaf-p0-r2"
        assert req.headers["X-Aiops-Signature"] == webhook_sign(1800000000, req.body, "SECx")


def test_wecom_cuts_long_messages_at_its_limit_and_keeps_the_key() -> None:
    long = {**RECORD, "action": "x" * 6000}
    note = Notification("k-long", "w", (IncidentNote.from_record(long),))
    content = json.loads(build("wecom", "http://h/", note).body)["markdown"]["content"]
    assert len(content.encode()) <= 4096 and content.endswith("key: k-long")


def test_the_minimal_file_works_as_written(tmp_path: Path) -> None:
    path = tmp_path / "notify.yaml"
    path.write_text(MINIMAL)
    config = load(path)
    assert config.receivers[0].kind == "dingtalk" and config.receivers[0].rate == 20
    assert config.routes[0].match.severity == ["critical", "warning"]
    assert "abc" not in repr(config) and "SECexample" not in repr(config)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"receivers": [], "routes": [{"receiver": "x"}]}, "routes[0] names receiver 'x'"),
        ({"receivers": [{"name": "a", "kind": "icq", "url": "u"}], "routes": []}, "receivers.0.kind"),
        (
            {
                "receivers": [{"name": "a", "kind": "slack", "url": "u"}],
                "routes": [{"receiver": "a", "group_wait": "5 minutes"}],
            },
            "not a duration",
        ),
        ({"receivers": [{"name": "a", "kind": "slack", "url": "u", "colour": 1}], "routes": []}, "colour"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_a_bad_file_says_where(raw: Any, says: str) -> None:
    with pytest.raises(NotifyConfigError, match=None) as err:
        parse(raw, "notify.yaml")
    assert says in str(err.value) and str(err.value).startswith("notify.yaml")


def _router(extra: str = "", route: str = "") -> tuple[Router, list[Notification]]:
    sent: list[Notification] = []
    config = parse(
        __import__("yaml").safe_load(
            "receivers: [{name: oncall, kind: webhook, url: 'http://h/'}]\n"
            f"routes: [{{receiver: oncall, group_wait: 30s, group_interval: 5m, repeat_interval: 1h{route}}}]\n" + extra
        )
    )
    return Router(config, sent.append), sent


def _state(status: str, t: float, incident: str = "inc-a", severity: str = "critical") -> dict[str, Any]:
    return {
        **RECORD,
        "incident_id": incident,
        "status": status,
        "severity": severity,
        "opened": 1000.0,
        "updated": t,
        "resolved": t if status == "resolved" else None,
    }


def _play(router: Router, states: dict[float, list[dict[str, Any]]], until: float, step: float = 30.0) -> None:
    t = 1000.0
    while t <= until:
        router.offer(states.get(t, []))
        router.advance(t)
        t += step


def test_one_notification_when_an_incident_opens_and_one_when_it_resolves_in_event_time() -> None:
    router, sent = _router()
    updates = {1000.0 + 30 * i: [_state("open", 1000.0 + 30 * i)] for i in range(40)}  # 20 minutes of updates
    updates[2800.0] = [_state("resolved", 2800.0)]
    _play(router, updates, 4000.0)
    assert [(n.key, n.incidents[0].status) for n in sent] == [
        ("oncall:inc-a:open", "open"),
        ("oncall:inc-a:resolved", "resolved"),
    ]
    assert sent[0].incidents[0].at == 1030.0  # sent after group_wait, saying the latest state


def test_an_incident_still_open_is_repeated_every_repeat_interval() -> None:
    router, sent = _router()
    _play(router, {1000.0: [_state("open", 1000.0)]}, 1000.0 + 2 * 3600 + 60)
    assert [n.key for n in sent] == ["oncall:inc-a:open", "oncall:inc-a:open:r1", "oncall:inc-a:open:r2"]
    assert sent[1].repeat == 1 and "(reminder)" in sent[1].title


def test_grouping_by_kind_sends_one_message_for_incidents_opened_within_group_wait() -> None:
    router, sent = _router(route=", group_by: [kind]")
    _play(
        router,
        {1000.0: [_state("open", 1000.0, "inc-a")], 1010.0: [], 1030.0: [_state("open", 1030.0, "inc-b")]},
        1100.0,
    )
    assert len(sent) == 1 and {n.incident_id for n in sent[0].incidents} == {"inc-a", "inc-b"}


def test_a_silence_holds_back_what_it_matches_while_it_lasts() -> None:
    router, sent = _router(extra="silences: [{match: {entity: 'leaf-*'}, starts: 0, ends: 2000}]\n")
    _play(router, {1000.0: [_state("open", 1000.0)]}, 1000.0 + 3600 + 60)
    # the opening fell in the silence; the reminder after it ended is heard
    assert [n.key for n in sent] == ["oncall:inc-a:open:r1"] and router.stats.silenced == 1


def test_routes_match_severity_and_the_first_match_wins() -> None:
    router, sent = _router(route=", match: {severity: [critical]}")
    _play(
        router, {1000.0: [_state("open", 1000.0, "inc-a"), _state("open", 1000.0, "inc-b", severity="major")]}, 1100.0
    )
    assert [n.incidents[0].incident_id for n in sent] == ["inc-a"] and router.stats.unrouted == 1


@pytest.mark.parametrize(
    ("match", "named"),
    [("{severity: [critical, info]}", "severity 'info'"), ("{kind: leaf_dwon}", "kind 'leaf_dwon'"),
     ("{status: [firing]}", "status 'firing'")],
)  # fmt: skip
def test_a_match_value_the_service_never_emits_stops_the_load_with_the_allowed_values(match: str, named: str) -> None:
    raw = __import__("yaml").safe_load(MINIMAL.replace("{severity: [critical, warning]}", match))
    with pytest.raises(NotifyConfigError, match=named) as caught:
        parse(raw, "routes.yaml")
    message = str(caught.value)
    assert message.startswith("routes.yaml: routes.0.match")
    # the values it could have said, so the operator can fix it from the message alone
    allowed = {"severity": "critical, major, minor, warning", "status": "open, warning, resolved"}
    field = named.split(maxsplit=1)[0]
    assert allowed.get(field, "leaf_down") in message


def test_a_silence_with_a_value_never_emitted_is_refused_too() -> None:
    raw = __import__("yaml").safe_load(MINIMAL + "silences: [{match: {severity: info}}]\n")
    with pytest.raises(NotifyConfigError, match=r"silences.0.match.*severity 'info'"):
        parse(raw)


def test_an_incident_no_route_matches_goes_to_the_default_receiver_when_the_file_names_one() -> None:
    router, sent = _router(route=", match: {severity: [critical]}", extra="default_receiver: oncall\n")
    _play(router, {1000.0: [_state("open", 1000.0, "inc-b", severity="minor")]}, 1100.0)
    assert [n.incidents[0].incident_id for n in sent] == ["inc-b"] and router.stats.unrouted == 0


def test_an_incident_no_route_matches_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    router, sent = _router(route=", match: {severity: [critical]}")
    _play(router, {1000.0: [_state("open", 1000.0, "inc-b", severity="minor")]}, 1100.0)
    assert sent == [] and router.stats.unrouted == 1
    assert any("no route matches incident inc-b" in r.getMessage() for r in caplog.records)


def test_a_default_receiver_that_is_not_defined_is_refused() -> None:
    raw = __import__("yaml").safe_load(MINIMAL + "default_receiver: nobody\n")
    with pytest.raises(NotifyConfigError, match="default_receiver 'nobody' is not defined"):
        parse(raw)


def test_a_blast_radius_that_doubled_by_a_node_or_more_is_said_again_once() -> None:
    # issue 66: an HBM incident said "1 GPU hit"; a 160-GPU job then started on the GPU and chat
    # never said so. Doubled and grown by at least a node's GPUs: news; a few GPUs more: not.
    router, sent = _router()

    def hit(t: float, gpus: int) -> dict[str, Any]:
        return {**_state("open", t), "gpus_hit": gpus}

    updates = {1000.0: [hit(1000.0, 1)], 1300.0: [hit(1300.0, 4)], 1600.0: [hit(1600.0, 160)]}
    updates[1900.0] = [hit(1900.0, 170)]  # grew, but not doubled: no message of its own
    updates[2200.0] = [_state("resolved", 2200.0)]
    _play(router, updates, 3000.0)
    assert [n.key for n in sent] == ["oncall:inc-a:open", "oncall:inc-a:open:g160", "oncall:inc-a:resolved"]
    grown = sent[1].incidents[0]
    assert grown.grown_from == 1 and grown.headline.startswith("GREW to 160 GPUs hit")
    assert ("Blast radius", "160 GPUs, 2 jobs: job-00000, job-00001 (was 1 when last told)") in grown.facts()
