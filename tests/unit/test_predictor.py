"""Failure prediction: features against a one-at-a-time reference, model files that round-trip or
fail clearly, and the once-per-episode rule."""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sklearn
import skops.io
from numpy.typing import NDArray

from aiops.default_model import generated_history, load_or_train_default
from detectors.base import FloatArray
from detectors.predict.features import FEATURES, HEAT_SLOPE_PRIOR_C_PER_W, Ewma, PrecursorFeatures, reference_ewma
from detectors.predict.model import (
    FORMAT_VERSION,
    HORIZON_S,
    MAGIC,
    Dataset,
    ModelError,
    Predictor,
    card_path,
    collect,
    disagreeing_folds,
    labels_for,
    load,
    save,
    train,
)
from detectors.predict.online import (
    RE_ARM_S,
    OnlinePredictor,
    Prediction,
    PredictionReport,
    evaluate_predictions,
)
from detectors.stack.summary import CohortSummary
from ingest.frames import Frame

SMALL = {
    "gpus": 128,
    "hours": 10.0,
    "interval": 120.0,
    "seeds": [7],
    "faults": "gpu_hbm_ecc=4,gpu_thermal=4,optic_degradation=4,rack_cooling=3,gpu_straggler=1",
}


@cache
def small_model() -> Predictor:
    dataset = Dataset()
    ticks, truth = generated_history(7, SMALL)
    collect(ticks, truth, dataset, every_s=600)
    return train(dataset, sources=["test"])


def test_ewma_matches_the_reference_on_irregular_times_with_gaps() -> None:
    rng = np.random.default_rng(1)
    times = np.cumsum(rng.uniform(5, 120, 60)).tolist()
    series = rng.normal(0, 1, (60, 3))
    series[rng.random((60, 3)) < 0.2] = np.nan
    avg = Ewma(300.0)
    got = []
    for t, row in zip(times, series, strict=True):
        avg.update(t, np.arange(3), row)
        got.append(avg.value[:3].copy())
    for j in range(3):
        expected = reference_ewma(times, series[:, j].tolist(), 300.0)
        np.testing.assert_allclose([g[j] for g in got], expected, equal_nan=True)


def test_features_of_a_creeping_gpu_and_a_sagging_optic_move_the_right_way() -> None:
    ticks, truth = generated_history(5, {**SMALL, "faults": "gpu_thermal=1,optic_degradation=1", "hours": 8.0})
    features = PrecursorFeatures()
    thermal = next(f for f in truth if f["kind"] == "gpu_thermal")
    optic = next(f for f in truth if f["kind"] == "optic_degradation")
    for t, frames in ticks:
        features.update(t, frames)
        if t >= float(thermal["onset"]) - 60 and t >= float(optic["onset"]) - 60:
            break
    ids, X = features.matrix("gpu")
    col = FEATURES["gpu"].index("heat_vs_node_10m")
    assert ids[int(np.nanargmax(X[:, col]))] == thermal["root"]
    ids, X = features.matrix("optic")
    col = FEATURES["optic"].index("rx_vs_own_12h")
    assert ids[int(np.nanargmin(X[:, col]))] == optic["root"]


def test_labels_mark_the_horizon_and_drop_failed_entities() -> None:
    truth = [{"kind": "gpu_hbm_ecc", "root": "g1", "onset": 10_000.0, "end": 12_000.0}]
    ids = np.array(["g0", "g1"], dtype=object)
    y, ttf, keep = labels_for("gpu", ids, 5_000.0, truth, 6 * 3600)
    assert y.tolist() == ["none", "gpu_hbm_ecc"] and ttf[1] == 5_000.0 and keep.all()
    y, _, keep = labels_for("gpu", ids, 11_000.0, truth, 6 * 3600)
    assert keep.tolist() == [True, False]
    y, _, _ = labels_for("gpu", ids, 10_000.0 - 7 * 3600, truth, 6 * 3600)
    assert y.tolist() == ["none", "none"]


def test_model_round_trips_through_save_and_load_with_identical_outputs(tmp_path: Path) -> None:
    model = small_model()
    path = tmp_path / "m.skops"
    save(model, path)
    loaded = load(path)
    X = np.random.default_rng(0).normal(0, 1, (50, len(FEATURES["gpu"])))
    for a, b in zip(model.probabilities("gpu", X), loaded.probabilities("gpu", X), strict=True):
        assert np.array_equal(a, b, equal_nan=True) if a.dtype != object else (a == b).all()
    card = card_path(path).read_text()
    assert "features" in card and "sklearn" in card and "training_data" in card


def test_a_failure_kind_is_predicted_from_its_own_evidence_only() -> None:
    """An HBM failure is read from memory errors, never from a GPU's heat: two GPUs with the same
    memory-error history get the same HBM probability however far apart their heat and power are
    (the single classifier before warned of HBM failures on idle GPUs with no error at all), and
    each kind's evidence is on the card."""
    model = small_model()
    gpu = model.models["gpu"]
    assert set(gpu.classifiers) == {"gpu_hbm_ecc", "gpu_thermal"}
    names = FEATURES["gpu"]
    assert model.card["evidence"]["gpu"]["gpu_hbm_ecc"] == [names[c] for c in gpu.columns["gpu_hbm_ecc"]]
    assert "heat_vs_node_10m" not in model.card["evidence"]["gpu"]["gpu_hbm_ecc"]
    rng = np.random.default_rng(3)
    calm = rng.normal(0.0, 0.5, (50, len(names)))
    calm[:, names.index("sbe_per_h_30m") : names.index("remap_per_h_3h") + 1] = 0.0
    hot = calm.copy()
    for name in ("heat_vs_node_10m", "heat_vs_node_3h", "heat_vs_node_trend", "heat_vs_node_rise_12h"):
        hot[:, names.index(name)] += 12.0  # a GPU far hotter than its mates, and rising
    per_kind_calm, per_kind_hot = gpu.probabilities(calm), gpu.probabilities(hot)
    hbm = list(gpu.classifiers).index("gpu_hbm_ecc")
    np.testing.assert_array_equal(per_kind_calm[:, hbm], per_kind_hot[:, hbm])
    thermal = list(gpu.classifiers).index("gpu_thermal")
    assert per_kind_hot[:, thermal].mean() > per_kind_calm[:, thermal].mean()
    p, which, _ = model.probabilities("gpu", hot)
    np.testing.assert_array_equal(p, per_kind_hot.max(axis=1))  # the likeliest kind, at its own probability
    assert which.tolist() == [list(gpu.classifiers)[i] for i in per_kind_hot.argmax(axis=1)]


def test_the_card_shows_what_each_calibration_fold_can_answer_at_most() -> None:
    """The card's `calibration_folds` is each fold's highest calibrated probability: no input gets
    more from that fold, and the strongest evidence in training gets exactly it."""
    model = small_model()
    folds = model.card["calibration_folds"]
    dataset = Dataset()
    ticks, truth = generated_history(7, SMALL)
    collect(ticks, truth, dataset, every_s=600)
    X, _, _ = dataset.arrays("gpu")
    extreme = np.random.default_rng(5).normal(0, 30, (400, len(FEATURES["gpu"])))
    for failure, classifier in model.models["gpu"].classifiers.items():
        cols = model.models["gpu"].columns[failure]
        tops = folds["top_answer"][failure]
        assert len(tops) == len(classifier.calibrated_classifiers_) == 3
        for fold, top in zip(classifier.calibrated_classifiers_, tops, strict=True):
            seen = fold.predict_proba(X[:, cols])[:, 1].max()
            assert seen == pytest.approx(top, abs=1e-4)
            assert fold.predict_proba(extreme[:, cols])[:, 1].max() <= top + 1e-4
    assert folds["disagreeing"] == disagreeing_folds(folds["top_answer"])


def test_folds_that_top_out_far_apart_are_named() -> None:
    # the optic classifier shipped before 9dcb21c4e45b, and one whose folds agree
    tops = {"optic_degradation": [0.69, 0.007, 0.62], "gpu_hbm_ecc": [1.0, 0.99, 1.0], "rack_cooling": [0.7, 0.4, 0.6]}
    assert disagreeing_folds(tops) == ["optic_degradation"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no model at"),
        (b"not a model", "unreadable"),
        (MAGIC + b'{"format": 999}\n', "format 999"),
        (MAGIC + json.dumps({"format": FORMAT_VERSION, "sklearn": "0.1"}).encode() + b"\n", "scikit-learn 0.1"),
        (pickle.dumps({"format": 1, "predictor": None}), "pickle"),
    ],
    ids=["missing", "corrupt", "future-format", "other-sklearn", "old-pickle"],
)
def test_bad_model_files_give_a_clear_error_with_the_retrain_path(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "m.skops"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelError, match=message) as err:
        load(path)
    assert "aiops predictor train" in str(err.value)


class _RunsCode:
    """Unpickling this makes a directory: what a swapped model file could do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.marker),))


def test_a_model_file_that_would_run_code_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "m.skops"
    path.write_bytes(pickle.dumps(_RunsCode(marker)))
    with pytest.raises(ModelError, match="pickle, which can run code"):
        load(path)
    assert not marker.exists()
    pickle.loads(path.read_bytes())  # what loading it the old way would have done
    assert marker.exists()
    # a well-formed file (right magic, header and checksum) whose body names a callable
    body = skops.io.dumps({"horizon_s": 1.0, "card": "{}", "kinds": {"gpu": {"classifier": os.system}}})
    header = {"format": FORMAT_VERSION, "sklearn": sklearn.__version__, "sha256": hashlib.sha256(body).hexdigest()}
    path.write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + body)
    with pytest.raises(ModelError, match=r"asks for types .*system"):
        load(path)


def test_an_edited_model_file_fails_its_checksum(tmp_path: Path) -> None:
    path = tmp_path / "m.skops"
    save(small_model(), path)
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ModelError, match="checksum"):
        load(path)


def test_a_corrupt_default_model_is_retrained_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "default.skops"
    path.write_bytes(b"\x00garbage")
    model = load_or_train_default(path, SMALL)
    assert isinstance(model, Predictor)
    assert isinstance(load(path), Predictor)  # and it was saved for next time


def test_a_prediction_is_made_once_per_episode() -> None:
    model = small_model()
    ticks, truth = generated_history(9, {**SMALL, "hours": 8.0, "faults": "gpu_hbm_ecc=2,optic_degradation=2"})
    online = OnlinePredictor(model, threshold=0.5, thresholds={}, every_ticks=1, warmup_s=3600)
    predictions: list[Prediction] = []
    for t, frames in ticks:
        predictions += online.update(t, frames)
    assert predictions, "nothing predicted at all"
    last: dict[str, float] = {}
    for p in predictions:  # no repeats every scoring: an entity is predicted again only after its
        if p.update:  # (a warning said again at a higher probability is not another prediction)
            continue
        assert p.entity not in last or p.at - last[p.entity] >= RE_ARM_S  # probability fell for an hour
        last[p.entity] = p.at
    report = evaluate_predictions(predictions, truth)
    assert report.hits >= 1
    for p in predictions:
        assert 0.5 <= p.probability <= 1.0 and p.action and p.horizon_s == HORIZON_S
        assert p.expected_in_s is None or 0 < p.expected_in_s <= p.horizon_s
    assert not math.isnan(report.precision)


class _ScriptedFeatures(PrecursorFeatures):
    """Three GPUs whose features are whatever the test says; the model below reads column 0."""

    def __init__(self) -> None:
        super().__init__()
        self.now = np.zeros(3)

    def update(self, t: float, frames: dict[str, Frame], cohorts: CohortSummary | None = None) -> None:
        pass

    def matrix(self, kind: str) -> tuple[NDArray[np.object_], FloatArray]:
        if kind != "gpu":
            return np.zeros(0, dtype=object), np.zeros((0, 1))
        return np.array(["g0", "g1", "g2"], dtype=object), self.now[:, None]


class _Column0Model(Predictor):
    """P(failure) = feature 0; expected time to it = 2 h unless the feature is 0.99 (then 5 h)."""

    def __init__(self) -> None:
        super().__init__(models={}, horizon_s=HORIZON_S, card={})

    def probabilities(self, kind: str, X: FloatArray) -> tuple[FloatArray, NDArray[np.object_], FloatArray]:
        p = X[:, 0]
        return p, np.full(len(p), "gpu_hbm_ecc", dtype=object), np.where(p == 0.99, 5 * 3600.0, 2 * 3600.0)


def test_a_prediction_needs_two_rounds_above_and_a_failure_expected_within_the_window() -> None:
    features = _ScriptedFeatures()
    online = OnlinePredictor(
        _Column0Model(), persist_rounds=2, emit_within_s=3 * 3600.0, every_ticks=1, warmup_s=0.0, features=features
    )
    rounds = [
        [0.9, 0.99, 0.1],  # g0 above once; g1 above but expected 5 h out
        [0.1, 0.99, 0.9],  # g0 fell back: its count starts again; g2 above once
        [0.9, 0.99, 0.9],  # g2 above twice: predicted; g0 once again
        [0.9, 0.9, 0.9],  # g0 twice: predicted; g1 first round inside the window
        [0.9, 0.9, 0.9],  # g1 twice: predicted; g0 and g2 already in their episodes
    ]
    emitted: list[list[str]] = []
    for n, row in enumerate(rounds):
        features.now = np.array(row)
        emitted.append([p.entity for p in online.update(float(n * 60), {})])
    assert emitted == [[], [], ["g2"], ["g0"], ["g1"]]


def test_a_warning_is_said_again_when_its_probability_has_risen_and_counted_once() -> None:
    """Said at 0.45, a warning is said again, as an update, once its probability has held 0.15
    higher for the rounds a warning needs (0.62, then 0.9), not for every small rise (0.5); the
    quality measures count it once."""
    features = _ScriptedFeatures()
    online = OnlinePredictor(
        _Column0Model(), threshold=0.4, thresholds={}, every_ticks=1, warmup_s=0.0, features=features
    )
    said = []
    for n, level in enumerate([0.45, 0.45, 0.5, 0.62, 0.62, 0.62, 0.9, 0.9]):
        features.now = np.array([level, 0.0, 0.0])
        said += [(p.probability, p.update) for p in online.update(float(n * 60), {})]
    assert said == [(0.45, False), (0.62, True), (0.9, True)]
    came = [{"kind": "gpu_hbm_ecc", "root": "g0", "onset": 3600.0, "end": 7200.0, "fault_id": "f0"}]
    replayed = OnlinePredictor(_Column0Model(), threshold=0.4, thresholds={}, every_ticks=1, warmup_s=0.0)
    predictions = [
        p for n, level in enumerate([0.45, 0.45, 0.62, 0.62]) for p in _score(replayed, float(n * 60), level)
    ]
    assert [p.update for p in predictions] == [False, True]
    report = evaluate_predictions(predictions, came)
    assert (report.predictions, report.hits) == (1, 1)


def _score(online: OnlinePredictor, t: float, level: float) -> list[Prediction]:
    ids = np.array(["g0"], dtype=object)
    return online.score(t, "gpu", ids, np.array([level]), np.array(["gpu_hbm_ecc"], dtype=object), np.array([7200.0]))


def test_the_default_models_evaluation_is_for_the_model_trained_today() -> None:
    """The figures on the default model's card (and in the README) name the model they were
    measured on; training it differently without measuring again fails here."""
    from aiops.default_model import DEFAULT_EVALUATION, DEFAULT_TRAINING
    from detectors.predict.model import fingerprint

    assert DEFAULT_EVALUATION["model"] == fingerprint(**DEFAULT_TRAINING)
    assert DEFAULT_EVALUATION["command"].startswith("scripts/holdout-table")
    trained_on = {(gpus, DEFAULT_TRAINING["interval"], "fat-tree") for gpus in DEFAULT_TRAINING["gpus"]}
    held_out = {(c["gpus"], c["interval_s"], c["topology"]) for c in DEFAULT_EVALUATION["clusters"]}
    assert not held_out & trained_on  # another size, topology or interval than it learnt from
    assert not {c["seed"] for c in DEFAULT_EVALUATION["clusters"]} & set(DEFAULT_TRAINING["seeds"])
    # and with the emission settings the pipeline uses: changing them means measuring again
    online = OnlinePredictor(_Column0Model())
    assert DEFAULT_EVALUATION["emission"] == {
        "threshold": online.threshold,
        "thresholds": online.thresholds,
        "persist_rounds": online.persist_rounds,
        "emit_within_s": online.emit_within_s,
        "warmup_s": online.warmup_s,
    }


def _gpu_frame(
    t: float,
    temp: list[float],
    util: list[float],
    power: list[float],
    energy_mj: list[float] | None = None,
    nodes: int = 1,
    inlet: list[float] | None = None,
) -> dict[str, Frame]:
    """`nodes` nodes' GPUs (eight each, in order) as a stock dcgm-exporter sends them (no job tag;
    the energy counter where given), and each node's inlet temperature from its BMC where given."""
    from ingest.frames import Column
    from vocab.catalog import FieldType

    n = len(temp)
    fields = {
        "DCGM_FI_DEV_GPU_TEMP": Column.of(FieldType.FLOAT, temp),
        "DCGM_FI_DEV_GPU_UTIL": Column.of(FieldType.FLOAT, util),
        "DCGM_FI_DEV_POWER_USAGE": Column.of(FieldType.FLOAT, power),
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": Column.of(FieldType.FLOAT, [0.0] * n),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Column.of(FieldType.FLOAT, [0.0] * n),
    }
    if energy_mj is not None:
        fields["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] = Column.of(FieldType.FLOAT, energy_mj)
    per_node = n // nodes
    node = np.array([f"n{i // per_node:05d}" for i in range(n)], dtype=object)
    gpus = np.array([f"{node[i]}-gpu{i % per_node}" for i in range(n)], dtype=object)
    tags = {"gpu": gpus, "node": node}
    frames = {"gpu": Frame("gpu", np.full(n, int(t * 1e9), dtype=np.int64), tags, fields)}
    if inlet is not None:
        names = np.array([f"n{i:05d}" for i in range(nodes)], dtype=object)
        frames["node"] = Frame(
            "node",
            np.full(nodes, int(t * 1e9), dtype=np.int64),
            {"node": names},
            {"inlet_temp_c": Column.of(FieldType.FLOAT, inlet)},
        )
    return frames


def test_a_gpu_is_held_against_its_node_mates_at_its_power_whatever_state_they_are_in() -> None:
    """Four GPUs busy at the power cap (70 C at 690 W) beside four idle (35 C at 81 W) for six
    hours, then all idle (the job ended): at its power, nobody runs warmer than its mates, and
    nobody has risen against its own past when the job ends. Against the node's temperatures
    alone, the four that were idle all along would look 17 degrees "risen" once their neighbours
    cool; against mates in the same state, a GPU's reference changed with every job that came or
    went. One GPU that runs 8 degrees warmer than its idle mates after the job is seen."""
    features = PrecursorFeatures()
    busy = [99.0] * 4 + [0.0] * 4
    t = 0.0
    for _ in range(6 * 60):
        t += 60.0
        features.update(t, _gpu_frame(t, [70.0] * 4 + [35.0] * 4, busy, [690.0] * 4 + [81.0] * 4))
    for _ in range(60):
        t += 60.0
        features.update(t, _gpu_frame(t, [35.0] * 7 + [43.0], [0.0] * 8, [81.0] * 8))
    _, X = features.matrix("gpu")
    rise = X[:, FEATURES["gpu"].index("heat_vs_node_rise_12h")]
    level = X[:, FEATURES["gpu"].index("heat_vs_node_10m")]
    assert np.all(np.abs(rise[:7]) < 1.0), rise
    assert np.all(np.abs(level[:7]) < 1.0), level
    assert rise[7] > 5.0 and level[7] > 5.0
    assert np.all(X[:, FEATURES["gpu"].index("busy_now")] == 0.0)


def test_a_gpus_heat_has_not_risen_when_its_mates_change_state_whatever_their_offsets() -> None:
    """A node whose eight GPUs run up to 3 degrees apart (manufacturing), under a site slope a little
    off its own (0.057 C/W against 0.065 on the two other nodes: the median over nodes), four busy
    and four idle for six hours; then one busy GPU goes idle, then all do, then all are busy again.
    Held as a level against the node's median (version 5), the GPUs' trends moved 0.7-0.85 degrees
    when one mate went idle and the median crossed between the busy and the idle ones, 2.6 for
    the one that went (harsh validation histories 2011, 2013: most false thermal warnings).
    Against their own past in their state, less their mates' changes, nobody rises; one GPU that
    then creeps 3 degrees does."""
    offsets = [1.5, -1.2, 0.3, 2.0, -0.8, 0.0, -1.5, 0.9]

    def node(slope: float, busy: int, offset: list[float]) -> tuple[list[float], list[float], list[float]]:
        powers = [690.0] * busy + [81.0] * (8 - busy)
        temps = [30.0 + slope * p + o for p, o in zip(powers, offset, strict=True)]
        return temps, [99.0] * busy + [0.0] * (8 - busy), powers

    def rises(features: PrecursorFeatures) -> FloatArray:
        _, X = features.matrix("gpu")
        cols = [FEATURES["gpu"].index(n) for n in ("heat_vs_node_trend", "heat_vs_node_rise_12h")]
        return X[:8][:, cols]

    features = PrecursorFeatures()
    t = 0.0
    for hours, busy, creep in ((6.0, 4, 0.0), (1.0, 3, 0.0), (1.0, 0, 0.0), (1.0, 8, 0.0), (1.0, 8, 3.0)):
        for _ in range(int(hours * 60)):
            t += 60.0
            first = node(0.057, busy, [o + (creep if i == 1 else 0.0) for i, o in enumerate(offsets)])
            parts = [first, node(0.065, 4, [0.0] * 8), node(0.065, 4, [0.0] * 8)]
            temp, util, power = ([x for part in parts for x in part[i]] for i in range(3))
            features.update(t, _gpu_frame(t, temp, util, power, nodes=3))
        if not creep:
            assert np.all(np.abs(rises(features)) < 0.3), (hours, busy, rises(features))
    crept = rises(features)  # an hour into it: most of it against 12 h, part of it against 3 h
    assert crept[1, 1] > 2.0 and crept[1, 0] > 1.0 and np.all(np.abs(np.delete(crept, 1, axis=0)) < 0.6), crept


@pytest.mark.parametrize("inlet_read", [True, False])
def test_a_gpu_has_not_risen_when_its_racks_air_gets_hot_whatever_state_its_mates_are_in(inlet_read: bool) -> None:
    """A node's eight GPUs busy for six hours at 22 C air; then the rack's cooling falters and its
    air is 37 C for an hour (training history 1005: its rack's inlet went from 23 to 37 C) while
    four of them wait idle. Each GPU's change is read against its own past in its state: the busy
    four against a busy past at 22 C, the idle four against an idle past that began in the hot
    air, so the node's median change falls between them. Read above the node's inlet (its BMC's),
    nobody rises; from the temperature alone (a site whose BMCs are not scraped, and version 7)
    the busy four "rose" 5 degrees, as a thermal creep would."""
    slope, offsets = 0.06, [1.5, -1.2, 0.3, 2.0, -0.8, 0.0, -1.5, 0.9]

    def node(air: float, busy: int, offset: list[float]) -> tuple[list[float], list[float], list[float]]:
        powers = [690.0] * busy + [81.0] * (8 - busy)
        temps = [air + 8.0 + slope * p + o for p, o in zip(powers, offset, strict=True)]
        return temps, [99.0] * busy + [0.0] * (8 - busy), powers

    features = PrecursorFeatures()
    t, hour = 0.0, 60
    for k in range(7 * hour):
        t += 60.0
        air, busy = (22.0, 8) if k < 6 * hour else (37.0, 4)
        # two more nodes, half busy throughout: the site's slope is known from the first tick
        parts = [node(air, busy, offsets), node(air, 4, [0.0] * 8), node(air, 4, [0.0] * 8)]
        temp, util, power = ([x for part in parts for x in part[i]] for i in range(3))
        features.update(t, _gpu_frame(t, temp, util, power, nodes=3, inlet=[air] * 3 if inlet_read else None))
    _, X = features.matrix("gpu")
    rise = X[:8, [FEATURES["gpu"].index(n) for n in ("heat_vs_node_trend", "heat_vs_node_rise_12h")]]
    if inlet_read:
        assert np.all(np.abs(rise) < 0.3), rise
    else:
        assert np.all(rise[:4] > 2.0), rise


def test_the_heat_slope_is_read_across_the_fleet_where_nodes_read_their_inlet() -> None:
    """Whole-node jobs: no node ever holds busy and idle GPUs at once, so version 7 read every
    whole-node site with the recorded H200's 0.039. Above each node's own inlet (three nodes, three
    inlets, GPUs 1.5 degrees apart), busy GPUs against idle ones across the fleet give the site's
    0.06."""
    offsets = [1.5, -1.2, 0.3, 2.0, -0.8, 0.0, -1.5, 0.9] * 3
    inlets = [20.0, 24.0, 22.0]
    powers = [690.0] * 16 + [81.0] * 8  # two busy nodes, one idle
    temps = [inlets[i // 8] + 0.06 * p + o for i, (p, o) in enumerate(zip(powers, offsets, strict=True))]
    util = [99.0] * 16 + [0.0] * 8
    features = PrecursorFeatures()
    features.update(60.0, _gpu_frame(60.0, temps, util, powers, nodes=3))
    assert features.heat_slope == HEAT_SLOPE_PRIOR_C_PER_W  # no inlet, no node with both states
    for i in range(2, 120):
        features.update(60.0 * i, _gpu_frame(60.0 * i, temps, util, powers, nodes=3, inlet=inlets))
    assert abs(features.heat_slope - 0.06) < 0.003


def test_a_gpus_past_is_read_at_the_sites_slope_as_it_is_now() -> None:
    """A record begins with every GPU busy, so the site's slope is not known yet and the recorded
    H200's 0.039 C/W stands for twenty minutes where the site runs 0.06; then one node of three
    waits idle for two hours (the fleet shows its slope), and six of its GPUs go back to work
    while two wait on. Read at the slope of their day, the six busy pasts would hold twenty minutes
    14 degrees "hotter" and the two idle GPUs "rise" 2 degrees against them (validation history
    2005, `n00005`); read at today's slope, nobody rises."""
    offsets = [1.5, -1.2, 0.3, 2.0, -0.8, 0.0, -1.5, 0.9]
    inlets = [20.0, 24.0, 22.0]

    def tick(t: float, busy_first: int) -> dict[str, Frame]:
        busy = [busy_first, 8, 8]
        powers = [690.0 if g < b else 81.0 for b in busy for g in range(8)]
        temps = [inlets[i // 8] + 0.06 * p + offsets[i % 8] for i, p in enumerate(powers)]
        util = [99.0 if p > 100 else 0.0 for p in powers]
        return _gpu_frame(t, temps, util, powers, nodes=3, inlet=inlets)

    features = PrecursorFeatures()
    t = 0.0
    for minutes, busy_first in ((20, 8), (120, 0), (30, 6)):
        for _ in range(minutes):
            t += 60.0
            features.update(t, tick(t, busy_first))
    _, X = features.matrix("gpu")
    rise = X[:8, [FEATURES["gpu"].index(n) for n in ("heat_vs_node_trend", "heat_vs_node_rise_12h")]]
    assert np.all(np.abs(rise) < 0.3), rise


def test_a_sample_that_caught_a_gpu_changing_state_is_not_its_past() -> None:
    """A node's eight GPUs busy for two hours; a scrape catches them all just gone idle (a die
    settles in seconds, so its temperature is idle while the energy counter says the interval
    burnt 690 W), except that one GPU's counter was not read in it (the gauge's 81 W is all there
    is for it); then they stay idle for half an hour. Kept as the idle past, that sample pairs an
    idle die with busy watts for seven GPUs and not for the eighth, which then "rises" against
    them (harsh validation history 2109, `n00311-gpu1`: 2.8 degrees). Only samples whose GPU held
    its state since the one before are read: nobody rises."""
    offsets = [1.5, -1.2, 0.3, 2.0, -0.8, 0.0, -1.5, 0.9]
    inlets = [20.0, 24.0, 22.0]
    energy = np.full(24, 3.6e9)
    features = PrecursorFeatures()
    t = 0.0
    for k in range(120 + 1 + 30):
        t += 60.0
        first_busy = k < 120
        burnt = [690.0 if (first_busy or k == 120) else 81.0] * 8 + ([690.0] * 4 + [81.0] * 4) * 2
        gauge = [690.0 if first_busy else 81.0] * 8 + ([690.0] * 4 + [81.0] * 4) * 2
        energy += np.array(burnt) * 60.0 * 1000.0
        counted = energy.copy()
        if k == 120:
            counted[1] = np.nan
        temps = [inlets[i // 8] + 0.06 * p + offsets[i % 8] for i, p in enumerate(gauge)]
        util = [99.0 if p > 100 else 0.0 for p in gauge]
        features.update(t, _gpu_frame(t, temps, util, gauge, counted.tolist(), nodes=3, inlet=inlets))
    _, X = features.matrix("gpu")
    rise = X[:8, [FEATURES["gpu"].index(n) for n in ("heat_vs_node_trend", "heat_vs_node_rise_12h")]]
    assert np.all(np.abs(rise) < 0.3), rise


def test_features_from_a_checkpoint_written_before_inlets_go_on() -> None:
    """A daemon upgraded over a checkpoint of feature version 7 restores features with no node
    inlets; they go on, and read the inlet from the next node frame."""
    import pickle

    features = PrecursorFeatures()
    features.update(60.0, _gpu_frame(60.0, [60.0] * 8, [99.0] * 8, [690.0] * 8))
    del features.__dict__["_node_rows"], features.__dict__["_node_inlet"]  # as version 7 wrote it
    restored = pickle.loads(pickle.dumps(features))
    restored.update(120.0, _gpu_frame(120.0, [60.0] * 8, [99.0] * 8, [690.0] * 8, inlet=[22.0]))
    assert restored._inlet_of(np.array(["n00000"], dtype=object)).tolist() == [22.0]


@pytest.mark.parametrize("counted", [True, False])
def test_heat_is_read_at_the_power_the_interval_burnt_where_the_exporter_counts_energy(counted: bool) -> None:
    """Eight GPUs at their cap (690 W, 60 C) for three hours; every fourth scrape, one GPU's
    1-s power sample catches a step's pause (280 W) while it burns 690 W the whole interval, as
    the recorded H200 does now and then. With the energy counter, that GPU's heat is read at the
    690 W it burnt and it is not "warmer" than its mates; a stock exporter without the counter
    leaves only the gauge, and the dips read as degrees of heat (what the counter is for)."""
    features = PrecursorFeatures()
    energy = np.full(8, 3.6e9)
    t = 0.0
    for k in range(180):
        t += 60.0
        energy += 690.0 * 60.0 * 1000.0
        power = [690.0] * 8
        if k % 4 == 1:  # (the first scrape has no delta yet: the gauge is all there is)
            power[3] = 280.0
        frame = _gpu_frame(t, [60.0] * 8, [99.0] * 8, power, energy.tolist() if counted else None)
        features.update(t, frame)
    _, X = features.matrix("gpu")
    level = X[:, FEATURES["gpu"].index("heat_vs_node_3h")]
    assert not np.isnan(level).any()
    if counted:
        assert np.all(np.abs(level) < 0.05), level
    else:
        assert level[3] > 2.0, level


def test_the_heat_slope_is_the_sites_own_and_the_recorded_gpus_until_a_node_shows_it() -> None:
    """Degrees per watt come from nodes with busy and idle GPUs at once; before any, the recorded
    H200's 0.039. A site whose GPUs run 0.02 C/W (a colder loop) is not read with 0.039."""
    features = PrecursorFeatures()
    features.update(60.0, _gpu_frame(60.0, [60.0] * 8, [99.0] * 8, [690.0] * 8))
    assert features.heat_slope == HEAT_SLOPE_PRIOR_C_PER_W
    for i in range(2, 120):
        t = 60.0 * i
        features.update(
            t,
            _gpu_frame(
                t, [40.0 + 0.02 * 690] * 4 + [40.0 + 0.02 * 81] * 4, [99.0] * 4 + [0.0] * 4, [690.0] * 4 + [81.0] * 4
            ),
        )
    assert abs(features.heat_slope - 0.02) < 0.002


def test_training_histories_mix_job_shapes_and_realism_per_seed_and_mask_blank_sentinels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aiops.default_model import DEFAULT_TRAINING, per_seed
    from vocab.catalog import DCGM_FP64_BLANK

    assert {per_seed(DEFAULT_TRAINING, "job_shapes", s, "nodes") for s in DEFAULT_TRAINING["seeds"]} == {
        "nodes",
        "gpus",
    }
    assert {per_seed(DEFAULT_TRAINING, "realism", s, "clean") for s in DEFAULT_TRAINING["seeds"]} == {
        "typical",
        "harsh",
    }
    assert per_seed({"seeds": [1], "job_shapes": ["nodes", "gpus"]}, "job_shapes", 2001, "nodes") == "gpus"
    assert per_seed({"job_shapes": "gpus"}, "job_shapes", 5, "nodes") == "gpus"
    # every kind can confuse the predictor, so every kind is in its training histories
    assert all(faults.startswith("all=") for faults in DEFAULT_TRAINING["faults"])
    # what training reads is what ingest serves: DCGM's "no value" sentinels are missing, not 1.8e19
    import telemetry_gen.simulate

    monkeypatch.setattr(telemetry_gen.simulate, "BLANK_FIELD_P", 0.01)  # rare by design: made common here
    ticks, _ = generated_history(3, {**SMALL, "hours": 1.0, "faults": ""})
    missing = 0
    for _, frames in ticks:
        temp = frames["gpu"].fields["DCGM_FI_DEV_GPU_TEMP"].as_float()
        assert not np.any(temp >= DCGM_FP64_BLANK)
        missing += int(np.isnan(temp).sum())
    assert missing > 0


def test_no_prediction_for_a_failure_expected_sooner_than_a_drain_can_happen() -> None:
    from detectors.predict.online import MIN_EMIT_LEAD_S

    class _Soon(_Column0Model):
        def probabilities(self, kind: str, X: FloatArray) -> tuple[FloatArray, NDArray[np.object_], FloatArray]:
            p = X[:, 0]
            return p, np.full(len(p), "gpu_hbm_ecc", dtype=object), np.array([MIN_EMIT_LEAD_S / 2, 3600.0, 3600.0])

    features = _ScriptedFeatures()
    online = OnlinePredictor(_Soon(), persist_rounds=1, every_ticks=1, warmup_s=0.0, features=features)
    features.now = np.array([0.9, 0.9, 0.1])
    assert [p.entity for p in online.update(0.0, {})] == ["g1"]


def test_each_failure_kind_is_held_to_its_own_threshold() -> None:
    class _TwoKinds(_Column0Model):
        """g0 and g1 look like thermal creep, g2 like an HBM trend."""

        def probabilities(self, kind: str, X: FloatArray) -> tuple[FloatArray, NDArray[np.object_], FloatArray]:
            which = np.array(["gpu_thermal", "gpu_thermal", "gpu_hbm_ecc"], dtype=object)
            return X[:, 0], which, np.full(3, 3600.0)

    features = _ScriptedFeatures()
    online = OnlinePredictor(
        _TwoKinds(),
        threshold=0.5,
        thresholds={"gpu_thermal": 0.3},
        persist_rounds=1,
        every_ticks=1,
        warmup_s=0.0,
        features=features,
    )
    features.now = np.array([0.35, 0.25, 0.45])
    # thermal at 0.35 passes its own 0.3; 0.25 does not; HBM at 0.45 is held to the default 0.5
    assert [(p.entity, p.kind) for p in online.update(0.0, {})] == [("g0", "gpu_thermal")]
    features.now = np.array([0.35, 0.35, 0.55])
    # g1 passes now, but its failure is under way (the detectors report it): an incident, not a prediction
    assert [p.entity for p in online.update(60.0, {}, failing={"g1"})] == ["g2"]


def test_a_warning_lasts_for_acting_as_long_as_the_model_says_it_does() -> None:
    """act/ prices a drain by how long a warning lasts (it does not import the detectors)."""
    from act.costs import WARNING_HORIZON_S

    assert WARNING_HORIZON_S == HORIZON_S


def _validation_script(monkeypatch: pytest.MonkeyPatch) -> Any:
    import importlib.util
    from importlib.machinery import SourceFileLoader

    script = str(Path(__file__).parents[2] / "scripts" / "predictor-validation")
    spec = importlib.util.spec_from_loader("predictor_validation", SourceFileLoader("predictor_validation", script))
    assert spec is not None and spec.loader is not None
    validation = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "predictor_validation", validation)  # its dataclasses look themselves up
    spec.loader.exec_module(validation)
    return validation


def test_the_validation_rule_holds_each_acceptance_group_to_the_floor_with_a_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rule that picks the settings holds precision >= 0.90 in each group the acceptance holds
    apart (whole nodes or part of a node, typical or harsh), one standard error below what the
    group showed: 60 of 66 right (0.91) is not enough from so few warnings, 64 of 66 (0.97) is,
    and a group with no warning has none false."""
    validation = _validation_script(monkeypatch)
    config = validation.VALIDATION
    histories = [(s, config) for s in (2001, 2002)] + [(s, {**config, "realism": "harsh"}) for s in (2011, 2012)]
    groups = validation.by_shape_and_realism(histories)
    assert {name: [seed for seed, _ in h] for name, h in groups.items()} == {
        "part of a node, typical": [2001],
        "whole nodes, typical": [2002],
        "part of a node, harsh": [2011],
        "whole nodes, harsh": [2012],
    }

    def report(hits: int, predictions: int) -> PredictionReport:
        return PredictionReport({}, predictions, hits, 1.0, hits / predictions if predictions else math.nan, 3.0)

    assert not validation.precision_floor_holds(report(60, 66))
    assert validation.precision_floor_holds(report(64, 66))
    assert validation.precision_floor_holds(report(0, 0))
    assert not validation.precision_floor_holds(report(9, 10))  # 0.90 from ten warnings says little


def test_the_validation_grid_replays_exactly_what_the_pipeline_predicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/predictor-validation chooses the emission settings by replaying recorded model
    answers through `OnlinePredictor.score`; a replay that drifted from the pipeline's path would
    choose settings for a predictor nobody runs."""
    from detectors.detect_loop import DetectLoop

    validation = _validation_script(monkeypatch)
    model = small_model()
    config = {**SMALL, "hours": 8.0, "faults": "gpu_hbm_ecc=2,optic_degradation=2,gpu_fell_off_bus=1"}
    thresholds = {"gpu_hbm_ecc": 0.3, "optic_degradation": 0.6}
    live = DetectLoop(
        interval=120.0, predictor=OnlinePredictor(model, thresholds=thresholds, persist_rounds=2, every_ticks=2)
    )
    recorder = validation._Recorder([model])
    recorder.online.every_ticks = 2
    replayed_loop = DetectLoop(interval=120.0, predictor=recorder)
    ticks, _ = generated_history(9, config)
    for t, frames in ticks:
        live.analyse(t, frames)
        replayed_loop.analyse(t, frames)
    replay = OnlinePredictor(validation._Horizon(model.horizon_s), thresholds=thresholds, persist_rounds=2)
    replayed = [p for r in recorder.rounds[0] for p in replay.score(r.t, r.kind, r.ids, r.p, r.which, r.ttf, r.blocked)]
    assert live.predictions, "nothing predicted: the comparison would be empty"
    assert sorted(replayed, key=lambda p: (p.at, p.entity)) == sorted(live.predictions, key=lambda p: (p.at, p.entity))


@pytest.mark.parametrize("inlets", [True, False])
def test_features_split_by_node_read_one_processs_slope(inlets: bool) -> None:
    """Split detection: each member holds some nodes' GPUs, and the site's slope comes from every
    member's share of the tick, merged, so its features are one process's to the bit, whether the
    slope is read across the fleet above the inlets or within nodes that hold both states. Each
    GPU is sampled at its own moment within the tick (an exporter's scrape is not one instant)."""
    rng = np.random.default_rng(7)
    nodes, n = 4, 32
    offsets = rng.uniform(-1.5, 1.5, n)
    busy = np.array([True] * 12 + [False] * 4 + [True] * 4 + [False] * 4 + [True] * 8)  # nodes 1, 2 mixed
    whole, members = PrecursorFeatures(), [PrecursorFeatures(), PrecursorFeatures()]
    member_of_node = np.array([0, 1, 1, 0])
    energy = rng.uniform(1e9, 2e9, n)
    for i in range(1, 60):
        t = 30.0 * i
        power = np.where(busy, rng.uniform(660, 700, n), rng.uniform(78, 84, n))
        energy += power * 30_000.0 * rng.uniform(0.98, 1.02, n)  # mJ over an interval near 30 s
        inlet = [22.0 + 0.1 * i, 24.0, 21.0, 23.0] if inlets else None
        temp = np.repeat(inlet or [22.0] * nodes, 8) + 0.06 * power + offsets + rng.normal(0, 0.2, n)
        frames = _gpu_frame(
            t, temp.tolist(), np.where(busy, 99.0, 0.0).tolist(), power.tolist(), energy.tolist(), nodes, inlet
        )
        gpu = frames["gpu"]
        frames["gpu"] = Frame("gpu", gpu.time_ns + rng.integers(0, 2_000_000_000, n), gpu.tags, gpu.fields)
        shares, parts = [], []
        for m, features in enumerate(members):
            mine = {
                kind: frame.take(np.flatnonzero(member_of_node[_node_number(frame)] == m))
                for kind, frame in frames.items()
            }
            share = CohortSummary()
            features.summarise(t, mine, share)
            shares.append(share)
            parts.append(mine)
        merged = CohortSummary.merge(shares)
        for features, mine in zip(members, parts, strict=True):
            features.update(t, mine, merged)
        whole.update(t, frames)
    assert whole.heat_slope != HEAT_SLOPE_PRIOR_C_PER_W  # the site's slope was read
    ids, X = whole.matrix("gpu")
    split = [m.matrix("gpu") for m in members]
    split_ids, split_X = np.concatenate([i for i, _ in split]), np.concatenate([x for _, x in split])
    order, split_order = np.argsort(ids), np.argsort(split_ids)
    assert list(split_ids[split_order]) == list(ids[order])
    np.testing.assert_array_equal(split_X[split_order], X[order])


def _node_number(frame: Frame) -> NDArray[np.int64]:
    return np.array([int(str(node)[1:]) for node in frame.tag("node")], dtype=np.int64)
