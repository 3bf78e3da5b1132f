"""What the daemon fault tests share: the recorded cluster and its offline run (the reference),
the daemons as processes, and the comparison of the topics with the offline run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops.cli import main
from benchmarks.soak import by_incident, incident_differences
from ingest.kafka import ensure_topics
from tests.faults.test_broker_restart import topic_env
from tests.integration.test_run_kafka import _consume
from vocab.settings import KafkaSettings

GEN = ["--gpus", "256", "--hours", "1", "--interval", "30", "--seed", "8"]
FAULTS = ["--faults", "leaf_down=1,psu_failure=1,pfc_storm=1,gpu_straggler=1"]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Replay:
    """A recorded hour, its offline run, and how to run the daemons on the same data."""

    k: KafkaSettings
    recorded: Path
    offline: Path
    env: dict[str, str]

    @property
    def daemon(self) -> list[str]:
        r = self.recorded
        return [
            "run", "--kafka", self.k.bootstrap, "--topology", str(r / "topology.json"), "--interval", "30",
            "--events", str(r / "events.jsonl"), "--group", self.k.ingest_group + "-run", "--no-predict",
        ]  # fmt: skip

    def aiops(self, *args: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "aiops.cli", *args]
        return subprocess.Popen(command, env=self.env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def stream(self) -> subprocess.Popen[str]:
        return self.aiops("gen", *GEN, *FAULTS, "--kafka", self.k.bootstrap, "--speed", "50")  # an hour in ~72 s

    def publish(self, part: int, split: float = 2 / 3) -> None:
        """The recorded telemetry to Kafka, its first `split` of the ticks (part 0) or the rest
        (part 1), whole before this returns. A test stops a daemon after what it has done (its
        first incident) with the rest still to come, whatever the machine's speed: no race with
        a producer that might finish first."""
        lines = (self.recorded / "telemetry.lp").read_bytes().splitlines(keepends=True)
        stamps = [int(line.rsplit(b" ", 1)[1]) for line in lines]
        cut = min(stamps) + split * (max(stamps) - min(stamps))
        chosen = [line for line, t in zip(lines, stamps, strict=True) if (t < cut) == (part == 0)]
        path = self.recorded.parent / f"part-{part}.lp"
        path.write_bytes(b"".join(chosen))
        produced = self.aiops("produce", str(path), "--kafka", self.k.bootstrap, "--partitions", "3")
        _, err = produced.communicate(timeout=120)
        assert produced.returncode == 0, err[-3000:]

    def wait_for_checkpoint(self, name: str, timeout_s: float = 120.0) -> None:
        """Until the daemon has checkpointed (a stop is then from what it has done)."""
        path = Path(self.env["AIOPS_STATE_DIR"]) / name
        deadline = time.monotonic() + timeout_s
        while not path.is_file() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert path.is_file(), f"no checkpoint {path.name} after {timeout_s:.0f} s"

    def wait_for_first_incident(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not _consume(self.k, self.k.incidents_topic) and time.monotonic() < deadline:
            time.sleep(1)

    def assert_topics_equal_offline(self) -> None:
        """Incident for incident, id for id; anomaly for anomaly, none missing or twice."""
        expected = by_incident(jsonl(self.offline / "incidents.jsonl"))
        assert incident_differences(by_incident(_consume(self.k, self.k.incidents_topic)), expected) == []
        streamed = Counter(json.dumps(a, sort_keys=True) for a in _consume(self.k, self.k.anomalies_topic))
        assert streamed == Counter(json.dumps(a, sort_keys=True) for a in jsonl(self.offline / "anomalies.jsonl"))


def replay(k: KafkaSettings, tmp_path: Path) -> Replay:
    recorded, offline = tmp_path / "recorded", tmp_path / "offline"
    assert main(["gen", *GEN, *FAULTS, "--out", str(recorded)]) == 0
    assert main(["run", "--input", str(recorded), "--out", str(offline), "--no-predict"]) == 0
    assert len(by_incident(jsonl(offline / "incidents.jsonl"))) >= 3
    ensure_topics(k.bootstrap, [k.telemetry_topic], partitions=3)
    env = {**os.environ, **topic_env(k), "AIOPS_CHECKPOINT_EVERY_S": "2"}
    return Replay(k, recorded, offline, env)


@contextmanager
def reaped() -> Iterator[Callable[[subprocess.Popen[str]], subprocess.Popen[str]]]:
    """Processes started in the block are killed if it fails: no daemon outlives its test, and
    none leaves its pipes open (closed by the garbage collector during a later test, they would
    fail that test with an unraisable ResourceWarning)."""
    started: list[subprocess.Popen[str]] = []

    def track(p: subprocess.Popen[str]) -> subprocess.Popen[str]:
        started.append(p)
        return p

    try:
        yield track
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                _, err = p.communicate()
                # a daemon still running when the block failed is usually why: its log says where
                print(f"--- killed, still running: {str(p.args)[-400:]}\n{(err or '')[-4000:]}")
            else:
                p.communicate()  # what it wrote and nobody read: its pipes closed here
