"""Honest NAB figures: settings chosen by leave-one-category-out cross-validation.

A detector's settings chosen on the same files it is scored on give an in-sample figure, which an
operator's own series would not see. Here every candidate setting scores every file once (the
detector is online, so a file's scores do not depend on the others); then, fold by fold, the
setting and NAB's corpus-wide threshold are chosen on the training part only (NAB's own sweep,
on the profile in question) and applied to the held-out part. The held-out parts' raw scores,
null and perfect scores are pooled across folds and normalised once, as NAB normalises a corpus.

Folds are categories (NAB's folders). A category without labelled windows (artificialNoAnomaly)
has no null or perfect score of its own, so it cannot be judged alone: it joins the fold of the
category whose name it shares the most with (artificialWithAnomaly), where it still costs its
false positives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from detectors.nab import NabFile, Profile, _evaluate, _file_geometry, _FileGeometry, _optimise, _prepare, _row_values

__all__ = ["FoldChoice", "OutOfFold", "category", "folds", "normalised", "out_of_fold"]

Scores = Mapping[str, npt.ArrayLike]


def category(name: str) -> str:
    """A file's category: its folder under data/."""
    return name.split("/", 1)[0] if "/" in name else ""


def folds(corpus: list[NabFile]) -> dict[str, list[str]]:
    """Category -> the categories judged with it; windowless categories join their closest sibling."""
    with_windows: dict[str, bool] = {}
    for f in corpus:
        cat = category(f.name)
        with_windows[cat] = with_windows.get(cat, False) or bool(f.windows)
    judged = sorted(c for c, has in with_windows.items() if has)
    if len(judged) < 2:
        raise ValueError(f"{len(judged)} categories with labelled windows: leaving one out needs at least two")
    out: dict[str, list[str]] = {c: [c] for c in judged}
    for cat in sorted(c for c, has in with_windows.items() if not has):
        out[max(judged, key=lambda c: (_common_prefix(c, cat), c))].append(cat)
    return out


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class FoldChoice:
    """What one fold's training part chose, and what it earned on the held-out part."""

    held_out: list[str]
    setting: Any  # the candidate's key
    threshold: float
    train_score: float
    raw: float
    null: float
    perfect: float
    fp: int
    windows_detected: int
    windows: int


@dataclass
class OutOfFold:
    """Pooled held-out score of one profile, with every fold's choice and a per-category split."""

    profile: str
    score: float
    raw: float
    null: float
    perfect: float
    choices: list[FoldChoice]
    per_category: dict[str, FoldChoice] = field(default_factory=dict)


def out_of_fold(corpus: list[NabFile], candidates: Mapping[Any, Scores], profile: Profile) -> OutOfFold:
    """Leave-one-category-out score of choosing among ``candidates`` (setting -> scores of every file)."""
    if not candidates:
        raise ValueError("no candidate settings")
    geometry = {f.name: _file_geometry(f) for f in corpus}
    choices: list[FoldChoice] = []
    per_category: dict[str, FoldChoice] = {}
    for judged, held in folds(corpus).items():
        del judged
        test = [f for f in corpus if category(f.name) in held]
        train = [f for f in corpus if category(f.name) not in held]
        best_key: Any = None
        best_score, best_threshold = -math.inf, math.nan
        for key, scores in candidates.items():
            prep = _prepare(train, scores, [geometry[f.name] for f in train])
            result = _optimise(prep, profile)
            if best_key is None or result.score > best_score:
                best_key, best_score, best_threshold = key, result.score, result.threshold
        assert best_key is not None
        choice = _apply(test, candidates[best_key], profile, best_threshold, geometry)
        choice.held_out, choice.setting, choice.train_score = held, best_key, best_score
        choices.append(choice)
        for cat in held:
            part = [f for f in test if category(f.name) == cat]
            one = _apply(part, candidates[best_key], profile, best_threshold, geometry)
            one.held_out, one.setting, one.train_score = [cat], best_key, best_score
            per_category[cat] = one
    raw = sum(c.raw for c in choices)
    null = sum(c.null for c in choices)
    perfect = sum(c.perfect for c in choices)
    score = 100.0 * (raw - null) / (perfect - null) if perfect > null else math.nan
    return OutOfFold(profile.name, score, raw, null, perfect, choices, per_category)


def _apply(
    files: list[NabFile], scores: Scores, profile: Profile, threshold: float, geometry: Mapping[str, _FileGeometry]
) -> FoldChoice:
    prep = _prepare(files, scores, [geometry[f.name] for f in files])
    result = _evaluate(prep, _row_values(prep, profile), profile, threshold)
    return FoldChoice(
        held_out=[],
        setting=None,
        threshold=threshold,
        train_score=math.nan,
        raw=result.raw,
        null=result.null,
        perfect=result.perfect,
        fp=result.fp,
        windows_detected=result.windows_detected,
        windows=result.windows,
    )


def normalised(choice: FoldChoice) -> float:
    """A held-out part's own normalised score (NaN for a part without windows)."""
    if choice.perfect <= choice.null:
        return math.nan
    return 100.0 * (choice.raw - choice.null) / (choice.perfect - choice.null)
