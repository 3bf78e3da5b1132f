"""Encode frames as line protocol, the way Telegraf's serializer writes it.

Whole columns are formatted at once with Arrow kernels (number-to-text, escaping, joining), so
the generator can emit a 100,000-GPU tick without a per-value Python loop.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from ingest.frames import Frame
from vocab.catalog import FieldType


class EncodeError(ValueError):
    """A frame that line protocol cannot represent (a newline in a key, a row with no field)."""


def _escape(values: pa.Array, specials: str) -> pa.Array:
    out = pc.replace_substring(values, "\\", "\\\\")
    for ch in specials:
        out = pc.replace_substring(out, ch, "\\" + ch)
    return out


def _check_no_newline(values: pa.Array, what: str) -> None:
    if pc.any(pc.match_substring_regex(values, "[\\n\\r]")).as_py():
        raise EncodeError(f"{what} contains a newline, which line protocol cannot carry")


def _escape_key(key: str, what: str, specials: str = ",= ") -> str:
    if not key or "\n" in key or "\r" in key:
        raise EncodeError(f"{what} {key!r} is empty or contains a newline")
    out = key.replace("\\", "\\\\")
    for ch in specials:
        out = out.replace(ch, "\\" + ch)
    return out


def _field_text(ftype: FieldType, values: np.ndarray) -> pa.Array:
    if ftype == FieldType.FLOAT:
        if not np.isfinite(values).all():
            raise EncodeError("non-finite float among present values")
        # Arrow prints the shortest text that parses back to the same double.
        return pc.cast(pa.array(values, pa.float64()), pa.string())
    if ftype == FieldType.INT:
        return pc.binary_join_element_wise(pc.cast(pa.array(values, pa.int64()), pa.string()), "i", "")
    if ftype == FieldType.UINT:
        return pc.binary_join_element_wise(pc.cast(pa.array(values, pa.uint64()), pa.string()), "u", "")
    if ftype == FieldType.BOOL:
        return pc.if_else(pa.array(values, pa.bool_()), "true", "false")
    text = pa.array(values, pa.string())
    _check_no_newline(text, "string field")
    return pc.binary_join_element_wise(
        '"', pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"'), '"', ""
    )


def encode_heads(measurement: str, tags: Mapping[str, NDArray[np.object_]], n: int) -> pa.Array:
    """`measurement,tag=value,...` for each row. Callers with fixed entities compute this once
    and reuse it every tick (see `encode_lines`)."""
    if measurement.startswith("#"):
        raise EncodeError("a measurement starting with '#' would read back as a comment")
    escaped = _escape_key(measurement, "measurement", ", ")
    # (pa.repeat, not np.full: numpy would strip a trailing NUL from the name)
    head = pa.repeat(pa.scalar(escaped, pa.string()), n)
    for key, column in tags.items():
        values = pa.array(column, pa.string())
        _check_no_newline(values, f"tag {key!r}")
        pair = pc.binary_join_element_wise("," + _escape_key(key, "tag key") + "=", _escape(values, ",= "), "")
        # an empty tag value means the row lacks the tag
        head = pc.binary_join_element_wise(head, pc.if_else(pc.equal(values, ""), "", pair), "")
    return head


def encode_lines(head: pa.Array, frame: Frame) -> pa.Array:
    """Whole lines (without newline) from precomputed heads and the frame's fields and times."""
    n = len(frame)
    pairs: list[pa.Array] = []
    for key, col in frame.fields.items():
        present = np.asarray(col.present)
        if present.all():
            text = _field_text(col.type, col.values)
        elif present.any():
            formatted = _field_text(col.type, col.values[present])
            # spread the formatted values back to their rows; absent rows become nulls
            slot = np.where(present, np.cumsum(present) - 1, 0)
            text = formatted.take(pa.array(slot, mask=~present))
        else:
            continue
        pairs.append(
            pc.binary_join_element_wise(_escape_key(key, "field key") + "=", text, "", null_handling="emit_null")
        )
    has_field = np.zeros(n, dtype=np.bool_)
    for col in frame.fields.values():
        has_field |= col.present
    if not has_field.all():
        # (checked first also because Arrow's join drops rows that are null in every input)
        raise EncodeError(f"row {int(np.argmin(has_field))} of {frame.measurement!r} has no field values")
    fields = pc.binary_join_element_wise(*pairs, ",", null_handling="skip")
    stamps = pc.cast(pa.array(frame.time_ns, pa.int64()), pa.string())
    return pc.binary_join_element_wise(head, fields, stamps, " ")


def lines_to_bytes(lines: pa.Array) -> bytes:
    """Newline-terminated lines as one bytes object, without a Python object per line: join
    each line with its newline in Arrow, then take the values buffer as it is."""
    if len(lines) == 0:
        return b""
    terminated = pc.binary_join_element_wise(lines, "\n", "").cast(pa.large_string())
    offsets = np.frombuffer(terminated.buffers()[1], dtype=np.int64)[
        terminated.offset : terminated.offset + len(terminated) + 1
    ]
    data = terminated.buffers()[2]
    raw: bytes = data.to_pybytes()
    return raw[int(offsets[0]) : int(offsets[-1])]


def encode_frame(frame: Frame) -> list[bytes]:
    """One line per row, in row order."""
    if len(frame) == 0:
        return []
    lines = encode_lines(encode_heads(frame.measurement, frame.tags, len(frame)), frame)
    return lines_to_bytes(lines).splitlines()


def encode(frames: dict[str, Frame] | list[Frame]) -> bytes:
    """Frames as newline-terminated line protocol."""
    items = frames.values() if isinstance(frames, dict) else frames
    return b"".join(
        lines_to_bytes(encode_lines(encode_heads(f.measurement, f.tags, len(f)), f)) for f in items if len(f)
    )
