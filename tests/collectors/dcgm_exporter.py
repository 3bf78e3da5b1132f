"""A stand-in for NVIDIA dcgm-exporter's ``/metrics``, for tests that point a real Telegraf at it.

It serves what a stock dcgm-exporter serves for healthy H100 SXM GPUs under training load, byte
for byte as far as the exporter's sources say, so that Telegraf's ``inputs.prometheus`` (and the
``aggregators.merge`` / starlark steps after it) see the real label set, order and number format.

Where each decision comes from (NVIDIA/dcgm-exporter unless said otherwise; ``@`` is the commit
of the stored copy that was read):

Counters file (:func:`read_counters`)
    ``internal/pkg/counters/counter_config.go`` @1d6b4b7f: Go ``encoding/csv`` with
    ``Comment = '#'`` (a line whose *first* character is ``#`` is skipped whole, so the
    ``# Clocks,,`` comment lines of old releases are fine; blank lines are skipped), then every
    field ``strings.Trim(r, " ")`` (spaces only: ``DCGM_FI_DEV_DEC_UTIL ,`` becomes the field
    name), exactly 3 fields per record or the exporter refuses to start, and the type must be a
    known Prometheus type. ``tests/data/dcgm-exporter/default-counters.csv`` is ``etc/
    default-counters.csv`` @83970c75fe78560f70145cf7bd647b8f0c1d3655, the release-4.4.0 tree
    (``hack/VERSION``: ``NEW_EXPORTER_VERSION=4.4.0``, ``NEW_DCGM_VERSION=4.3.1``;
    ``deployment/Chart.yaml`` ``appVersion: "4.4.0"``), with DCP section.

Exposition (``flavor="template"``, the default)
    ``internal/pkg/rendermetrics/render_metrics.go`` @1f7abdb7 (Chart ``appVersion 4.8.1``) and
    @5f9250c2 (older), same GPU template in both: a Go ``text/template`` ranging over
    ``map[counters.Counter][]Metric``. Go's template ``range`` visits map keys sorted
    (``internal/fmtsort``: structs field by field), and ``counters.Counter`` is ``{FieldID,
    FieldName, PromType, Help}`` (``internal/pkg/counters/types.go``), so **families come in
    DCGM field-ID order** (SM_CLOCK 100, MEM_CLOCK 101, MEMORY_TEMP 140, GPU_TEMP 150, ...,
    PROF_* 1001+); field IDs are from go-dcgm's ``dcgm_fields.h``. Per family: ``# HELP
    <name> <help>`` (a trailing space when help is empty), ``# TYPE <name> <type>``, then one
    line per GPU in DCGM GPU-id order (``collector/gpu_collector.go`` loops the monitored
    entities in order)::

        NAME{gpu="0",UUID="GPU-...",pci_bus_id="00000000:18:00.0",device="nvidia0",
             modelName="NVIDIA H100 80GB HBM3",Hostname="node"<labels><attributes>} VALUE

    (one line; wrapped here).

    ``UUID`` is upper case (``uuid`` only with ``--use-old-namespace``); ``GPU_I_PROFILE`` /
    ``GPU_I_ID`` follow ``modelName`` only for MIG instances (not modelled); ``Hostname`` is
    left out when the hostname is empty. ``<labels>`` are the CSV's ``label`` rows, keyed by the
    DCGM field name (``DCGM_FI_DRIVER_VERSION="550.54.15"``), sorted by name (a Go map in a
    template); ``<attributes>`` are sorted too and, from ``toMetric`` in ``gpu_collector.go``
    @1b5e07fb (the same code in every stored 3.3.x-4.x version found), only
    ``DCGM_FI_DEV_XID_ERRORS`` has any: ``err_code="<value>"`` and ``err_msg`` from
    ``collector/xid_errors.go`` @3446595f (``"No Error"`` for 0, ``"Unknown Error"`` past the
    table). Nothing is escaped: values are pasted into the template as they are. The body ends
    with the last sample's newline. Checked against two real scrapes pasted into public
    repositories (found through the code index, repositories not named there): an L4 on driver
    580.105.08 and an H100 vGPU on 580.95.05 show the same family order, labels and label
    order, ``16.365000`` for power, ``0.000000`` for DCP ratios, ints for ``PROF_PCIE_*_BYTES``,
    ``err_code="0",err_msg="No Error"``, and families missing whole where the GPU gives blanks.

Values
    ``toString`` in ``gpu_collector.go``: a DCGM ``INT64`` field is written ``%d``
    (``1980``), a ``DOUBLE`` field ``%f`` (``612.345000``, ``0.512000``), a ``STRING`` field
    as is. Field types are DCGM's (``dcgmlib/src/dcgm_fields.cpp`` of NVIDIA/DCGM): power
    and power limits and the DCP ratios are doubles; clocks, temperatures, energy, utilisation,
    framebuffer, XID, violations, ECC, retired pages, remapped rows, NVLink and vGPU-licence
    fields and ``PROF_PCIE_*_BYTES`` are int64. Blanks: a value that is one of DCGM's sentinels
    (``collector/utils.go``: INT32/INT64 ``BLANK``, ``NOT_FOUND``, ``NOT_SUPPORTED``,
    ``NOT_PERMISSIONED``; FP64 the same four) or a non-OK status makes the exporter **skip the
    sample**; a family whose every sample is blank is left out whole, HELP and TYPE included
    (it never enters the map). Put one of :data:`INT64_BLANK`, :data:`INT64_NOT_SUPPORTED`,
    :data:`FP64_BLANK`, ... in :attr:`Gpu.values` to get that. A stock exporter therefore never
    sends a sentinel as a value. A label field that is blank is left off the labels.

Exposition (``flavor="expfmt"``)
    ``render_metrics.go`` @7ad58324 (``hack/versions.env`` ``EXPORTER_VERSION=4.8.3``, Chart
    4.8.3) and @fafd1511 (Chart 4.8.4) re-wrote the renderer on prometheus ``expfmt``: families
    sorted by name, samples sorted by their label signature (all pairs sorted by name, so by
    ``DCGM_FI_DRIVER_VERSION`` then ``UUID`` value, not by GPU index), the host label is
    lower-case ``hostname``, label values and HELP are escaped, and every value is re-parsed
    with ``strconv.ParseFloat`` and written with ``strconv.FormatFloat(v, 'g', -1, 64)``
    (``1980``, ``612.345``, ``4.28e+11``). Could not confirm whether the *released* 4.8.3 image
    already has it (4.8.1 does not); offered for tests that want the newer shape.

HTTP (:class:`ExporterServer`)
    ``internal/pkg/server/server.go`` @00673efa: ``/metrics`` renders into a buffer and writes
    it with ``X-Content-Type-Options: nosniff`` and no explicit Content-Type, so Go's
    ``net/http`` sniffs ``text/plain; charset=utf-8``; a body over 2048 bytes goes out chunked
    (Go's ``bufferBeforeChunkingSize``). ``/`` is a small HTML page, ``/health`` answers ``KO``
    (sic), anything else gorilla/mux's ``404 page not found``. The headers of the expfmt-era
    server were not checked; the same ones are sent for both flavors.

Not modelled / not confirmed: MIG, NVSwitch, NVLink-entity and CPU families; the Kubernetes
``pod``/``namespace``/``container`` attributes; ``DCGM_EXP_*`` exporter fields; the optional
Go/process self-metrics of newer trees. The older ``pkg/dcgmexporter`` tree (3.3.x era,
``render_metrics.go`` @1b646e10) has no ``pci_bus_id`` label; which release added it was not
established. The XID texts are the newest table (codes 0-172); an older release's shorter table
says ``"Unknown Error"`` for the newest codes. The sentinels are DCGM's ``DCGM_*_BLANK`` (as in
``vocab.catalog``) with ``NOT_FOUND``/``NOT_SUPPORTED``/``NOT_PERMISSIONED`` at +1/+2/+3
(``dcgm_structs.h``, the ``+1``/``+2``/``+3`` defines seen; the BLANK bases not re-read there).
Whether ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`` is cumulative is unclear: 4.4.0 declares it
``counter``, but DCGM gives it the MB/s unit and ``etc/default-counters.csv`` @8dc9e11b calls it
``gauge`` "Aggregate NVLink throughput (in MB/s)"; here it grows on every scrape, as a counter
(``vocab.catalog`` models it as bytes). The values of the string label fields other than the
driver version (serial, VBIOS, inforom) are made up in a plausible shape.
"""

from __future__ import annotations

import csv
import hashlib
import http.server
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import Literal

Flavor = Literal["template", "expfmt"]

# DCGM's blank sentinels (dcgm_structs.h; checked by dcgm-exporter's collector/utils.go).
INT32_BLANK = 0x7FFFFFF0
INT32_NOT_FOUND = INT32_BLANK + 1
INT32_NOT_SUPPORTED = INT32_BLANK + 2
INT32_NOT_PERMISSIONED = INT32_BLANK + 3
INT64_BLANK = 0x7FFFFFFFFFFFFFF0
INT64_NOT_FOUND = INT64_BLANK + 1
INT64_NOT_SUPPORTED = INT64_BLANK + 2
INT64_NOT_PERMISSIONED = INT64_BLANK + 3
FP64_BLANK = 140737488355328.0
FP64_NOT_FOUND = FP64_BLANK + 1.0
FP64_NOT_SUPPORTED = FP64_BLANK + 2.0
FP64_NOT_PERMISSIONED = FP64_BLANK + 3.0
_INT_BLANKS = frozenset(
    {
        INT32_BLANK,
        INT32_NOT_FOUND,
        INT32_NOT_SUPPORTED,
        INT32_NOT_PERMISSIONED,
        INT64_BLANK,
        INT64_NOT_FOUND,
        INT64_NOT_SUPPORTED,
        INT64_NOT_PERMISSIONED,
    }
)
_FP_BLANKS = frozenset({FP64_BLANK, FP64_NOT_FOUND, FP64_NOT_SUPPORTED, FP64_NOT_PERMISSIONED})

_KINDS = ("gauge", "counter", "label")

# DCGM field id and value type ('i' int64, 'd' double, 's' string), from dcgm_fields.h and
# dcgm_fields.cpp. Covers every row, commented or not, of the exporter's default-counters.csv and
# dcp-metrics-included.csv, and config/dcgm-exporter/counters.csv.
_FIELDS: dict[str, tuple[int, str]] = {
    "DCGM_FI_DRIVER_VERSION": (1, "s"),
    "DCGM_FI_NVML_VERSION": (2, "s"),
    "DCGM_FI_DEV_NAME": (50, "s"),
    "DCGM_FI_DEV_BRAND": (51, "s"),
    "DCGM_FI_DEV_SERIAL": (53, "s"),
    "DCGM_FI_DEV_UUID": (54, "s"),
    "DCGM_FI_DEV_OEM_INFOROM_VER": (56, "s"),
    "DCGM_FI_DEV_PCI_BUSID": (57, "s"),
    "DCGM_FI_DEV_ECC_INFOROM_VER": (80, "s"),
    "DCGM_FI_DEV_POWER_INFOROM_VER": (81, "s"),
    "DCGM_FI_DEV_INFOROM_IMAGE_VER": (82, "s"),
    "DCGM_FI_DEV_VBIOS_VERSION": (85, "s"),
    "DCGM_FI_DEV_SM_CLOCK": (100, "i"),
    "DCGM_FI_DEV_MEM_CLOCK": (101, "i"),
    "DCGM_FI_DEV_VIDEO_CLOCK": (102, "i"),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": (112, "i"),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": (112, "i"),  # the pre-DCGM-3.3 name of the same field
    "DCGM_FI_DEV_MEMORY_TEMP": (140, "i"),
    "DCGM_FI_DEV_GPU_TEMP": (150, "i"),
    "DCGM_FI_DEV_POWER_USAGE": (155, "d"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (156, "i"),
    "DCGM_FI_DEV_POWER_USAGE_INSTANT": (157, "d"),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": (160, "d"),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": (164, "d"),
    "DCGM_FI_DEV_PSTATE": (190, "i"),
    "DCGM_FI_DEV_FAN_SPEED": (191, "i"),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": (200, "i"),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": (201, "i"),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (202, "i"),
    "DCGM_FI_DEV_GPU_UTIL": (203, "i"),
    "DCGM_FI_DEV_MEM_COPY_UTIL": (204, "i"),
    "DCGM_FI_DEV_ENC_UTIL": (206, "i"),
    "DCGM_FI_DEV_DEC_UTIL": (207, "i"),
    "DCGM_FI_DEV_XID_ERRORS": (230, "i"),
    "DCGM_FI_DEV_FABRIC_MANAGER_STATUS": (170, "i"),
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": (235, "i"),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": (236, "i"),
    "DCGM_FI_DEV_PCIE_LINK_GEN": (237, "i"),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": (238, "i"),
    "DCGM_FI_DEV_POWER_VIOLATION": (240, "i"),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (241, "i"),
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": (242, "i"),
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": (243, "i"),
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION": (244, "i"),
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": (245, "i"),
    "DCGM_FI_DEV_FB_TOTAL": (250, "i"),
    "DCGM_FI_DEV_FB_FREE": (251, "i"),
    "DCGM_FI_DEV_FB_USED": (252, "i"),
    "DCGM_FI_DEV_FB_RESERVED": (253, "i"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (310, "i"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (311, "i"),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (312, "i"),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (313, "i"),
    "DCGM_FI_DEV_RETIRED_SBE": (390, "i"),
    "DCGM_FI_DEV_RETIRED_DBE": (391, "i"),
    "DCGM_FI_DEV_RETIRED_PENDING": (392, "i"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (393, "i"),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (394, "i"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": (395, "i"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": (396, "i"),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (409, "i"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": (419, "i"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": (429, "i"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": (439, "i"),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0": (440, "i"),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (449, "i"),
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": (526, "i"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (1001, "d"),
    "DCGM_FI_PROF_SM_ACTIVE": (1002, "d"),
    "DCGM_FI_PROF_SM_OCCUPANCY": (1003, "d"),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (1004, "d"),
    "DCGM_FI_PROF_DRAM_ACTIVE": (1005, "d"),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": (1006, "d"),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": (1007, "d"),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": (1008, "d"),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (1009, "i"),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (1010, "i"),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": (1011, "i"),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": (1012, "i"),
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": (1013, "d"),
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": (1014, "d"),
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": (1015, "d"),
    "DCGM_FI_PROF_PIPE_INT_ACTIVE": (1016, "d"),
}

# err_msg for DCGM_FI_DEV_XID_ERRORS, by XID (dcgm-exporter internal/pkg/collector/xid_errors.go,
# itself from NVIDIA's XID catalogue); past the end the exporter says "Unknown Error".
_XID_TEXT: tuple[str, ...] = (
    "No Error",
    *(["Invalid or corrupted push buffer stream"] * 4),
    "Unused",
    "Invalid or corrupted push buffer stream",
    "Invalid or corrupted push buffer address",
    "GPU stopped processing",
    "Driver error programming GPU",
    "Unused",  # 10
    "Invalid or corrupted push buffer stream",
    "Driver error handling GPU exception",
    "Graphics Engine Exception",
    "Unused",
    "Unused",
    "Display engine hung",
    "Unused",
    "Bus mastering disabled in PCI Config Space",
    "Display Engine error",
    "Invalid or corrupted Mpeg push buffer",  # 20
    "Invalid or corrupted Motion Estimation push buffer",
    "Invalid or corrupted Video Processor push buffer",
    "Unused",
    "GPU semaphore timeout",
    "Invalid or illegal push buffer stream",
    "Framebuffer timeout",
    "Video processor exception",
    "Video processor exception",
    "Video processor exception",
    "GPU semaphore access error",  # 30
    "GPU memory page fault",
    "Invalid or corrupted push buffer stream",
    "Internal micro-controller error",
    "Video processor exception",
    "Video processor exception",
    "Video processor exception",
    "Driver firmware error",
    "Driver firmware error",
    "Unused",
    "Unused",  # 40
    "Unused",
    "Video processor exception",
    "GPU stopped processing",
    "Graphics Engine fault during context switch",
    "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    "GPU stopped processing",
    "Video processor exception",
    "Double Bit ECC Error",
    "Unused",
    "Unused",  # 50
    "Unused",
    "Unused",
    "Unused",
    "Auxiliary power is not connected to the GPU board",
    "Unused",
    "Display Engine error",
    "Error programming video memory interface",
    "Unstable video memory interface detected",
    "Internal micro-controller error",
    "Video processor exception",  # 60
    "Internal micro-controller breakpoint/warning",
    "Internal micro-controller halt",
    "ECC page retirement or row remapping recording event",
    "ECC page retirement or row remapper recording failure",
    "Video processor exception",
    "Illegal access by driver",
    "Illegal access by driver",
    "NVDEC0 Exception",
    "Graphics Engine class error",
    "CE3: Unknown Error",  # 70
    "CE4: Unknown Error",
    "CE5: Unknown Error",
    "NVENC2 Error",
    "NVLINK Error",
    "CE6: Unknown Error",
    "CE7: Unknown Error",
    "CE8: Unknown Error",
    "vGPU Start Error",
    "GPU has fallen off the bus",
    "Corrupted data sent to GPU",  # 80
    "VGA Subsystem Error",
    "NVJPG0 Error",
    "NVDEC1 Error",
    "NVDEC2 Error",
    "CE9: Unknown Error",
    "OFA Exception",
    "Reserved",
    "NVDEC3 Error",
    "NVDEC4 Error",
    "Reserved",  # 90
    "Reserved",
    "High single-bit ECC error rate",
    "Non-fatal violation of provisioned InfoROM wear limit",
    "Contained ECC error",
    "Uncontained ECC error",
    "NVDEC5 Error",
    "NVDEC6 Error",
    "NVDEC7 Error",
    "NVJPG1 Error",
    "NVJPG2 Error",  # 100
    "NVJPG3 Error",
    "NVJPG4 Error",
    "NVJPG5 Error",
    "NVJPG6 Error",
    "NVJPG7 Error",
    "SMBPBI Test Message",
    "SMBPBI Test Message Silent",
    "Reserved",
    "Context Switch Timeout Error",
    "Security Fault Error",  # 110
    "Display Bundle Error Event",
    "Display Supervisor Error",
    "DP Link Training Error",
    "Display Pipeline Underflow Error",
    "Display Core Channel Error",
    "Display Window Channel Error",
    "Display Cursor Channel Error",
    "Display Pixel Pipeline Error",
    "GSP RPC Timeout",
    "GSP Error",  # 120
    "C2C Link Error",
    "SPI PMU RPC Read Failure",
    "SPI PMU RPC Write Failure",
    "SPI PMU RPC Erase Failure",
    "Inforom FS Failure",
    *(f"Robust Channel CE{n} Error" for n in range(10, 20)),  # 126-135
    "ALI Training Fail",
    "NVLink Privilege Error",
    "Robust Channel DLA Error",
    "Robust Channel OFA1 Error",
    "Unrecovered ECC Error",  # 140
    "Robust Channel Fast Path Error",
    "Robust Channel NVENVC3 Error",
    "GPU Initialization Failure",
    "NVLINK: Saw Error",
    "NVLINK: RLW Error",
    "NVLINK: TLW Error",
    "NVLINK: TREX Error",
    "NVLINK: NVLPW_CTRL Error",
    "NVLINK: NETIR Error",
    "NVLINK: MSE Error",  # 150
    "Robust Channel Key rotation Error",
    "Robust Channel DLA SMMU Error",
    "Robust Channel DLA timeout Error",
    "GPU Recovery Action Changed",
    "NVLINK: SW Defined Error",
    "Resource Retirement Event",
    "Resource Retirement Failure",
    "GPU Fatal Timeout",
    "Robust Channel CHI Non-Data Error",
    "Channel Retirement Event",  # 160
    "Channel Retirement Failure",
    "Power Smoothing HW Circuitry Reengaged",
    "Power Smoothing HW Circuitry Disengaged",
    "Power Smoothing HW Circuitry Low Lifetime",
    "Power Smoothing HW Circuitry Lifetime Exhausted",
    "NVLINK Secure Crypto Error",
    "PCIE Fatal Timeout",
    "Reduced GPU Memory Capacity (Errors found in write protection region)",
    "Internal micro-controller halt",
    "NVLINK: Interrupt seen in CC mode",  # 170
    "Uncorrectable DRAM Error",
    "Uncorrectable SRAM Error",
)

# PCI bus ids of the eight GPUs of an HGX/DGX H100 baseboard, in NVML index order.
_HGX_H100_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


@dataclass(frozen=True)
class Counter:
    """One row of a dcgm-exporter counters CSV."""

    field: str  # e.g. "DCGM_FI_DEV_GPU_TEMP"
    kind: str  # "gauge" | "counter" | "label"
    help: str


def read_counters(path: Path) -> list[Counter]:
    """Parse a counters CSV as the exporter does: ``#`` lines and blank lines skipped, fields
    trimmed of spaces, exactly three fields per row; raises ValueError where it refuses to start."""
    rows: list[Counter] = []
    text = path.read_text(encoding="utf-8")
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        record = next(csv.reader([line], strict=True))
        if len(record) != 3:
            raise ValueError(f"{path}:{line_no}: expected 3 fields, got {len(record)}: {line!r}")
        name, kind, help_text = (part.strip(" ") for part in record)
        if kind not in _KINDS:
            raise ValueError(f"{path}:{line_no}: unknown Prometheus metric type {kind!r}")
        rows.append(Counter(name, kind, help_text))
    return rows


@dataclass
class Gpu:
    """One GPU as DCGM sees it. ``values``: field name -> value; a counters field absent here gets
    a healthy default (see :func:`default_value`)."""

    index: int
    uuid: str
    pci_bus_id: str
    model: str = "NVIDIA H100 80GB HBM3"
    values: dict[str, float | int] = field(default_factory=dict)


def make_gpus(hostname: str, count: int) -> list[Gpu]:
    """``count`` GPUs with stable, host-specific UUIDs and HGX H100 PCI bus ids."""
    gpus = []
    for i in range(count):
        h = hashlib.sha256(f"{hostname}/gpu{i}".encode()).hexdigest()
        uuid = f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        bus = _HGX_H100_BUSES[i % len(_HGX_H100_BUSES)]
        domain = i // len(_HGX_H100_BUSES)  # a ninth GPU on: another PCI domain
        gpus.append(Gpu(index=i, uuid=uuid, pci_bus_id=f"{domain:08X}:{bus}:00.0"))
    return gpus


def _frac(gpu: Gpu, key: str) -> float:
    """A per-GPU, per-key number in [0, 1), the same on every call."""
    digest = hashlib.blake2b(f"{gpu.uuid}/{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _span(gpu: Gpu, key: str, lo: float, hi: float) -> float:
    return lo + (hi - lo) * _frac(gpu, key)


# Healthy H100 SXM5 80GB under a training job. Rates (per second) drive the fields that grow.
_FB_TOTAL_MIB = 81559
_FB_RESERVED_MIB = 571
_UPTIME_S = (180 * 3600.0, 260 * 3600.0)  # time since the driver was loaded, for the counters


def _power(gpu: Gpu) -> float:
    return round(480.0 + 170.0 * _frac(gpu, "power"), 3)


def _fb_used(gpu: Gpu) -> int:
    return int(71000 + 7500 * _frac(gpu, "fb"))


def _uptime(gpu: Gpu) -> float:
    return _UPTIME_S[0] + (_UPTIME_S[1] - _UPTIME_S[0]) * _frac(gpu, "uptime")


def _watched(gpu: Gpu) -> float:
    return 3600.0 * (3.0 + 4.0 * _frac(gpu, "watched"))


def _nvlink_rate(gpu: Gpu) -> float:
    return 1.1e11 + 6e10 * _frac(gpu, "nvlink")  # bytes/s, both directions, all 18 links


_DEFAULTS: dict[str, Callable[[Gpu], float | int]] = {
    "DCGM_FI_DEV_SM_CLOCK": lambda g: 1980,
    "DCGM_FI_DEV_MEM_CLOCK": lambda g: 2619,
    "DCGM_FI_DEV_VIDEO_CLOCK": lambda g: 1965,
    # NVML reports no reason while the SM clock sits at its 1980 MHz maximum (the GPU idle and SW
    # power cap bits appear only with lower clocks).
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": lambda g: 0,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": lambda g: 0,
    "DCGM_FI_DEV_GPU_TEMP": lambda g: 52 + int(13 * _frac(g, "temp")),
    "DCGM_FI_DEV_MEMORY_TEMP": lambda g: 55 + int(13 * _frac(g, "temp")),
    "DCGM_FI_DEV_POWER_USAGE": _power,
    "DCGM_FI_DEV_POWER_USAGE_INSTANT": lambda g: round(_power(g) + 25.0 * (_frac(g, "inst") - 0.5), 3),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda g: int(_power(g) * 0.93 * _uptime(g) * 1000.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": lambda g: 700.0,
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": lambda g: 700.0,
    "DCGM_FI_DEV_PSTATE": lambda g: 0,
    "DCGM_FI_DEV_FAN_SPEED": lambda g: INT64_NOT_SUPPORTED,  # SXM boards have no fan
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": lambda g: int(_span(g, "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 1.5e5, 9e5)),  # KB/s
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": lambda g: int(_span(g, "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", 2e5, 1.2e6)),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda g: 0,
    "DCGM_FI_DEV_GPU_UTIL": lambda g: 93 + int(7 * _frac(g, "util")),
    "DCGM_FI_DEV_MEM_COPY_UTIL": lambda g: 38 + int(22 * _frac(g, "mcu")),
    "DCGM_FI_DEV_ENC_UTIL": lambda g: 0,
    "DCGM_FI_DEV_DEC_UTIL": lambda g: 0,
    "DCGM_FI_DEV_XID_ERRORS": lambda g: 0,
    "DCGM_FI_DEV_PCIE_LINK_GEN": lambda g: 5,
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": lambda g: 5,
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": lambda g: 16,
    "DCGM_FI_DEV_FABRIC_MANAGER_STATUS": lambda g: 3,  # success, on an HGX board
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": lambda g: 16,
    # cumulative ns of clock reduction since the driver was loaded: none while healthy
    "DCGM_FI_DEV_POWER_VIOLATION": lambda g: 0,
    "DCGM_FI_DEV_THERMAL_VIOLATION": lambda g: 0,
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": lambda g: 0,
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": lambda g: 0,
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION": lambda g: 0,
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": lambda g: 0,
    "DCGM_FI_DEV_FB_TOTAL": lambda g: _FB_TOTAL_MIB,
    "DCGM_FI_DEV_FB_USED": _fb_used,
    "DCGM_FI_DEV_FB_FREE": lambda g: _FB_TOTAL_MIB - _FB_RESERVED_MIB - _fb_used(g),
    "DCGM_FI_DEV_FB_RESERVED": lambda g: _FB_RESERVED_MIB,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": lambda g: 0,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda g: 0,
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": lambda g: int(3 * _frac(g, "sbe")),  # a few, over a lifetime
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": lambda g: 0,
    "DCGM_FI_DEV_RETIRED_SBE": lambda g: 0,
    "DCGM_FI_DEV_RETIRED_DBE": lambda g: 0,
    "DCGM_FI_DEV_RETIRED_PENDING": lambda g: 0,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda g: 0,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda g: 0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda g: 0,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": lambda g: 0,
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": lambda g: 0,
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": lambda g: 0,
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": lambda g: 0,
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": lambda g: 0,
    # NVLink byte totals since nv-hostengine started watching (a few hours): kept under 2**53, so
    # they survive Telegraf's float64 exactly
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0": lambda g: int(_nvlink_rate(g) / 18 * _watched(g)),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": lambda g: int(_nvlink_rate(g) * 0.9 * _watched(g)),
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": lambda g: 0,  # bare metal: 0, as real H100/L4 scrapes show
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda g: round(_span(g, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.95, 0.995), 6),
    "DCGM_FI_PROF_SM_ACTIVE": lambda g: round(_span(g, "DCGM_FI_PROF_SM_ACTIVE", 0.86, 0.95), 6),
    "DCGM_FI_PROF_SM_OCCUPANCY": lambda g: round(_span(g, "DCGM_FI_PROF_SM_OCCUPANCY", 0.38, 0.55), 6),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": lambda g: round(_span(g, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.42, 0.58), 6),
    "DCGM_FI_PROF_DRAM_ACTIVE": lambda g: round(_span(g, "DCGM_FI_PROF_DRAM_ACTIVE", 0.35, 0.55), 6),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": lambda g: 0.0,
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": lambda g: round(_span(g, "DCGM_FI_PROF_PIPE_FP32_ACTIVE", 0.05, 0.14), 6),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": lambda g: round(_span(g, "DCGM_FI_PROF_PIPE_FP16_ACTIVE", 0.02, 0.08), 6),
    "DCGM_FI_PROF_PCIE_TX_BYTES": lambda g: int(_span(g, "DCGM_FI_PROF_PCIE_TX_BYTES", 2e8, 9e8)),
    "DCGM_FI_PROF_PCIE_RX_BYTES": lambda g: int(_span(g, "DCGM_FI_PROF_PCIE_RX_BYTES", 3e8, 1.2e9)),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": lambda g: int(_nvlink_rate(g) / 2),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": lambda g: int(_nvlink_rate(g) / 2 * 0.99),
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": lambda g: 0.0,
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": lambda g: round(_span(g, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.42, 0.58), 6),
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": lambda g: 0.0,
    "DCGM_FI_PROF_PIPE_INT_ACTIVE": lambda g: round(_span(g, "DCGM_FI_PROF_PIPE_INT_ACTIVE", 0.08, 0.2), 6),
}

# Fields that grow on every scrape of ExporterServer, and by how much per second.
_RATES: dict[str, Callable[[Gpu], float]] = {
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda g: _power(g) * 1000.0,  # mJ/s
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": _nvlink_rate,
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0": lambda g: _nvlink_rate(g) / 18,
}


def _label_default(field_name: str, gpu: Gpu, driver_version: str) -> str:
    h = hashlib.sha256(gpu.uuid.encode()).hexdigest()
    return {
        "DCGM_FI_DRIVER_VERSION": driver_version,
        "DCGM_FI_NVML_VERSION": f"12.{driver_version}",
        "DCGM_FI_DEV_NAME": gpu.model,
        "DCGM_FI_DEV_BRAND": "NVIDIA",
        "DCGM_FI_DEV_SERIAL": f"1654423{int(h[:8], 16) % 1000000:06d}",
        "DCGM_FI_DEV_UUID": gpu.uuid,
        "DCGM_FI_DEV_PCI_BUSID": gpu.pci_bus_id,
        "DCGM_FI_DEV_OEM_INFOROM_VER": "1.1",
        "DCGM_FI_DEV_ECC_INFOROM_VER": "7.16",
        "DCGM_FI_DEV_POWER_INFOROM_VER": "N/A",
        "DCGM_FI_DEV_INFOROM_IMAGE_VER": "G520.0200.00.05",
        "DCGM_FI_DEV_VBIOS_VERSION": "96.00.74.00.0D",
    }[field_name]


def default_value(field_name: str, gpu: Gpu) -> float | int:
    """The healthy value of a numeric field for this GPU (the same on every call)."""
    try:
        return _DEFAULTS[field_name](gpu)
    except KeyError:
        raise ValueError(f"no healthy default for {field_name}; give it in Gpu.values") from None


def _field(name: str) -> tuple[int, str]:
    try:
        return _FIELDS[name]
    except KeyError:
        # the exporter exits at start-up: "could not find DCGM field"
        raise ValueError(f"could not find DCGM field {name!r}") from None


def _dcgm_string(name: str, ftype: str, value: float | int) -> str | None:
    """dcgm-exporter's toString: the sample text, or None where it skips the sample."""
    if ftype == "i":
        v = round(value) if isinstance(value, float) and math.isfinite(value) else value
        if not isinstance(v, int):
            raise ValueError(f"{name} is an int64 field; got {value!r}")
        return None if v in _INT_BLANKS else f"{v:d}"
    v_f = float(value)
    if v_f in _FP_BLANKS:
        return None
    if math.isnan(v_f):
        return "NaN"
    if math.isinf(v_f):
        return "+Inf" if v_f > 0 else "-Inf"
    return f"{v_f:f}"


def go_format_float(value: float) -> str:
    """Go's ``strconv.FormatFloat(value, 'g', -1, 64)`` as prometheus expfmt writes a sample."""
    if value == 1:
        return "1"
    if value == 0:
        return "0"
    if value == -1:
        return "-1"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if value < 0 else ""
    parsed = Decimal(repr(abs(value))).as_tuple()  # repr: the shortest digits that round-trip
    digits = "".join(map(str, parsed.digits))
    exponent = int(parsed.exponent)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    point = len(digits) + exponent  # value = 0.<digits> * 10**point
    exp = point - 1
    if exp < -4 or exp >= 6:  # shortest 'g' switches to %e at 6 digits before the point
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _xid_attributes(text: str) -> list[tuple[str, str]]:
    code = int(text)
    msg = _XID_TEXT[code] if 0 <= code < len(_XID_TEXT) else "Unknown Error"
    return [("err_code", str(code)), ("err_msg", msg)]


@dataclass
class _Family:
    counter: Counter
    field_id: int
    samples: list[tuple[list[tuple[str, str]], str]]  # (labels in order, value text)


def _families(hostname: str, gpus: Sequence[Gpu], counters: Sequence[Counter], driver_version: str) -> list[_Family]:
    # the first row of a field wins (findCounterField), whatever its kind
    by_id: dict[int, Counter] = {}
    for counter in counters:
        field_id, _ = _field(counter.field)
        by_id.setdefault(field_id, counter)
    label_counters = [c for c in by_id.values() if c.kind == "label"]
    metric_counters = [c for c in by_id.values() if c.kind != "label"]
    families = {c.field: _Family(c, _field(c.field)[0], []) for c in metric_counters}
    for gpu in sorted(gpus, key=lambda g: g.index):
        labels: dict[str, str] = {}
        for counter in label_counters:
            _, ftype = _field(counter.field)
            if counter.field in gpu.values:
                text = _dcgm_string(counter.field, ftype, gpu.values[counter.field])
            elif ftype == "s":
                text = _label_default(counter.field, gpu, driver_version)
            else:
                text = _dcgm_string(counter.field, ftype, default_value(counter.field, gpu))
            if text is not None:
                labels[counter.field] = text
        base = [
            ("gpu", str(gpu.index)),
            ("UUID", gpu.uuid),
            ("pci_bus_id", gpu.pci_bus_id),
            ("device", f"nvidia{gpu.index}"),
            ("modelName", gpu.model),
        ]
        if hostname:
            base.append(("Hostname", hostname))
        base += sorted(labels.items())
        for counter in metric_counters:
            _, ftype = _field(counter.field)
            if ftype == "s":
                raise ValueError(f"{counter.field} is a string field; only a label row can carry it")
            raw = gpu.values[counter.field] if counter.field in gpu.values else default_value(counter.field, gpu)
            text = _dcgm_string(counter.field, ftype, raw)
            if text is None:
                continue
            attributes = _xid_attributes(text) if counter.field == "DCGM_FI_DEV_XID_ERRORS" else []
            families[counter.field].samples.append((base + attributes, text))
    return [f for f in families.values() if f.samples]


def render(
    hostname: str,
    gpus: Sequence[Gpu],
    counters: Sequence[Counter],
    driver_version: str = "550.54.15",
    *,
    flavor: Flavor = "template",
) -> str:
    """The body of ``GET /metrics`` as dcgm-exporter would serve it for these GPUs."""
    families = _families(hostname, gpus, counters, driver_version)
    out: list[str] = []
    if flavor == "template":  # anything else is "expfmt"
        for fam in sorted(families, key=lambda f: (f.field_id, f.counter.field, f.counter.kind, f.counter.help)):
            name = fam.counter.field
            out.append(f"# HELP {name} {fam.counter.help}\n# TYPE {name} {fam.counter.kind}\n")
            for labels, text in fam.samples:
                pairs = ",".join(f'{k}="{v}"' for k, v in labels)
                out.append(f"{name}{{{pairs}}} {text}\n")
        return "".join(out)
    for fam in sorted(families, key=lambda f: f.counter.field):
        name = fam.counter.field
        out.append(f"# HELP {name} {_escape_help(fam.counter.help)}\n# TYPE {name} {fam.counter.kind}\n")
        samples = []
        for labels, text in fam.samples:
            renamed = [("hostname" if k == "Hostname" else k, v) for k, v in labels]
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(f"{name}: non-finite sample value {text!r} (the exporter answers 500)")
            samples.append((_signature(renamed), renamed, go_format_float(value)))
        for _, labels, value_text in sorted(samples, key=lambda s: s[0]):
            pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
            out.append(f"{name}{{{pairs}}} {value_text}\n")
    return "".join(out)


def _signature(labels: list[tuple[str, str]]) -> str:
    return "".join(f"{len(k)}:{k}={len(v)}:{v};" for k, v in sorted(labels))


_INDEX_HTML = b"""<html>
\t\t\t<head><title>GPU Exporter</title></head>
\t\t\t<body>
\t\t\t<h1>GPU Exporter</h1>
\t\t\t<p><a href="./metrics">Metrics</a></p>
\t\t\t</body>
\t\t\t</html>"""
_GO_CHUNKING_THRESHOLD = 2048


class ExporterServer:
    """dcgm-exporter's HTTP endpoint on 127.0.0.1 (an ephemeral port), serving :func:`render` for
    ``gpus`` healthy GPUs. Use as a context manager; :meth:`set` changes what the next scrape
    shows. Energy and NVLink byte totals grow on every scrape, at the GPU's rate times the time
    since the previous scrape (at least 1 ms of it), visibly even after a float64 conversion."""

    def __init__(
        self,
        hostname: str,
        gpus: int,
        counters: Sequence[Counter],
        *,
        driver_version: str = "550.54.15",
        flavor: Flavor = "template",
    ) -> None:
        self.hostname = hostname
        self.gpus = make_gpus(hostname, gpus)
        self.counters = list(counters)
        self.driver_version = driver_version
        self.flavor: Flavor = flavor
        self._lock = threading.Lock()
        self._scrapes = 0
        self._last_scrape = time.monotonic()
        render(hostname, self.gpus, self.counters, driver_version, flavor=flavor)  # fail early
        growing = {c.field for c in self.counters if c.field in _RATES}
        for gpu in self.gpus:  # the growing fields live in values so they can accumulate
            for name in growing:
                gpu.values[name] = default_value(name, gpu)
        self._growing = growing
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/metrics"

    @property
    def scrapes(self) -> int:
        """How many ``GET /metrics`` were served."""
        with self._lock:
            return self._scrapes

    def set(self, gpu: int, field: str, value: float | int) -> None:
        """Make the next scrape show ``value`` for ``field`` on GPU ``gpu`` (a growing field then
        grows on from there)."""
        _field(field)
        with self._lock:
            self.gpus[gpu].values[field] = value

    def body(self) -> str:
        """What the next scrape would show, without counting as one."""
        with self._lock:
            return render(self.hostname, self.gpus, self.counters, self.driver_version, flavor=self.flavor)

    def _scrape(self) -> bytes:
        with self._lock:
            text = render(self.hostname, self.gpus, self.counters, self.driver_version, flavor=self.flavor)
            self._scrapes += 1
            now = time.monotonic()
            dt = max(now - self._last_scrape, 0.001)
            self._last_scrape = now
            for gpu in self.gpus:
                for name in self._growing:
                    current = gpu.values[name]
                    if int(current) in _INT_BLANKS:
                        continue
                    gpu.values[name] = int(current) + max(1, int(_RATES[name](gpu) * dt))
            return text.encode("utf-8")

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._serve(head=False)

            def do_HEAD(self) -> None:
                self._serve(head=True)

            def _serve(self, *, head: bool) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body = server._scrape() if not head else server.body().encode()
                    self._reply(200, "text/plain; charset=utf-8", body, head)
                elif path == "/":
                    self._reply(200, "text/html; charset=utf-8", _INDEX_HTML, head)
                elif path == "/health":
                    self._reply(200, "text/plain; charset=utf-8", b"KO", head)
                else:
                    self._reply(404, "text/plain; charset=utf-8", b"404 page not found\n", head)

            def _reply(self, code: int, ctype: str, body: bytes, head: bool) -> None:
                # Go's net/http: Date, no Server header; sniffed Content-Type; Content-Length for a
                # small body, chunked once the body passes the 2048-byte buffer
                self.log_request(code)
                self.send_response_only(code)
                self.send_header("Content-Type", ctype)
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Date", self.date_time_string())
                chunked = len(body) > _GO_CHUNKING_THRESHOLD and not head
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if head:
                    return
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
                else:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler

    def __enter__(self) -> ExporterServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="dcgm-exporter", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
