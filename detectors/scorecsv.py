"""Score a CSV of one entity's metrics with the series detector, row by row, strictly online.

Input: a header with a ``timestamp`` column and one or more numeric columns, one row per sample.
Each numeric column is its own series (`detectors.series`: row t sees rows <= t only, so the
whole file goes through one compiled call), and a row's score is the largest of its columns'. Output: ``timestamp,
anomaly_score`` with one row per input row, in input order, the timestamp written exactly as read.

Row order drives the statistics: repeated timestamps are scored in order and gaps in time are
allowed (NAB files are regular). Missing values (empty, ``nan``, ``NA``, ``null``) are skipped by
their column; a row with nothing scoreable, or read while the detector is still warming up,
scores 0. Malformed input raises :class:`ScoreCsvError` with a one-line message.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd

from detectors.base import FloatArray
from detectors.series import SeriesConfig, SeriesDetector

__all__ = ["ScoreCsvError", "counter_increases", "score_columns", "score_csv", "score_frame"]

TIMESTAMP = "timestamp"
MISSING = frozenset({"", "nan", "na", "n/a", "null", "none"})
DECIMALS = 6


class ScoreCsvError(ValueError):
    """The input cannot be scored; the message says why in one line."""


def score_csv(in_path: Path, out_path: Path, config: SeriesConfig | None = None) -> int:
    """Score `in_path` into `out_path` (``timestamp,anomaly_score``); returns the rows written."""
    frame = _read_csv(Path(in_path))
    scores = score_frame(frame, config)
    with Path(out_path).open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([TIMESTAMP, "anomaly_score"])
        writer.writerows(zip(frame[TIMESTAMP].astype(str), (f"{s:.{DECIMALS}f}" for s in scores), strict=True))
    return len(frame)


def score_frame(df: pd.DataFrame, config: SeriesConfig | None = None) -> FloatArray:
    """One score in [0, 1] per row of `df` (a ``timestamp`` column and numeric columns)."""
    columns = [str(c).strip() for c in df.columns]
    if len(set(columns)) != len(columns):
        raise ScoreCsvError(f"duplicate column names in header: {columns}")
    if TIMESTAMP not in columns:
        raise ScoreCsvError(f"no '{TIMESTAMP}' column (columns: {', '.join(columns) or 'none'})")
    df = df.set_axis(columns, axis=1)
    metrics = [c for c in columns if c != TIMESTAMP]
    if not metrics:
        raise ScoreCsvError(f"no numeric column besides '{TIMESTAMP}'")
    if len(df) == 0:
        raise ScoreCsvError("no data rows (header only)")
    seconds = _parse_timestamps(df[TIMESTAMP])
    values = np.column_stack([_parse_numbers(df[c], c) for c in metrics])
    per_column = score_columns(values, config, seconds)
    out: FloatArray = np.round(per_column.max(axis=1), DECIMALS)
    return out


def score_columns(
    values: FloatArray, config: SeriesConfig | None = None, seconds: FloatArray | None = None
) -> FloatArray:
    """Scores of a (rows, columns) array, each column its own series; ``seconds`` (one per row,
    since the epoch) place rows in the day for the daily profile, which is off without them.

    NaN values are skipped; their score, and any score the detector withholds, is 0. Columns of
    different lengths can be scored together by padding them with NaN at the end. A column that
    is a counter is scored on its increases (`counter_increases`).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"expected a (rows, columns) array, got shape {values.shape}")
    config = config or SeriesConfig()
    values = counter_increases(values, config.judge_after)
    out = SeriesDetector(values.shape[1], config).score_rows(values, seconds)
    return np.nan_to_num(np.clip(out, 0.0, 1.0), nan=0.0)


def counter_increases(values: FloatArray, decide_after: int) -> FloatArray:
    """Columns that are counters replaced by their per-row increases; other columns as they are.

    A counter (bytes received, packets, errors since boot) only grows, and what matters is how
    fast: its level says nothing but how long since the last restart, and a restart's drop to zero
    is not a fault. A column counts as one when its first ``decide_after`` values never fall and
    at least half of their steps rise. The test sees those rows only, and the detector scores
    nothing before its ``judge_after`` rows, so a prefix still scores the same as the whole file.
    Then each row's increase is the change from the value before, or, after a fall (a reset, as
    Prometheus's ``rate`` reads one), the new value itself.
    """
    out = values.copy()
    for j in range(values.shape[1]):
        column = values[:, j]
        valid = np.flatnonzero(~np.isnan(column))
        if len(valid) <= decide_after:
            continue
        first = column[valid[: decide_after + 1]]
        steps = np.diff(first)
        if (steps < 0.0).any() or (steps > 0.0).mean() < 0.5:
            continue
        kept = column[valid]
        increase = np.empty(len(kept))
        increase[0] = np.nan  # no increase before the first value
        increase[1:] = np.diff(kept)
        reset = increase[1:] < 0.0
        increase[1:][reset] = kept[1:][reset]
        out[:, j] = np.nan
        out[valid, j] = increase
    return out


# -- reading --------------------------------------------------------------------------------------


def _read_csv(path: Path) -> pd.DataFrame:
    """Every field as read (strings), rows checked against the header's width."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None or not any(h.strip() for h in header):
                raise ScoreCsvError(f"{path.name}: empty file (no header)")
            rows: list[list[str]] = []
            for row in reader:
                if not row:  # blank line
                    continue
                if len(row) != len(header):
                    raise ScoreCsvError(
                        f"{path.name}: row {len(rows) + 1} (line {reader.line_num}) has {len(row)} fields, "
                        f"the header has {len(header)}"
                    )
                rows.append(row)
    except UnicodeDecodeError as e:
        raise ScoreCsvError(f"{path.name}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except csv.Error as e:
        raise ScoreCsvError(f"{path.name}: malformed CSV: {e}") from e
    if not rows:
        raise ScoreCsvError(f"{path.name}: no data rows (header only)")
    return pd.DataFrame(rows, columns=[h.strip() for h in header], dtype=object)


def _parse_timestamps(column: pd.Series) -> FloatArray:
    """Seconds since the epoch of every timestamp, which must all parse (a time without a zone is
    taken as UTC: only its time of day matters, for the daily profile; the statistics use row order)."""
    text = column.astype(str).str.strip()
    parsed = pd.to_datetime(text, format="ISO8601", errors="coerce", utc=True)
    if parsed.isna().any():
        parsed = pd.to_datetime(text, format="mixed", errors="coerce", utc=True)
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if len(bad):
        row = int(bad[0])
        raise ScoreCsvError(f"unparseable timestamp {column.iloc[row]!r} at row {row + 1}")
    nanoseconds = parsed.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(dtype="datetime64[ns]").astype(np.int64)
    seconds: FloatArray = nanoseconds / 1e9
    return seconds


def _parse_numbers(column: pd.Series, name: str) -> FloatArray:
    if pd.api.types.is_bool_dtype(column):
        raise ScoreCsvError(f"column '{name}' is boolean, not numeric")
    if pd.api.types.is_numeric_dtype(column):
        values = np.array(column, dtype=np.float64)
        missing = np.isnan(values)
    else:
        text = column.astype(str).str.strip()
        missing = (text.str.lower().isin(MISSING) | column.isna()).to_numpy()
        values = np.array(pd.to_numeric(text.where(~missing, None), errors="coerce"), dtype=np.float64)
    bad = np.flatnonzero((~np.isfinite(values)) & ~missing)
    if len(bad):
        row = int(bad[0])
        raise ScoreCsvError(f"column '{name}' has a non-numeric value {column.iloc[row]!r} at row {row + 1}")
    values[missing] = np.nan
    return values
