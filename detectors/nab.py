"""Numenta Anomaly Benchmark (NAB) scoring, reproducing the rules of numenta/NAB.

The rules follow NAB's own code (``nab/sweeper.py``, ``nab/scorer.py``, ``nab/optimizer.py``,
``nab/runner.py``, ``nab/util.py``, ``nab/labeler.py`` and ``config/profiles.json``):

* **Probation.** The first ``min(floor(0.15 * n), 750)`` rows of a file of ``n`` rows are not scored
  at all (``util.getProbationPeriod``; 750 is NAB's ``0.15 * 5000``). They still count as rows when
  positions inside windows are measured.
* **Windows.** A window ``[start, end]`` (inclusive) covers the rows from the first row stamped ``start``
  (row ``a``) to the first row stamped ``end`` (row ``r``); its width is ``w = r - a + 1``. Both
  timestamps must be rows of the file (NAB's labeler refuses labels that are not).
* **Scaled sigmoid.** ``S(x) = 2 * sigmoid(-5x) - 1`` (``= tanh(-2.5x)``), and ``-1`` for ``x > 3``.
* **Row value** (NAB's "sweep score"). A row ``i`` inside a window is worth
  ``tp * S(-(r - i + 1) / w) / S(-1)``: exactly ``tp`` on the window's first row, falling on its last
  row to ``tp * tanh(2.5 / w) / tanh(2.5)`` (0.25 * tp for a 10-row window, near 0 for wide ones).
  A row outside every window is worth ``fp * S(|i - r'| / (w' - 1))`` where ``r'``, ``w'`` are the
  last row and width of the closest *preceding* window: a false positive just after a window costs
  little, one more than three window-widths away costs the full ``fp``. A row before the file's first
  window costs ``-fp``.
* **Detections** are the scored rows with anomaly score ``>= threshold``.
* **Raw score** = sum over the windows of (the value of the window's best, i.e. earliest, detected
  row, or ``-fn`` if none is detected) + the sum of the values of the detections outside windows.
  Later detections in an already detected window add nothing. True negatives are worth 0 (the
  profiles' ``tnWeight`` is never used by NAB).
* **Threshold.** One threshold per profile for the whole corpus: NAB's sweeper sorts every scored row
  of the corpus by anomaly score and evaluates every distinct score as a threshold, plus ``1.1``
  (nothing detected); the best raw score wins, ties going to the highest threshold (Python's stable
  sort in ``optimizer.optimizeThreshold``). Here this is one ``argsort`` and a ``cumsum``.
* **Normalised score** = ``100 * (raw - null) / (perfect - null)`` (``runner.normalize``): ``null`` is the
  score of a detector that never fires (``-fn`` per window) and ``perfect`` the score of one that
  fires on the first row of every window (``tp`` per window). A window with no scored row (inside the
  probation) is ignored, as NAB's sweeper ignores it; NAB's labeler drops such windows anyway, so
  ``perfect`` equals the runner's ``tp * number of windows`` on NAB's labels. A window reaching into
  the probation counts from its first scored row.

Counts in :class:`NabResult` are NAB's (``ThresholdScore`` of ``sweeper.py``): ``tp``/``fn`` count
*rows* inside windows that are / are not detected, ``fp``/``tn`` rows outside windows; the number of
windows detected is reported separately.

Deliberate differences, all in cases where NAB itself fails or misbehaves: a window of a single row
followed by rows would make NAB divide by zero (the rows after it are scored here as far away, ``-fp``);
labels whose windows overlap, are unsorted or name timestamps absent from the file raise
``ValueError`` (NAB silently skips the windows after such a one, or refuses the labels); a threshold
below every score of a file is fine here (NAB's per-file scorer returns ``None``). A corpus without
windows has no normalised score (``nan``), as NAB would divide by zero.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = [
    "NO_DETECTION_THRESHOLD",
    "PROBATION_CAP",
    "PROBATION_PERCENT",
    "PROFILES",
    "NabFile",
    "NabResult",
    "Profile",
    "format_table",
    "load_corpus",
    "probation_length",
    "run_nab",
    "scaled_sigmoid",
    "score_at_threshold",
    "score_corpus",
    "sweep_thresholds",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

PROBATION_PERCENT = 0.15
PROBATION_CAP = 750  # NAB caps the probation at probationPercent * 5000 rows
NO_DETECTION_THRESHOLD = 1.1  # NAB's sweep starts above every score: nothing is detected


@dataclass(frozen=True)
class Profile:
    """An application profile: NAB's cost matrix (``config/profiles.json``)."""

    name: str
    tp: float
    fp: float
    fn: float
    tn: float


PROFILES: dict[str, Profile] = {
    "standard": Profile("standard", tp=1.0, fp=0.11, fn=1.0, tn=1.0),
    "reward_low_FP_rate": Profile("reward_low_FP_rate", tp=1.0, fp=0.22, fn=1.0, tn=1.0),
    "reward_low_FN_rate": Profile("reward_low_FN_rate", tp=1.0, fp=0.11, fn=2.0, tn=1.0),
}


@dataclass
class NabFile:
    """One series of the corpus with its labelled anomaly windows (inclusive timestamp pairs)."""

    name: str
    timestamps: npt.NDArray[np.datetime64]
    values: FloatArray
    windows: list[tuple[np.datetime64, np.datetime64]]


@dataclass
class NabResult:
    """Score of one detector on one profile. ``score`` is normalised (null 0, perfect 100).

    ``threshold`` is ``1.1`` when the best choice is to never fire. ``tp``/``fn``/``fp``/``tn`` are NAB's
    row counts (see the module docstring); ``windows_detected`` of ``windows`` had a detection.
    """

    profile: str
    threshold: float
    score: float
    raw: float
    tp: int
    fp: int
    fn: int
    tn: int = 0
    windows_detected: int = 0
    windows: int = 0
    null: float = 0.0
    perfect: float = 0.0


# ---------------------------------------------------------------------------------------------
# Loading


def _parse_timestamp(text: str) -> np.datetime64:
    return np.datetime64(text.strip(), "ns")


def load_corpus(data_dir: Path, windows_path: Path | None = None) -> list[NabFile]:
    """Read every ``<category>/<name>.csv`` under ``data_dir`` with its windows, sorted by name.

    ``windows_path`` defaults to ``data_dir.parent / "labels" / "combined_windows.json"``; files without an
    entry there have no windows. Raises ``ValueError`` if a window is not made of timestamps of its file.
    """
    data_dir = Path(data_dir)
    if windows_path is None:
        windows_path = data_dir.parent / "labels" / "combined_windows.json"
    with Path(windows_path).open(encoding="utf-8") as fh:
        labels: dict[str, list[list[str]]] = json.load(fh)

    corpus: list[NabFile] = []
    for path in data_dir.rglob("*.csv"):
        name = path.relative_to(data_dir).as_posix()
        frame = pd.read_csv(path)
        stamps = pd.to_datetime(frame["timestamp"].astype(str).str.strip(), format="ISO8601")
        timestamps = stamps.to_numpy(dtype="datetime64[ns]")
        values = frame["value"].to_numpy(dtype=np.float64)
        windows = [(_parse_timestamp(start), _parse_timestamp(end)) for start, end in labels.get(name, [])]
        nab_file = NabFile(name=name, timestamps=timestamps, values=values, windows=windows)
        _window_rows(nab_file)  # validate now rather than at scoring time
        corpus.append(nab_file)
    corpus.sort(key=lambda f: f.name)
    return corpus


# ---------------------------------------------------------------------------------------------
# NAB's primitives


def probation_length(n_rows: int) -> int:
    """Number of leading rows NAB leaves unscored: ``min(floor(0.15 * n), 750)``."""
    return min(math.floor(PROBATION_PERCENT * n_rows), PROBATION_CAP)


def scaled_sigmoid(x: npt.ArrayLike) -> FloatArray:
    """NAB's ``scaledSigmoid``: ``2 * sigmoid(-5x) - 1``, and ``-1`` beyond ``x > 3``."""
    arr = np.asarray(x, dtype=np.float64)
    clipped = np.minimum(arr, 3.0)  # exp(5 * 3) is far from overflowing; larger x are -1 anyway
    val = 2.0 * (1.0 / (1.0 + np.exp(5.0 * clipped))) - 1.0
    return np.where(arr > 3.0, -1.0, val)


_MAX_TP = float(scaled_sigmoid(-1.0))


def _window_rows(nab_file: NabFile) -> list[tuple[int, int]]:
    """Rows ``(a, r)`` of each window: first rows stamped with its start and its end."""
    if not nab_file.windows:
        return []
    stamps = np.asarray(nab_file.timestamps, dtype="datetime64[ns]")
    unique, first = np.unique(stamps, return_index=True)

    def row_of(t: np.datetime64) -> int:
        key = np.asarray(t).astype("datetime64[ns]")
        pos = int(np.searchsorted(unique, key))
        if pos == len(unique) or unique[pos] != key:
            raise ValueError(f"{nab_file.name}: window timestamp {t} is not a row of the file")
        return int(first[pos])

    rows: list[tuple[int, int]] = []
    prev_end = -1
    for start, end in nab_file.windows:
        a, r = row_of(start), row_of(end)
        if r < a:
            raise ValueError(f"{nab_file.name}: window [{start}, {end}] ends before it starts")
        if a <= prev_end:
            raise ValueError(f"{nab_file.name}: window [{start}, {end}] overlaps or precedes the previous one")
        rows.append((a, r))
        prev_end = r
    return rows


@dataclass
class _FileGeometry:
    """Profile-independent part of NAB's sweep for one file, restricted to the scored rows."""

    rows: IntArray  # scored row indices (all rows after the probation)
    window: IntArray  # window index in the file, -1 outside every window
    unweighted: FloatArray  # S(position) of each scored row
    n_windows: int


def _file_geometry(nab_file: NabFile) -> _FileGeometry:
    n = len(nab_file.timestamps)
    bounds = _window_rows(nab_file)
    idx = np.arange(n, dtype=np.int64)
    window = np.full(n, -1, dtype=np.int64)
    position = np.full(n, np.inf)  # rows before the first window: -1, as if infinitely far
    for k, (a, r) in enumerate(bounds):
        width = float(r - a + 1)
        window[a : r + 1] = k
        position[a : r + 1] = -(r - idx[a : r + 1] + 1) / width
        stop = bounds[k + 1][0] if k + 1 < len(bounds) else n
        if r - a >= 1:  # NAB divides by (width - 1): a one-row window would raise ZeroDivisionError
            position[r + 1 : stop] = np.abs(r - idx[r + 1 : stop]) / (width - 1.0)
    keep = idx >= probation_length(n)
    return _FileGeometry(
        rows=idx[keep], window=window[keep], unweighted=scaled_sigmoid(position)[keep], n_windows=len(bounds)
    )


# ---------------------------------------------------------------------------------------------
# Corpus-level scoring


@dataclass
class _Prepared:
    """The scored rows of the whole corpus, concatenated, with their anomaly scores."""

    scores: FloatArray
    group: IntArray  # corpus-wide window id, -1 outside windows
    unweighted: FloatArray
    n_groups: int  # windows of the corpus (including any lying wholly in a probation period)
    active: BoolArray  # per window: has at least one scored row (NAB ignores the others)


def _check_scores(nab_file: NabFile, scores: Mapping[str, npt.ArrayLike]) -> FloatArray:
    if nab_file.name not in scores:
        raise KeyError(f"no anomaly scores for {nab_file.name}")
    arr = np.asarray(scores[nab_file.name], dtype=np.float64)
    if arr.shape != (len(nab_file.timestamps),):
        raise ValueError(
            f"{nab_file.name}: {arr.shape[0] if arr.ndim else 0} scores for {len(nab_file.timestamps)} rows"
        )
    if not np.all(np.isfinite(arr)) or np.any(arr < 0.0) or np.any(arr > 1.0):
        raise ValueError(f"{nab_file.name}: anomaly scores must be finite and in [0, 1]")
    return arr


def _prepare(
    corpus: list[NabFile], scores: Mapping[str, npt.ArrayLike], geometries: list[_FileGeometry] | None = None
) -> _Prepared:
    if geometries is None:
        geometries = [_file_geometry(f) for f in corpus]
    parts_scores: list[FloatArray] = []
    parts_group: list[IntArray] = []
    parts_unweighted: list[FloatArray] = []
    offset = 0
    for nab_file, geo in zip(corpus, geometries, strict=True):
        arr = _check_scores(nab_file, scores)
        parts_scores.append(arr[geo.rows])
        parts_group.append(np.where(geo.window >= 0, geo.window + offset, -1))
        parts_unweighted.append(geo.unweighted)
        offset += geo.n_windows
    group = np.concatenate(parts_group) if parts_group else np.empty(0, dtype=np.int64)
    active = np.zeros(offset, dtype=np.bool_)
    active[group[group >= 0]] = True
    return _Prepared(
        scores=np.concatenate(parts_scores) if parts_scores else np.empty(0),
        group=group,
        unweighted=np.concatenate(parts_unweighted) if parts_unweighted else np.empty(0),
        n_groups=offset,
        active=active,
    )


def _row_values(prep: _Prepared, profile: Profile) -> FloatArray:
    """NAB's weighted sweep score of every scored row."""
    inside = prep.group >= 0
    return np.where(inside, prep.unweighted * profile.tp / _MAX_TP, prep.unweighted * profile.fp)


def _window_best(prep: _Prepared, values: FloatArray, mask: BoolArray) -> FloatArray:
    """Per window: best value among the rows in ``mask`` (``-inf`` if none)."""
    best = np.full(prep.n_groups, -np.inf)
    sel = mask & (prep.group >= 0)
    np.maximum.at(best, prep.group[sel], values[sel])
    return best


def _null_and_perfect(prep: _Prepared, values: FloatArray, profile: Profile) -> tuple[float, float]:
    n_active = int(prep.active.sum())
    null = -profile.fn * n_active
    best = _window_best(prep, values, np.ones(len(values), dtype=np.bool_))
    perfect = float(np.maximum(best[prep.active], -profile.fn).sum())
    return null, perfect


def _sweep(prep: _Prepared, values: FloatArray, profile: Profile) -> tuple[FloatArray, FloatArray]:
    """Raw score of every candidate threshold (NAB's ``calcScoreByThreshold``), highest threshold first."""
    base = -profile.fn * int(prep.active.sum())
    if len(prep.scores) == 0:
        return np.array([NO_DETECTION_THRESHOLD]), np.array([base])
    order = np.argsort(-prep.scores, kind="stable")
    s_sorted = prep.scores[order]
    g_sorted = prep.group[order]
    delta = values[order].copy()  # a detection outside windows adds its (negative) value

    inside = np.flatnonzero(g_sorted >= 0)
    if inside.size:
        # In sweep order, a window's part is max(-fn, best value detected so far): the change it brings
        # is a running maximum per window, computed exactly on integer keys (window id, rank of value).
        by_group = np.argsort(g_sorted[inside], kind="stable")  # keeps sweep order inside each window
        pos = inside[by_group]
        groups = g_sorted[pos]
        vals = values[order][pos]
        m = len(vals)
        rank_order = np.argsort(vals, kind="stable")
        rank = np.empty(m, dtype=np.int64)
        rank[rank_order] = np.arange(m, dtype=np.int64)
        running = np.maximum.accumulate(groups * m + rank)
        best = np.maximum(vals[rank_order[running - groups * m]], -profile.fn)
        prev = np.empty(m)
        prev[1:] = best[:-1]
        first_of_window = np.ones(m, dtype=np.bool_)
        first_of_window[1:] = groups[1:] != groups[:-1]
        prev[first_of_window] = -profile.fn
        delta[pos] = best - prev

    totals = base + np.cumsum(delta)
    last_of_score = np.ones(len(s_sorted), dtype=np.bool_)
    last_of_score[:-1] = s_sorted[1:] != s_sorted[:-1]
    thresholds = np.concatenate(([NO_DETECTION_THRESHOLD], s_sorted[last_of_score]))
    raws = np.concatenate(([base], totals[last_of_score]))
    return thresholds, raws


def _evaluate(prep: _Prepared, values: FloatArray, profile: Profile, threshold: float) -> NabResult:
    """Score the corpus at one threshold, as NAB's scoring step does (detections: score >= threshold)."""
    detected = prep.scores >= threshold
    inside = prep.group >= 0
    best = _window_best(prep, values, detected)
    window_parts = np.maximum(best[prep.active], -profile.fn)
    fp_part = values[detected & ~inside]
    raw = float(window_parts.sum() + fp_part.sum())
    null, perfect = _null_and_perfect(prep, values, profile)
    score = 100.0 * (raw - null) / (perfect - null) if perfect > null else math.nan
    return NabResult(
        profile=profile.name,
        threshold=float(threshold),
        score=score,
        raw=raw,
        tp=int(np.count_nonzero(detected & inside)),
        fp=int(np.count_nonzero(detected & ~inside)),
        fn=int(np.count_nonzero(~detected & inside)),
        tn=int(np.count_nonzero(~detected & ~inside)),
        windows_detected=int(np.count_nonzero(np.isfinite(best[prep.active]))),
        windows=int(prep.active.sum()),
        null=null,
        perfect=perfect,
    )


def _optimise(prep: _Prepared, profile: Profile) -> NabResult:
    values = _row_values(prep, profile)
    thresholds, raws = _sweep(prep, values, profile)
    best = int(np.argmax(raws))  # first maximum: the highest threshold among ties, as NAB's stable sort
    return _evaluate(prep, values, profile, float(thresholds[best]))


def sweep_thresholds(
    corpus: list[NabFile], scores: Mapping[str, npt.ArrayLike], profile: Profile
) -> tuple[FloatArray, FloatArray]:
    """Every candidate threshold (``1.1`` then each distinct score, descending) and its raw score."""
    prep = _prepare(corpus, scores)
    return _sweep(prep, _row_values(prep, profile), profile)


def score_at_threshold(
    corpus: list[NabFile], scores: Mapping[str, npt.ArrayLike], profile: Profile, threshold: float
) -> NabResult:
    """Score the corpus with a given threshold instead of the optimal one."""
    prep = _prepare(corpus, scores)
    return _evaluate(prep, _row_values(prep, profile), profile, threshold)


def score_corpus(corpus: list[NabFile], scores: Mapping[str, npt.ArrayLike], profile: Profile) -> NabResult:
    """Choose the corpus-wide threshold maximising the raw score, and report the score there.

    ``scores`` maps each file's name to one anomaly score in [0, 1] per row of the file.
    """
    return _optimise(_prepare(corpus, scores), profile)


def run_nab(corpus: list[NabFile], score_file: Callable[[NabFile], npt.ArrayLike]) -> dict[str, NabResult]:
    """Run ``score_file`` once on every file and score the result on every profile of :data:`PROFILES`."""
    scores = {f.name: np.asarray(score_file(f), dtype=np.float64) for f in corpus}
    prep = _prepare(corpus, scores)
    return {name: _optimise(prep, profile) for name, profile in PROFILES.items()}


def format_table(results: dict[str, NabResult]) -> str:
    """A plain-text table of results, one line per profile."""
    header = (
        f"{'profile':<20} {'score':>8} {'raw':>10} {'threshold':>10} {'windows':>9} {'TP rows':>8} {'FP rows':>8} "
        f"{'FN rows':>8}"
    )
    lines = [header, "-" * len(header)]
    for res in results.values():
        found = f"{res.windows_detected}/{res.windows}"
        lines.append(
            f"{res.profile:<20} {res.score:>8.2f} {res.raw:>10.3f} {res.threshold:>10.4f} {found:>9} {res.tp:>8d} "
            f"{res.fp:>8d} {res.fn:>8d}"
        )
    return "\n".join(lines)
