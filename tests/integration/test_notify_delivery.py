"""Delivery against a local HTTP receiver that checks what the services check (DingTalk's
signature and timestamp): outages of the receiver, refusals, restarts of the sender, and an
offline run of the whole pipeline notifying through it. No chat service is reachable here; the
receiver stands in for one, with the services' own verification rules."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from aiops.cli import main
from notify.config import parse
from notify.message import IncidentNote, Notification
from notify.outbox import Outbox
from tests.unit.test_notify import RECORD

TOKEN, SECRET = "tok-0123456789abcdef", "SEC-do-not-log-me"


class Receiver:
    """A chat robot: verifies DingTalk's signature (HMAC-SHA256 of "<ts>\\n<secret>", base64, in
    the query) and that the timestamp is within an hour, answers `plan` codes in turn (then 200)."""

    def __init__(self) -> None:
        self.plan: list[int] = []
        self.received: list[dict[str, Any]] = []
        self.requests = 0
        self.bad_signatures = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests += 1
                code = receiver.plan.pop(0) if receiver.plan else 200
                if code == 200 and self.path.startswith("/robot/send"):
                    query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                    ts = query["timestamp"][0]
                    want = base64.b64encode(
                        hmac.new(SECRET.encode(), f"{ts}\n{SECRET}".encode(), hashlib.sha256).digest()
                    )
                    if query["sign"][0] != want.decode() or query["access_token"] != [TOKEN]:
                        receiver.bad_signatures += 1
                        code = 403
                if code == 200:
                    receiver.received.append(json.loads(body))
                self.send_response(code)
                self.end_headers()
                self.wfile.write(b'{"errcode":0}')

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def _config(url: str, kind: str = "dingtalk", group_wait: str = "30s") -> Any:
    return parse(
        {
            "receivers": [{"name": "oncall", "kind": kind, "url": url, "secret": SECRET}],
            "routes": [{"receiver": "oncall", "group_wait": group_wait}],
        }
    )


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


def _note(i: int, status: str = "open") -> Notification:
    record = {**RECORD, "incident_id": f"inc-{i}", "status": status}
    return Notification(f"oncall:inc-{i}:{status}", "oncall", (IncidentNote.from_record(record),))


def test_a_receiver_down_for_a_while_gets_every_notification_once(receiver: Receiver, tmp_path: Path) -> None:
    clock = Clock()
    outbox = Outbox(tmp_path / "outbox.sqlite", _config(f"{receiver.url}/robot/send?access_token={TOKEN}"), clock)
    receiver.plan = [500] * 7
    for i in range(5):
        outbox.put(_note(i))
    for _ in range(12):  # the backoff doubles from 1 s; the clock moves on between rounds
        outbox.deliver_due()
        clock.t += 60
    keys = [n["markdown"]["text"].rsplit("key: ", 1)[1] for n in receiver.received]
    assert sorted(keys) == [f"oncall:inc-{i}:open" for i in range(5)]
    assert receiver.bad_signatures == 0 and outbox.stats.retries == 7 and outbox.depth() == 0


def test_a_refusal_is_not_retried_and_is_counted(receiver: Receiver, tmp_path: Path) -> None:
    clock = Clock()
    outbox = Outbox(tmp_path / "outbox.sqlite", _config(f"{receiver.url}/bad", kind="webhook"), clock)
    receiver.plan = [400]
    outbox.put(_note(1))
    for _ in range(5):
        outbox.deliver_due()
        clock.t += 600
    assert receiver.requests == 1 and outbox.stats.failed == 1 and outbox.rows() == [("oncall:inc-1:open", "failed", 1)]


def test_a_restart_sends_what_was_pending_and_never_what_was_acknowledged(receiver: Receiver, tmp_path: Path) -> None:
    config = _config(f"{receiver.url}/robot/send?access_token={TOKEN}")
    first = Outbox(tmp_path / "outbox.sqlite", config)
    for i in range(3):
        first.put(_note(i))
    first.deliver_due()  # all three acknowledged
    first.put(_note(3))  # queued, then the daemon dies before sending it
    first._db.close()
    second = Outbox(tmp_path / "outbox.sqlite", config)
    for i in range(4):  # the restarted daemon replays from its checkpoint and routes the same again
        second.put(_note(i))
    second.deliver_due()
    keys = Counter(n["markdown"]["text"].rsplit("key: ", 1)[1] for n in receiver.received)
    assert keys == Counter({f"oncall:inc-{i}:open": 1 for i in range(4)})
    assert second.stats.duplicates == 4 and second.stats.sent == 1


def test_the_rate_limit_holds_messages_back_and_loses_none(receiver: Receiver, tmp_path: Path) -> None:
    clock = Clock()
    outbox = Outbox(tmp_path / "outbox.sqlite", _config(f"{receiver.url}/w", kind="wecom"), clock)  # 20 a minute
    for i in range(45):
        outbox.put(_note(i))
    per_round = []
    for _ in range(4):
        before = len(receiver.received)
        outbox.deliver_due()
        per_round.append(len(receiver.received) - before)
        clock.t += 61
    assert per_round == [20, 20, 5, 0] and len(receiver.received) == 45


def test_no_url_token_or_secret_reaches_a_log_line(
    receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    # a port nothing listens on (connection refused), then the receiver failing and refusing
    config = parse(
        {
            "receivers": [
                {
                    "name": "dead",
                    "kind": "dingtalk",
                    "url": f"http://127.0.0.1:9/robot/send?access_token={TOKEN}",
                    "secret": SECRET,
                },
                {
                    "name": "flaky",
                    "kind": "dingtalk",
                    "url": f"{receiver.url}/robot/send?access_token={TOKEN}",
                    "secret": SECRET,
                },
            ],
            "routes": [{"receiver": "dead"}],
        }
    )
    outbox = Outbox(tmp_path / "outbox.sqlite", config, clock)
    outbox.put(Notification("dead:inc-1:open", "dead", _note(1).incidents))
    outbox.put(Notification("flaky:inc-2:open", "flaky", _note(2).incidents))
    outbox.put(Notification("flaky:inc-3:open", "flaky", _note(3).incidents))
    receiver.plan = [500, 404]
    for _ in range(3):
        outbox.deliver_due()
        clock.t += 600
    stored = " ".join(str(row) for row in outbox._db.execute("SELECT * FROM outbox"))
    assert caplog.text and "not delivered" in caplog.text
    for secret in (TOKEN, SECRET, "127.0.0.1:9/robot"):
        assert secret not in caplog.text and secret not in stored


@pytest.mark.slow
def test_an_offline_run_notifies_once_per_open_and_once_per_resolve(receiver: Receiver, tmp_path: Path) -> None:
    recorded, out = tmp_path / "recorded", tmp_path / "out"
    gen = ["--gpus", "256", "--hours", "2", "--interval", "60", "--seed", "8"]
    assert (
        main(
            ["gen", *gen, "--faults", "leaf_down=1,psu_failure=1,gpu_hbm_ecc=1,nic_link_flap=1", "--out", str(recorded)]
        )
        == 0
    )
    config = tmp_path / "notify.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "receivers": [{"name": "oncall", "kind": "webhook", "url": f"{receiver.url}/hook", "secret": SECRET}],
                "routes": [{"receiver": "oncall", "group_wait": "0s", "match": {"severity": ["critical", "major"]}}],
                "public_url": "https://aiops.example",
            }
        )
    )
    assert (
        main(["run", "--input", str(recorded), "--out", str(out), "--no-predict", "--notify-config", str(config)]) == 0
    )
    states = [json.loads(line) for line in (out / "incidents.jsonl").read_text().splitlines()]
    opened = {s["incident_id"] for s in states if s["status"] == "open"}
    resolved = {s["incident_id"] for s in states if s["status"] == "resolved"}
    assert opened and resolved
    keys = Counter(n["key"] for n in receiver.received)
    assert set(keys.values()) == {1}
    assert keys == Counter({f"oncall:{i}:open": 1 for i in opened} | {f"oncall:{i}:resolved": 1 for i in resolved})
    assert all(
        n["incidents"][0]["links"]["Incident"].startswith("https://aiops.example/incidents/inc-")
        for n in receiver.received
    )


def test_two_processes_sharing_an_outbox_send_each_key_once(receiver: Receiver, tmp_path: Path) -> None:
    # the active daemon and a standby (or a restart while the old process winds down) on one file
    config = _config(f"{receiver.url}/robot/send?access_token={TOKEN}")
    one, two = Outbox(tmp_path / "outbox.sqlite", config), Outbox(tmp_path / "outbox.sqlite", config)
    for i in range(30):
        one.put(_note(i))
    threads = [threading.Thread(target=o.deliver_due) for o in (one, two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys = Counter(n["markdown"]["text"].rsplit("key: ", 1)[1] for n in receiver.received)
    assert keys == Counter({f"oncall:inc-{i}:open": 1 for i in range(30)})
    assert one.stats.sent + two.stats.sent == 30


def test_the_demo_notifies_too(receiver: Receiver, tmp_path: Path) -> None:
    config = tmp_path / "notify.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "receivers": [{"name": "chat", "kind": "slack", "url": f"{receiver.url}/services/T0/B0/x"}],
                "routes": [{"receiver": "chat", "group_wait": "0s"}],
            }
        )
    )
    demo = ["demo", "--gpus", "256", "--hours", "1", "--no-predict", "--faults", "leaf_down=1,psu_failure=1"]
    assert main([*demo, "--notify-config", str(config)]) == 0
    titles = [n["text"] for n in receiver.received]
    assert any("leaf_down" in t for t in titles) and any("psu_failure" in t for t in titles)
    assert len(titles) == len({n["blocks"][-1]["elements"][0]["text"] for n in receiver.received})  # one per key


def test_an_apprise_receiver_delivers_through_apprise_and_retries_its_failures(
    receiver: Receiver, tmp_path: Path
) -> None:
    # json:// is Apprise's generic JSON-over-HTTP service: it posts to our local receiver
    host = receiver.url.removeprefix("http://")
    config = parse({"receivers": [{"name": "tail", "kind": "apprise", "url": f"json://{host}/apprise"}],
                    "routes": [{"receiver": "tail"}]})  # fmt: skip
    clock = Clock()
    outbox = Outbox(tmp_path / "outbox.sqlite", config, clock)
    note = Notification("tail:inc-7:open", "tail", (IncidentNote.from_record({**RECORD, "incident_id": "inc-7"}),))
    outbox.put(note)
    receiver.plan = [500]
    assert outbox.deliver_due() == 0  # Apprise says "not delivered": retried later
    clock.t += 5
    assert outbox.deliver_due() == 1
    assert receiver.requests == 2 and len(receiver.received) == 1
    got = receiver.received[0]
    assert got["title"] == note.title and "key: tail:inc-7:open" in got["message"]
    assert RECORD["action"] in got["message"]
