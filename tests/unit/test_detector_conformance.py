"""One conformance suite for every detector used in production, through the protocol of
detectors/base.py: checkpoint round trip (`state_dict` through pickle, and the whole detector
pickled, as a daemon's checkpoint holds it), entities appearing and vanishing, NaN and huge
values, determinism, a score that changes nothing, and higher = more anomalous (a minimum ROC-AUC
on labelled data from the generator) wherever a detector scores anomalies.

The detectors: `Univariate` (the drift family's scorer of plain series, on `Block`s) and the six
families of the stack (rules, peers, drift, sag, presence, maintenance, on the views the stack
builds). The failure predictor is not a detector of this protocol (detectors/base.py says why).

Synthetic data (`synthetic_blocks`) is a few series of heavy-tailed noise; a family reads each
block as a small fleet's telemetry (`fleet_ticks`): series i is GPU i % 4 of node i // 4 (one job
per node), its NIC and the NIC's optic, the value moving the GPU's clock, power, temperature and
Xid, the optic's receive power and the NIC's pause frames."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pytest

from detectors.anomaly import Anomaly
from detectors.base import Block, Detector, Family
from detectors.stack import DetectorStack, default_drift
from detectors.stack.cohorts import PeerRules
from detectors.stack.history import DriftWatch, SagWatch
from detectors.stack.maintenance import Maintenance
from detectors.stack.presence import Presence
from detectors.stack.rules import HardRules
from detectors.stack.view import MeasurementTick
from detectors.univariate import Univariate
from ingest.frames import Column, Frame
from telemetry_gen.generator import GenConfig, Generation
from vocab.catalog import FieldType
from vocab.thresholds import DetectorSettings

SETTINGS = DetectorSettings()
Tick = tuple[float, list[MeasurementTick]]
Output = Any  # a Block detector: its scores; a family: (each frame's scores, the tick's findings)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], Detector[Any]]
    independent_series: bool  # an entity's scores do not depend on which other entities are present
    # runs a fresh detector on labelled data: (scores, 0/1 labels) for the ROC-AUC; None: the
    # detector scores no anomalies (maintenance: what it holds back, said in its docstring)
    labelled: Callable[[Detector[Any]], tuple[np.ndarray, np.ndarray]] | None
    min_auc: float = 0.0
    known_rows: bool = False  # rows: every entity it knows of the frame's measurement (presence)
    missing_scores_nan: bool = True  # a row whose values are missing scores NaN

    @property
    def family(self) -> Family | None:
        """A fresh one, if the detector is a family of the stack (None: a detector of plain series)."""
        made = self.make()
        return made if isinstance(made, Family) else None

    def frames(self, blocks: list[Block]) -> Sequence[Any]:
        """The blocks as this detector's frames: as they are, or as the fleet's ticks."""
        return blocks if self.family is None else fleet_ticks(blocks)


# ---------------------------------------------------------------- synthetic frames


def synthetic_blocks(seed: int, ticks: int = 300, series: int = 12) -> list[Block]:
    """Heavy-tailed noise around each series' own level, 3 % missing; series 6 falls by 30 from
    tick 100 on (a straggler, a sagging optic), series 5 reports nothing from tick 160 to 219."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0, 5, series)
    blocks = []
    for k in range(ticks):
        values = base + rng.standard_t(4, series)
        values[rng.random(series) < 0.03] = np.nan
        if k >= 100:
            values[6 % series] -= 30.0
        rows = np.arange(series)
        if 160 <= k < 220:
            rows = rows[rows != 5]
        blocks.append(Block.of(30.0 * k, rows, values[rows]))
    return blocks


def fleet_ticks(blocks: Sequence[Block]) -> list[Tick]:
    """The blocks as a small fleet's telemetry (module docstring), each tick's frames viewed as the
    stack views them (entities indexed in order of appearance, counter rates)."""
    builder = DetectorStack(30.0)
    pauses: dict[int, float] = {}
    out: list[Tick] = []
    for b in blocks:
        series, v = b.series.tolist(), b.values[:, 0]
        for s, x in zip(series, v.tolist(), strict=True):
            pauses[s] = pauses.get(s, 0.0) + 30.0 * (20_000.0 if x > 5 else 10.0)  # a storm now and then
        node = np.array([f"n{s // 4:05d}" for s in series], dtype=object)
        nic = np.array([f"n{s // 4:05d}-nic{s % 4}" for s in series], dtype=object)
        gpu = {
            "gpu": np.array([f"n{s // 4:05d}-gpu{s % 4}" for s in series], dtype=object),
            "node": node,
            "job": np.array([f"j{s // 4}" for s in series], dtype=object),
        }
        frames = {
            "gpu": _frame(
                "gpu",
                b,
                gpu,
                {
                    "DCGM_FI_DEV_SM_CLOCK": 1900.0 + 10.0 * v,
                    "DCGM_FI_DEV_POWER_USAGE": 600.0 + 5.0 * v,
                    "DCGM_FI_DEV_GPU_TEMP": 60.0 + v,
                    "DCGM_FI_DEV_GPU_UTIL": np.full(len(series), 99.0),
                    "DCGM_FI_DEV_XID_ERRORS": np.where(v > 6, 79.0, 0.0),
                },
            ),
            "optic": _frame("optic", b, {"optic": nic + "-optic", "node": node}, {"rx_power_dbm": -3.0 + 0.3 * v}),
            "nic": _frame(
                "nic",
                b,
                {"nic": nic, "node": node},
                {"tx_prio3_pause": np.array([pauses[s] for s in series]), "symbol_error": np.zeros(len(series))},
            ),
        }
        out.append((b.t, builder.prepare(b.t, frames)))
    return out


def _frame(name: str, b: Block, tags: dict[str, np.ndarray], fields: dict[str, np.ndarray]) -> Frame:
    """A measurement's rows at the block's tick; a row whose block value is missing has no fields."""
    have = ~np.isnan(b.values[:, 0])
    columns = {k: Column(FieldType.FLOAT, np.where(have, x, np.nan), have.copy()) for k, x in fields.items()}
    return Frame(name, np.full(len(b.series), int(b.t * 1e9), dtype=np.int64), tags, columns)


# ---------------------------------------------------------------- running a detector


# the stack has maintenance learn each frame as it indexes it (where each new entity sits: a
# judged frame no longer says which of its entities are new); on its own it learns every frame
LEARNS_AS_INDEXED = (Maintenance,)


def step(family: Family, t: float, views: list[MeasurementTick], scored: bool = True) -> Output:
    """One tick as the stack runs it: each frame the family watches scored (when `scored`) and
    judged, then the tick closed."""
    scores, found = [], []
    for m in views:
        if not family.watches(m.name):
            continue
        if isinstance(family, LEARNS_AS_INDEXED):
            family.learn(m)
        if scored:
            scores.append(family.score(m))
        found += family.judge(m)
    return tuple(scores), family.close(t, found)


def run(detector: Detector[Any], frames: Sequence[Any], scored: bool = True) -> list[Output]:
    """Block detectors score and learn each block; families step through the ticks (blocks are
    read as the fleet's ticks first)."""
    if not isinstance(detector, Family):
        return [detector.score_and_learn(b) for b in frames]
    ticks = fleet_ticks(frames) if frames and isinstance(frames[0], Block) else frames
    return [step(detector, t, views, scored) for t, views in ticks]


def same(a: object, b: object) -> bool:
    """Outputs equal: arrays to the bit (NaN where NaN), findings field by field."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def scores_of(out: list[Output]) -> list[np.ndarray]:
    """Every frame's scores, in order."""
    return [s for o in out for s in (o[0] if isinstance(o, tuple) else (o,))]


def findings_of(out: list[Output]) -> list[Anomaly]:
    return [a for o in out if isinstance(o, tuple) for a in o[1]]


# ---------------------------------------------------------------- labelled data


@dataclass(frozen=True)
class Fleet:
    ticks: list[Tick]
    ids: dict[str, np.ndarray]  # per measurement, the id of each row of its entity index
    faults: dict[str, list[tuple[str, float, float, bool]]]  # entity -> (fault kind, onset, end, its root)


@cache
def fleet() -> Fleet:
    """A generated fleet with one fault of each kind the families below are scored on."""
    faults = (
        "gpu_straggler=2,psu_failure=1,optic_degradation=2,gpu_fell_off_bus=2,pfc_storm=1,gpu_hbm_ecc=1,rack_cooling=1"
    )
    gen = Generation(GenConfig(realism="clean", gpus=128, hours=3, interval=30, seed=12, faults=faults))
    builder = DetectorStack(30.0)
    ticks = []
    for tick in gen.ticks():
        t = tick.time_ns / 1e9
        ticks.append((t, builder.prepare(t, {f.measurement: f for f in tick.frames})))
    touched: dict[str, list[tuple[str, float, float, bool]]] = {}
    for f in gen.faults:
        for entity in {f.root, *f.affected}:
            touched.setdefault(entity, []).append((f.kind, f.onset, f.end, entity == f.root))
    return Fleet(ticks, {name: ent.index.ids for name, ent in builder.entities.items()}, touched)


def worst_per_entity(kinds: tuple[str, ...]) -> Callable[[Detector[Any]], tuple[np.ndarray, np.ndarray]]:
    """A family on the fleet, each entity's highest score over its columns: positives are the
    roots of faults of these kinds at their worst during the fault, negatives the entities no
    fault touches at their worst over the run (an entity another fault touches is left out)."""

    def labelled(family: Detector[Any]) -> tuple[np.ndarray, np.ndarray]:
        assert isinstance(family, Family)
        data = fleet()
        worst: dict[tuple[str, str], float] = {}
        for t, views in data.ticks:
            watched = [m for m in views if family.watches(m.name)]
            scores, _ = step(family, t, watched)
            for m, s in zip(watched, scores, strict=True):
                ids = data.ids[m.name][: len(s)] if len(s) != len(m.frame) else m.ids
                top = np.max(np.where(np.isnan(s), -np.inf, s), axis=1, initial=-np.inf)
                for entity, x in zip(ids.tolist(), top.tolist(), strict=True):
                    faults = data.faults.get(entity, [])
                    during = any(k in kinds and root and a < t <= b for k, a, b, root in faults)
                    if np.isfinite(x) and (during or not faults):
                        worst[(m.name, entity)] = max(worst.get((m.name, entity), -np.inf), x)
        labels = [any(k in kinds and root for k, _, _, root in data.faults.get(e, [])) for _, e in worst]
        return np.array(list(worst.values())), np.array(labels, dtype=np.int64)

    return labelled


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
    for tick in gen.ticks():
        node = next(f for f in tick.frames if f.measurement == "node")
        t = tick.time_ns / 1e9
        rows = np.array([int(str(n)[1:]) for n in node.tags["node"]])
        values = node.fields["inlet_temp_c"].as_float()
        label = np.array([1 if str(n) in hit and fault.onset < t <= fault.onset + 30 else 0 for n in node.tags["node"]])
        label[[str(n) in hit and t > fault.onset + 30 for n in node.tags["node"]]] = -1  # not scored
        blocks.append(Block(t, rows, values[:, None]))
        labels.append(label)
    return blocks, labels


def first_tick_after_onset(detector: Detector[Any]) -> tuple[np.ndarray, np.ndarray]:
    blocks, labels = cooling_shift()
    s = np.concatenate([x[:, 0] for x in run(detector, blocks)])
    y = np.concatenate(labels)
    return s[y >= 0], y[y >= 0]


def maintenance() -> Maintenance:
    held = Maintenance()
    held.announce(["n00001"], 3000.0, 6000.0)  # synthetic time: ticks 100-199
    return held


CASES = [
    Case("univariate", lambda: Univariate(1), True, first_tick_after_onset, 0.95),
    Case(
        "rules",
        lambda: HardRules(SETTINGS.rules),
        True,
        worst_per_entity(("gpu_hbm_ecc", "pfc_storm", "psu_failure", "gpu_fell_off_bus")),
        0.95,
    ),
    Case("peers", lambda: PeerRules(SETTINGS.peers, 30.0), False, worst_per_entity(("gpu_straggler",)), 0.95),
    Case(
        "drift", lambda: DriftWatch(SETTINGS.drift, default_drift), True, worst_per_entity(("optic_degradation",)), 0.95
    ),
    Case("sag", lambda: SagWatch(SETTINGS.sag, 30.0), True, worst_per_entity(("optic_degradation",)), 0.95),
    Case(
        "presence",
        lambda: Presence(SETTINGS.presence, 30.0),
        False,
        worst_per_entity(("gpu_fell_off_bus",)),
        0.95,
        known_rows=True,
        missing_scores_nan=False,
    ),
    Case("maintenance", maintenance, True, None, missing_scores_nan=False),
]


# ---------------------------------------------------------------- the checks


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_checkpoint_round_trip_gives_identical_outputs(case: Case) -> None:
    blocks = synthetic_blocks(1)
    original = case.make()
    run(original, blocks[:150])
    restored = case.make()
    restored.load_state(pickle.loads(pickle.dumps(original.state_dict())))
    later = run(original, blocks[150:])
    assert same(later, run(restored, blocks[150:]))
    assert any(np.isfinite(s).any() for s in scores_of(later))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_whole_detector_pickled_carries_on_as_if_it_had_never_stopped(case: Case) -> None:
    """A daemon checkpoints the whole detect loop, pickled (its file and restricted loader:
    tests/unit/test_checkpoint.py): each detector comes back from a pickle scoring and finding
    what it would have."""
    frames = case.frames(synthetic_blocks(5))
    original = case.make()
    run(original, frames[:150])
    restored = pickle.loads(pickle.dumps(original))
    assert same(run(original, frames[150:]), run(restored, frames[150:]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_determinism(case: Case) -> None:
    blocks = synthetic_blocks(2)
    assert same(run(case.make(), blocks), run(case.make(), blocks))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_score_changes_nothing(case: Case) -> None:
    """Scoring a frame, once or twice, leaves what follows as it was; `score_and_learn` scores
    what `score` does."""
    frames = case.frames(synthetic_blocks(6))
    scored, unscored, learner = case.make(), case.make(), case.make()
    if not isinstance(scored, Family):
        for b in frames:
            before = scored.score(b)
            assert same(before, scored.score(b)) and same(before, scored.score_and_learn(b))
        return
    assert isinstance(unscored, Family) and isinstance(learner, Family)
    found, found_unscored = [], []
    for k, (t, views) in enumerate(frames):
        for m in views:
            if scored.watches(m.name):
                assert same(scored.score(m), scored.score(m))
            if k < 100 and learner.watches(m.name):
                assert same(learner.score(m), learner.score_and_learn(m))
        found += step(scored, t, views, scored=False)[1]
        found_unscored += step(unscored, t, views, scored=False)[1]
    assert same(found, found_unscored)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_entities_appearing_and_vanishing(case: Case) -> None:
    blocks = synthetic_blocks(3, series=12)
    # series 8-11 appear half way; series 0-3 vanish at two thirds
    varied = []
    for k, b in enumerate(blocks):
        keep = np.ones(len(b.series), dtype=np.bool_)
        if k < 150:
            keep &= b.series < 8
        if k > 200:
            keep &= b.series >= 4
        varied.append(Block(b.t, b.series[keep], b.values[keep]))
    frames = case.frames(varied)
    out = run(case.make(), frames)
    for rows, s in zip(_rows(case, frames), scores_of(out), strict=True):
        assert s.shape[0] == rows
        assert not np.isinf(s).any()
    if case.independent_series:  # series 4-7 were there all along: their scores must not care
        middle = [(b.series >= 4) & (b.series < 8) for b in varied]
        alone = case.frames([Block(b.t, b.series[m], b.values[m]) for b, m in zip(varied, middle, strict=True)])
        ids = _ids(alone)
        assert same(_by_entity(case, frames, out, ids), _by_entity(case, alone, run(case.make(), alone), ids))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_nan_and_huge_values_do_not_poison_state(case: Case) -> None:
    blocks = synthetic_blocks(4)
    poisoned = blocks[150].values.copy()
    poisoned[0] = np.nan
    poisoned[1] = 1.4e14  # a DCGM blank that slipped through
    blocks[150] = Block(blocks[150].t, blocks[150].series, poisoned)
    out = run(case.make(), case.frames(blocks))
    for s in scores_of(out[150:151]):
        assert not case.missing_scores_nan or np.isnan(s[0]).all()
    assert all(not np.isinf(x).any() for x in scores_of(out[151:]))
    assert any(np.isfinite(x[2:]).any() for x in scores_of(out[-1:]))


@pytest.mark.parametrize("case", [c for c in CASES if c.labelled is not None], ids=lambda c: c.name)
def test_higher_scores_are_more_anomalous_on_labelled_generated_data(case: Case) -> None:
    assert case.labelled is not None
    s, y = case.labelled(case.make())
    ok = ~np.isnan(s)
    assert y[ok].sum() >= 2 and (y[ok] == 0).sum() >= 4
    assert roc_auc(s[ok], y[ok]) >= case.min_auc


def _rows(case: Case, frames: Sequence[Any]) -> list[int]:
    """Rows each frame's scores should have: the frame's, or every entity known of its measurement."""
    family = case.family
    if family is None:
        return [len(b.series) for b in frames]
    watched = [m for _, views in frames for m in views if family.watches(m.name)]
    return [m.n_entities if case.known_rows else len(m.frame) for m in watched]


def _ids(frames: Sequence[Any]) -> set[str]:
    if frames and isinstance(frames[0], Block):
        return {str(s) for b in frames for s in b.series.tolist()}
    return {str(e) for _, views in frames for m in views for e in m.ids.tolist()}


def _by_entity(case: Case, frames: Sequence[Any], out: list[Output], keep: set[str]) -> list[dict[str, np.ndarray]]:
    """Each tick's scores by entity (and measurement), of the entities in `keep` only."""
    family = case.family
    by_tick = []
    for frame, o in zip(frames, out, strict=True):
        if family is None:
            pairs = [(str(e), o[r]) for r, e in enumerate(frame.series.tolist())]
        else:
            watched = [m for m in frame[1] if family.watches(m.name)]
            pairs = [
                (f"{m.name}:{e}", s[r])
                for m, s in zip(watched, o[0], strict=True)
                for r, e in enumerate(m.ids.tolist())
            ]
        by_tick.append({key: value for key, value in pairs if key.rpartition(":")[2] in keep})
    return by_tick


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
