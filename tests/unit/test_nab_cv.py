"""Leave-one-category-out selection (detectors/nab_cv.py): a held-out category never chooses its own setting."""

from __future__ import annotations

import numpy as np
import pytest

from detectors.nab import PROFILES, NabFile, score_at_threshold, score_corpus
from detectors.nab_cv import category, folds, normalised, out_of_fold
from tests.unit.test_nab import make_file

STANDARD = PROFILES["standard"]
N = 200
WINDOW = (100, 119)


def _corpus() -> list[NabFile]:
    return [
        make_file("alpha/a1.csv", N, [WINDOW]),
        make_file("alpha/a2.csv", N, [WINDOW]),
        make_file("beta/b1.csv", N, [WINDOW]),
        make_file("gamma/g1.csv", N, [WINDOW]),
        make_file("gammaQuiet/q1.csv", N, []),
    ]


def _detects(rows: dict[str, list[int]]) -> dict[str, np.ndarray]:
    out = {}
    for f in _corpus():
        s = np.zeros(N)
        s[rows.get(f.name, [])] = 0.9
        out[f.name] = s
    return out


def test_a_category_without_windows_joins_its_closest_sibling() -> None:
    assert category("realTweets/x.csv") == "realTweets"
    assert folds(_corpus()) == {"alpha": ["alpha"], "beta": ["beta"], "gamma": ["gamma", "gammaQuiet"]}
    with pytest.raises(ValueError, match="needs at least two"):
        folds([make_file("quiet/q.csv", N, [])])
    with pytest.raises(ValueError, match="needs at least two"):
        folds([make_file("one/a.csv", N, [WINDOW]), make_file("one/b.csv", N, [WINDOW])])


def test_the_held_out_category_is_scored_with_what_the_others_chose() -> None:
    every_window = {f.name: [WINDOW[0]] for f in _corpus() if f.windows}
    # "tuned" finds every window and also fires on alpha where nothing is; it wins where alpha
    # is not judged. "plain" finds every window and nothing else.
    tuned = _detects({**every_window, "alpha/a1.csv": [100, 150, 160, 170, 180], "alpha/a2.csv": [100, 150]})
    tuned_beta_miss = _detects({k: v for k, v in every_window.items() if not k.startswith("beta")})
    candidates = {"plain": _detects(every_window), "misses beta": tuned_beta_miss, "noisy on alpha": tuned}
    result = out_of_fold(_corpus(), candidates, STANDARD)
    by_fold = {c.held_out[0]: c for c in result.choices}
    # holding out beta, "misses beta" ties "plain" on the rest: the first maximum is kept
    assert by_fold["beta"].setting == "plain"
    assert normalised(result.per_category["beta"]) == pytest.approx(100.0)
    # every fold's threshold and setting come from the other folds' files only
    for cat, choice in by_fold.items():
        train = [f for f in _corpus() if category(f.name) not in choice.held_out]
        assert choice.train_score == pytest.approx(score_corpus(train, candidates[choice.setting], STANDARD).score)
        test = [f for f in _corpus() if category(f.name) in choice.held_out]
        held = score_at_threshold(test, candidates[choice.setting], STANDARD, choice.threshold)
        assert choice.raw == pytest.approx(held.raw), cat
    # pooled: one normalisation over the held-out parts, as NAB normalises a corpus
    pooled = 100.0 * (result.raw - result.null) / (result.perfect - result.null)
    assert result.score == pytest.approx(pooled)
    assert result.null == pytest.approx(-4.0)  # four windows, each missed costs fn = 1


def test_a_setting_tuned_on_one_category_does_not_score_it_in_sample() -> None:
    """Only alpha's own files favour "alpha only": out of fold, alpha never gets it."""
    alpha_only = _detects({"alpha/a1.csv": [100], "alpha/a2.csv": [100]})
    everywhere_late = _detects({f.name: [WINDOW[1]] for f in _corpus() if f.windows})
    candidates = {"alpha only": alpha_only, "late everywhere": everywhere_late}
    result = out_of_fold(_corpus(), candidates, STANDARD)
    alpha = next(c for c in result.choices if c.held_out == ["alpha"])
    assert alpha.setting == "late everywhere"
    in_sample_alpha = score_corpus([f for f in _corpus() if f.name.startswith("alpha/")], alpha_only, STANDARD)
    assert normalised(result.per_category["alpha"]) < in_sample_alpha.score
