"""`aiops bench nab` on a NAB-layout folder: out-of-fold figures when the categories allow them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from aiops.cli import main

ROWS = 1200
SPIKE = 900


def _folder(root: Path, categories: list[str]) -> Path:
    windows: dict[str, list[list[str]]] = {}
    stamps = pd.date_range("2024-03-01", periods=ROWS, freq="5min")
    for c, cat in enumerate(categories):
        (root / "data" / cat).mkdir(parents=True)
        for k in range(2):
            rng = np.random.default_rng(10 * c + k)
            values = 100.0 + rng.normal(0.0, 3.0, ROWS)
            values[SPIKE] += 60.0
            name = f"{cat}/series_{k}.csv"
            pd.DataFrame({"timestamp": stamps.strftime("%Y-%m-%d %H:%M:%S"), "value": values}).to_csv(
                root / "data" / name, index=False
            )
            windows[name] = [[str(stamps[SPIKE]), str(stamps[SPIKE + 40])]]
    (root / "labels").mkdir()
    (root / "labels" / "combined_windows.json").write_text(json.dumps(windows))
    return root


@pytest.mark.timeout(300)
def test_out_of_fold_headline_and_score_csv_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _folder(tmp_path / "nab", ["first", "second"])
    assert main(["bench", "nab", "--data", str(data), "--out", str(tmp_path / "nab.json")]) == 0
    printed = capsys.readouterr().out
    assert "out of fold" in printed and "without daily profile" in printed
    report = json.loads((tmp_path / "nab.json").read_text())
    full = report["out_of_fold"]["full design"]["standard"]
    assert set(full["per_category"]) == {"first", "second"}
    # every window opens with a clear spike: the threshold chosen on one category finds at least
    # one of the other's two (NAB's sweep keeps the highest threshold that scores best, so a
    # spike a little weaker than the training ones can fall under it)
    assert min(full["per_category"].values()) >= 50.0
    assert report["in_sample"]["standard"]["score"] > 90.0
    assert report["score_csv"]["samples"] == 4 * ROWS
    assert report["designs_tried"] >= 1


def test_one_category_gets_a_reason_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _folder(tmp_path / "nab", ["only"])
    assert main(["bench", "nab", "--data", str(data)]) == 0
    printed = capsys.readouterr().out
    assert "no out-of-fold figures" in printed and "leaving one out needs at least two" in printed
    assert "score-csv" in printed
