"""What a real collector makes of the cluster's samples on their way to line protocol.

The options here model the collector, not the cluster: Telegraf on each host scraping
dcgm-exporter and friends. They change how samples are stamped (the host's clock offset and
collection jitter, `precision = "1s"`), tagged (a stock dcgm-exporter knows no job) and split into
lines (the prometheus input writes one single-field line per sample), never what the cluster did:
the physics, faults, truth and events are the same with and without them. The in-process path
(`Generation.ticks()` feeding frames to detectors) stays clean; only encoded output goes through
here.

A host is a node with everything it reports (gpu, nvswitch, nic, optic, psu and node lines), a
switch with its ports, or a rack's cooling loop. All lines of one host in one tick share one
timestamp: the tick's event time plus the host's constant clock offset plus that tick's jitter,
optionally truncated to whole seconds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from ingest.frames import Column, Frame
from ingest.lineprotocol import encode_lines
from telemetry_gen.simulate import ClusterSim, Tick
from telemetry_gen.topology import Topology
from vocab.catalog import FieldType

# Seed purposes of their own (the cluster uses 1-4), so turning an option on shifts no other draw.
OFFSET_PURPOSE = 20
JITTER_PURPOSE = 21
NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Encoded:
    """One frame's lines. `frame` holds the samples as sent (the host's timestamps, the tags the
    collector knows); `rows` is the frame row each line carries, None when line i is row i."""

    frame: Frame
    lines: pa.Array
    rows: NDArray[np.int64] | None = None

    def keys(self, tag: str) -> NDArray[np.object_]:
        """A tag's value for each line (the Kafka partition key, say)."""
        values = self.frame.tag(tag)
        return values if self.rows is None else values[self.rows]


def hosts_of(t: Topology) -> tuple[dict[str, NDArray[np.int64]], int]:
    """Per measurement, the host that reports each entity (rows in the simulator's static tag
    order), and how many hosts there are: nodes, then switches, then cooling loops."""
    nodes, switches, loops = t.count("node"), len(t.switches), t.count("cooling")
    hosts = {
        "gpu": t.gpu_node,
        "nvswitch": t.nvswitch_node,
        "nic": t.nic_node,
        "optic": t.nic_node,
        "psu": t.psu_node,
        "node": np.arange(nodes, dtype=np.int64),
        "switch": nodes + np.arange(switches, dtype=np.int64),
        "switch_port": nodes + t.port_switch,
        "cooling": nodes + switches + np.arange(loops, dtype=np.int64),
    }
    return hosts, nodes + switches + loops


class Collector:
    """Encodes a simulator's ticks the way the configured collectors would send them."""

    def __init__(
        self,
        sim: ClusterSim,
        seed: int,
        *,
        clock_offset_s: float = 0.0,
        jitter_s: float = 0.0,
        truncate_s: bool = False,
        job_tags: bool = True,
        single_field: bool = False,
    ) -> None:
        for name, value in (("clock_offset_s", clock_offset_s), ("jitter_s", jitter_s)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, not {value}")
        self.sim = sim
        self.seed = seed
        self.jitter_s = jitter_s
        self.truncate_s = truncate_s
        self.job_tags = job_tags
        self.single_field = single_field
        self.hosts, count = hosts_of(sim.t)
        # Drawn once: a host's clock is off by the same amount all run (NTP drift is slower than that).
        self.offset_s = np.random.default_rng([seed, OFFSET_PURPOSE]).uniform(0.0, clock_offset_s, count)
        self.restamps = clock_offset_s > 0 or jitter_s > 0 or truncate_s

    def encode(self, tick: Tick) -> list[Encoded]:
        stamps = self.host_stamps(tick.time_ns) if self.restamps else None
        out = []
        for frame in tick.frames:
            head = self.sim.heads(tick, frame, job_tag=self.job_tags)
            sent = self._as_sent(frame, tick, stamps)
            out.append(_single_field(head, sent) if self.single_field else Encoded(sent, encode_lines(head, sent)))
        return out

    def host_stamps(self, time_ns: int) -> NDArray[np.int64]:
        """Each host's timestamp for the tick at `time_ns`: its clock offset plus this tick's
        jitter. The jitter comes from a generator seeded by the tick's time, so encoding a tick
        twice (a folder and Kafka, say) stamps it the same."""
        shift = self.offset_s
        if self.jitter_s > 0:
            rng = np.random.default_rng([self.seed, JITTER_PURPOSE, time_ns])
            shift = shift + rng.uniform(0.0, self.jitter_s, len(shift))
        stamps = time_ns + np.round(shift * NS).astype(np.int64)
        if self.truncate_s:
            stamps -= stamps % NS  # Telegraf's precision = "1s" truncates, it does not round
        return stamps

    def _as_sent(self, frame: Frame, tick: Tick, stamps: NDArray[np.int64] | None) -> Frame:
        """The frame with the host's timestamps and without the tags the collector does not know.
        Columns are shared, not copied: the tick's own frame stays as simulated."""
        tags = frame.tags if self.job_tags else {k: v for k, v in frame.tags.items() if k != "job"}
        time_ns = frame.time_ns
        if stamps is not None:
            time_ns = stamps[self.hosts[frame.measurement][tick.rows[frame.measurement]]]
        if tags is frame.tags and time_ns is frame.time_ns:
            return frame
        return Frame(frame.measurement, time_ns, tags, frame.fields)


def _single_field(head: pa.Array, frame: Frame) -> Encoded:
    """One line per present sample, as Telegraf's prometheus input (metric_version = 2) writes
    them: the row's head and timestamp with one field. Lines come in row order, a row's samples
    together in field order."""
    fields = list(frame.fields.items())
    width = len(fields)
    present = [np.flatnonzero(col.present).astype(np.int64) for _, col in fields]
    key = np.concatenate([np.zeros(0, dtype=np.int64)] + [rows * width + j for j, rows in enumerate(present)])
    if not len(key):
        return Encoded(frame, pa.array([], pa.string()), key)
    order = np.argsort(key, kind="stable")
    line_rows, line_field = np.divmod(key[order], width)
    if all(_plain(name, col) for name, col in fields):
        lines = _quick_lines(head, frame, present, order, line_rows, line_field)
    else:  # anything the encoder must escape or check: whole lines from the encoder itself
        parts = [_encoder_lines(head, frame, name, rows) for name, rows in zip(frame.fields, present, strict=True)]
        lines = pa.concat_arrays(parts).take(pa.array(order))
    return Encoded(frame, lines, line_rows)


def _encoder_lines(head: pa.Array, frame: Frame, name: str, rows: NDArray[np.int64]) -> pa.Array:
    """One field's lines for some rows, by the line-protocol encoder."""
    if not len(rows):
        return pa.array([], pa.string())
    one = Frame(frame.measurement, frame.time_ns[rows], {}, {name: frame.fields[name].take(rows)})
    return encode_lines(head.take(pa.array(rows)), one)


def _quick_lines(
    head: pa.Array,
    frame: Frame,
    present: list[NDArray[np.int64]],
    order: NDArray[np.int64],
    line_rows: NDArray[np.int64],
    line_field: NDArray[np.int64],
) -> pa.Array:
    """`head key=value ts` for plain fields (see `_plain`): each field's values formatted as a
    column, then every piece put in line order and joined once, not once per field."""
    fields = list(frame.fields.values())
    values = pa.concat_arrays([_digits(col, rows) for col, rows in zip(fields, present, strict=True)])
    keys = pa.array([name + "=" for name in frame.fields], pa.string())
    suffixes = pa.array(["i" if col.type is FieldType.INT else "" for col in fields], pa.string())
    by_field, by_row = pa.array(line_field), pa.array(line_rows)
    stamps = pc.cast(pa.array(frame.time_ns, pa.int64()), pa.string())
    return pc.binary_join_element_wise(
        head.take(by_row),
        " ",
        keys.take(by_field),
        values.take(pa.array(order)),
        suffixes.take(by_field),
        " ",
        stamps.take(by_row),
        "",
    )


_ESCAPED_IN_KEYS = re.compile(r"[,= \\\n\r]")


def _plain(name: str, col: Column) -> bool:
    """A field that `_quick_lines` writes exactly as the line-protocol encoder would: a key with
    nothing to escape, and integers or finite floats (the only types the simulator makes)."""
    if not name or _ESCAPED_IN_KEYS.search(name):
        return False
    if col.type is FieldType.INT:
        return True
    return col.type is FieldType.FLOAT and bool(np.isfinite(col.values[col.present]).all())


def _digits(col: Column, rows: NDArray[np.int64]) -> pa.Array:
    """The values of some rows as the encoder writes them, without the type suffix: floats as
    the shortest text that reads back the same, integers in decimal."""
    arrow_type = pa.float64() if col.type is FieldType.FLOAT else pa.int64()
    return pc.cast(pa.array(col.values[rows], arrow_type), pa.string())
