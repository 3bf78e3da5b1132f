"""The daemon SIGKILLed while an action runs, then started again: the action is done once, never
twice. The drain here is a site command that cannot be read back (it records that it started,
then takes its time), so the next start marks it failed, "interrupted", pages a person, and does
not run it again; the same incident replayed after the restart plans nothing new."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from tests.faults.daemons import reaped, replay
from tests.integration.test_run_kafka import _consume
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.services, pytest.mark.slow]

SLOW_DRAIN = """
import sys, time
with open(sys.argv[1], "a") as out:
    out.write("started " + sys.argv[2] + " " + sys.argv[3] + "\\n")
time.sleep(20)
with open(sys.argv[1], "a") as out:
    out.write("finished " + sys.argv[2] + "\\n")
"""


def test_an_action_killed_midway_is_not_run_again(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    r = replay(kafka_settings, tmp_path)
    script, marks = tmp_path / "drain.py", tmp_path / "drains.log"
    script.write_text(SLOW_DRAIN)
    policies = tmp_path / "actions.yml"
    policies.write_text(
        json.dumps(
            {
                "dry_run": False,
                "breaker": {"max_nodes": 4, "max_fraction": 1.0},
                "policies": [
                    {
                        "name": "drain-psu",
                        "match": {"kinds": ["psu_failure"]},
                        "action": {"type": "drain"},
                        "execute": True,
                    }
                ],
                "executors": {"commands": {"drain": [sys.executable, str(script), str(marks), "{node}", "{incident}"]}},
            }
        )
    )
    daemon = [*r.daemon, "--actions", str(policies)]
    with reaped() as track:
        gen = track(r.stream())
        first = track(r.aiops(*daemon))
        deadline = time.monotonic() + 180
        while not (marks.is_file() and "started" in marks.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marks.is_file(), "the drain never started"
        os.kill(first.pid, signal.SIGKILL)  # while the drain command runs
        first.communicate(timeout=60)
        second = track(r.aiops(*daemon, "--stop-when-idle", "15"))
        _, err = second.communicate(timeout=600)
        gen.communicate(timeout=60)
        assert second.returncode == 0, err[-3000:]
    time.sleep(21)  # the first drain command, orphaned by the kill, finishes its own work
    started = [line for line in marks.read_text().splitlines() if line.startswith("started")]
    assert len(started) == 1, started  # once, never twice
    audit = Path(r.env["AIOPS_STATE_DIR"]) / f"actions-{kafka_settings.ingest_group}-run.sqlite"
    rows = sqlite3.connect(audit).execute("SELECT state, detail FROM actions WHERE action = 'drain'").fetchall()
    assert rows == [("failed", "interrupted: unknown whether it ran; not run again")]
    pages = [n for n in _consume(kafka_settings, kafka_settings.notices_topic) if n.get("kind") == "action"]
    assert any("interrupted" in n["message"] for n in pages), pages
