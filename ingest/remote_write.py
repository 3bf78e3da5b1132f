"""The Prometheus door: remote-write v1 (protobuf + snappy) in, the catalog's line protocol out.

A site that already runs dcgm-exporter (and node-exporter) under Prometheus points Prometheus's
`remote_write` at `aiops ingest --remote-write HOST:PORT`; the series this door knows become the
same lines the Telegraf node agent sends (config/telegraf/node.conf): one line per entity and
scrape, `gpu,gpu=<node>-gpu<i>,node=<node> DCGM_FI_...=<v>,... <ns>` and
`nic,nic=<node>-nic<i>,node=<node> port_xmit_data=...`, on the telemetry topic keyed by node.
Everything else is counted, and dead-lettered with the reason (one dead letter per series and
request, never per sample; at most MAX_DEADLETTERS_PER_REQUEST a request and one summary). DCGM's
blank sentinels (ingest/dcgm_blanks.py) are dropped and counted by which one, catalogued field or
not: they mean "no reading".

Formats, from their specifications:
- remote-write 1.0 (prometheus.io/docs/specs/remote_write_spec): POST, `Content-Encoding:
  snappy`, `Content-Type: application/x-protobuf`, body = snappy *block* format (not framed) of
  `prometheus.WriteRequest` (prompb/remote.proto, types.proto): WriteRequest{repeated TimeSeries
  timeseries = 1; repeated MetricMetadata metadata = 3}, TimeSeries{repeated Label labels = 1;
  repeated Sample samples = 2; exemplars = 3; histograms = 4}, Label{string name = 1; string
  value = 2}, Sample{double value = 1; int64 timestamp = 2 (ms)}. A 2xx is success, a 4xx is
  not retried by the sender, a 5xx is (the spec's "retry on 5xx and 429").
- snappy's block format (google/snappy format_description.txt): a varint of the uncompressed
  length, then literals (tag & 3 == 0) and copies with 1-, 2- or 4-byte offsets.
- Prometheus marks a series that went away with a *stale marker*, the NaN 0x7ff0000000000002
  (prometheus/model/value/value.go StaleNaN); those are counted, not data.

Both are decoded here (no snappy or protobuf package is a dependency of the service): the
messages are three, and the block format is a page. The body is bounded before it is read, the
declared uncompressed length before anything is decompressed, and what it decodes to (series,
samples, labels) while it is parsed.

Label mapping (the Telegraf path's, config/telegraf/node.conf's starlark):
- node: the `node` label when the site sets one (relabel_configs), else dcgm-exporter's
  `Hostname` (`hostname` in newer exporters), else the host part of Prometheus's `instance`.
- dcgm-exporter (`DCGM_*` with a `gpu` label, the GPU index): gpu = <node>-gpu<gpu>, every DCGM
  field a field under its own name, as the Telegraf path sends them. MIG instances (`GPU_I_ID`)
  are not modelled (dead letter).
- node-exporter's infiniband collector (`node_infiniband_*{device, port}`,
  collector/infiniband_linux.go; procfs already multiplies port_*_data by 4, so they are bytes):
  nic = <node>-nic<i> for mlx5_<i> port 1, else <node>-<device>-p<port> (the Telegraf mapping);
  the catalog's counters under the sysfs names, the rest under their exporter names.
- Only ids leave this door as tags (node, gpu, nic), and each passes the id grammar
  (vocab/ids.py); every other label (UUID, modelName, the scrape's `job` and `instance` - a
  Prometheus job name is not the catalog's scheduler `job`) is not forwarded.
"""

from __future__ import annotations

import math
import re
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from ingest.dcgm_blanks import blank_name, width_of
from ingest.deadletter import DeadLetter
from vocab.catalog import measurement
from vocab.ids import entity_refusal, gpu_id, nic_id, nic_port_id, node_refusal

# An operational choice, stated as one: Prometheus sends at most max_samples_per_send (2000 by
# default in 2.42) samples a request, well under a megabyte compressed; 16 MiB compressed and
# 64 MiB decompressed leave room for a site's larger batches and refuse a body that would only
# fill memory. Configurable with --remote-write-max-bytes.
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
# What a request may decode to, counted while it is parsed (the parse stops at the bound and the
# whole request is refused, 400, before the rest becomes objects): a snappy body of empty
# TimeSeries is ~20:1, and each series was an object and a dead letter (300 KB: 1.2 GB, 3 million
# Kafka messages). Prometheus 2.x sends one TimeSeries per sample and at most max_samples_per_send
# (2000 by default) samples a request: 50,000 is 25 times that, for a site that raised it; every
# bound keeps a request's objects to tens of MB (about 150 bytes a label, 130 a sample).
MAX_SERIES_PER_REQUEST = 50_000
MAX_SAMPLES_PER_REQUEST = 50_000
# a dcgm-exporter series carries 8-15 labels (gpu, UUID, device, modelName, Hostname, driver,
# err_code/err_msg, Kubernetes pod/namespace/container, Prometheus's job/instance); 64 leaves room
# for a site's relabelling
MAX_LABELS_PER_SERIES = 64
# names and values of one series: a real one is a few hundred bytes (err_msg is the longest)
MAX_LABEL_BYTES_PER_SERIES = 16 * 1024
# all labels of one request: 2000 series of 15 labels is 30,000; 500,000 (~75 MB of objects) is
# 16 times a raised max_samples_per_send's worth, and stops 50,000 series of 64 labels (3.2 million)
MAX_LABELS_PER_REQUEST = 500_000
# Dead letters are for a person to read: one per bad series, at most this many a request; beyond
# it one summary dead letter counts the rest by reason (a request can never make more than 101
# Kafka messages on the dead-letter topic)
MAX_DEADLETTERS_PER_REQUEST = 100

STALE_NAN_BITS = 0x7FF0000000000002


class RemoteWriteError(ValueError):
    """A body that is not a remote-write request (answered 400: the sender must not retry it)."""


# ---------------------------------------------------------------- snappy (block format)


def _varint(buf: bytes | memoryview, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(buf):
            raise RemoteWriteError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise RemoteWriteError("varint longer than 10 bytes")


def snappy_length(data: bytes) -> int:
    """The uncompressed length a snappy block declares (its first varint)."""
    return _varint(data, 0)[0]


def snappy_decompress(data: bytes, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decode one snappy block. The declared length is checked against `max_bytes` before any
    output is made, and every element against the declared length."""
    want, i = _varint(data, 0)
    if want > max_bytes:
        raise RemoteWriteError(f"decompresses to {want:,} bytes (the limit is {max_bytes:,})")
    out = bytearray()
    n = len(data)
    while i < n:
        tag = data[i]
        i += 1
        kind = tag & 3
        if kind == 0:  # literal
            length = (tag >> 2) + 1
            if length > 60:
                extra = length - 60  # 1..4 little-endian bytes hold length - 1
                if i + extra > n:
                    raise RemoteWriteError("truncated literal length")
                length = int.from_bytes(data[i : i + extra], "little") + 1
                i += extra
            if i + length > n:
                raise RemoteWriteError("literal runs past the input")
            if len(out) + length > want:
                raise RemoteWriteError("more output than the declared length")
            out += data[i : i + length]
            i += length
            continue
        if kind == 1:
            if i >= n:
                raise RemoteWriteError("truncated copy")
            length = 4 + ((tag >> 2) & 7)
            offset = ((tag >> 5) << 8) | data[i]
            i += 1
        else:
            width = 2 if kind == 2 else 4
            if i + width > n:
                raise RemoteWriteError("truncated copy")
            length = (tag >> 2) + 1
            offset = int.from_bytes(data[i : i + width], "little")
            i += width
        if offset == 0 or offset > len(out):
            raise RemoteWriteError(f"copy offset {offset} outside the {len(out)} bytes made so far")
        if len(out) + length > want:
            raise RemoteWriteError("more output than the declared length")
        start = len(out) - offset
        if offset >= length:
            out += out[start : start + length]
        else:  # overlapping: the last `offset` bytes repeat
            chunk = bytes(out[start:])
            out += (chunk * (length // offset + 1))[:length]
    if len(out) != want:
        raise RemoteWriteError(f"decompressed {len(out):,} bytes, declared {want:,}")
    return bytes(out)


def snappy_compress_literal(data: bytes) -> bytes:
    """A valid snappy block holding `data` as literals only (for tests and tools; Prometheus
    compresses properly)."""
    out = bytearray()
    n = len(data)
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            break
    for i in range(0, len(data), 65536):
        chunk = data[i : i + 65536]
        length = len(chunk) - 1
        if length < 60:
            out.append(length << 2)
        else:
            nbytes = (length.bit_length() + 7) // 8
            out.append((59 + nbytes) << 2)
            out += length.to_bytes(nbytes, "little")
        out += chunk
    return bytes(out)


# ---------------------------------------------------------------- protobuf (the three messages)


@dataclass(slots=True)
class Series:
    labels: dict[str, str]
    samples: list[tuple[float, int]]  # (value, timestamp ms)
    histograms: int = 0  # native histograms: not mapped, counted


def _fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of one message; unknown fields are skipped by type."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: int | memoryview
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            if i + 8 > n:
                raise RemoteWriteError("truncated 64-bit field")
            value = int.from_bytes(buf[i : i + 8], "little")
            i += 8
        elif wire == 2:
            length, i = _varint(buf, i)
            if i + length > n:
                raise RemoteWriteError("length-delimited field runs past its message")
            value = buf[i : i + length]
            i += length
        elif wire == 5:
            if i + 4 > n:
                raise RemoteWriteError("truncated 32-bit field")
            value = int.from_bytes(buf[i : i + 4], "little")
            i += 4
        else:
            raise RemoteWriteError(f"wire type {wire} (field {number}) is not proto3")
        yield number, wire, value


def _text(value: int | memoryview) -> str:
    if isinstance(value, int):
        raise RemoteWriteError("a label is not a string")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise RemoteWriteError("a label is not UTF-8") from None


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may decode to (the module's MAX_* constants say why each is what it is)."""

    series: int = MAX_SERIES_PER_REQUEST
    samples: int = MAX_SAMPLES_PER_REQUEST
    labels_per_series: int = MAX_LABELS_PER_SERIES
    label_bytes_per_series: int = MAX_LABEL_BYTES_PER_SERIES
    labels: int = MAX_LABELS_PER_REQUEST
    deadletters: int = MAX_DEADLETTERS_PER_REQUEST


class RequestTooLargeError(RemoteWriteError):
    """A request over one of the Limits: refused whole (400), counted as `refused_bounds`."""


def parse_write_request(body: bytes, limits: Limits | None = None) -> list[Series]:
    """The request's series, counted as they are parsed: the first one over a bound of `limits`
    stops the parse (RequestTooLargeError) before the rest becomes objects."""
    limits = limits or Limits()
    out: list[Series] = []
    samples = labels = 0
    for number, wire, value in _fields(memoryview(body)):
        if number != 1 or wire != 2:
            continue  # metadata (3) and anything newer
        assert isinstance(value, memoryview)
        if len(out) >= limits.series:
            raise RequestTooLargeError(f"more than {limits.series:,} series in one request")
        series = Series({}, [])
        label_bytes = 0
        for n2, w2, v2 in _fields(value):
            if w2 != 2:
                continue
            assert isinstance(v2, memoryview)
            if n2 == 1:
                labels += 1
                label_bytes += len(v2)
                if len(series.labels) >= limits.labels_per_series:
                    raise RequestTooLargeError(f"a series with more than {limits.labels_per_series} labels")
                if label_bytes > limits.label_bytes_per_series:
                    raise RequestTooLargeError(
                        f"a series with more than {limits.label_bytes_per_series:,} bytes of labels"
                    )
                if labels > limits.labels:
                    raise RequestTooLargeError(f"more than {limits.labels:,} labels in one request")
                name = val = ""
                for n3, _w3, v3 in _fields(v2):
                    if n3 == 1:
                        name = _text(v3)
                    elif n3 == 2:
                        val = _text(v3)
                series.labels[name] = val
            elif n2 == 2:
                samples += 1
                if samples > limits.samples:
                    raise RequestTooLargeError(f"more than {limits.samples:,} samples in one request")
                bits, ts = 0, 0
                for n3, w3, v3 in _fields(v2):
                    if n3 == 1 and w3 == 1:
                        assert isinstance(v3, int)
                        bits = v3
                    elif n3 == 2 and w3 == 0:
                        assert isinstance(v3, int)
                        ts = v3 - (1 << 64) if v3 >= 1 << 63 else v3
                series.samples.append((struct.unpack("<d", bits.to_bytes(8, "little"))[0], ts))
            elif n2 == 4:
                series.histograms += 1
        out.append(series)
    return out


def _encode_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def encode_write_request(series: list[Series]) -> bytes:
    """The protobuf of a WriteRequest (for tests and tools)."""
    body = bytearray()
    for s in series:
        ts = bytearray()
        for name, value in s.labels.items():
            ts += _len_field(1, _len_field(1, name.encode()) + _len_field(2, value.encode()))
        for value_f, t in s.samples:
            sample = (
                _encode_varint(1 << 3 | 1) + struct.pack("<d", value_f) + _encode_varint(2 << 3) + _encode_varint(t)
            )
            ts += _len_field(2, sample)
        body += _len_field(1, bytes(ts))
    return bytes(body)


# ---------------------------------------------------------------- mapping


# node-exporter's infiniband names (collector/infiniband_linux.go) -> the catalog's sysfs names
NODE_EXPORTER_IB: dict[str, str] = {
    "node_infiniband_port_data_transmitted_bytes_total": "port_xmit_data",
    "node_infiniband_port_data_received_bytes_total": "port_rcv_data",
    "node_infiniband_port_errors_received_total": "port_rcv_errors",
    "node_infiniband_link_downed_total": "link_downed",
    "node_infiniband_link_error_recovery_total": "link_error_recovery",
    "node_infiniband_port_transmit_wait_total": "port_xmit_wait",
    "node_infiniband_port_discards_transmitted_total": "port_xmit_discards",
}
# IBA PortState 4 is ACTIVE (node-exporter's state_id help: "4: active"): the catalog's link_state
IB_STATE_ACTIVE = 4
_MLX5 = re.compile(r"^mlx5_(\d+)$")
_DIGITS = re.compile(r"^\d+$")
# a Prometheus metric name (data model), which becomes a line-protocol field key as it is
_METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_:]*$")


@dataclass(slots=True)
class Mapped:
    """What one request became: lines per node (the Kafka key), dead letters, and counts."""

    lines: dict[str, list[bytes]] = field(default_factory=dict)
    deadletters: list[DeadLetter] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


def _series_text(labels: dict[str, str]) -> bytes:
    name = labels.get("__name__", "")
    rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}".encode("utf-8", "backslashreplace")


def _node_of(labels: dict[str, str]) -> str:
    node = labels.get("node") or labels.get("Hostname") or labels.get("hostname") or ""
    if not node:
        instance = labels.get("instance", "")
        node = instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance
    return node


def _target(labels: dict[str, str]) -> tuple[str, str, str, str, float] | str:
    """(measurement, id tag, id, node, scale) for a series, or why it cannot be mapped."""
    name = labels.get("__name__", "")
    if not _METRIC_NAME.match(name):
        return f"metric name {name[:80]!r} is not a Prometheus metric name"
    if name.startswith("DCGM_"):
        if "GPU_I_ID" in labels:
            return "a MIG instance (GPU_I_ID) is not modelled"
        gpu = labels.get("gpu", "")
        if not _DIGITS.match(gpu):
            return f"dcgm-exporter series without a GPU index label 'gpu' (got {gpu!r})"
        kind = id_tag = "gpu"
        node = _node_of(labels)
        entity = gpu_id(node, gpu)
    elif name.startswith("node_infiniband_"):
        device, port = labels.get("device", ""), labels.get("port", "1")
        index = _MLX5.match(device)
        kind = id_tag = "nic"
        node = _node_of(labels)
        entity = nic_id(node, index.group(1)) if index and port == "1" else nic_port_id(node, device, port)
    else:
        return f"no mapping for {name!r} (dcgm-exporter DCGM_* and node-exporter node_infiniband_* are mapped)"
    if problem := node_refusal(node):
        return f"node {node!r}: {problem}"
    if problem := entity_refusal(entity):
        return f"{id_tag} {entity!r}: {problem}"
    return kind, id_tag, entity, node, 1.0


def _field_of(name: str, value: float) -> tuple[str, float]:
    if name.startswith("DCGM_"):
        return name, value
    if name in NODE_EXPORTER_IB:
        return NODE_EXPORTER_IB[name], value
    if name == "node_infiniband_state_id":
        return "link_state", 1.0 if value == IB_STATE_ACTIVE else 0.0
    if name == "node_infiniband_rate_bytes_per_second":
        return "link_rate_gbps", value * 8 / 1e9
    return name.removeprefix("node_infiniband_"), value


def _number(value: float) -> str:
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


_GPU = measurement("gpu")


def _blank(name: str, value: float) -> str | None:
    """The DCGM sentinel a dcgm-exporter sample is, if it is one (ingest/dcgm_blanks.py): by the
    field's width when the catalog lists it, by exact family member when it does not."""
    metric = _GPU.metric(name) if _GPU is not None else None
    return blank_name(value, width_of(metric) if metric is not None else None)


class _Letters:
    """A request's dead letters: one per bad series, at most `cap`; the rest counted by reason
    and said in one summary dead letter."""

    def __init__(self, out: Mapped, cap: int) -> None:
        self.out, self.cap = out, cap
        self.dropped: Counter[str] = Counter()

    def add(self, reason: str, labels: dict[str, str]) -> None:
        self.out.counts["series_deadlettered"] += 1
        if len(self.out.deadletters) < self.cap:
            self.out.deadletters.append(DeadLetter("remote_write", reason, _series_text(labels)))
        else:
            self.dropped[DeadLetter("remote_write", reason, b"").category] += 1

    def close(self) -> None:
        if not self.dropped:
            return
        n = sum(self.dropped.values())
        self.out.counts["deadletters_dropped"] += n
        why = "; ".join(f"{k}: {v:,}" for k, v in self.dropped.most_common(10))
        self.out.deadletters.append(
            DeadLetter(
                "remote_write",
                f"{n:,} more series of this request not dead-lettered one by one (at most {self.cap} a request); "
                f"by reason: {why}",
                b"",
            )
        )


def map_series(all_series: list[Series], max_deadletters: int = MAX_DEADLETTERS_PER_REQUEST) -> Mapped:
    """One line per (measurement, entity, timestamp), keyed by node; a bad series is one dead
    letter (never one per sample), at most `max_deadletters` a request and one summary."""
    out = Mapped()
    letters = _Letters(out, max_deadletters)
    rows: dict[tuple[str, str, str, str, int], dict[str, float]] = {}
    for series in all_series:
        out.counts["series"] += 1
        out.counts["histograms_skipped"] += series.histograms
        target = _target(series.labels)
        if isinstance(target, str):
            out.counts["series_unmapped"] += 1
            out.counts["samples_unmapped"] += len(series.samples)
            letters.add(target, series.labels)
            continue
        kind, id_tag, entity, node, _ = target
        name = series.labels["__name__"]
        dcgm = name.startswith("DCGM_")
        not_finite: Counter[str] = Counter()
        for value, ts_ms in series.samples:
            if math.isnan(value) and struct.unpack("<Q", struct.pack("<d", value))[0] == STALE_NAN_BITS:
                out.counts["stale_markers"] += 1
                continue
            if not math.isfinite(value):
                not_finite[repr(value)] += 1
                continue
            if dcgm and (sentinel := _blank(name, value)) is not None:
                out.counts["dcgm_blanks"] += 1  # "no reading": dropped, counted by which sentinel
                out.counts[f"dcgm_blank:{sentinel}"] += 1
                continue
            key, mapped = _field_of(name, value)
            rows.setdefault((kind, id_tag, entity, node, ts_ms), {})[key] = mapped
            out.counts["samples"] += 1
        if not_finite:
            n = sum(not_finite.values())
            out.counts["samples_unmapped"] += n
            which = ", ".join(f"{k} x{v}" for k, v in sorted(not_finite.items()))
            letters.add(f"samples not finite: {n} of {len(series.samples)} ({which})", series.labels)
    letters.close()
    for (kind, id_tag, entity, node, ts_ms), fields in rows.items():
        body = ",".join(f"{k}={_number(v)}" for k, v in sorted(fields.items()))
        line = f"{kind},{id_tag}={entity},node={node} {body} {ts_ms * 1_000_000}".encode()
        out.lines.setdefault(node, []).append(line)
        out.counts["lines"] += 1
    return out


def decode_request(body: bytes, max_decompressed: int = MAX_DECOMPRESSED_BYTES, limits: Limits | None = None) -> Mapped:
    """A remote-write body (snappy-compressed protobuf) to lines; RemoteWriteError if it is none,
    RequestTooLargeError if it decodes to more than `limits` allow."""
    limits = limits or Limits()
    return map_series(parse_write_request(snappy_decompress(body, max_decompressed), limits), limits.deadletters)
