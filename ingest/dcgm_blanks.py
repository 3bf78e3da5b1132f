"""DCGM's "no value" sentinels: the one place that decides whether a value is one.

DCGM reports a field it has no reading for as a value at the top of the field's type, and
dcgm-exporter prints it as it is (a real exposition: `DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
9223372036854775794`, DCGM_INT64_NOT_SUPPORTED). The families, from DCGM's dcgm_structs.h
(github.com/NVIDIA/DCGM, dcgmlib/dcgm_structs.h, "DCGM_INT32_BLANK" and the lines after it):

    #define DCGM_INT32_BLANK            0x7ffffff0
    #define DCGM_INT64_BLANK            0x7ffffffffffffff0
    #define DCGM_FP64_BLANK             140737488355328.0
    #define DCGM_STR_BLANK              "<<<NULL>>>"
    #define DCGM_*_NOT_FOUND            (DCGM_*_BLANK + 1)      DCGM_STR_NOT_FOUND  "<<<NOT_FOUND>>>"
    #define DCGM_*_NOT_SUPPORTED        (DCGM_*_BLANK + 2)      DCGM_STR_NOT_SUPPORTED "<<<NOT_SUPPORTED>>>"
    #define DCGM_*_NOT_PERMISSIONED     (DCGM_*_BLANK + 3)      DCGM_STR_NOT_PERMISSIONED "<<<NOT_PERM>>>"
    #define DCGM_INT32_IS_BLANK(val)    (((val) >= DCGM_INT32_BLANK) ? 1 : 0)   (and INT64, FP64 alike)
    #define DCGM_STR_IS_BLANK(val)      (val == strstr(val, "<<<") && strstr(val, ">>>"))

Two rules, one per what is known about the field:
- a field whose width is known (the catalog's fields: float -> fp64, 64-bit counters -> int64,
  other integers -> int32) is blank at or above its family's BLANK, as DCGM's IS_BLANK macros say;
- a field whose width is not known (a DCGM field the catalog does not list) is blank only when the
  value is a member of a family: the int64 family (anything at or above 0x7ffffffffffffff0; as a
  float every member is 2**63, above any real int64), or exactly one of the 16 values 0x7ffffff0 ..
  0x7fffffff or 140737488355328.0 .. +15.0. The `>=` rule would drop a real 64-bit count above
  2**31 (energy in mJ, bytes) of a field whose width is not known; an exact member of those 16 is
  not a count anyone will see.
Every door (line protocol via ingest/validate.py, Prometheus remote write via ingest/remote_write.py)
asks this module, so a blank is dropped the same way whichever collector carried it.
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np
from numpy.typing import NDArray

from vocab.catalog import DCGM_FP64_BLANK, DCGM_INT32_BLANK, DCGM_INT64_BLANK, FieldType, Metric, MetricKind

# DCGM_*_BLANK + offset -> the header's name for it (dcgm_structs.h)
_OFFSET_NAMES = {0: "BLANK", 1: "NOT_FOUND", 2: "NOT_SUPPORTED", 3: "NOT_PERMISSIONED"}
# the header's string family; DCGM_STR_IS_BLANK takes any "<<<...>>>"
DCGM_STR_BLANKS = ("<<<NULL>>>", "<<<NOT_FOUND>>>", "<<<NOT_SUPPORTED>>>", "<<<NOT_PERM>>>")
# the int32 and fp64 families span BLANK .. BLANK + 15 (0x7ffffff0 .. 0x7fffffff: the top 16
# int32s; the header names the first four); the exact-member rule takes the same 16 of fp64
FAMILY_SPAN = 16
# every member of the int64 family rounds to 2**63 as a float (Prometheus's samples are floats)
_INT64_AS_FLOAT = float(DCGM_INT64_BLANK)


class Width(Enum):
    INT32 = "INT32"
    INT64 = "INT64"
    FP64 = "FP64"


def width_of(metric: Metric) -> Width | None:
    """The DCGM type of a catalogued field (None: not a number, no sentinel applies)."""
    if metric.type == FieldType.FLOAT:
        return Width.FP64
    if metric.type in (FieldType.INT, FieldType.UINT):
        return Width.INT64 if metric.kind is MetricKind.COUNTER else Width.INT32
    return None


def _name(width: Width, base: float, value: float) -> str:
    offset = value - base
    part = _OFFSET_NAMES.get(int(offset), "BLANK") if 0 <= offset < FAMILY_SPAN else "BLANK"
    return f"DCGM_{width.value}_{part}"


def blank_name(value: float, width: Width | None) -> str | None:
    """The sentinel `value` is (e.g. "DCGM_INT64_NOT_SUPPORTED"), or None for a reading.
    `width` None: the field's type is not known, only exact family members are blanks."""
    if math.isnan(value):  # NaN is not DCGM's (the doors judge it as not finite)
        return None
    if value >= _INT64_AS_FLOAT or (width is Width.INT64 and value >= DCGM_INT64_BLANK):
        return _name(Width.INT64, DCGM_INT64_BLANK, value) if value < _INT64_AS_FLOAT else "DCGM_INT64_BLANK"
    if width is None:
        for w, base in ((Width.INT32, float(DCGM_INT32_BLANK)), (Width.FP64, DCGM_FP64_BLANK)):
            if base <= value < base + FAMILY_SPAN and float(value).is_integer():
                return _name(w, base, value)
        return None
    top = {Width.INT32: float(DCGM_INT32_BLANK), Width.FP64: DCGM_FP64_BLANK}.get(width)
    if top is not None and value >= top:
        return _name(width, top, value)
    return None


def blank_mask(values: NDArray[np.generic], width: Width | None) -> NDArray[np.bool_]:
    """`blank_name(v, width) is not None` for every value of a numeric column, vectorised."""
    v = np.asarray(values)
    if v.dtype.kind == "f":
        at_or_above = {Width.FP64: DCGM_FP64_BLANK, Width.INT32: float(DCGM_INT32_BLANK)}
        int64 = v >= _INT64_AS_FLOAT
        if width is Width.INT64:
            return v >= float(DCGM_INT64_BLANK)
        if width is not None:
            return (v >= at_or_above[width]) | int64
        whole = np.equal(np.floor(v), v)
        return (
            int64
            | (whole & (v >= DCGM_INT32_BLANK) & (v < DCGM_INT32_BLANK + FAMILY_SPAN))
            | (whole & (v >= DCGM_FP64_BLANK) & (v < DCGM_FP64_BLANK + FAMILY_SPAN))
        )
    # integers (int64 or uint64 columns): exact comparisons, no float rounding
    if width is Width.INT64 or width is None:
        int64 = v >= DCGM_INT64_BLANK
        if width is Width.INT64:
            return np.asarray(int64)
        return np.asarray(int64 | ((v >= DCGM_INT32_BLANK) & (v < DCGM_INT32_BLANK + FAMILY_SPAN)))
    if width is Width.FP64:
        return np.asarray(v >= DCGM_FP64_BLANK)
    return np.asarray(v >= DCGM_INT32_BLANK)


def is_string_blank(value: str) -> bool:
    """DCGM_STR_IS_BLANK: a string that starts with "<<<" and holds ">>>"."""
    return value.startswith("<<<") and ">>>" in value
