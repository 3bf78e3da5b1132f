"""Encode frames as line protocol, byte for byte as InfluxData's Go encoder writes it.

Whole columns are formatted at once with Arrow kernels (number-to-text, escaping, joining), so
the generator can emit a 100,000-GPU tick without a per-value Python loop.

Like the reference encoder, names escape only the characters that would end them (a backslash is
written as is, since the decoder reads `\\` outside a string as two backslashes), so a name may
not end in a backslash, nor hold a control character; a string escapes backslash, quote, newline,
carriage return and tab; a float is Go's shortest `%g`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from ingest.frames import Frame
from vocab.catalog import FieldType

_MEASUREMENT_SPECIALS = ", "
_NAME_SPECIALS = ",= "  # tag keys, tag values, field keys
# A control character would end the name when read back; a trailing backslash would escape the
# separator after it. (Both Arrow's RE2 and Python's re read this pattern the same way.)
_UNENCODABLE = r"[\x00-\x1f\x7f]|\\$"
_UNENCODABLE_RE = re.compile(_UNENCODABLE)
_STRING_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))


class EncodeError(ValueError):
    """A frame that line protocol cannot represent (a control character in a name, a row with no field)."""


def _escape(values: pa.Array, specials: str) -> pa.Array:
    out = values
    for ch in specials:
        out = pc.replace_substring(out, ch, "\\" + ch)
    return out


def _check_encodable(values: pa.Array, what: str) -> None:
    if pc.any(pc.match_substring_regex(values, _UNENCODABLE)).as_py():
        raise EncodeError(f"{what} has a control character or a trailing backslash, which line protocol cannot carry")


def _escape_key(key: str, what: str, specials: str = _NAME_SPECIALS) -> str:
    if not key or _UNENCODABLE_RE.search(key):
        raise EncodeError(f"{what} {key!r} is empty, has a control character or ends in a backslash")
    for ch in specials:
        key = key.replace(ch, "\\" + ch)
    return key


def _float_text(values: NDArray[np.float64]) -> pa.Array:
    if not np.isfinite(values).all():
        raise EncodeError("non-finite float among present values")
    # Arrow prints the shortest text that parses back to the same double, in positional form
    # wherever Go's %g does, except for large and tiny magnitudes, which are rare: redo those.
    text = pc.cast(pa.array(values, pa.float64()), pa.string())
    magnitude = np.abs(values)
    exponent_form = (magnitude >= 1e6) | ((magnitude < 1e-4) & (magnitude > 0))
    if exponent_form.any():
        rewritten = pa.array([_go_exponent_form(float(v)) for v in values[exponent_form]], pa.string())
        text = pc.replace_with_mask(text, pa.array(exponent_form), rewritten)
    return text


def _go_exponent_form(value: float) -> str:
    """Go's strconv.FormatFloat(value, 'g', -1, 64) for a value it writes with an exponent:
    the shortest round-trip digits as d.ddd, then e, a sign and at least two exponent digits."""
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)  # finite
    power = len(digits) - 1 + exponent
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"


def _string_text(values: NDArray[np.object_]) -> pa.Array:
    text = pa.array(values, pa.string())
    for raw, escaped in _STRING_ESCAPES:
        text = pc.replace_substring(text, raw, escaped)
    return pc.binary_join_element_wise('"', text, '"', "")


def _field_text(ftype: FieldType, values: np.ndarray) -> pa.Array:
    if ftype == FieldType.FLOAT:
        return _float_text(values)
    if ftype == FieldType.INT:
        return pc.binary_join_element_wise(pc.cast(pa.array(values, pa.int64()), pa.string()), "i", "")
    if ftype == FieldType.UINT:
        return pc.binary_join_element_wise(pc.cast(pa.array(values, pa.uint64()), pa.string()), "u", "")
    if ftype == FieldType.BOOL:
        return pc.if_else(pa.array(values, pa.bool_()), "true", "false")
    return _string_text(values)


def encode_heads(measurement: str, tags: Mapping[str, NDArray[np.object_]], n: int) -> pa.Array:
    """`measurement,tag=value,...` for each row. Callers with fixed entities compute this once
    and reuse it every tick (see `encode_lines`)."""
    if measurement.startswith("#"):
        raise EncodeError("a measurement starting with '#' would read back as a comment")
    escaped = _escape_key(measurement, "measurement", _MEASUREMENT_SPECIALS)
    head = pa.repeat(pa.scalar(escaped, pa.string()), n)
    for key, column in tags.items():
        values = pa.array(column, pa.string())
        _check_encodable(values, f"tag {key!r}")
        pair = pc.binary_join_element_wise("," + _escape_key(key, "tag key") + "=", _escape(values, _NAME_SPECIALS), "")
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
