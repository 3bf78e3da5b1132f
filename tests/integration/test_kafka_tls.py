"""Kafka over TLS with a real broker: a second broker of the suite's (scripts/services kafka-up, its
own state and ports, the same server.properties as the suite's broker: an SSL listener with the
suite's self-signed CA, scripts/services tls-dir) and the service's clients configured only through
the environment (AIOPS_KAFKA__SECURITY_PROTOCOL=SSL, AIOPS_KAFKA__SSL_CAFILE): the remote-write
door publishes through the SSL listener and a reader with the same settings reads it back; a
client that does not trust the CA is refused by the handshake."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.remote_write import Series, encode_write_request, snappy_compress_literal
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services


ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops"))
# the TLS broker's ports, beside the suite's 9092/9093/9094
PORTS = {"AIOPS_KAFKA_PORT": "9192", "AIOPS_KAFKA_CONTROLLER_PORT": "9193", "AIOPS_KAFKA_SSL_PORT": "9194"}
SSL_BOOTSTRAP = "127.0.0.1:9194"


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
    if started:
        subprocess.run([services, "kafka-up"], env=env, check=True)
    yield ca / "ca.pem"
    if started:  # a JVM less on a shared machine
        subprocess.run([services, "kafka-down"], env=env, check=False)


def _ssl_env(ca: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AIOPS_KAFKA__SECURITY_PROTOCOL": "SSL",
        "AIOPS_KAFKA__SSL_CAFILE": str(ca),
    }


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


def _in_a_client_process(ca: Path, program: str) -> str:
    """Runs a kafka-python client in a process of its own and returns what it printed: kafka-python
    leaves the sockets of a refused TLS handshake and of its version probes to the garbage
    collector, and in this process their ResourceWarnings would fail whichever later test the
    collector happened to run in (test_replay, in CI)."""
    done = subprocess.run(
        [sys.executable, "-W", "ignore::ResourceWarning", "-c", program],
        env=_ssl_env(ca),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()
