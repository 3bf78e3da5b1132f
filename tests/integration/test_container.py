"""The Dockerfile, built and run: `scripts/container build` makes the image with buildah (on a Debian
bookworm base made with debootstrap, in place of python:3.11-slim, which cannot be pulled here),
and `scripts/container run` enters a fresh copy of its root filesystem with chroot as the image's
own user (podman cannot start a container in this sandbox). In it, `aiops --help` answers, not as
root, and `aiops gen --kafka` feeding the suite's Kafka and the daemon `aiops run --kafka` reading
it give the incidents the offline runner gives here, on the worktree's code, for the same seed.

Slow: the first build takes minutes (docs/operating.md, "The container")."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer

from aiops.cli import main
from benchmarks.soak import by_incident, incident_differences
from ingest.kafka import ensure_topics
from tests.integration.test_run_kafka import FAULTS, GEN
from vocab.settings import KafkaSettings

pytestmark = [pytest.mark.slow, pytest.mark.services]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "container"


@pytest.fixture(scope="module")
def image() -> None:
    done = subprocess.run([str(SCRIPT), "build"], capture_output=True, text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]


def _in_image(
    command: list[str], binds: dict[Path, str] | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [str(SCRIPT), "run"]
    for host, inside in (binds or {}).items():
        argv += ["--bind", f"{host}:{inside}"]
    for key, value in (env or {}).items():
        argv += ["--env", f"{key}={value}"]
    done = subprocess.run([*argv, "--", *command], capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    return done


def test_the_image_runs_aiops_as_its_own_user(image: None) -> None:
    done = _in_image(["sh", "-c", "id -u && pwd && aiops --help"])
    uid, workdir, *help_text = done.stdout.splitlines()
    assert uid != "0"
    assert workdir == "/var/lib/aiops"  # the Dockerfile's WORKDIR, the user's home
    assert any(line.startswith("usage: aiops") for line in help_text)
    # it runs the installed package: no sources (the build stage's /src) and no tests in the image
    where = _in_image(["python", "-c", "import aiops, os; print(aiops.__file__, os.path.exists('/src'))"])
    installed, src_exists = where.stdout.split()
    assert installed.startswith("/usr/") and installed.endswith("-packages/aiops/__init__.py"), installed
    assert src_exists == "False"


# what the wheel installs: pyproject.toml's packages, by their top-level names
_SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
PACKAGES = tuple(name.rstrip("*") for name in _SETUPTOOLS["packages"]["find"]["include"])
_DIGESTS = (
    "import hashlib, importlib, pathlib\n"
    "for name in {packages!r}:\n"
    "    root = pathlib.Path(importlib.import_module(name).__file__).parent\n"
    "    for p in sorted(root.rglob('*.py')):\n"
    "        print(name + '/' + str(p.relative_to(root)), hashlib.sha256(p.read_bytes()).hexdigest())\n"
)


def test_the_image_holds_the_worktrees_code(image: None) -> None:
    """Every module installed in the image is the worktree's, byte for byte. buildah reused a
    cached install layer after the sources changed (its cache key of a RUN does not see the wheels
    a bind mount brings), and the compose run tested last commit's code (issue 65); the build now
    passes a digest of the sources (Dockerfile, AIOPS_SOURCE_DIGEST). Failed before the fix after
    any change to a module."""
    done = _in_image(["python", "-c", _DIGESTS.format(packages=PACKAGES)])
    installed = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())
    here = {
        f"{name}/{p.relative_to(ROOT / name)}": hashlib.sha256(p.read_bytes()).hexdigest()
        for name in PACKAGES
        for p in sorted((ROOT / name).rglob("*.py"))
    }
    assert installed == here, sorted(set(installed.items()) ^ set(here.items()))[:10]


def test_the_state_volumes_mount_path_is_the_service_users_in_the_image(image: None) -> None:
    """A new named volume takes the ownership of its mount path in the image; a path the image
    lacks makes it root's, and the daemons (uid 10001) died at their first checkpoint with a
    PermissionError (issue 65). Failed before the fix: the path did not exist."""
    done = _in_image(["sh", "-c", "id -u; stat -c '%u %a' /var/lib/aiops-state; touch /var/lib/aiops-state/probe"])
    uid, owner_mode = done.stdout.splitlines()[:2]
    assert owner_mode == f"{uid} 700"


def _consume(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000)
    records = [json.loads(m.value) for m in consumer]
    consumer.close()
    return records


def test_the_daemon_in_the_image_finds_the_offline_incidents(
    image: None, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    kafka = kafka_settings
    ensure_topics(kafka.bootstrap, [kafka.telemetry_topic], partitions=3)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # written by the image's user
    topics = ("telemetry", "anomalies", "predictions", "incidents", "notices", "deadletter")
    env = {f"AIOPS_KAFKA__{t.upper()}_TOPIC": getattr(kafka, f"{t}_topic") for t in topics}
    gen = ["aiops", "gen", *GEN, *FAULTS, "--kafka", kafka.bootstrap, "--truth-dir", "/shared/side"]
    run = ["aiops", "run", "--kafka", kafka.bootstrap, "--topology", "/shared/side/topology.json"]
    run += ["--interval", "30", "--events", "/shared/side/events.jsonl", "--group", kafka.ingest_group + "-run"]
    run += ["--stop-when-idle", "8", "--no-predict"]
    _in_image(["sh", "-c", f"{shlex.join(gen)} && {shlex.join(run)}"], binds={shared: "/shared"}, env=env)
    streamed = _consume(kafka.bootstrap, kafka.incidents_topic)

    assert main(["gen", *GEN, *FAULTS, "--out", str(tmp_path / "recorded")]) == 0
    out = tmp_path / "offline"
    assert main(["run", "--input", str(tmp_path / "recorded"), "--out", str(out), "--no-predict"]) == 0
    offline = [json.loads(line) for line in (out / "incidents.jsonl").read_text().splitlines() if line.strip()]

    assert offline, "the faults opened no incident at all"
    assert incident_differences(by_incident(streamed), by_incident(offline)) == []
