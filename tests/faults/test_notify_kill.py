"""Notifications from the live daemon while things go wrong: the receiver answers 500 for a
while, the daemon is SIGKILLed twice mid-stream (once soon after its first incident, once while
notifications are pending) and started again. Every notification the offline run sends of the
same data arrives, each key at most twice (the documented window: sent, then killed before the
acknowledgement was recorded), and never more often than the daemon was killed. Meanwhile the
HTTP API of the first daemon serves the incidents it published."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aiops.cli import main
from tests.faults.daemons import reaped, replay
from tests.http_endpoint import Endpoint
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def hook() -> Iterator[Endpoint]:
    r = Endpoint()
    yield r
    r.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_killed_twice_with_a_failing_receiver_every_notification_arrives_once_per_key(
    kafka_settings: KafkaSettings, tmp_path: Path, hook: Endpoint
) -> None:
    config = tmp_path / "notify.yml"
    receivers = [{"name": "oncall", "kind": "webhook", "url": hook.url}]
    config.write_text(yaml.safe_dump({"receivers": receivers, "routes": [{"receiver": "oncall"}]}))
    r = replay(kafka_settings, tmp_path)
    reference = tmp_path / "offline-notified"
    run = ["run", "--input", str(r.recorded), "--out", str(reference), "--no-predict", "--notify-config", str(config)]
    assert main(run) == 0
    expected = Counter(b["key"] for b in hook.bodies)
    assert len(expected) >= 3 and max(expected.values()) == 1
    hook.bodies.clear()
    hook.plan = [500] * 4  # the chat service is down for the first few attempts

    port = _free_port()
    notifying = [*r.daemon, "--notify-config", str(config)]
    with reaped() as track:
        r.publish(0)  # two thirds of the hour; the rest comes after the first kill
        first = track(r.aiops(*notifying, "--api-port", str(port)))
        r.wait_for_first_incident()
        listed = _get(f"http://127.0.0.1:{port}/api/incidents")
        assert listed and all(i["incident_id"].startswith("inc-") for i in listed)
        assert _get(f"http://127.0.0.1:{port}/readyz") == {"status": "active"}
        r.wait_for_checkpoint(f"run-{kafka_settings.ingest_group}-run.ckpt")
        os.kill(first.pid, signal.SIGKILL)
        first.communicate(timeout=60)

        r.publish(1)
        second = track(r.aiops(*notifying))
        deadline = time.monotonic() + 120
        while len(hook.bodies) < 2 and time.monotonic() < deadline:  # killed with notifications in flight
            time.sleep(0.5)
        os.kill(second.pid, signal.SIGKILL)
        second.communicate(timeout=60)

        third = track(r.aiops(*notifying, "--stop-when-idle", "15"))
        _, err = third.communicate(timeout=600)
        assert third.returncode == 0, err[-3000:]

    got = Counter(b["key"] for b in hook.bodies)
    assert set(got) == set(expected), "notifications lost or invented"
    repeated = {k: n for k, n in got.items() if n > 1}
    assert all(n <= 2 for n in repeated.values()) and len(repeated) <= 2, repeated
    r.assert_topics_equal_offline()
