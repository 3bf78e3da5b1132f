"""The Prometheus door with a real Prometheus (Debian's 2.42, installed by scripts/services):
Prometheus scrapes a dcgm-exporter exposition (tests/collectors/dcgm_exporter.py) and remote-writes,
with the shipped config/prometheus/remote-write.yml, to `aiops ingest --remote-write`, which
publishes to real Kafka; `aiops run --kafka` reads it. As with the Telegraf node agent
(tests/integration/test_telegraf.py, same node, GPUs, counters and fault): no dead letters, one line
per GPU and scrape with the catalog's ids, every enabled field in every scrape with the value the
exposition served, and an XID 79 on GPU 3 becomes one incident naming that GPU."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter as Tally
from pathlib import Path

import numpy as np
import pytest

from ingest.frames import merge_rows
from ingest.kafka import ensure_topics
from ingest.lineprotocol import decode
from ingest.pipeline import IngestCore
from tests.collectors.dcgm_exporter import _RATES, ExporterServer, read_counters
from tests.integration.test_telegraf import (
    DAEMON,
    NODE,
    OUR_COUNTERS,
    NodeRun,
    _daemon_env,
    _stop,
    _topology,
    _wait,
)
from vocab.catalog import measurement
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
REMOTE_WRITE_CONF = ROOT / "config" / "prometheus" / "remote-write.yml"
INTERVAL_S = 2
# the daemon holds a tick open for 6 s: the shipped batch_send_deadline (1 s) plus a scrape
DAEMON_FLAGS = ["--interval", str(INTERVAL_S), "--lateness", "6", "--stop-when-idle", "12", "--no-predict"]
# fields whose value grows with every scrape (energy, NVLink bytes) or that the test changes
_CHANGING = {"DCGM_FI_DEV_XID_ERRORS"}


def _prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.fail("no prometheus on PATH: scripts/services up installs Debian's")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_config(exporter_url: str, door: str, token_file: Path, ca_file: Path) -> str:
    """A whole prometheus.yml: a scrape job for the exporter and the shipped remote_write block,
    pointed at the door, with its token and the suite's CA."""
    target = exporter_url.split("//", 1)[1].split("/", 1)[0]
    shipped = (
        REMOTE_WRITE_CONF.read_text()
        .replace("https://head01.mgmt:9201/", f"https://{door}/")
        .replace("/etc/prometheus/aiops-remote-write.token", str(token_file))
        .replace("/etc/prometheus/aiops-ca.pem", str(ca_file))
    )
    assert f"https://{door}/" in shipped and str(token_file) in shipped and str(ca_file) in shipped
    return (
        f"global:\n  scrape_interval: {INTERVAL_S}s\n  scrape_timeout: {INTERVAL_S}s\n"
        f'scrape_configs:\n  - job_name: dcgm\n    static_configs:\n      - targets: ["{target}"]\n' + shipped
    )


def _exposition_values(body: str) -> dict[tuple[str, str], float]:
    """(field, gpu index) -> value, from a dcgm-exporter exposition."""
    out = {}
    for m in re.finditer(r'^(DCGM_\w+)\{gpu="(\d+)"[^}]*\} (\S+)$', body, re.M):
        out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def test_prometheus_remote_write_finds_an_xid_79(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    prometheus = _prometheus()
    kafka = kafka_settings
    ensure_topics(kafka.bootstrap, [kafka.telemetry_topic], partitions=3)
    door = f"127.0.0.1:{_free_port()}"
    counters = read_counters(OUR_COUNTERS)
    with (
        ExporterServer(NODE, 8, counters) as exporter,
        (tmp_path / "prometheus.log").open("wb") as prom_log,
        (tmp_path / "door.log").open("wb") as door_log,
        (tmp_path / "run.log").open("wb") as run_log,
    ):
        served = _exposition_values(exporter.body())
        tls = Path(
            subprocess.run(
                [str(ROOT / "scripts" / "services"), "tls-dir"], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        (tmp_path / "token").write_text("prometheus-remote-write-token\n")
        (tmp_path / "prometheus.yml").write_text(
            prometheus_config(exporter.url, door, tmp_path / "token", tls / "ca.pem")
        )
        receiver = subprocess.Popen(
            [
                *[sys.executable, "-m", "aiops.cli", "ingest", "--remote-write", door, "--kafka", kafka.bootstrap],
                *["--remote-write-token-file", str(tmp_path / "token")],
                *[
                    "--remote-write-tls-cert",
                    str(tls / "broker.pem"),
                    "--remote-write-tls-key",
                    str(tls / "broker.key"),
                ],
            ],
            env=_daemon_env(kafka),
            stdout=door_log,
            stderr=door_log,
        )
        server = subprocess.Popen(
            [
                prometheus,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{_free_port()}",
            ],
            stdout=prom_log,
            stderr=prom_log,
        )
        daemon = subprocess.Popen(
            [*DAEMON, "--kafka", kafka.bootstrap, "--topology", str(_topology(tmp_path)), *DAEMON_FLAGS],
            env=_daemon_env(kafka),
            stdout=run_log,
            stderr=run_log,
        )
        try:
            _wait(lambda: exporter.scrapes >= 8, 90, "8 healthy scrapes")
            exporter.set(3, "DCGM_FI_DEV_XID_ERRORS", 79)
            start = exporter.scrapes
            _wait(lambda: exporter.scrapes >= start + 5, 60, "5 scrapes with the XID")
            time.sleep(3)  # the last batch (batch_send_deadline 1 s) on its way
        finally:
            _stop(server)
        try:
            daemon.wait(timeout=120)
        finally:
            _stop(daemon)
            receiver.send_signal(signal.SIGTERM)
            try:
                receiver.wait(timeout=30)
            finally:
                _stop(receiver)
    door_text = (tmp_path / "door.log").read_text()
    assert receiver.returncode == 0, door_text[-3000:]
    assert daemon.returncode == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert "remote write: " in door_text and " 0 requests" not in door_text, door_text[-2000:]
    assert "unauthorized 0," in door_text, door_text[-2000:]  # Prometheus sent its token over TLS
    run = NodeRun(kafka)
    assert run.deadletters == []
    payload = b"\n".join(run.lines()) + b"\n"
    decoded = decode(payload)
    assert decoded.rejects == []
    gpu = decoded.frames["gpu"]
    ids = gpu.tag("gpu")
    assert set(ids) == {f"{NODE}-gpu{i}" for i in range(8)}
    assert set(gpu.tag("node")) == {NODE}
    assert set(gpu.tags) == {"gpu", "node"}  # no UUID, modelName, job or instance: ids only
    per_scrape = Tally(zip(ids.tolist(), gpu.time_ns.tolist(), strict=True))
    # Prometheus may split a scrape over requests (shards, and the 1 s batch deadline cutting a
    # scrape in two: 1.21 was seen over TLS on a loaded machine); ingest merges those rows again
    # (checked point by point below). More than two rows a scrape would be a scrape cut in three.
    assert len(gpu) / len(per_scrape) < 2.0
    enabled = {c.field for c in counters if c.kind != "label"}
    catalog_gpu = {m.name for m in measurement("gpu").metrics}  # type: ignore[union-attr]
    assert set(gpu.fields) >= (enabled & catalog_gpu)
    frame = IngestCore().process(payload).frames["gpu"]
    growing = set(_RATES)
    rows = 0
    for t in set(frame.time_ns.tolist()):  # as InfluxDB stores them: one point per GPU and time
        merged = merge_rows(frame.take(np.flatnonzero(frame.time_ns == t)), "gpu")
        rows += len(merged)
        for name in enabled & catalog_gpu:  # every sample of every scrape arrived
            assert merged.fields[name].present.all(), name
        # with the value the exporter served (the Telegraf path stores the same)
        for r, entity in enumerate(merged.tag("gpu").tolist()):
            index = entity.rsplit("gpu", 1)[1]
            for name in (enabled & catalog_gpu) - growing - _CHANGING:
                assert float(merged.fields[name].values[r]) == pytest.approx(served[(name, index)]), (entity, name)
    assert rows == len(per_scrape)
    opened = {i["incident_id"]: i for i in run.incidents}
    assert len(opened) == 1, [i["root_cause"] for i in run.incidents]
    (incident,) = opened.values()
    assert incident["root_cause"]["entity"] == f"{NODE}-gpu3"
    assert incident["root_cause"]["kind"] == "gpu_fell_off_bus"


def test_docs_prometheus_block_is_the_shipped_file() -> None:
    doc = (ROOT / "docs" / "collectors.md").read_text()
    section = doc[doc.index("### Prometheus sites") :]
    block = section[section.index("```yaml\n") + len("```yaml\n") :]
    assert block[: block.index("```")] == REMOTE_WRITE_CONF.read_text()
