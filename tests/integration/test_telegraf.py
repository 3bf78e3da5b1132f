"""The shipped collector configuration, run by a real Telegraf (built by scripts/services from its Go
module), against what the real sources serve: a dcgm-exporter exposition (its metric names, labels
and number formats), a sysfs tree as the kernel's mlx5 driver lays it out, and a Redfish BMC.

node agent (config/telegraf/node.conf) -> real Kafka -> `aiops run --kafka`: healthy scrapes
give no dead letters, one line per GPU and scrape, and an XID 79 on one GPU becomes one incident
naming that GPU. The BMC agent's mapping is checked the same way, through Telegraf itself.

Not fed locally: inputs.ethtool reads the kernel by ioctl (a sysfs tree cannot stand in for it,
and the machine's own NICs are not the cluster's), and inputs.gnmi needs a gNMI target; the switch
agent's mapping is checked by feeding gNMI-shaped metrics through the same processors.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaConsumer

from ingest.frames import merge_rows
from ingest.kafka import ensure_topics
from ingest.lineprotocol import decode
from ingest.pipeline import IngestCore
from tests.collectors.dcgm_exporter import ExporterServer, read_counters
from tests.collectors.redfish import RedfishServer
from tests.collectors.sysfs_ib import InfinibandTree, fake_sysfs_available, run_in_fake_sysfs
from vocab.catalog import measurement
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"
NODE_CONF = CONFIG / "telegraf" / "node.conf"
BMC_CONF = CONFIG / "telegraf" / "bmc.conf"
OUR_COUNTERS = CONFIG / "dcgm-exporter" / "counters.csv"
STOCK_COUNTERS = ROOT / "tests" / "data" / "dcgm-exporter" / "default-counters.csv"
TELEGRAF = Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops")) / "bin" / "telegraf"
NODE = "n00000"
INTERVAL_S = 2
DAEMON = [sys.executable, "-m", "aiops.cli", "run"]
DAEMON_FLAGS = ["--interval", str(INTERVAL_S), "--lateness", "4", "--stop-when-idle", "12", "--no-predict"]


@pytest.fixture(scope="module")
def telegraf() -> Path:
    if not os.access(TELEGRAF, os.X_OK):
        pytest.fail(f"no Telegraf at {TELEGRAF}: scripts/services up builds it")
    return TELEGRAF


def _topology(tmp_path: Path) -> Path:
    from telemetry_gen.topology import build_fat_tree

    path = tmp_path / "topology.json"
    path.write_text(json.dumps(build_fat_tree(64).to_json()))
    return path


def _read_topic(bootstrap: str, topic: str, quiet_ms: int = 3000) -> list[tuple[bytes | None, bytes]]:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=quiet_ms
    )
    out = [(m.key, m.value) for m in consumer]
    consumer.close()
    return out


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.2)


def _agent_env(kafka: KafkaSettings, exporter_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "AIOPS_NODE_ID": NODE,
        "AIOPS_SCRAPE_INTERVAL": f"{INTERVAL_S}s",
        "AIOPS_KAFKA_BROKER": kafka.bootstrap,
        "AIOPS_TELEMETRY_TOPIC": kafka.telemetry_topic,
        "DCGM_EXPORTER_URL": exporter_url,
        # ethtool would read this machine's own NICs, which are not the cluster's
        "AIOPS_ROCE_INTERFACES": "aiops-test-no-such-interface",
    }


def _daemon_env(kafka: KafkaSettings) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for key in ("telemetry_topic", "anomalies_topic", "predictions_topic", "incidents_topic", "notices_topic"):
        env[f"AIOPS_KAFKA__{key.upper()}"] = getattr(kafka, key)
    env["AIOPS_KAFKA__DEADLETTER_TOPIC"] = kafka.deadletter_topic
    env["AIOPS_KAFKA__RUN_GROUP"] = kafka.ingest_group + "-run"
    return env


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class NodeRun:
    """What one run of the node agent and the daemon left in Kafka."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.telemetry = [v for _, v in _read_topic(kafka.bootstrap, kafka.telemetry_topic)]
        self.deadletters = [json.loads(v) for _, v in _read_topic(kafka.bootstrap, kafka.deadletter_topic, 1000)]
        self.incidents = [json.loads(v) for _, v in _read_topic(kafka.bootstrap, kafka.incidents_topic, 1000)]
        self.notices = [json.loads(v) for _, v in _read_topic(kafka.bootstrap, kafka.notices_topic, 1000)]

    def lines(self) -> Iterator[bytes]:
        for value in self.telemetry:
            yield from (line for line in value.split(b"\n") if line.strip())


def _run_node_agent(
    telegraf: Path,
    kafka: KafkaSettings,
    counters: Path,
    tmp_path: Path,
    conf: Path = NODE_CONF,
    broker: str | None = None,
    client_env: dict[str, str] | None = None,
) -> NodeRun:
    """A healthy node for 8 scrapes, then XID 79 on GPU 3 for 5 more, through Telegraf and Kafka
    into `aiops run --kafka`, which stops once the topic has been quiet. Telegraf and the daemon
    reach the broker at `broker` (kafka.bootstrap unless given; a TLS listener, say) with
    `client_env` added to both environments; the topics are made and read at kafka.bootstrap."""
    broker = broker or kafka.bootstrap
    ensure_topics(kafka.bootstrap, [kafka.telemetry_topic], partitions=3)
    tree = InfinibandTree(tmp_path / "sys", devices=8)
    topology = _topology(tmp_path)
    with (
        ExporterServer(NODE, 8, read_counters(counters)) as exporter,
        (tmp_path / "telegraf.log").open("wb") as agent_log,
        (tmp_path / "run.log").open("wb") as run_log,
    ):
        agent = run_in_fake_sysfs(
            tree,
            [str(telegraf), "--config", str(conf)],
            env={**_agent_env(kafka, exporter.url), "AIOPS_KAFKA_BROKER": broker, **(client_env or {})},
            stdout=subprocess.DEVNULL,
            stderr=agent_log,
        )
        daemon = subprocess.Popen(
            [*DAEMON, "--kafka", broker, "--topology", str(topology), *DAEMON_FLAGS],
            env={**_daemon_env(kafka), **(client_env or {})},
            stdout=run_log,
            stderr=run_log,
        )
        try:
            _wait(lambda: exporter.scrapes >= 8, 60, "8 healthy scrapes")
            exporter.set(3, "DCGM_FI_DEV_XID_ERRORS", 79)
            start = exporter.scrapes
            _wait(lambda: exporter.scrapes >= start + 5, 60, "5 scrapes with the XID")
        finally:
            _stop(agent)
        try:
            daemon.wait(timeout=120)
        finally:
            _stop(daemon)
    log = (tmp_path / "run.log").read_text()
    assert daemon.returncode == 0, log[-3000:]
    return NodeRun(kafka)


@pytest.mark.skipif(
    not fake_sysfs_available(), reason="needs a private mount namespace (unshare -m) for the sysfs tree"
)
@pytest.mark.parametrize("counters", [OUR_COUNTERS, STOCK_COUNTERS], ids=["our-counters", "stock-counters"])
def test_node_agent_through_kafka_finds_an_xid_79(
    telegraf: Path, kafka_settings: KafkaSettings, tmp_path: Path, counters: Path
) -> None:
    run = _run_node_agent(telegraf, kafka_settings, counters, tmp_path)
    assert run.deadletters == []
    # one line per GPU and scrape: the merge worked and the ids are the catalog's
    decoded = decode(b"\n".join(run.lines()) + b"\n")
    assert decoded.rejects == []
    gpu = decoded.frames["gpu"]
    ids = gpu.tag("gpu")
    assert set(ids) == {f"{NODE}-gpu{i}" for i in range(8)}
    assert set(gpu.tag("node")) == {NODE}
    # merged: without aggregators.merge every GPU scrape is ~40 single-field lines. A scrape whose
    # metrics straddle the aggregator's period comes out in two lines; ingest merges those again.
    per_scrape = Tally(zip(ids.tolist(), gpu.time_ns.tolist(), strict=True))
    assert len(gpu) / len(per_scrape) < 1.2, "dcgm-exporter samples were not merged per GPU"
    enabled = {c.field for c in read_counters(counters) if c.kind != "label"}
    catalog_gpu = {m.name for m in measurement("gpu").metrics}  # type: ignore[union-attr]
    assert set(gpu.fields) >= (enabled & catalog_gpu)
    stored = IngestCore().process(b"\n".join(run.lines()) + b"\n").frames
    frame = stored["gpu"]
    rows = 0
    for t in set(frame.time_ns.tolist()):  # as InfluxDB stores them: one point per GPU and time
        merged = merge_rows(frame.take(np.flatnonzero(frame.time_ns == t)), "gpu")
        rows += len(merged)
        for name in enabled & catalog_gpu:  # every sample of every scrape arrived
            assert merged.fields[name].present.all(), name
    assert rows == len(per_scrape)
    nic = decoded.frames["nic"]
    assert set(nic.tag("nic")) == {f"{NODE}-nic{i}" for i in range(8)}
    nic_scrapes = Tally(zip(nic.tag("nic").tolist(), nic.time_ns.tolist(), strict=True))
    assert len(nic) / len(nic_scrapes) < 1.5  # two sysfs directories per port, merged
    assert {"symbol_error", "link_downed", "np_cnp_sent"} <= set(nic.fields)
    # the XID: one incident, on that GPU
    opened = {i["incident_id"]: i for i in run.incidents}
    assert len(opened) == 1, [i["root_cause"] for i in run.incidents]
    (incident,) = opened.values()
    assert incident["root_cause"]["entity"] == f"{NODE}-gpu3"
    assert incident["root_cause"]["kind"] == "gpu_fell_off_bus"
    # blind spots said out loud, per counters file
    coverage = {n["subject"]: n for n in run.notices if n["kind"] == "coverage"}
    assert "pfc_storm" in coverage  # no ethtool here, no switch agent
    # neither Telegraf's inputs.infiniband nor a GPU field of DCGM says how a link trained
    assert coverage["ib_link_degraded"]["status"] == "blind"
    assert coverage["gpu_nvlink_down"]["status"] == "blind"
    if counters == STOCK_COUNTERS:
        assert coverage["gpu_nvlink"]["status"] == "blind"
        assert coverage["gpu_hbm_ecc"]["status"] == "degraded"
        assert coverage["nvswitch_fabric_manager"]["status"] == "blind"
        assert coverage["gpu_pcie_downtrained"]["status"] == "degraded"  # utilisation alone
        assert coverage["gpu_row_remap_pending"]["status"] == "degraded"  # remapped rows, not pending
    else:
        assert "gpu_nvlink" not in coverage and "gpu_hbm_ecc" not in coverage
        assert not {"nvswitch_fabric_manager", "gpu_pcie_downtrained", "gpu_row_remap_pending"} & set(coverage)


def test_shipped_counters_enable_every_catalog_gpu_field() -> None:
    enabled = {c.field for c in read_counters(OUR_COUNTERS) if c.kind != "label"}
    # DCGM's GPU fields; nvlink_links_up is counted from the per-link DCGM_FI_DEV_NVLINK_LINK_STATUS,
    # which is no GPU field (docs/collectors.md)
    catalog_gpu = {m.name for m in measurement("gpu").metrics if m.name.startswith("DCGM_")}  # type: ignore[union-attr]
    assert catalog_gpu - enabled == set()
    stock = {c.field for c in read_counters(STOCK_COUNTERS) if c.kind != "label"}
    # what the stock defaults leave out, as measured with a real exporter's defaults
    assert catalog_gpu - stock == {
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_PCIE_LINK_GEN",
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
        "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS",
    }


def _telegraf_test(telegraf: Path, config: Path, env: dict[str, str]) -> list[bytes]:
    """`telegraf --test`: one gather through the processors, printed as line protocol."""
    done = subprocess.run(
        [str(telegraf), "--config", str(config), "--test"], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return [line[2:] for line in done.stdout.splitlines() if line.startswith(b"> ")]


def test_bmc_agent_maps_redfish_to_psu_and_node(telegraf: Path) -> None:
    with RedfishServer("gpu-node-017", psus=4) as bmc:
        bmc.fail_psu(2)
        env = {
            **os.environ,
            "BMC_ADDRESS": bmc.address,
            "BMC_USER": "aiops",
            "BMC_PASSWORD": "secret",
            "BMC_NODE": "n00003",
        }
        lines = _telegraf_test(telegraf, BMC_CONF, env)
    decoded = decode(b"\n".join(lines) + b"\n")
    assert decoded.rejects == []
    assert set(decoded.frames) == {"psu", "node"}
    psu = decoded.frames["psu"]
    status = dict(zip(psu.tag("psu").tolist(), psu.fields["status"].values.tolist(), strict=True))
    assert status == {"n00003-psu0": 1, "n00003-psu1": 1, "n00003-psu2": 0, "n00003-psu3": 1}
    assert {"output_power_w", "input_voltage_v", "power_capacity_watts"} <= set(psu.fields)
    node = decoded.frames["node"]
    assert set(node.tag("node")) == {"n00003"}
    assert {"inlet_temp_c", "fan_speed_rpm", "power_w"} <= set(node.fields)
    # the mean fan speed is the mean over every fan the BMC reports
    fans = [c for k, c in node.fields.items() if k.startswith("fan_rpm_")]
    row = int(next(i for i, p in enumerate(node.fields["fan_speed_rpm"].present) if p))
    mean = sum(float(c.values[row]) for c in fans) / len(fans)
    assert abs(float(node.fields["fan_speed_rpm"].values[row]) - mean) < 1e-6


def test_plugins_built_are_the_plugins_the_configs_use() -> None:
    built = set(
        subprocess.run(
            [str(ROOT / "scripts" / "services"), "telegraf-plugins"], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    used = set()
    for conf in (CONFIG / "telegraf").glob("*.conf"):
        text = conf.read_text()
        used |= {
            f"{kind}.{name}"
            for kind, name in re.findall(r"^\s*\[\[(inputs|outputs|processors|aggregators)\.(\w+)\]\]", text, re.M)
        }
        used |= {f"serializers.{f}" for f in re.findall(r'data_format\s*=\s*"(\w+)"', text)}
    # inputs.file and parsers.influx feed gNMI-shaped metrics to the switch agent's processors;
    # outputs.file is there to debug an agent (write to a file instead of Kafka)
    assert used <= built
    assert built - used <= {"inputs.file", "parsers.influx", "outputs.file"}


SWITCH_CONF = CONFIG / "telegraf" / "switch.conf"


def _gnmi_shaped(ts: int) -> str:
    """What inputs.gnmi emits for the switch agent's three subscriptions (measurement = the
    subscription name, the interface as `name`, `source` = the target, counters as uint)."""
    out = []
    for i in range(1, 5):
        down = i == 3
        tags = f"name=swp{i},path=/interfaces/interface/state/counters,role=leaf,source=10.0.0.1,switch=leaf-p0-r0"
        transitions = 2 if down else 1
        out.append(
            f"ifcounters,{tags} in_errors={i}u,out_discards=0u,in_octets={1000 * i}u,out_octets={2000 * i}u,"
            f"carrier_transitions={transitions}u,in_fcs_errors=0u {ts}"
        )
        out.append(f'ifstatus,{tags} oper_status="{"DOWN" if down else "UP"}" {ts}')
        out.append(f"ifethernet,{tags} in_symbol_error={10 * i}u,in_mac_pause_frames=5u,out_mac_pause_frames=0u {ts}")
    return "\n".join(out) + "\n"


def test_switch_agent_maps_openconfig_counters(telegraf: Path, tmp_path: Path) -> None:
    """The switch agent's processors and merge, run by Telegraf on gNMI-shaped metrics read from a
    file in place of the gNMI subscription."""
    conf = SWITCH_CONF.read_text()
    head, rest = conf.split("[[inputs.gnmi]]", 1)
    mapping = rest[rest.index("[[processors.starlark]]") : rest.index("[[outputs.kafka]]")]
    samples = tmp_path / "gnmi.lp"
    samples.write_text(_gnmi_shaped(1_796_000_000_000_000_000))
    test_conf = tmp_path / "switch-test.conf"
    test_conf.write_text(head + f'[[inputs.file]]\n  files = ["{samples}"]\n  data_format = "influx"\n\n' + mapping)
    lines = _telegraf_test(telegraf, test_conf, dict(os.environ))
    decoded = decode(b"\n".join(lines) + b"\n")
    assert decoded.rejects == []
    assert set(decoded.frames) == {"switch_port", "switch"}
    port = decoded.frames["switch_port"]
    assert sorted(port.tag("port").tolist()) == [f"leaf-p0-r0:swp{i}" for i in range(1, 5)]
    by_port = {p: r for r, p in enumerate(port.tag("port").tolist())}
    row = by_port["leaf-p0-r0:swp3"]
    assert port.fields["link_state"].values[row] == 0 and port.fields["link_downed"].values[row] == 1
    assert port.fields["port_rcv_errors"].values[row] == 3 and port.fields["symbol_error"].values[row] == 30
    assert "in_mac_pause_frames" in port.fields  # kept, not mapped to a per-priority count
    switch = decoded.frames["switch"]
    assert switch.tag("switch").tolist() == ["leaf-p0-r0"] and switch.tag("role").tolist() == ["leaf"]
    assert switch.fields["ports_up"].values[0] == 3
    assert switch.fields["port_rcv_errors"].values[0] == 1 + 2 + 3 + 4
    assert switch.fields["link_downed"].values[0] == 1


def test_readme_node_agent_is_the_shipped_file() -> None:
    readme = (ROOT / "docs" / "collectors.md").read_text()
    section = readme[readme.index("### Pointing it at a real cluster") :]
    block = section[section.index("```toml\n") + len("```toml\n") :]
    assert block[: block.index("```")] == NODE_CONF.read_text()
