"""The Prometheus text format (0.0.4) of a node-exporter textfile, strictly: what NCCL Inspector's
Prometheus mode writes (`<NCCL_INSPECTOR_DUMP_DIR>/nccl_inspector_metrics_<GPU UUID>.prom`, one
file per GPU, rewritten every dump) read without node-exporter and Prometheus in between, into
the same `Series` the remote-write door decodes (ingest.remote_write).

A sample line is `name{label="value",...} value [timestamp_ms]`; `#` lines are comments (HELP,
TYPE). Label values escape `\\`, `\"` and `\n` (prometheus/docs exposition_formats.md). A line
that is not this, holds a label twice, or is longer than MAX_LINE_BYTES is refused with its number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ingest.jobs._common import lines
from ingest.remote_write import MAX_LABELS_PER_SERIES, Series

# NCCL's own lines are under 1 KB (its label buffer is 1,024 bytes, inspector_prom.cc)
MAX_LINE_BYTES = 64 * 1024

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\[\\"n])*)"\s*(,|(?=\}))')
_HEAD = re.compile(rf"({_NAME})\s*(\{{)?")
_TAIL = re.compile(r"\s*([^\s]+)(?:\s+(-?\d{1,19}))?\s*")
_UNESCAPE = re.compile(r"\\([\\\"n])")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN")


@dataclass(slots=True)
class Parsed:
    series: list[Series] = field(default_factory=list)
    rejects: list[tuple[int, str, bytes]] = field(default_factory=list)  # (line, reason, excerpt)


def parse_exposition(data: bytes, time_ms: int) -> Parsed:
    """Series of a text exposition; a sample without its own timestamp takes `time_ms` (the
    file's modification time: when NCCL wrote it)."""
    out = Parsed()
    for line in lines(data if data.endswith(b"\n") else data + b"\n", MAX_LINE_BYTES):
        if line.overlong:
            out.rejects.append(
                (line.number, f"{line.overlong:,} bytes, over the {MAX_LINE_BYTES:,} a line may be", line.data)
            )
            continue
        try:
            raw = line.data.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            out.rejects.append((line.number, f"not UTF-8 (byte {exc.start})", line.data))
            continue
        if not raw or raw.startswith("#"):
            continue
        parsed = _sample(raw, time_ms)
        if isinstance(parsed, str):
            out.rejects.append((line.number, parsed, line.data))
        else:
            out.series.append(parsed)
    return out


def _sample(raw: str, time_ms: int) -> Series | str:
    head = _HEAD.match(raw)
    if head is None:
        return "not a sample line (name{labels} value)"
    labels = {"__name__": head.group(1)}
    i = head.end()
    if head.group(2):
        while not raw.startswith("}", i):
            label = _LABEL.match(raw, i)
            if label is None:
                return f'a label that is not name="value" at column {i + 1}'
            key = label.group(1)
            if key in labels:
                return f"label {key!r} twice"
            if len(labels) > MAX_LABELS_PER_SERIES:
                return f"more than {MAX_LABELS_PER_SERIES} labels"
            labels[key] = _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), label.group(2))
            i = label.end()
        i += 1
    tail = _TAIL.fullmatch(raw, i)
    if tail is None or not _FLOAT.fullmatch(tail.group(1)):
        return "no value after the labels (a float, NaN or +Inf)"
    stamp = int(tail.group(2)) if tail.group(2) else time_ms
    return Series(labels, [(float(tail.group(1)), stamp)])
