"""score-csv: one entity's CSV in, one anomaly score per row out, strictly online."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from detectors.scorecsv import ScoreCsvError, counter_increases, score_columns, score_csv, score_frame
from detectors.series import SeriesConfig


def _series(rows: int = 600, seed: int = 0, spike_at: int | None = 400) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = 50.0 + 10.0 * np.sin(np.arange(rows) / 30.0) + rng.normal(0.0, 1.0, rows)
    if spike_at is not None:
        values[spike_at] += 60.0
    return values


def _stamps(rows: int, step: str = "5min") -> list[str]:
    return [str(t) for t in pd.date_range("2024-01-01", periods=rows, freq=step)]


def _write(path: Path, header: list[str], rows: list[list[str]], newline: str = "\n") -> Path:
    path.write_bytes((newline.join(",".join(r) for r in [header, *rows]) + newline).encode())
    return path


def _read_out(path: Path) -> tuple[list[str], np.ndarray]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["timestamp", "anomaly_score"]
    return [r[0] for r in rows[1:]], np.array([float(r[1]) for r in rows[1:]])


def _score_file(
    tmp_path: Path,
    header: list[str],
    rows: list[list[str]],
    newline: str = "\n",
    config: SeriesConfig | None = None,
) -> np.ndarray:
    out = tmp_path / "out.csv"
    n = score_csv(_write(tmp_path / "in.csv", header, rows, newline), out, config)
    stamps, scores = _read_out(out)
    assert n == len(rows) == len(scores)
    assert stamps == [r[header.index("timestamp")] for r in rows]
    return scores


def _seconds(rows: int, step: str = "5min") -> np.ndarray:
    stamps = pd.date_range("2024-01-01", periods=rows, freq=step).to_numpy(dtype="datetime64[s]")
    return stamps.astype(np.float64)


def _univariate_rows(values: np.ndarray, stamps: list[str] | None = None) -> list[list[str]]:
    stamps = stamps or _stamps(len(values))
    return [[t, repr(float(v))] for t, v in zip(stamps, values, strict=True)]


def test_scores_every_row_in_order_and_a_spike_stands_out(tmp_path: Path) -> None:
    values = _series()
    scores = _score_file(tmp_path, ["timestamp", "value"], _univariate_rows(values))
    assert ((scores >= 0.0) & (scores <= 1.0)).all()
    assert scores[400] == scores.max() > 0.5
    assert np.median(scores[150:]) < 0.2


def test_timestamps_are_written_exactly_as_read(tmp_path: Path) -> None:
    stamps = [f"2024-01-01T00:{m:02d}:00.000Z" for m in range(60)] * 3
    scores = _score_file(tmp_path, ["timestamp", "value"], _univariate_rows(_series(180, spike_at=None), stamps))
    assert len(scores) == 180


def test_crlf_line_endings_give_the_same_scores(tmp_path: Path) -> None:
    rows = _univariate_rows(_series())
    (tmp_path / "lf").mkdir()
    (tmp_path / "crlf").mkdir()
    lf = _score_file(tmp_path / "lf", ["timestamp", "value"], rows)
    crlf = _score_file(tmp_path / "crlf", ["timestamp", "value"], rows, newline="\r\n")
    np.testing.assert_array_equal(lf, crlf)


def test_repeated_timestamps_and_gaps_are_scored_by_row_order(tmp_path: Path) -> None:
    """The deviations follow row order; only the daily profile reads the time of day."""
    values = _series()
    regular = _stamps(600)
    odd = regular.copy()
    odd[100:103] = [odd[100]] * 3  # a repeated timestamp
    odd[300:] = _stamps(600, step="5min")[:300]  # time goes back...
    odd[300:] = [str(pd.Timestamp(t) + pd.Timedelta(days=30)) for t in odd[300:]]  # ...then jumps a month on
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    no_profile = SeriesConfig(season=False)
    plain = _score_file(tmp_path / "a", ["timestamp", "value"], _univariate_rows(values, regular), config=no_profile)
    gappy = _score_file(tmp_path / "b", ["timestamp", "value"], _univariate_rows(values, odd), config=no_profile)
    np.testing.assert_array_equal(plain, gappy)
    with_profile = _score_file(tmp_path / "b", ["timestamp", "value"], _univariate_rows(values, odd))
    assert ((with_profile >= 0.0) & (with_profile <= 1.0)).all()


def test_missing_values_are_skipped_and_an_empty_row_scores_zero(tmp_path: Path) -> None:
    values = _series()
    rows = _univariate_rows(values)
    for i in (200, 201, 202, 450):
        rows[i][1] = ["", "nan", "NA", "null"][i % 4]
    scores = _score_file(tmp_path, ["timestamp", "value"], rows)
    assert (scores[[200, 201, 202, 450]] == 0.0).all()
    kept = np.ones(600, dtype=bool)
    kept[[200, 201, 202, 450]] = False
    alone = score_columns(values[kept, None], seconds=_seconds(600)[kept])[:, 0]
    np.testing.assert_allclose(scores[kept], alone, atol=5e-7)


def test_a_prefix_scores_the_same_as_the_start_of_the_full_file(tmp_path: Path) -> None:
    rows = _univariate_rows(_series(800))
    (tmp_path / "full").mkdir()
    (tmp_path / "prefix").mkdir()
    full = _score_file(tmp_path / "full", ["timestamp", "value"], rows)
    for k in (150, 401, 620):
        prefix = _score_file(tmp_path / "prefix", ["timestamp", "value"], rows[:k])
        np.testing.assert_array_equal(prefix, full[:k])


def test_multivariate_rows_take_the_largest_column_score(tmp_path: Path) -> None:
    a, b, c = _series(seed=1, spike_at=None), _series(seed=2, spike_at=500), _series(seed=3, spike_at=None)
    c[[10, 300, 301]] = np.nan
    rows = [
        [repr(float(x)), t, repr(float(y)), "" if np.isnan(z) else repr(float(z))]
        for t, x, y, z in zip(_stamps(600), a, b, c, strict=True)
    ]
    scores = _score_file(tmp_path, ["cpu", "timestamp", "mem", "temp"], rows)
    per_column = score_columns(np.column_stack([a, b, c]), seconds=_seconds(600))
    np.testing.assert_allclose(scores, per_column.max(axis=1), atol=5e-7)
    assert scores[500] == scores.max() > 0.5
    for j, col in enumerate((a, b, c)):  # each column scores as it would alone
        kept = ~np.isnan(col)
        alone = score_columns(col[kept, None], seconds=_seconds(600)[kept])[:, 0]
        np.testing.assert_array_equal(per_column[kept, j], alone)


def test_score_frame_takes_a_parsed_frame() -> None:
    values = _series()
    frame = pd.DataFrame({"timestamp": pd.date_range("2024-01-01", periods=600, freq="min"), "value": values})
    scores = score_frame(frame)
    assert scores.shape == (600,)
    np.testing.assert_allclose(scores, score_columns(values[:, None], seconds=_seconds(600, "min"))[:, 0], atol=5e-7)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"\n\n", "empty file"),
        (b"timestamp,value\n", r"no data rows \(header only\)"),
        (b"timestamp,value\r\n", r"no data rows \(header only\)"),
        (b"time,value\n2024-01-01 00:00:00,1\n", "no 'timestamp' column"),
        (b"timestamp\n2024-01-01 00:00:00\n", "no numeric column"),
        (b"timestamp,value\n2024-01-01 00:00:00,1\n2024-01-01 00:05:00,abc\n", r"column 'value'.*'abc' at row 2"),
        (b"timestamp,a,b\n2024-01-01 00:00:00,1,2\n2024-01-01 00:05:00,1,2\n2024-01-01 00:10:00,3,x1\n", r"'b'.*row 3"),
        (b"timestamp,value\n2024-01-01 00:00:00,inf\n", r"column 'value'.*'inf' at row 1"),
        (b"timestamp,value\n2024-01-01 00:00:00,1\n2024-01-01 00:05:00\n", r"row 2 \(line 3\) has 1 fields"),
        (b"timestamp,value\n2024-01-01 00:00:00,1,7\n", r"row 1 \(line 2\) has 3 fields, the header has 2"),
        (b"timestamp,value\n2024-01-01 00:00:00,1\nyesterday,2\n", r"unparseable timestamp 'yesterday' at row 2"),
        (b"timestamp,value\n2024-01-01 00:00:00,1\n,2\n", r"unparseable timestamp '' at row 2"),
        (b"timestamp,value,value\n2024-01-01 00:00:00,1,2\n", "duplicate column"),
        (b"timestamp,value\n2024-01-01 00:00:00,\xff\n", "not UTF-8"),
    ],
)
def test_bad_input_is_refused_with_a_one_line_reason(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(content)
    out = tmp_path / "out.csv"
    with pytest.raises(ScoreCsvError, match=message) as info:
        score_csv(path, out)
    assert "\n" not in str(info.value)
    assert not out.exists()


def test_errors_are_value_errors() -> None:
    assert issubclass(ScoreCsvError, ValueError)
    with pytest.raises(ValueError, match="no 'timestamp' column"):
        score_frame(pd.DataFrame({"value": [1.0, 2.0]}))


def test_a_counter_is_scored_on_its_increases_and_a_restart_is_not_a_fault(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    increases = rng.poisson(1000.0, 3000).astype(float)  # bytes a scrape, about 1,000
    increases[2000] = 9000.0  # a burst: nine scrapes' worth at once
    counter = np.cumsum(increases)
    counter[1500:] -= counter[1499]  # the exporter restarted: the counter starts again from zero
    scores = _score_file(tmp_path, ["timestamp", "bytes"], _univariate_rows(counter))
    assert scores[2000] == scores.max() > 0.5
    assert scores[1495:1505].max() < 0.5  # the restart's drop is read as a reset, not a fall
    # before the restart, exactly the scores of the increases themselves
    as_rate = score_columns(np.r_[np.nan, increases[1:1500]][:, None])[:, 0]
    np.testing.assert_array_equal(score_columns(counter[:1500, None])[:, 0], as_rate)
    for k in (50, 100, 101, 102, 1700):  # deciding after the first rows keeps prefixes exact
        prefix = score_columns(counter[:k, None])[:, 0]
        np.testing.assert_array_equal(prefix, score_columns(counter[:, None])[:k, 0])


def test_a_gauge_that_falls_is_not_taken_for_a_counter() -> None:
    values = _series(600)
    np.testing.assert_array_equal(counter_increases(values[:, None], 100), values[:, None])
    mostly_rising = np.r_[np.zeros(40), np.ones(80)].cumsum()  # 60 of its first 100 steps rise
    assert np.isnan(counter_increases(mostly_rising[:, None], 100)[0, 0])
    mostly_flat = np.r_[np.zeros(60), np.ones(60)].cumsum()  # 40 of 100 rise: a step function
    np.testing.assert_array_equal(counter_increases(mostly_flat[:, None], 100), mostly_flat[:, None])
    flat = np.full((300, 1), 7.0)  # never falls, never rises: a constant, not a counter
    np.testing.assert_array_equal(counter_increases(flat, 100), flat)


def test_the_command_takes_settings_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aiops.cli import main

    source = _write(tmp_path / "in.csv", ["timestamp", "value"], _univariate_rows(_series()))
    assert main(["score-csv", str(source), "--out", str(tmp_path / "a.csv"), "--set", "still=true"]) == 0
    assert main(["score-csv", str(source), "--out", str(tmp_path / "b.csv"), "--set", "stil=true"]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err
    assert not (tmp_path / "b.csv").exists()
