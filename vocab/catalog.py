"""The metric catalog: the wire format's measurements, tags and fields.

Telemetry travels as InfluxDB line protocol exactly as Telegraf's Kafka output writes it: one line
per entity per tick, one measurement per entity kind, entity ids as tags, metrics as fields,
nanosecond timestamps. Field names are the ones operators already know: DCGM field names for GPUs,
InfiniBand/RoCE port counters for NICs and switch ports, SFF-8472/8636 DDM for optics.

This module is the single source of truth for that format; `aiops catalog` renders it to
docs/metrics.md, and ingest validates lines against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FieldType(StrEnum):
    """Line-protocol value types."""

    FLOAT = "float"
    INT = "int"
    UINT = "uint"
    BOOL = "bool"
    STRING = "string"


class MetricKind(StrEnum):
    GAUGE = "gauge"  # a level: detectors use the value
    COUNTER = "counter"  # cumulative and monotonic, as exporters report: detectors use the rate
    STATE = "state"  # an enumeration or bitmask: rules read it


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    type: FieldType
    kind: MetricKind
    unit: str
    description: str


@dataclass(frozen=True, slots=True)
class Measurement:
    """One entity kind on the wire."""

    name: str
    id_tag: str  # the tag whose value is the entity id
    partition_tag: str  # the Kafka key: node id for node-local parts, switch id for switches
    tags: tuple[tuple[str, str], ...]  # (tag key, description), id tag first
    metrics: tuple[Metric, ...]
    description: str

    def metric(self, name: str) -> Metric | None:
        return _METRIC_INDEX[self.name].get(name)

    @property
    def tag_keys(self) -> tuple[str, ...]:
        return tuple(key for key, _ in self.tags)


# Short names keep the tables below one metric per line.
FLOAT, INT = FieldType.FLOAT, FieldType.INT
GAUGE, COUNTER, STATE = MetricKind.GAUGE, MetricKind.COUNTER, MetricKind.STATE

# DCGM reports "blank" (no value available) as values at the top of the int64/float range,
# e.g. DCGM_INT64_BLANK = 0x7ffffff0 in 32-bit fields and 0x7ffffffffffffff0 in 64-bit ones,
# DCGM_FP64_BLANK = 140737488355328.0. Anything at or above these is missing, not a value.
DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK = 140737488355328.0


def _ib_port_counters(prefix_doc: str) -> tuple[Metric, ...]:
    """InfiniBand/RoCE port counters (names as in /sys/class/infiniband/*/ports/*/counters)."""
    return (
        Metric("symbol_error", INT, COUNTER, "count", f"{prefix_doc}: symbol errors on the physical link"),
        Metric("port_rcv_errors", INT, COUNTER, "count", f"{prefix_doc}: received packets with errors"),
        Metric("link_downed", INT, COUNTER, "count", f"{prefix_doc}: times the link went down"),
        Metric("link_error_recovery", INT, COUNTER, "count", f"{prefix_doc}: link retrain events"),
        Metric("port_xmit_wait", INT, COUNTER, "ticks", f"{prefix_doc}: ticks with data to send but no credit"),
        Metric("port_xmit_discards", INT, COUNTER, "count", f"{prefix_doc}: packets discarded on transmit"),
        Metric("rx_prio3_pause", INT, COUNTER, "count", f"{prefix_doc}: PFC pause frames received (prio 3)"),
        Metric("tx_prio3_pause", INT, COUNTER, "count", f"{prefix_doc}: PFC pause frames sent (prio 3)"),
        Metric("port_xmit_data", INT, COUNTER, "bytes", f"{prefix_doc}: bytes transmitted"),
        Metric("port_rcv_data", INT, COUNTER, "bytes", f"{prefix_doc}: bytes received"),
        Metric("link_state", INT, STATE, "enum", f"{prefix_doc}: 1 = active, 0 = down"),
    )


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        name="gpu",
        id_tag="gpu",
        partition_tag="node",
        tags=(("gpu", "GPU id, e.g. n00012-gpu3"), ("node", "node id"), ("job", "job id or 'idle'")),
        description="One GPU, as dcgm-exporter reports it (DCGM field names).",
        metrics=(
            Metric("DCGM_FI_DEV_GPU_TEMP", FLOAT, GAUGE, "°C", "GPU core temperature"),
            Metric("DCGM_FI_DEV_MEMORY_TEMP", FLOAT, GAUGE, "°C", "HBM temperature"),
            Metric("DCGM_FI_DEV_POWER_USAGE", FLOAT, GAUGE, "W", "board power draw"),
            # the mean power over a scrape interval is its delta over the interval: what heated the
            # die, where the power gauge is one second's average (a step's pause, a checkpoint's edge)
            Metric("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", INT, COUNTER, "mJ", "energy since the driver loaded"),
            Metric("DCGM_FI_DEV_SM_CLOCK", INT, GAUGE, "MHz", "SM clock"),
            Metric("DCGM_FI_DEV_MEM_CLOCK", INT, GAUGE, "MHz", "memory clock"),
            Metric("DCGM_FI_DEV_GPU_UTIL", INT, GAUGE, "%", "GPU utilisation"),
            Metric("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", FLOAT, GAUGE, "ratio", "tensor pipe active ratio"),
            Metric("DCGM_FI_DEV_FB_USED", INT, GAUGE, "MiB", "framebuffer memory used"),
            Metric("DCGM_FI_DEV_XID_ERRORS", INT, STATE, "xid", "last XID error code (0 = none)"),
            Metric("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", INT, COUNTER, "count", "volatile single-bit (correctable) ECC"),
            Metric("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", INT, COUNTER, "count", "volatile double-bit (uncorrectable) ECC"),
            Metric(
                "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", INT, COUNTER, "rows", "rows remapped for correctable errors"
            ),
            Metric("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", INT, COUNTER, "rows", "rows remapped, uncorrectable"),
            Metric("DCGM_FI_DEV_ROW_REMAP_FAILURE", INT, STATE, "bool", "1 if a row remap failed"),
            Metric("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", INT, COUNTER, "count", "NVLink CRC flit errors"),
            Metric("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", INT, COUNTER, "count", "NVLink replay errors"),
            Metric("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", INT, COUNTER, "bytes", "NVLink bytes, all links"),
            Metric("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", INT, COUNTER, "count", "PCIe replays"),
            # the link as trained now, and the most both ends support; an idle GPU drops its link
            # to a lower generation (and some models to fewer lanes) to save power, so "now below
            # the most" is a fault only under load (nvidia-smi -q: current_link_gen vs max_link_gen)
            Metric("DCGM_FI_DEV_PCIE_LINK_GEN", INT, GAUGE, "gen", "PCIe link generation now"),
            Metric("DCGM_FI_DEV_PCIE_LINK_WIDTH", INT, GAUGE, "lanes", "PCIe link width now"),
            Metric("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", INT, GAUGE, "gen", "PCIe link generation, the most supported"),
            Metric("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", INT, GAUGE, "lanes", "PCIe link width, the most supported"),
            Metric("DCGM_FI_DEV_ROW_REMAP_PENDING", INT, STATE, "bool", "1 if a row remap waits for a GPU reset"),
            Metric(
                "DCGM_FI_DEV_FABRIC_MANAGER_STATUS",
                INT,
                STATE,
                "enum",
                "fabric manager status (dcgmFabricManagerStatus_t: 0 not supported, 1 not started, "
                "2 in progress, 3 success, 4 failure, 5 unrecognized, 6 NVML too old)",
            ),
            Metric(
                "nvlink_links_up",
                INT,
                GAUGE,
                "links",
                "NVLink links in the Up state (DCGM's per-link DCGM_FI_DEV_NVLINK_LINK_STATUS, counted "
                "per GPU by the collector; nvidia-smi nvlink -s)",
            ),
            Metric("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", INT, STATE, "bitmask", "clock throttle reasons"),
        ),
    ),
    Measurement(
        name="nvswitch",
        id_tag="nvswitch",
        partition_tag="node",
        tags=(("nvswitch", "NVSwitch id, e.g. n00012-nvsw0"), ("node", "node id")),
        description="One NVSwitch inside a node.",
        metrics=(
            Metric("temperature_c", FLOAT, GAUGE, "°C", "switch temperature"),
            Metric("nvlink_crc_errors", INT, COUNTER, "count", "NVLink CRC errors on all switch ports"),
            Metric("nvlink_replay_errors", INT, COUNTER, "count", "NVLink replays on all switch ports"),
        ),
    ),
    Measurement(
        name="nic",
        id_tag="nic",
        partition_tag="node",
        tags=(("nic", "NIC id, e.g. n00012-nic3"), ("node", "node id"), ("rail", "rail index")),
        description="One InfiniBand/RoCE NIC port (ethtool / IB sysfs counters).",
        metrics=(
            *_ib_port_counters("NIC port"),
            Metric("np_cnp_sent", INT, COUNTER, "count", "RoCE CNPs sent"),
            # /sys/class/infiniband/<dev>/ports/<p>/rate, e.g. "400 Gb/sec (4X NDR)": the port as
            # it trained (Telegraf's inputs.infiniband does not read it; see docs/collectors.md)
            Metric("link_width", INT, GAUGE, "lanes", "NIC port: active link width (1X, 2X, 4X, 8X)"),
            Metric("link_rate_gbps", FLOAT, GAUGE, "Gb/s", "NIC port: active data rate (width x lane speed)"),
        ),
    ),
    Measurement(
        name="optic",
        id_tag="optic",
        partition_tag="node",
        tags=(("optic", "transceiver id, e.g. n00012-nic3-optic"), ("nic", "NIC id"), ("node", "node id")),
        description="One optical transceiver (DDM / digital diagnostics).",
        metrics=(
            Metric("rx_power_dbm", FLOAT, GAUGE, "dBm", "receive optical power"),
            Metric("tx_power_dbm", FLOAT, GAUGE, "dBm", "transmit optical power"),
            Metric("temperature_c", FLOAT, GAUGE, "°C", "module temperature"),
            Metric("bias_current_ma", FLOAT, GAUGE, "mA", "laser bias current"),
        ),
    ),
    Measurement(
        name="switch",
        id_tag="switch",
        partition_tag="switch",
        tags=(("switch", "switch id, e.g. leaf-p0-r3"), ("role", "leaf | spine | core | group")),
        description="One leaf/spine switch, counters summed over its ports.",
        metrics=(
            *_ib_port_counters("all ports"),
            Metric("ports_up", INT, GAUGE, "ports", "ports in the active state"),
            Metric("temperature_c", FLOAT, GAUGE, "°C", "ASIC temperature"),
        ),
    ),
    Measurement(
        name="switch_port",
        id_tag="port",
        partition_tag="switch",
        tags=(("port", "port id, e.g. leaf-p0-r3:p17"), ("switch", "switch id"), ("peer", "connected entity id")),
        description="One switch port (IB/RoCE counters), for localising what a switch-level sum hides.",
        metrics=_ib_port_counters("switch port"),
    ),
    Measurement(
        name="node",
        id_tag="node",
        partition_tag="node",
        tags=(("node", "node id"), ("rack", "rack id")),
        description="One host (node exporter / BMC).",
        metrics=(
            Metric("cpu_util", FLOAT, GAUGE, "%", "host CPU utilisation"),
            Metric("mem_used_pct", FLOAT, GAUGE, "%", "host memory used"),
            Metric("inlet_temp_c", FLOAT, GAUGE, "°C", "inlet air temperature"),
            Metric("fan_speed_rpm", FLOAT, GAUGE, "rpm", "mean fan speed"),
            Metric("power_w", FLOAT, GAUGE, "W", "node power draw"),
            Metric("power_cap_w", FLOAT, GAUGE, "W", "node power cap in force"),
        ),
    ),
    Measurement(
        name="psu",
        id_tag="psu",
        partition_tag="node",
        tags=(("psu", "PSU id, e.g. n00012-psu1"), ("node", "node id")),
        description="One power supply (BMC / Redfish).",
        metrics=(
            Metric("output_power_w", FLOAT, GAUGE, "W", "output power"),
            Metric("input_voltage_v", FLOAT, GAUGE, "V", "input voltage"),
            Metric("status", INT, STATE, "enum", "1 = OK, 0 = failed"),
        ),
    ),
    Measurement(
        name="cooling",
        id_tag="cooling",
        partition_tag="rack",
        tags=(("cooling", "cooling loop id, e.g. rack07-cdu"), ("rack", "rack id")),
        description="One rack cooling loop / CDU.",
        metrics=(
            Metric("supply_temp_c", FLOAT, GAUGE, "°C", "coolant supply temperature"),
            Metric("return_temp_c", FLOAT, GAUGE, "°C", "coolant return temperature"),
            Metric("flow_lpm", FLOAT, GAUGE, "l/min", "coolant flow"),
        ),
    ),
)

MEASUREMENT_BY_NAME: dict[str, Measurement] = {m.name: m for m in MEASUREMENTS}
_METRIC_INDEX: dict[str, dict[str, Metric]] = {
    m.name: {metric.name: metric for metric in m.metrics} for m in MEASUREMENTS
}


def measurement(name: str) -> Measurement | None:
    return MEASUREMENT_BY_NAME.get(name)


def render_markdown() -> str:
    """The catalog as a Markdown document (docs/metrics.md is this, regenerated by the CLI)."""
    out = [
        "# Metric catalog",
        "",
        "Generated by `aiops catalog --markdown` from `vocab/catalog.py`; do not edit by hand.",
        "",
        "Wire format: InfluxDB line protocol as Telegraf's Kafka output writes it, one line per",
        "entity per tick, timestamps in nanoseconds, Kafka key = the partition tag's value.",
        "Counters are cumulative (detectors use rates). DCGM 'blank' sentinels",
        f"(int ≥ {DCGM_INT32_BLANK:#x} in 32-bit fields, ≥ {DCGM_INT64_BLANK:#x}, float ≥ {DCGM_FP64_BLANK:g})",
        "are treated as missing values.",
        "",
    ]
    for m in MEASUREMENTS:
        out += [f"## `{m.name}`", "", m.description, ""]
        out += [f"Entity id tag: `{m.id_tag}`; Kafka key: `{m.partition_tag}`.", ""]
        out += ["| tag | meaning |", "|---|---|"]
        out += [f"| `{key}` | {doc} |" for key, doc in m.tags]
        out += ["", "| field | type | kind | unit | meaning |", "|---|---|---|---|---|"]
        out += [f"| `{x.name}` | {x.type.value} | {x.kind.value} | {x.unit} | {x.description} |" for x in m.metrics]
        out.append("")
    return "\n".join(out)
