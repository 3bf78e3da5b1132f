"""The series detector behind score-csv: online, deterministic, vectorised, and what each part sees."""

from __future__ import annotations

import numpy as np
import pytest

from detectors.series import DAY_S, SeriesConfig, SeriesDetector

STEP_S = 300.0  # 5-minute samples: 288 a day


def _daily(days: int, seed: int = 0, noise: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A daily square-ish pattern: low at night, a plateau by day, like a service's load."""
    rows = int(days * DAY_S / STEP_S)
    seconds = 1_700_000_000.0 - (1_700_000_000.0 % DAY_S) + STEP_S * np.arange(rows)
    hour = (seconds % DAY_S) / 3600.0
    rng = np.random.default_rng(seed)
    values = np.where((hour >= 9) & (hour < 18), 80.0, 20.0) + rng.normal(0.0, noise, rows)
    return values, seconds


def _score(values: np.ndarray, seconds: np.ndarray | None = None, config: SeriesConfig | None = None) -> np.ndarray:
    return SeriesDetector(1, config).score_rows(values[:, None], seconds)[:, 0]


def test_a_prefix_scores_the_same_as_the_start_of_the_whole_series() -> None:
    values, seconds = _daily(6)
    whole = _score(values, seconds)
    for k in (150, 700, 1500):
        np.testing.assert_array_equal(_score(values[:k], seconds[:k]), whole[:k])
    # and fed in blocks of any size, the same again
    detector = SeriesDetector(1)
    parts = [detector.score_rows(values[a:b, None], seconds[a:b])[:, 0] for a, b in ((0, 1), (1, 333), (333, 1728))]
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_many_series_at_once_score_as_each_alone() -> None:
    columns = [_daily(5, seed=s, noise=1.0 + s)[0] for s in range(4)]
    seconds = _daily(5)[1]
    block = np.column_stack(columns)
    block[[10, 500, 501], 2] = np.nan
    together = SeriesDetector(4).score_rows(block, seconds)
    for j in range(4):
        kept = ~np.isnan(block[:, j])
        alone = _score(block[kept, j], seconds[kept])
        np.testing.assert_array_equal(together[kept, j], alone)
        assert (together[~kept, j] == 0.0).all()


def test_scores_are_in_range_and_zero_while_warming_up() -> None:
    values, seconds = _daily(4)
    scores = _score(values, seconds)
    assert ((scores >= 0.0) & (scores < 1.0)).all()
    assert (scores[: SeriesConfig().judge_after] == 0.0).all()


def test_a_spike_and_a_level_shift_stand_out_on_a_noisy_series() -> None:
    rng = np.random.default_rng(3)
    values = 100.0 + rng.normal(0.0, 2.0, 3000)
    values[1200] += 40.0  # a spike of 20 sigma
    values[2200:] += 60.0  # a shift that stays, larger than the spike
    scores = _score(values, config=SeriesConfig(season=False))
    quiet = np.r_[scores[300:1190], scores[1300:2190]]
    # the noise's own new extremes score up to about its record (0.5); the spike is far beyond
    assert scores[1200] > 0.75 > quiet.max() + 0.1
    assert scores[2200:2210].max() > quiet.max() + 0.05
    assert scores[2500:].max() < 0.6  # the new level is learnt, not flagged for ever


def test_the_daily_profile_sees_a_missing_plateau_inside_the_usual_range() -> None:
    values, seconds = _daily(10)
    day = int(DAY_S / STEP_S)
    hour = (seconds % DAY_S) / 3600.0
    anomalous = (np.arange(len(values)) // day == 7) & (hour >= 9) & (hour < 18)
    values[anomalous] = 20.0 + np.random.default_rng(9).normal(0.0, 1.0, anomalous.sum())  # the day that did not come
    with_profile = _score(values, seconds)
    without = _score(values, seconds, SeriesConfig(season=False))
    usual = with_profile[3 * day : 7 * day]
    assert with_profile[anomalous].max() > max(0.5, usual.max())
    assert without[anomalous].max() < 0.5  # a step/level detector sees nothing out of range


def test_a_quantised_series_does_not_divide_by_zero() -> None:
    """A gauge in whole percent, flat for hours: the resolution keeps spreads above zero."""
    values = np.full(2000, 42.0)
    values[::97] = 43.0
    values[1500] = 60.0
    scores = _score(values, config=SeriesConfig(season=False))
    assert np.isfinite(scores).all()
    assert scores[1500] == scores.max() > 0.5


def test_state_is_fixed_per_series() -> None:
    detector = SeriesDetector(3)
    before = detector.state_bytes_per_series
    values, seconds = _daily(3)
    detector.score_rows(np.column_stack([values] * 3), seconds)
    assert detector.state_bytes_per_series == before <= 64 * 1024


def test_bad_input_is_refused_with_a_reason() -> None:
    detector = SeriesDetector(2)
    with pytest.raises(ValueError, match="expected"):
        detector.score_rows(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="timestamps"):
        detector.score_rows(np.zeros((5, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="finite"):
        detector.score_rows(np.zeros((2, 2)), np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="no such settings"):
        SeriesConfig().replace(windows=3)
    with pytest.raises(ValueError, match="season_rate"):
        SeriesConfig(season_rate=0.0)


def test_stillness_flags_a_frozen_sensor_once() -> None:
    rng = np.random.default_rng(4)
    values = np.round(40.0 + rng.normal(0.0, 0.5, 3000), 2)  # a temperature read to 0.01
    values[2000:2400] = values[1999]  # the sensor froze: the same reading for 400 rows
    still = _score(values, config=SeriesConfig(season=False, still=True))
    plain = _score(values, config=SeriesConfig(season=False))
    alarms = np.flatnonzero(still >= SeriesConfig().alarm)
    frozen = alarms[(alarms >= 2000) & (alarms < 2400)]
    assert len(frozen) == 1 and frozen[0] < 2010  # within a few readings, and once
    assert plain[2000:2400].max() < 0.5  # no other part sees a value that did not move


def test_settings_by_name_are_checked() -> None:
    config = SeriesConfig.from_settings(["still=true", "period_days=7", "season_weight=0.35"])
    assert (config.still, config.period_days, config.season_weight) == (True, 7, 0.35)
    for bad, message in (
        (["stil=true"], "expected NAME=VALUE"),
        (["still"], "expected NAME=VALUE"),
        (["still=maybe"], "takes bool values"),
        (["period_days=1.5"], "takes int values"),
        (["season_rate=0"], "season_rate"),
    ):
        with pytest.raises(ValueError, match=message):
            SeriesConfig.from_settings(bad)
