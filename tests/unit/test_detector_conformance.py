"""One conformance suite for every detector of the protocol in detectors/base.py: checkpoint round
trip, series appearing and vanishing, NaN and huge values, determinism, and a minimum ROC-AUC on
labelled data from the generator."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest

from detectors.base import Block, Detector
from detectors.peers import PeerDetector
from detectors.univariate import Univariate
from telemetry_gen.generator import GenConfig, Generation


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], Detector]
    independent_series: bool  # a series' scores do not depend on which other series are present
    labelled: Callable[[], tuple[list[Block], list[np.ndarray]]]  # blocks, and per block a 0/1 label per row
    min_auc: float


def synthetic_blocks(seed: int, ticks: int = 300, series: int = 12) -> list[Block]:
    rng = np.random.default_rng(seed)
    base = rng.normal(0, 5, series)
    blocks = []
    for k in range(ticks):
        values = base + rng.standard_t(4, series)
        values[rng.random(series) < 0.03] = np.nan
        blocks.append(Block.of(30.0 * k, np.arange(series), values, groups=np.arange(series) // 4))
    return blocks


@cache
def straggler_clocks() -> tuple[list[Block], list[np.ndarray]]:
    """GPU SM clocks per tick, grouped by job; positives: the straggler and the power-braked GPUs
    after their faults' onsets."""
    gen = Generation(
        GenConfig(realism="clean", gpus=256, hours=1.5, interval=30, seed=11, faults="gpu_straggler=1,psu_failure=1")
    )
    bad: dict[str, tuple[float, float]] = {}
    for f in gen.faults:
        for e in f.affected if f.kind == "psu_failure" else [f.root]:
            bad[e] = (f.onset, f.end)
    blocks, labels = [], []
    index: dict[str, int] = {}
    for tick in gen.ticks():
        g = next(f for f in tick.frames if f.measurement == "gpu")
        t = tick.time_ns / 1e9
        ids = g.tags["gpu"]
        rows = np.array([index.setdefault(str(i), len(index)) for i in ids])
        jobs = np.unique(g.tags["job"], return_inverse=True)[1]
        jobs[g.tags["job"] == "idle"] = -1
        blocks.append(Block(t, rows, g.fields["DCGM_FI_DEV_SM_CLOCK"].as_float()[:, None], jobs.astype(np.int64)))
        labels.append(np.array([1 if str(i) in bad and bad[str(i)][0] < t < bad[str(i)][1] else 0 for i in ids]))
    return blocks, labels


@cache
def cooling_shift() -> tuple[list[Block], list[np.ndarray]]:
    """Node inlet temperatures; positives: the nodes of the rack whose cooling fails, at the first
    tick after onset (later ticks of the fault are neither: the detector alarms once per incident
    and then re-learns)."""
    seed = next(
        s
        for s in range(100)
        if Generation(GenConfig(realism="clean", gpus=256, hours=4, interval=30, seed=s, faults="rack_cooling=1"))
        .faults[0]
        .onset
        > 1767225600 + 7200
    )
    gen = Generation(GenConfig(realism="clean", gpus=256, hours=4, interval=30, seed=seed, faults="rack_cooling=1"))
    fault = gen.faults[0]
    hit = set(fault.affected)
    blocks, labels = [], []
    for k, tick in enumerate(gen.ticks()):
        node = next(f for f in tick.frames if f.measurement == "node")
        t = tick.time_ns / 1e9
        rows = np.array([int(str(n)[1:]) for n in node.tags["node"]])
        values = node.fields["inlet_temp_c"].as_float()
        label = np.array([1 if str(n) in hit and fault.onset < t <= fault.onset + 30 else 0 for n in node.tags["node"]])
        label[[str(n) in hit and t > fault.onset + 30 for n in node.tags["node"]]] = -1  # not scored
        blocks.append(Block(t, rows, values[:, None]))
        labels.append(label)
        del k
    return blocks, labels


CASES = [
    Case("univariate", lambda: Univariate(1), True, cooling_shift, 0.95),
    Case("peer", lambda: PeerDetector(1, abs_floor=15.0, rel_floor=0.01), False, straggler_clocks, 0.95),
]


def run(detector: Detector, blocks: list[Block]) -> list[np.ndarray]:
    return [detector.score_and_learn(b) for b in blocks]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_checkpoint_round_trip_gives_identical_scores(case: Case) -> None:
    blocks = synthetic_blocks(1)
    original = case.make()
    run(original, blocks[:150])
    restored = case.make()
    restored.load_state(pickle.loads(pickle.dumps(original.state_dict())))
    assert same(run(original, blocks[150:]), run(restored, blocks[150:]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_determinism(case: Case) -> None:
    blocks = synthetic_blocks(2)
    assert same(run(case.make(), blocks), run(case.make(), blocks))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_series_appearing_and_vanishing(case: Case) -> None:
    blocks = synthetic_blocks(3, series=12)
    # series 8-11 appear half way; series 0-3 vanish at two thirds
    varied = []
    for k, b in enumerate(blocks):
        keep = np.ones(len(b.series), dtype=np.bool_)
        if k < 150:
            keep &= b.series < 8
        if k > 200:
            keep &= b.series >= 4
        assert b.groups is not None
        varied.append(Block(b.t, b.series[keep], b.values[keep], b.groups[keep]))
    scores = run(case.make(), varied)
    for b, s in zip(varied, scores, strict=True):
        assert s.shape == b.values.shape
        assert not np.isinf(s).any()
    if case.independent_series:  # series 4-7 were there all along: their scores must not care
        alone = run(
            case.make(),
            [
                Block(b.t, b.series[(b.series >= 4) & (b.series < 8)], b.values[(b.series >= 4) & (b.series < 8)])
                for b in varied
            ],
        )
        middle = [s[(b.series >= 4) & (b.series < 8)] for b, s in zip(varied, scores, strict=True)]
        assert same(middle, alone)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_nan_and_huge_values_do_not_poison_state(case: Case) -> None:
    blocks = synthetic_blocks(4)
    detector = case.make()
    run(detector, blocks[:150])
    poisoned = blocks[150].values.copy()
    poisoned[0] = np.nan
    poisoned[1] = 1.4e14  # a DCGM blank that slipped through
    s = detector.score_and_learn(Block(blocks[150].t, blocks[150].series, poisoned, blocks[150].groups))
    assert np.isnan(s[0]).all()
    later = run(detector, blocks[151:])
    assert all(not np.isinf(x).any() for x in later)
    assert np.isfinite(later[-1][2:]).any()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_minimum_roc_auc_on_labelled_generated_data(case: Case) -> None:
    blocks, labels = case.labelled()
    scores = run(case.make(), blocks)
    s = np.concatenate([x[:, 0] for x in scores])
    y = np.concatenate(labels)
    ok = ~np.isnan(s) & (y >= 0)
    assert y[ok].sum() >= 4
    assert roc_auc(s[ok], y[ok]) >= case.min_auc


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann-Whitney: the chance a positive outscores a negative (ties count half)."""
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
