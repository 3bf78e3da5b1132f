"""The statistical stream detector: protocol conformance, robustness and detection quality."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from detectors.base import Block, FloatArray
from detectors.univariate import FIELDS, MF, MS, Univariate, UnivariateConfig


def _noise(rows: int, cols: int, seed: int) -> FloatArray:
    """Heavy-tailed noise (Student t, 3 degrees of freedom) around 100, a different scale per series."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 5.0, cols)
    out: FloatArray = 100.0 + rng.standard_t(3, (rows, cols)) * scale
    return out


def _run(det: Univariate, values: FloatArray, series: NDArray[np.int64] | None = None) -> FloatArray:
    """Score and learn row by row; (rows, cols) scores."""
    series = np.arange(values.shape[1]) if series is None else series
    out = np.full(values.shape, np.nan)
    for t, row in enumerate(values):
        out[t] = det.score_and_learn(Block(float(t), series, row[:, None]))[:, 0]
    return out


def _auc(scores: FloatArray, labels: NDArray[np.bool_]) -> float:
    """ROC-AUC as the probability that an anomaly outscores a normal point (ties count half)."""
    pos, neg = np.sort(scores[labels]), np.sort(scores[~labels])
    below = np.searchsorted(neg, pos, side="left")
    equal = np.searchsorted(neg, pos, side="right") - below
    return float((below + 0.5 * equal).sum() / (len(pos) * len(neg)))


def test_scores_are_in_unit_interval_and_nan_where_missing_or_warming_up() -> None:
    values = _noise(400, 8, seed=1)
    values[200:210, 3] = np.nan
    values[300, 5] = 1e6
    scores = _run(Univariate(), values)
    judge_after = UnivariateConfig().judge_after
    assert np.isnan(scores[:judge_after]).all()
    assert np.isnan(scores[200:210, 3]).all()
    rest = scores[judge_after:][~np.isnan(values[judge_after:])]
    assert not np.isnan(rest).any()
    assert ((rest >= 0.0) & (rest <= 1.0)).all()
    assert scores[300, 5] > 0.9


def test_checkpoint_round_trip_gives_identical_scores() -> None:
    values = _noise(600, 12, seed=2)
    values[350, 4] += 500.0
    values[420:, 7] += 80.0
    first = Univariate()
    _run(first, values[:300])
    second = Univariate(1, UnivariateConfig(decay=0.5))  # the checkpoint's config must win
    second.load_state(first.state_dict())
    assert second.config == first.config
    np.testing.assert_array_equal(_run(first, values[300:]), _run(second, values[300:]))


def test_checkpoint_of_another_width_is_refused() -> None:
    with pytest.raises(ValueError, match="width"):
        Univariate(2).load_state(Univariate(1).state_dict())


def test_same_input_gives_same_scores() -> None:
    values = _noise(500, 10, seed=3)
    np.testing.assert_array_equal(_run(Univariate(), values), _run(Univariate(), values))


def test_vectorised_scoring_equals_scoring_each_series_alone() -> None:
    values = _noise(500, 16, seed=4)
    values[250, ::3] *= 4.0
    together = _run(Univariate(), values)
    for j in range(values.shape[1]):
        alone = _run(Univariate(), values[:, j : j + 1])
        np.testing.assert_array_equal(together[:, j], alone[:, 0])


def test_series_appearing_later_and_missing_values_do_not_disturb_others() -> None:
    rows = 500
    values = _noise(rows, 10, seed=5)
    values[np.random.default_rng(6).random((rows, 10)) < 0.2] = np.nan
    values[:, :4] = _noise(rows, 4, seed=7)  # series 0-3 complete
    base = _run(Univariate(), values[:, :4])
    det = Univariate()
    mixed = np.full((rows, 4), np.nan)
    for t in range(rows):
        # series 4-9 only join at row 150; the block lists series in a shuffled order
        series = np.arange(10 if t >= 150 else 4)
        order = np.random.default_rng(t).permutation(len(series))
        block = Block(float(t), series[order], values[t, series[order], None])
        scores = det.score_and_learn(block)[:, 0]
        mixed[t] = scores[np.argsort(order)][:4]
    np.testing.assert_array_equal(base, mixed)


def test_a_missing_value_leaves_its_series_as_if_the_row_had_not_been() -> None:
    values = _noise(500, 1, seed=8)[:, 0]
    holes = np.zeros(500, dtype=bool)
    holes[[120, 121, 122, 300, 301, 450]] = True
    with_holes = values.copy()
    with_holes[holes] = np.nan
    scores = _run(Univariate(), with_holes[:, None])[:, 0]
    skipped = _run(Univariate(), values[~holes, None])[:, 0]
    assert np.isnan(scores[holes]).all()
    np.testing.assert_array_equal(scores[~holes], skipped)


def test_spikes_and_level_shifts_score_above_noise() -> None:
    """Labelled synthetic data: spikes (8-20 spreads) and level shifts (10-25 spreads) in heavy-tailed noise."""
    rows, cols = 1500, 60
    rng = np.random.default_rng(9)
    values = _noise(rows, cols, seed=10)
    scale = np.median(np.abs(values - 100.0), axis=0)
    labels = np.zeros((rows, cols), dtype=bool)
    for j in range(cols):
        spikes = rng.choice(np.arange(300, rows, 100), size=4, replace=False) + rng.integers(0, 50, 4)
        signs = rng.choice([-1.0, 1.0], size=4)
        values[spikes, j] += signs * rng.uniform(8, 20, 4) * scale[j] * 3
        labels[spikes, j] = True
        if j % 2 == 0:
            start = int(rng.integers(400, 1300))
            values[start:, j] += rng.choice([-1.0, 1.0]) * rng.uniform(10, 25) * scale[j] * 3
            labels[start, j] = True
    scores = _run(Univariate(), values)
    judged = ~np.isnan(scores)
    auc = _auc(scores[judged], labels[judged])
    assert auc > 0.93, auc
    shuffled = rng.permutation(labels[judged])  # the same check on random labels must fail
    assert _auc(scores[judged], shuffled) < 0.7


def test_score_comes_back_down_after_a_persistent_level_shift() -> None:
    noise = _noise(3000, 4, seed=11)
    spread = np.median(np.abs(noise - 100.0), axis=0)
    shift = 3.0 * np.abs(noise[:1000] - 100.0).max(axis=0)  # three times the largest excursion so far
    shifted = noise.copy()
    shifted[1000:] += shift
    for threshold in (None, 0.5):  # learning everything, and not learning what was flagged
        scores = {}
        for name, values in (("noise", noise), ("shifted", shifted)):
            det = Univariate()
            out = np.full(values.shape, np.nan)
            for t, row in enumerate(values):
                out[t] = det.score_and_learn(Block(float(t), np.arange(4), row[:, None]), threshold)[:, 0]
            scores[name] = out
        assert (scores["shifted"][1000:1005].max(axis=0) > 0.7).all()
        # 100 rows on, the new level is the baseline: scores are those of the noise alone
        after, plain = scores["shifted"][1100:], scores["noise"][1100:]
        assert (after.max(axis=0) <= plain.max(axis=0) + 0.05).all(), threshold
        assert (after.mean(axis=0) <= plain.mean(axis=0) + 0.02).all(), threshold
        state = det.state_dict()["state"]
        assert isinstance(state, np.ndarray)
        np.testing.assert_allclose(state[:4, 0, MS], 100.0 + shift, atol=5 * spread.max())


def test_masked_values_do_not_move_the_baseline() -> None:
    values = _noise(300, 3, seed=12)
    det = Univariate()
    _run(det, values)
    before = det.state_dict()["state"]
    assert isinstance(before, np.ndarray)
    block = Block.of(300.0, [0, 1, 2], [[1e6], [1e6], [1e6]])
    assert (det.score(block) > 0.9).all()
    det.learn(block, np.array([[False], [True], [False]]))
    after = det.state_dict()["state"]
    assert isinstance(after, np.ndarray)
    np.testing.assert_array_equal(after[[0, 2]][..., [MF, MS]], before[[0, 2]][..., [MF, MS]])
    assert after[1, 0, MF] != before[1, 0, MF]


def test_wide_blocks_score_each_column_as_its_own_stream() -> None:
    values = _noise(400, 6, seed=13)
    wide = Univariate(width=3)
    out = np.full((400, 2, 3), np.nan)
    for t, row in enumerate(values):
        out[t] = wide.score_and_learn(Block(float(t), np.arange(2), row.reshape(2, 3)))
    narrow = _run(Univariate(), values)
    np.testing.assert_array_equal(out.reshape(400, 6), narrow)


def test_state_is_small() -> None:
    det = Univariate()
    _run(det, _noise(10, 1000, seed=14))
    state = det.state_dict()["state"]
    assert isinstance(state, np.ndarray)
    assert state.nbytes / det.series == len(FIELDS) * 8 <= 200
