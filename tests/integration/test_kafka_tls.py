"""Kafka over TLS with a real broker: a second broker of the suite's (scripts/services kafka-up, its
own state and ports, the same server.properties as the suite's broker: an SSL listener and a
SASL_SSL listener with SCRAM-SHA-512, both with the suite's self-signed CA, scripts/services
tls-dir) and the service's clients configured only through the environment
(AIOPS_KAFKA__SECURITY_PROTOCOL, AIOPS_KAFKA__SSL_CAFILE, AIOPS_KAFKA__SASL_*):

- the remote-write door publishes through the SSL listener and a reader with the same settings
  reads it back; a client that does not trust the CA is refused by the handshake;
- the node agent (the real Telegraf with the shipped node.conf, its TLS lines uncommented) publishes
  through the SSL listener, and through the SASL_SSL one with a SCRAM login, to `aiops run --kafka`
  reading through the same listener: the XID 79 becomes the one incident the offline runner opens
  on the same lines; a wrong SCRAM password is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.cli import main
from benchmarks.soak import by_incident, incident_differences
from ingest.remote_write import Series, encode_write_request, snappy_compress_literal
from tests.collectors.sysfs_ib import fake_sysfs_available
from tests.integration.test_telegraf import INTERVAL_S, NODE, NODE_CONF, OUR_COUNTERS, TELEGRAF, _run_node_agent
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services


ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops"))
# the TLS broker's ports, beside the suite's 9092/9093/9094
PORTS = {
    "AIOPS_KAFKA_PORT": "9192",
    "AIOPS_KAFKA_CONTROLLER_PORT": "9193",
    "AIOPS_KAFKA_SSL_PORT": "9194",
    "AIOPS_KAFKA_SASL_PORT": "9195",
}
PLAIN_BOOTSTRAP = "127.0.0.1:9192"  # where the test makes topics, users, and reads back
SSL_BOOTSTRAP = "127.0.0.1:9194"
SASL_BOOTSTRAP = "127.0.0.1:9195"
SCRAM_USER = "aiops-node-agent"
SCRAM_PASSWORD = "aiops-test-scram-password"


def _open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def tls_broker() -> Iterator[Path]:
    """The CA file of a running broker with an SSL listener on SSL_BOOTSTRAP."""
    env = {**os.environ, **PORTS, "AIOPS_STATE": str(CACHE / "run-tls")}
    services = str(ROOT / "scripts" / "services")
    ca = Path(subprocess.run([services, "tls-dir"], env=env, capture_output=True, text=True, check=True).stdout.strip())
    started = not _open(9194)
    if not started and not _open(9195):  # one started before it had a SASL_SSL listener
        subprocess.run([services, "kafka-down"], env=env, check=True)
        started = True
    if started:
        subprocess.run([services, "kafka-up"], env=env, check=True)
    # the SCRAM login the SASL_SSL tests use, kept by the broker in its metadata (KRaft)
    made = _in_a_client_process(
        ca / "ca.pem",
        f"""
from kafka.admin import KafkaAdminClient, UserScramCredentialUpsertion
admin = KafkaAdminClient(bootstrap_servers={PLAIN_BOOTSTRAP!r})
print(admin.alter_user_scram_credentials(
    [UserScramCredentialUpsertion({SCRAM_USER!r}, "SCRAM-SHA-512", {SCRAM_PASSWORD!r})]))
admin.close()
""",
        env=dict(os.environ),
    )
    assert made == repr({SCRAM_USER: None}), made
    yield ca / "ca.pem"
    if started:  # a JVM less on a shared machine
        subprocess.run([services, "kafka-down"], env=env, check=False)


def _ssl_env(ca: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **_client_env("SSL", ca)}


def _client_env(protocol: str, ca: Path, password: str = SCRAM_PASSWORD) -> dict[str, str]:
    """The service's settings for a TLS listener (docs/operating.md, "Kafka over TLS"), and the
    node agent's SASL login (the shipped Telegraf configs read it from these two variables)."""
    env = {"AIOPS_KAFKA__SECURITY_PROTOCOL": protocol, "AIOPS_KAFKA__SSL_CAFILE": str(ca)}
    if protocol == "SASL_SSL":
        env |= {
            "AIOPS_KAFKA__SASL_USERNAME": SCRAM_USER,
            "AIOPS_KAFKA__SASL_PASSWORD": password,
            "AIOPS_KAFKA_USER": SCRAM_USER,
            "AIOPS_KAFKA_PASSWORD": password,
        }
    return env


def test_daemon_publishes_through_the_ssl_listener(tls_broker: Path, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:10]
    kafka = KafkaSettings(
        bootstrap=SSL_BOOTSTRAP,
        telemetry_topic=f"test.tls.{suffix}",
        deadletter_topic=f"test.tls.dl.{suffix}",
        security_protocol="SSL",
        ssl_cafile=tls_broker,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **_ssl_env(tls_broker),
        "AIOPS_KAFKA__TELEMETRY_TOPIC": kafka.telemetry_topic,
        "AIOPS_KAFKA__DEADLETTER_TOPIC": kafka.deadletter_topic,
    }
    with (tmp_path / "door.log").open("wb") as log:
        door = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aiops.cli",
                "ingest",
                "--remote-write",
                f"127.0.0.1:{port}",
                "--kafka",
                SSL_BOOTSTRAP,
            ],
            env=env,
            stdout=log,
            stderr=log,
        )
        try:
            series = [
                Series(
                    {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "3", "Hostname": "n00000"}, [(45.0, 1_790_000_000_000)]
                )
            ]
            body = snappy_compress_literal(encode_write_request(series))
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v1/write",
                data=body,
                headers={"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"},
            )
            deadline = time.monotonic() + 120
            while True:  # the door listens once it has reached the broker (topics made over TLS)
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        assert answer.status == 204
                    break
                except (ConnectionError, urllib.error.URLError):
                    assert door.poll() is None, (tmp_path / "door.log").read_text()[-2000:]
                    assert time.monotonic() < deadline, (tmp_path / "door.log").read_text()[-2000:]
                    time.sleep(0.5)
        finally:
            door.send_signal(signal.SIGTERM)
            door.wait(timeout=60)
    assert door.returncode == 0, (tmp_path / "door.log").read_text()[-2000:]
    values = _in_a_client_process(
        tls_broker,
        f"""
from kafka import KafkaConsumer
consumer = KafkaConsumer({kafka.telemetry_topic!r}, bootstrap_servers={SSL_BOOTSTRAP!r},
    auto_offset_reset="earliest", consumer_timeout_ms=5000,
    security_protocol="SSL", ssl_cafile={str(tls_broker)!r})
print(repr([m.value for m in consumer]))
consumer.close()
""",
    )
    assert values == repr([b"gpu,gpu=n00000-gpu3,node=n00000 DCGM_FI_DEV_GPU_TEMP=45 1790000000000000000\n"])


def test_a_client_that_does_not_trust_the_ca_is_refused(tls_broker: Path) -> None:
    # the system's CAs do not include the suite's: the handshake fails, nothing is sent in clear
    answer = _in_a_client_process(
        tls_broker,
        f"""
from kafka import KafkaProducer
from kafka.errors import KafkaError
try:
    KafkaProducer(bootstrap_servers={SSL_BOOTSTRAP!r}, security_protocol="SSL", request_timeout_ms=5000)
except KafkaError as refused:
    print("refused", type(refused).__name__)
else:
    print("accepted")
""",
    )
    assert answer.startswith("refused"), answer


def _in_a_client_process(ca: Path, program: str, env: dict[str, str] | None = None) -> str:
    """Runs a kafka-python client in a process of its own and returns what it printed: kafka-python
    leaves the sockets of a refused TLS handshake and of its version probes to the garbage
    collector, and in this process their ResourceWarnings would fail whichever later test the
    collector happened to run in (test_replay, in CI)."""
    done = subprocess.run(
        [sys.executable, "-W", "ignore::ResourceWarning", "-c", program],
        env=env if env is not None else _ssl_env(ca),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _agent_conf(protocol: str, ca: Path, into: Path) -> Path:
    """The shipped node agent's config with its TLS (and, for SASL_SSL, SCRAM) lines uncommented,
    as docs/operating.md says to, and the suite's CA in place of the example path."""
    text = NODE_CONF.read_text()
    keys = ["enable_tls", "tls_ca"] + (
        ["sasl_mechanism", "sasl_username", "sasl_password"] if protocol == "SASL_SSL" else []
    )
    for key in keys:
        text, found = re.subn(rf"^  # ({key} = .*)$", r"  \1", text, flags=re.M)
        assert found == 1, key
    assert text.count('"/etc/telegraf/kafka-ca.pem"') == 1
    into.write_text(text.replace('"/etc/telegraf/kafka-ca.pem"', json.dumps(str(ca))))
    return into


def _offline_incidents(lines: list[bytes], tmp_path: Path) -> list[dict[str, Any]]:
    """`aiops run --input` on a folder of the lines the topic holds, in its order."""
    folder = tmp_path / "recorded"
    folder.mkdir()
    (folder / "telemetry.lp").write_bytes(b"\n".join(lines) + b"\n")
    (folder / "events.jsonl").write_text("")
    shutil.copy(tmp_path / "topology.json", folder / "topology.json")
    out = tmp_path / "offline"
    argv = ["run", "--input", str(folder), "--out", str(out), "--interval", str(INTERVAL_S), "--no-predict"]
    assert main(argv) == 0
    return [json.loads(line) for line in (out / "incidents.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.skipif(
    not fake_sysfs_available(), reason="needs a private mount namespace (unshare -m) for the sysfs tree"
)
@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_node_agent_and_run_daemon_through_the_tls_listener_find_the_offline_incident(
    tls_broker: Path, kafka_settings: KafkaSettings, tmp_path: Path, protocol: str
) -> None:
    if not os.access(TELEGRAF, os.X_OK):
        pytest.fail(f"no Telegraf at {TELEGRAF}: scripts/services up builds it")
    kafka = kafka_settings.model_copy(update={"bootstrap": PLAIN_BOOTSTRAP})
    conf = _agent_conf(protocol, tls_broker, tmp_path / "node.conf")
    secure = SSL_BOOTSTRAP if protocol == "SSL" else SASL_BOOTSTRAP
    run = _run_node_agent(
        TELEGRAF, kafka, OUR_COUNTERS, tmp_path, conf=conf, broker=secure, client_env=_client_env(protocol, tls_broker)
    )
    agent_log = (tmp_path / "telegraf.log").read_text()
    assert run.telemetry, agent_log[-3000:]  # Telegraf published through the TLS listener
    assert run.deadletters == []
    streamed = run.incidents
    assert {(i["root_cause"]["entity"], i["root_cause"]["kind"]) for i in streamed} == {
        (f"{NODE}-gpu3", "gpu_fell_off_bus")
    }
    offline = _offline_incidents(list(run.lines()), tmp_path)
    assert incident_differences(by_incident(streamed), by_incident(offline)) == []


def test_the_scram_login_is_checked(tls_broker: Path) -> None:
    program = f"""
from kafka.errors import KafkaError
from ingest.kafka.client import security
from kafka import KafkaProducer
try:
    KafkaProducer(bootstrap_servers={SASL_BOOTSTRAP!r}, request_timeout_ms=5000, **security()).close()
except KafkaError as refused:
    print("refused", type(refused).__name__)
else:
    print("accepted")
"""
    answers = {
        password: _in_a_client_process(
            tls_broker,
            program,
            env={**os.environ, "PYTHONPATH": str(ROOT), **_client_env("SASL_SSL", tls_broker, password=password)},
        )
        for password in (SCRAM_PASSWORD, "not-the-password")
    }
    assert answers[SCRAM_PASSWORD] == "accepted"
    assert answers["not-the-password"].startswith("refused"), answers
