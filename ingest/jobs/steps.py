"""The training step signal: one line per rank per step, as the job writes it.

The documented metric (docs/collectors.md, "The training step"), InfluxDB line protocol, written
by ingest/jobs/aiops_step.py (or anything that writes the same line):

    train_step,job=<job id>,rank=<rank>,node=<host>,gpu=<index> step=<n>i,duration_s=<s>,phase="<phase>" <ns>

- tags: `job` (the scheduler's job id), `rank` (the global rank), `node` (the host, as the
  topology names it), `gpu` (NVML's index of the rank's GPU, dcgm-exporter's `gpu` label; left
  out where the writer does not know it); all but `rank` may be missing;
- fields: `step` (integer, the loop's step counter), `duration_s` (float, the step's wall time),
  `phase` (string: the loop's own word, "train", "eval", "checkpoint"...);
- time: when the step ended (ns): the job's progress, and never ahead of when it was written.

And the shape of a loop's own log (../shared/datasets/real-gpu/h200/train-steps.csv, a real H200
loop): CSV with a header `t,phase,step_s` (the step's start, Unix seconds; its phase; its
duration, s), optionally `step`; one file per rank, so the job, rank, node and GPU are the
caller's. Its rows become the same records, the time the step's end (t + step_s) and the step
its row number where there is no `step` column.

RefusedError, one dead letter per line or row: a measurement other than train_step, a line the
line-protocol grammar refuses, a tag outside the id grammar (job, node), a rank or GPU index
outside the bounds, a step that is negative, a duration that is negative, not finite or over a
day, a phase that is not a short word, a time outside 2000..2100; a file over MAX_FILE_BYTES.
"""

from __future__ import annotations

import csv
import io
import math
import re
from typing import Any

import numpy as np

from ingest.jobs._common import INT64_MAX, MAX_RANKS, Letters, Read, RefusedError, integer, node, number, text, time_ns
from ingest.jobs._common import job as checked_job
from ingest.jobs.records import Step
from ingest.lineprotocol import decode
from vocab.bounds import MAX_GPU_INDEX
from vocab.ids import gpu_id

STAGE = "train_step"
MEASUREMENT = "train_step"
# a step line is ~150 bytes: a million steps of a rank, with room
MAX_FILE_BYTES = 256 << 20
# A step that took a day is a stalled loop's first step after it resumed, or a clock error: kept
# out of a step-time baseline either way, and refused here.
MAX_STEP_S = 86_400.0
_PHASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_PHASE_WHAT = "a phase word (letters, digits, _ . : -, at most 64)"


def read_step_lines(data: bytes) -> Read[Step]:
    """The train_step lines of a line-protocol batch (other measurements are refused)."""
    out: Read[Step] = Read()
    letters = Letters(STAGE, out)
    if len(data) > MAX_FILE_BYTES:
        letters.add(f"{len(data):,} bytes, over the {MAX_FILE_BYTES:,} one read may be", data)
        letters.close()
        return out
    decoded = decode(data)
    for reject in decoded.rejects:
        letters.add(f"line {reject.line_no + 1}: {reject.reason}", reject.line)
    for name, frame in decoded.frames.items():
        rows = decoded.line_no[name]
        if name != MEASUREMENT:
            for r in rows:
                letters.add(f"line {int(r) + 1}: measurement {name!r} is not {MEASUREMENT!r}", decoded.line(int(r)))
            continue
        tags = {key: frame.tag(key) for key in ("job", "rank", "node", "gpu")}
        fields = {key: frame.fields.get(key) for key in ("step", "duration_s", "phase")}
        for i in range(len(frame)):
            row = {key: (str(col[i]) or None) for key, col in tags.items()}
            values = {
                key: (col.values[i] if col is not None and col.present[i] else None) for key, col in fields.items()
            }
            try:
                out.records.append(_step(int(frame.time_ns[i]), row, values))
            except RefusedError as exc:
                letters.add(f"line {int(rows[i]) + 1}: {exc}", decoded.line(int(rows[i])))
    out.counts["lines"] = decoded.lines
    letters.close()
    return out


def read_step_csv(
    data: bytes, *, job: str | None = None, rank: int | None = None, node: str | None = None, gpu: int | None = None
) -> Read[Step]:
    """A loop's step log shaped like train-steps.csv (`t,phase,step_s`, optionally `step`): one
    rank's, whose job, rank, node and GPU index the caller names."""
    out: Read[Step] = Read()
    letters = Letters(STAGE, out)
    try:
        if len(data) > MAX_FILE_BYTES:
            raise RefusedError(f"{len(data):,} bytes, over the {MAX_FILE_BYTES:,} a step log may be")
        tags = {
            "job": job,
            "rank": None if rank is None else str(rank),
            "node": node,
            "gpu": None if gpu is None else str(gpu),
        }
        _step(0, tags, {"step": 0, "duration_s": 0.0, "phase": "train"}, check_time=False)  # the caller's ids
        rows = csv.reader(io.StringIO(data.decode("utf-8")))
        header = next(rows, None)
        if header is None or not {"t", "phase", "step_s"} <= set(header) or len(set(header)) != len(header):
            raise RefusedError(
                f"header {header!r}: expected the columns t, phase, step_s (and optionally step), each once"
            )
    except (RefusedError, UnicodeDecodeError) as exc:
        letters.add(str(exc) if isinstance(exc, RefusedError) else f"not UTF-8 (byte {exc.start})", data)
        letters.close()
        return out
    col = {name: i for i, name in enumerate(header)}
    for n, row in enumerate(rows):
        raw = ",".join(row).encode("utf-8", "backslashreplace")
        try:
            if len(row) != len(header):
                raise RefusedError(f"{len(row)} columns, the header has {len(header)}")
            start = _float(row[col["t"]], "t")
            duration = _float(row[col["step_s"]], "step_s")
            step = _int(row[col["step"]], "step") if "step" in col else n
            end_s = start + duration
            end_ns = round(end_s * 1e9) if abs(end_s) < 1e11 else -1  # past 5138 AD: refused as no time
            out.records.append(_step(end_ns, tags, {"step": step, "duration_s": duration, "phase": row[col["phase"]]}))
        except RefusedError as exc:
            letters.add(f"row {n + 2}: {exc}", raw)
    out.counts["rows"] = out.counts["refused"] + len(out.records)
    letters.close()
    return out


def _step(t_ns: int, tags: dict[str, str | None], values: dict[str, Any], check_time: bool = True) -> Step:
    step, duration, phase = values["step"], values["duration_s"], values["phase"]
    if step is None or duration is None or phase is None:
        missing = [k for k in ("step", "duration_s", "phase") if values[k] is None]
        raise RefusedError(f"no {', '.join(missing)}")
    if isinstance(step, float) and step.is_integer():
        step = int(step)  # `step=12` without the `i`: a float that is a whole number
    host = None if tags["node"] is None else node(tags["node"], "node")
    index = None if tags["gpu"] is None else integer(_int(tags["gpu"], "gpu"), "gpu", 0, MAX_GPU_INDEX)
    if index is not None and host is None:
        raise RefusedError("gpu without node: a GPU index names a GPU only on its node")
    return Step(
        time_ns=time_ns(t_ns, "time") if check_time else t_ns,
        job=checked_job(tags["job"], "job"),
        rank=None if tags["rank"] is None else integer(_int(tags["rank"], "rank"), "rank", 0, MAX_RANKS - 1),
        node=host,
        gpu=None if index is None or host is None else gpu_id(host, index),
        step=integer(_py(step), "step", 0, INT64_MAX),
        duration_s=number(_py(duration), "duration_s", 0.0, MAX_STEP_S),
        phase=text(phase, "phase", _PHASE, _PHASE_WHAT),
    )


def _py(value: Any) -> Any:
    """A numpy scalar from a decoded column as the Python number it is."""
    return value.item() if isinstance(value, np.generic) else value


def _int(value: str, where: str) -> int:
    value = value.strip()
    if not re.fullmatch(r"-?\d{1,19}", value):
        raise RefusedError(f"{where}: {value[:40]!r} is not an integer")
    return int(value)


def _float(value: str, where: str) -> float:
    try:
        result = float(value)
    except ValueError:
        raise RefusedError(f"{where}: {value[:40]!r} is not a number") from None
    if not math.isfinite(result):
        raise RefusedError(f"{where}: {value[:40]!r} is not a finite number")
    return result
