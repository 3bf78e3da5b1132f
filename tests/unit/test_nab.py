"""Tests of the NAB scorer (detectors/nab.py) on hand-made corpora, a line-by-line transcription of NAB's
sweeper, and the real subset in /work/shared/datasets/nab."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from detectors.nab import (
    NO_DETECTION_THRESHOLD,
    PROFILES,
    NabFile,
    NabResult,
    Profile,
    format_table,
    load_corpus,
    probation_length,
    run_nab,
    scaled_sigmoid,
    score_at_threshold,
    score_corpus,
    sweep_thresholds,
)

STANDARD = PROFILES["standard"]
START = np.datetime64("2024-01-01T00:00:00", "ns")
STEP = np.timedelta64(5, "m")
REAL_NAB = Path("/work/shared/datasets/nab")

Scores = dict[str, npt.NDArray[np.float64]]


def tp_credit(row: int, a: int, r: int) -> float:
    """NAB's credit of a first detection at ``row`` in window rows [a, r], written with tanh."""
    width = r - a + 1
    return math.tanh(2.5 * (r - row + 1) / width) / math.tanh(2.5)


def fp_cost(row: int, a: int, r: int, fp: float = 0.11) -> float:
    """NAB's (negative) value of a false positive at ``row`` after the window [a, r]."""
    position = (row - r) / (r - a)
    return -fp if position > 3 else -fp * math.tanh(2.5 * position)


def make_file(name: str, n: int, windows: list[tuple[int, int]]) -> NabFile:
    ts = START + np.arange(n) * STEP
    return NabFile(
        name=name,
        timestamps=ts,
        values=np.zeros(n),
        windows=[(ts[a], ts[r]) for a, r in windows],
    )


def spikes(n: int, rows: Mapping[int, float]) -> npt.NDArray[np.float64]:
    out = np.zeros(n)
    for row, value in rows.items():
        out[row] = value
    return out


# One file of 100 rows: probation = 15 rows, one window on rows 40..49.
N, A, R = 100, 40, 49


@pytest.fixture
def single() -> list[NabFile]:
    return [make_file("cat/one.csv", N, [(A, R)])]


def window_starts(corpus: list[NabFile]) -> Scores:
    """A perfect detector: 1 on the first row of every window."""
    out: Scores = {}
    for f in corpus:
        s = np.zeros(len(f.timestamps))
        for start, _ in f.windows:
            s[int(np.flatnonzero(f.timestamps == start)[0])] = 1.0
        out[f.name] = s
    return out


# ---------------------------------------------------------------------------------------------
# Constants and primitives


def test_profiles_match_nab_config() -> None:
    expected = {
        "standard": Profile("standard", tp=1.0, fp=0.11, fn=1.0, tn=1.0),
        "reward_low_FP_rate": Profile("reward_low_FP_rate", tp=1.0, fp=0.22, fn=1.0, tn=1.0),
        "reward_low_FN_rate": Profile("reward_low_FN_rate", tp=1.0, fp=0.11, fn=2.0, tn=1.0),
    }
    assert expected == PROFILES


@pytest.mark.parametrize(("n", "expected"), [(20, 3), (100, 15), (1127, 169), (4032, 604), (5000, 750), (15902, 750)])
def test_probation_length(n: int, expected: int) -> None:
    assert probation_length(n) == expected


def test_scaled_sigmoid_reference_points() -> None:
    # values quoted in NAB's docstring
    got = scaled_sigmoid([-1.0, -0.5, 0.0, 1.0, 3.0, 3.0001, 50.0])
    assert got[:4] == pytest.approx([0.98661, 0.84828, 0.0, -0.98661], abs=1e-5)
    assert got[4] == pytest.approx(math.tanh(-7.5))
    assert list(got[5:]) == [-1.0, -1.0]


# ---------------------------------------------------------------------------------------------
# Hand-computed scores on one window


def test_detection_on_first_row_of_window_earns_full_credit(single: list[NabFile]) -> None:
    res = score_corpus(single, {"cat/one.csv": spikes(N, {A: 1.0})}, STANDARD)
    assert res.raw == pytest.approx(1.0, abs=1e-12)
    assert res.score == pytest.approx(100.0)
    assert res.threshold == 1.0
    assert (res.windows_detected, res.windows) == (1, 1)
    assert (res.tp, res.fn, res.fp) == (1, 9, 0)  # NAB counts rows


def test_late_detection_earns_less(single: list[NabFile]) -> None:
    res = score_corpus(single, {"cat/one.csv": spikes(N, {R - 1: 1.0})}, STANDARD)
    credit = tp_credit(R - 1, A, R)  # tanh(0.5) / tanh(2.5) ~ 0.468
    assert credit == pytest.approx(0.468387, abs=1e-6)
    assert res.raw == pytest.approx(credit, abs=1e-12)
    assert res.score == pytest.approx(100 * (credit + 1) / 2)


def test_detection_on_last_row_of_window() -> None:
    corpus = [make_file("cat/one.csv", N, [(A, R)])]
    res = score_corpus(corpus, {"cat/one.csv": spikes(N, {R: 1.0})}, STANDARD)
    assert res.raw == pytest.approx(math.tanh(0.25) / math.tanh(2.5), abs=1e-12)


def test_only_first_detection_in_window_counts(single: list[NabFile]) -> None:
    scores = {"cat/one.csv": spikes(N, {A + 1: 1.0, A + 4: 1.0, A + 7: 1.0})}
    res = score_corpus(single, scores, STANDARD)
    assert res.raw == pytest.approx(tp_credit(A + 1, A, R), abs=1e-12)
    assert (res.tp, res.fp, res.windows_detected) == (3, 0, 1)


def test_false_positive_right_after_window_costs_less_than_far_away(single: list[NabFile]) -> None:
    near = score_at_threshold(single, {"cat/one.csv": spikes(N, {A: 1.0, R + 1: 1.0})}, STANDARD, 0.5)
    mid = score_at_threshold(single, {"cat/one.csv": spikes(N, {A: 1.0, R + 9: 1.0})}, STANDARD, 0.5)
    far = score_at_threshold(single, {"cat/one.csv": spikes(N, {A: 1.0, 90: 1.0})}, STANDARD, 0.5)
    assert near.raw == pytest.approx(1.0 + fp_cost(R + 1, A, R), abs=1e-12)  # ~ 1 - 0.11 * 0.27
    assert mid.raw == pytest.approx(1.0 - 0.11 * math.tanh(2.5), abs=1e-12)  # one window width after
    assert far.raw == pytest.approx(1.0 - 0.11, abs=1e-12)  # more than 3 widths: full cost
    assert near.raw > mid.raw > far.raw
    assert near.fp == mid.fp == far.fp == 1
    # the optimiser keeps the threshold 1.0: the TP outweighs the FP
    assert score_corpus(single, {"cat/one.csv": spikes(N, {A: 1.0, R + 1: 1.0})}, STANDARD).raw == near.raw


def test_false_positive_before_first_window_costs_full_weight(single: list[NabFile]) -> None:
    for profile in PROFILES.values():
        res = score_at_threshold(single, {"cat/one.csv": spikes(N, {20: 1.0, A: 1.0})}, profile, 0.5)
        assert res.raw == pytest.approx(profile.tp - profile.fp, abs=1e-12)


def test_false_positive_uses_the_closest_preceding_window() -> None:
    # windows 30..39 (width 10) and 60..63 (width 4): row 66 is 3 rows after the second, narrow one
    corpus = [make_file("cat/two.csv", N, [(30, 39), (60, 63)])]
    scores = {"cat/two.csv": spikes(N, {30: 1.0, 60: 1.0, 66: 1.0})}
    res = score_at_threshold(corpus, scores, STANDARD, 1.0)
    assert res.raw == pytest.approx(2.0 - 0.11 * math.tanh(2.5 * 3 / 3), abs=1e-12)


def test_probationary_period_is_ignored(single: list[NabFile]) -> None:
    # rows 0..14 are the probation: detections there are neither FP nor TP
    scores = {"cat/one.csv": spikes(N, dict.fromkeys(range(15), 1.0) | {A: 1.0})}
    res = score_at_threshold(single, scores, STANDARD, 0.5)
    assert res.raw == pytest.approx(1.0, abs=1e-12)
    assert res.fp == 0
    assert res.tn == N - 15 - 10
    # row 15 is the first scored row
    res = score_at_threshold(single, {"cat/one.csv": spikes(N, {15: 1.0, A: 1.0})}, STANDARD, 0.5)
    assert res.raw == pytest.approx(1.0 - 0.11, abs=1e-12)


def test_window_inside_probation_is_ignored() -> None:
    # probation of 200 rows = 30; the first window (5..10) lies in it and is not scored at all
    corpus = [make_file("cat/p.csv", 200, [(5, 10), (100, 119)])]
    null = score_corpus(corpus, {"cat/p.csv": np.zeros(200)}, STANDARD)
    assert null.raw == pytest.approx(-1.0)
    assert null.windows == 1
    perfect = score_corpus(corpus, {"cat/p.csv": spikes(200, {5: 1.0, 100: 1.0})}, STANDARD)
    assert perfect.raw == pytest.approx(1.0) and perfect.score == pytest.approx(100.0)


def test_detection_is_score_at_least_threshold(single: list[NabFile]) -> None:
    scores = {"cat/one.csv": spikes(N, {A: 0.7})}
    assert score_at_threshold(single, scores, STANDARD, 0.7).raw == pytest.approx(1.0)
    assert score_at_threshold(single, scores, STANDARD, np.nextafter(0.7, 1.0)).raw == pytest.approx(-1.0)


def test_ties_choose_the_highest_threshold(single: list[NabFile]) -> None:
    # a later detection in the same window adds nothing: thresholds 1.0 and 0.5 score the same
    res = score_corpus(single, {"cat/one.csv": spikes(N, {A: 1.0, A + 5: 0.5})}, STANDARD)
    assert res.threshold == 1.0
    assert res.tp == 1


# ---------------------------------------------------------------------------------------------
# Normalisation: null 0, perfect 100, fires-everywhere negative


@pytest.fixture
def multi() -> list[NabFile]:
    return [
        make_file("a/one.csv", 300, [(100, 129), (200, 229)]),
        make_file("a/two.csv", 120, [(60, 71)]),
        make_file("b/none.csv", 80, []),
        make_file("b/three.csv", 1000, [(400, 449), (600, 649), (900, 949)]),
    ]


@pytest.mark.parametrize("profile", list(PROFILES.values()), ids=list(PROFILES))
def test_null_detector_scores_zero_and_perfect_scores_100(multi: list[NabFile], profile: Profile) -> None:
    null = score_corpus(multi, {f.name: np.zeros(len(f.timestamps)) for f in multi}, profile)
    assert null.score == 0.0
    assert null.raw == pytest.approx(-6 * profile.fn)
    assert null.threshold == NO_DETECTION_THRESHOLD
    assert (null.tp, null.fp) == (0, 0)

    perfect = score_corpus(multi, window_starts(multi), profile)
    assert perfect.score == pytest.approx(100.0, abs=1e-9)
    assert perfect.raw == pytest.approx(6 * profile.tp)
    assert (perfect.windows_detected, perfect.windows, perfect.fp) == (6, 6, 0)
    assert perfect.null == pytest.approx(-6 * profile.fn)
    assert perfect.perfect == pytest.approx(6 * profile.tp)


def test_detector_firing_everywhere_scores_negative(single: list[NabFile]) -> None:
    res = score_at_threshold(single, {"cat/one.csv": np.ones(N)}, STANDARD, 0.5)
    # 25 rows before the window, the window's first row, then 50 rows after it
    expected = 25 * -0.11 + 1.0 + sum(fp_cost(i, A, R) for i in range(R + 1, N))
    assert res.raw == pytest.approx(expected, abs=1e-12)
    assert res.score < 0
    assert res.score == pytest.approx(100 * (expected + 1) / 2)
    # the optimiser would rather not fire at all
    assert score_corpus(single, {"cat/one.csv": np.ones(N)}, STANDARD).score == 0.0


def test_detector_firing_everywhere_on_larger_corpus(multi: list[NabFile]) -> None:
    everywhere = {f.name: np.ones(len(f.timestamps)) for f in multi}
    for profile in PROFILES.values():
        assert score_at_threshold(multi, everywhere, profile, 0.5).score < 0
    assert score_at_threshold(multi, everywhere, STANDARD, 0.5).score < -50


def test_run_nab_scores_every_profile(multi: list[NabFile]) -> None:
    calls: list[str] = []

    def detector(f: NabFile) -> npt.NDArray[np.float64]:
        calls.append(f.name)
        return window_starts([f])[f.name]

    results = run_nab(multi, detector)
    assert sorted(calls) == sorted(f.name for f in multi)  # once per file, not once per profile
    assert list(results) == list(PROFILES)
    for name, res in results.items():
        assert res.profile == name
        assert res.score == pytest.approx(100.0)
    table = format_table(results)
    assert all(name in table for name in PROFILES)
    assert "100.00" in table


# ---------------------------------------------------------------------------------------------
# The optimised sweep against brute force and against a transcription of NAB's sweeper


@dataclass
class _Point:
    anomaly: float
    value: float
    window: str | None


def _nab_scaled_sigmoid(x: float) -> float:
    return -1.0 if x > 3.0 else 2.0 / (1.0 + math.exp(5.0 * x)) - 1.0


def reference_sweep(corpus: list[NabFile], scores: Scores, profile: Profile) -> list[tuple[float, float]]:
    """Row-by-row transcription of NAB's Sweeper.calcSweepScore + calcScoreByThreshold."""
    max_tp = _nab_scaled_sigmoid(-1.0)
    points: list[_Point] = []
    for f in corpus:
        stamps = list(f.timestamps)
        pending = list(f.windows)
        probation = min(math.floor(0.15 * len(stamps)), 0.15 * 5000)
        current: tuple[np.datetime64, np.datetime64] | None = None
        name: str | None = None
        right = width = 0
        prev_right: int | None = None
        prev_width = 0
        for i, (stamp, anomaly) in enumerate(zip(stamps, scores[f.name], strict=True)):
            if pending and stamp == pending[0][0]:
                current = pending.pop(0)
                name = f"{f.name}|{current[0]}"
                right = stamps.index(current[1])
                width = right - stamps.index(current[0]) + 1
            if current is not None:
                value = _nab_scaled_sigmoid(-(right - i + 1) / float(width)) * profile.tp / max_tp
            elif prev_right is None:
                value = -1.0 * profile.fp
            else:
                value = _nab_scaled_sigmoid(abs(prev_right - i) / float(prev_width - 1)) * profile.fp
            points.append(_Point(float(anomaly), value, name if i >= probation else "probationary"))
            if current is not None and stamp == current[1]:
                prev_right, prev_width = i, width
                current, name = None, None

    scorable = sorted((p for p in points if p.window != "probationary"), key=lambda p: p.anomaly, reverse=True)
    parts: dict[str, float] = {"fp": 0.0}
    for p in scorable:
        if p.window is not None:
            parts[p.window] = -profile.fn
    out: list[tuple[float, float]] = []
    threshold = 1.1
    for p in scorable:
        if p.anomaly != threshold:
            out.append((threshold, sum(parts.values())))
            threshold = p.anomaly
        if p.window is None:
            parts["fp"] += p.value
        else:
            parts[p.window] = max(parts[p.window], p.value)
    out.append((threshold, sum(parts.values())))
    return out


def random_corpus(rng: np.random.Generator, n_files: int) -> tuple[list[NabFile], Scores]:
    corpus: list[NabFile] = []
    scores: Scores = {}
    for k in range(n_files):
        n = int(rng.integers(40, 400))
        unique = START + np.arange(n) * STEP
        # windows (width >= 2) on distinct timestamps, separated by at least one row, some in the probation
        windows: list[tuple[np.datetime64, np.datetime64]] = []
        row = int(rng.integers(0, 30))
        while True:
            width = int(rng.integers(2, 40))
            if row + width >= n:
                break
            if rng.random() < 0.7:
                windows.append((unique[row], unique[row + width - 1]))
            row += width + int(rng.integers(1, 80))
        # repeat a few timestamps (as some NAB files do)
        repeats = rng.choice(n, size=int(rng.integers(0, 4)), replace=False)
        stamps = np.sort(np.concatenate([unique, unique[repeats]]))
        name = f"cat{k % 3}/file{k}.csv"
        corpus.append(NabFile(name=name, timestamps=stamps, values=np.zeros(len(stamps)), windows=windows))
        # quantised scores so that many rows share a score
        scores[name] = rng.integers(0, 25, size=len(stamps)) / 24.0
    return corpus, scores


@pytest.mark.parametrize("seed", range(8))
def test_sweep_matches_nab_transcription(seed: int) -> None:
    rng = np.random.default_rng(seed)
    corpus, scores = random_corpus(rng, n_files=int(rng.integers(1, 7)))
    for profile in PROFILES.values():
        expected = reference_sweep(corpus, scores, profile)
        thresholds, raws = sweep_thresholds(corpus, scores, profile)
        assert list(thresholds) == [t for t, _ in expected]
        np.testing.assert_allclose(raws, [s for _, s in expected], rtol=0, atol=1e-9)
        best_threshold = sorted(expected, key=lambda x: x[1], reverse=True)[0][0]  # NAB's optimizer
        res = score_corpus(corpus, scores, profile)
        assert res.threshold == best_threshold
        assert res.raw == pytest.approx(max(s for _, s in expected), abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_sweep_matches_brute_force_thresholds(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    corpus, _ = random_corpus(rng, n_files=4)
    scores = {f.name: rng.random(len(f.timestamps)) ** 4 for f in corpus}  # continuous scores
    profile = PROFILES["reward_low_FN_rate"]
    thresholds, raws = sweep_thresholds(corpus, scores, profile)
    assert thresholds[0] == NO_DETECTION_THRESHOLD
    assert np.all(np.diff(thresholds) < 0)
    picks = np.unique(np.r_[0, 1, rng.integers(0, len(thresholds), 40), len(thresholds) - 1])
    for j in picks:
        direct = score_at_threshold(corpus, scores, profile, float(thresholds[j]))
        assert direct.raw == pytest.approx(raws[j], abs=1e-9)


def test_nab_transcription_agrees_on_hand_case(single: list[NabFile]) -> None:
    # guards the transcription itself with a value computed by hand
    ref = reference_sweep(single, {"cat/one.csv": spikes(N, {R - 1: 1.0})}, STANDARD)
    assert ref[0] == (1.1, -1.0)
    assert ref[1][0] == 1.0
    assert ref[1][1] == pytest.approx(tp_credit(R - 1, A, R))


# ---------------------------------------------------------------------------------------------
# Input validation and loading


def test_scores_are_validated(single: list[NabFile]) -> None:
    with pytest.raises(ValueError, match="scores for"):
        score_corpus(single, {"cat/one.csv": np.zeros(N - 1)}, STANDARD)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        score_corpus(single, {"cat/one.csv": np.full(N, 1.5)}, STANDARD)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        score_corpus(single, {"cat/one.csv": np.full(N, np.nan)}, STANDARD)
    with pytest.raises(KeyError):
        score_corpus(single, {}, STANDARD)


def test_bad_windows_are_rejected() -> None:
    f = make_file("cat/x.csv", N, [(A, R)])
    f.windows = [(f.windows[0][0] + np.timedelta64(1, "s"), f.windows[0][1])]
    with pytest.raises(ValueError, match="not a row"):
        score_corpus([f], {"cat/x.csv": np.zeros(N)}, STANDARD)
    g = make_file("cat/y.csv", N, [(40, 49), (45, 60)])
    with pytest.raises(ValueError, match="overlaps"):
        score_corpus([g], {"cat/y.csv": np.zeros(N)}, STANDARD)


def test_corpus_without_windows_has_no_normalised_score() -> None:
    corpus = [make_file("cat/none.csv", N, [])]
    res = score_corpus(corpus, {"cat/none.csv": np.zeros(N)}, STANDARD)
    assert res.raw == 0.0 and math.isnan(res.score)


def test_load_corpus(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "b").mkdir(parents=True)
    (data / "a").mkdir()
    rows = [f"2015-01-01 00:{m:02d}:00" for m in range(0, 60, 5)]
    lines = ["timestamp,value", *(f"{t},{i}" for i, t in enumerate(rows)), f"{rows[-1]},99"]  # repeated stamp
    (data / "b" / "crlf.csv").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    (data / "a" / "plain.csv").write_text("timestamp,value\n2015-01-01 00:00:00,1.5\n2015-01-01 00:05:00,2\n")
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "combined_windows.json").write_text(
        '{"b/crlf.csv": [["2015-01-01 00:20:00.000000", "2015-01-01 00:30:00.000000"]]}'
    )
    corpus = load_corpus(data)
    assert [f.name for f in corpus] == ["a/plain.csv", "b/crlf.csv"]
    plain, crlf = corpus
    assert plain.windows == []
    assert plain.values.dtype == np.float64 and list(plain.values) == [1.5, 2.0]
    assert crlf.timestamps.dtype == np.dtype("datetime64[ns]")
    assert len(crlf.timestamps) == 13 and crlf.values[-1] == 99.0
    assert crlf.windows == [(np.datetime64("2015-01-01T00:20", "ns"), np.datetime64("2015-01-01T00:30", "ns"))]

    (labels / "other.json").write_text('{"a/plain.csv": [["2015-01-01 00:01:00", "2015-01-01 00:05:00"]]}')
    with pytest.raises(ValueError, match="not a row"):
        load_corpus(data, labels / "other.json")


# ---------------------------------------------------------------------------------------------
# The real subset


@pytest.mark.skipif(not (REAL_NAB / "data").is_dir(), reason="NAB subset not available")
def test_real_subset() -> None:
    corpus = load_corpus(REAL_NAB / "data")
    assert len(corpus) == 34
    assert [f.name for f in corpus] == sorted(f.name for f in corpus)
    n_windows = 0
    for f in corpus:
        assert len(f.timestamps) == len(f.values) > 0
        assert not np.isnan(f.values).any()
        first, last = f.timestamps.min(), f.timestamps.max()
        probation_end = f.timestamps[probation_length(len(f.timestamps))]
        for start, end in f.windows:
            assert first <= start <= end <= last
            assert start >= probation_end  # NAB's labeler drops windows touching the probation
        n_windows += len(f.windows)
    assert sum(f.name.startswith("artificialNoAnomaly/") and not f.windows for f in corpus) == 5

    perfect = run_nab(corpus, lambda f: window_starts([f])[f.name])
    null = run_nab(corpus, lambda f: np.zeros(len(f.timestamps)))
    for name, profile in PROFILES.items():
        assert perfect[name].score == pytest.approx(100.0, abs=1e-9)
        assert perfect[name].raw == pytest.approx(n_windows * profile.tp)
        assert null[name].score == 0.0
        assert null[name].raw == pytest.approx(-n_windows * profile.fn)

    rng = np.random.default_rng(0)
    noisy = run_nab(corpus, lambda f: rng.random(len(f.timestamps)))
    assert all(isinstance(r, NabResult) and -100.0 < r.score < 100.0 for r in noisy.values())


@pytest.mark.skipif(not (REAL_NAB / "data").is_dir(), reason="NAB subset not available")
def test_real_subset_matches_nab_transcription() -> None:
    corpus = load_corpus(REAL_NAB / "data")
    rng = np.random.default_rng(1)
    scores = {f.name: np.round(rng.random(len(f.timestamps)) ** 3, 3) for f in corpus}
    expected = reference_sweep(corpus, scores, STANDARD)
    thresholds, raws = sweep_thresholds(corpus, scores, STANDARD)
    assert list(thresholds) == [t for t, _ in expected]
    np.testing.assert_allclose(raws, [s for _, s in expected], rtol=0, atol=1e-8)
    res = score_corpus(corpus, scores, STANDARD)
    assert res.threshold == sorted(expected, key=lambda x: x[1], reverse=True)[0][0]
