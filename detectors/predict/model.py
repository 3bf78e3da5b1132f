"""The failure predictor: gradient-boosted trees per entity kind, calibrated, with a model card.

Per entity kind that has predictable failures (GPU: HBM ECC and thermal; optic; cooling loop),
one binary classifier per failure kind, "fails with it within the horizon", that reads only that
kind's evidence (the registry's `evidence`: an HBM failure from memory errors, an overheating GPU
from its heat and power), so a prediction says what is coming and why, and one kind's probability
is never made of another kind's evidence. A single classifier over all features and kinds, as
before, warned of HBM failures on idle GPUs with no memory error at all: its "failure" probability
was the sum over kinds, and the trees had learnt that idle GPUs with a few watts more than their
mates fail more often in the training histories, a coincidence of the sample (validation history
2103, docs/prediction.md). Probabilities are calibrated (isotonic, cross-validated) so a threshold
means what it says. A regressor on the positive samples gives the expected time to failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sklearn
from numpy.typing import NDArray
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

from detectors.base import FloatArray
from detectors.predict.features import FEATURE_VERSION, FEATURES, HOUR, WARMUP_S, PrecursorFeatures
from ingest.frames import Frame
from vocab import registry

FORMAT_VERSION = 3  # 3: a classifier per failure kind on its evidence; 2: skops body with a checksum (1 was a pickle)
# What "fails within the horizon" means. The failures that announce themselves do it hours ahead
# (the generator's precursors: 1-12 h; HBM correctable-error climbs and optic receive-power sags are
# read over hours to days in the field reports): at 6 h, a precursor already plain 7-10 h before its
# failure was a false prediction by definition (10 of the 12 false ones of the 6-h model on the
# validation histories were the right entity and kind, 6-10 h early; scripts/predictor-validation).
# Chosen on those validation histories, never on the held-out ones.
HORIZON_S = 12 * HOUR
# root entity kind -> the kinds that announce themselves there (the registry's precursor flag)
PREDICTABLE: dict[str, tuple[str, ...]] = registry.predictable_by_root()
NONE = "none"


class ModelError(RuntimeError):
    """A model file that cannot be used (missing, corrupt, from another version), and what to do."""


@dataclass
class Dataset:
    X: dict[str, list[FloatArray]] = field(default_factory=lambda: defaultdict(list))
    y: dict[str, list[NDArray[np.object_]]] = field(default_factory=lambda: defaultdict(list))
    ttf: dict[str, list[FloatArray]] = field(default_factory=lambda: defaultdict(list))
    histories: int = 0

    def arrays(self, kind: str) -> tuple[FloatArray, NDArray[np.object_], FloatArray]:
        if not self.X.get(kind):
            return np.zeros((0, len(FEATURES[kind]))), np.zeros(0, dtype=object), np.zeros(0)
        return np.vstack(self.X[kind]), np.concatenate(self.y[kind]), np.concatenate(self.ttf[kind])


def labels_for(
    kind: str, ids: NDArray[np.object_], t: float, truth: list[dict[str, Any]], horizon: float
) -> tuple[NDArray[np.object_], FloatArray, NDArray[np.bool_]]:
    """(label, time to onset, keep) per entity at time t. An entity between a failure's onset
    and its end is not a prediction sample (it has already failed)."""
    y = np.full(len(ids), NONE, dtype=object)
    ttf = np.full(len(ids), np.nan)  # time to onset whenever one is coming within 2 horizons
    keep = np.ones(len(ids), dtype=np.bool_)
    index = {e: i for i, e in enumerate(ids.tolist())}
    for f in truth:
        if f["kind"] not in PREDICTABLE[kind] or f["root"] not in index:
            continue
        i = index[f["root"]]
        onset, end = float(f["onset"]), float(f["end"])
        if t < onset <= t + 2 * horizon:
            ttf[i] = onset - t
        if t < onset <= t + horizon:
            y[i] = f["kind"]
        elif onset <= t < end + HOUR:
            keep[i] = False
    return y, ttf, keep


def collect(
    ticks: Iterable[tuple[float, dict[str, Frame]]],
    truth: list[dict[str, Any]],
    dataset: Dataset,
    every_s: float = 300.0,
    horizon: float = HORIZON_S,
) -> None:
    """Run the features over a history and sample them every `every_s` with their labels."""
    features = PrecursorFeatures()
    next_sample: float | None = None
    for t, frames in ticks:
        features.update(t, frames)
        if next_sample is None:
            next_sample = t + WARMUP_S  # learn from what the online predictor will see once it speaks
        if t < next_sample:
            continue
        next_sample = t + every_s
        for kind in FEATURES:
            ids, X = features.matrix(kind)
            if not len(ids):
                continue
            y, ttf, keep = labels_for(kind, ids, t, truth, horizon)
            dataset.X[kind].append(X[keep])
            dataset.y[kind].append(y[keep])
            dataset.ttf[kind].append(ttf[keep])
    dataset.histories += 1


def evidence_columns(kind: str) -> dict[str, list[int]]:
    """Failure kind -> the columns of its root's feature matrix its classifier reads."""
    names = FEATURES[kind]
    wanted = registry.precursor_evidence()
    out = {}
    for failure in PREDICTABLE.get(kind, ()):
        chosen = wanted.get(failure, names)
        unknown = [n for n in chosen if n not in names]
        if unknown:
            raise ValueError(f"vocab/faults.toml: {failure}'s evidence {unknown} are not {kind} features")
        out[failure] = [names.index(n) for n in chosen]
    return out


# The features the trees read on a fixed grid of degrees, not on the training data's quantiles.
# Gradient-boosted trees bin each feature into at most 255 bins at its quantiles; a healthy GPU's
# heat rise sits within 0.3 C of zero 99.99 % of the time (feature version 8, training
# histories), so every bin but the last lay between -0.3 and +0.2 C and the last held everything
# above: the thermal classifier could not tell a 0.3 C rise from a 3 C one and warned on the
# GPU's level against its mates alone, which a GPU's own offset (1.5 C spread) hides. On a grid
# of 0.1 C from -12 to +12 (241 values, under the 255 bins, so each value is its own bin) the
# trees see the whole ramp. 0.1 C is a third of a temperature reading's own noise.
HEAT_GRID_C, HEAT_GRID_LIMIT_C = 0.1, 12.0
ON_HEAT_GRID: dict[str, tuple[str, ...]] = {
    "gpu": ("heat_vs_node_10m", "heat_vs_node_3h", "heat_vs_node_trend", "heat_vs_node_rise_12h"),
}


def on_grid(kind: str, X: FloatArray) -> FloatArray:
    """`X` with the features of ON_HEAT_GRID rounded to HEAT_GRID_C and held within the limit
    (NaN stays NaN: missing is missing)."""
    names = ON_HEAT_GRID.get(kind, ())
    if not names or not len(X):
        return X
    cols = [FEATURES[kind].index(n) for n in names]
    out = X.copy()
    out[:, cols] = np.clip(np.round(X[:, cols] / HEAT_GRID_C) * HEAT_GRID_C, -HEAT_GRID_LIMIT_C, HEAT_GRID_LIMIT_C)
    return out


@dataclass
class KindModel:
    classifiers: dict[str, Any]  # failure kind -> fitted calibrated binary classifier
    columns: dict[str, list[int]]  # failure kind -> the feature columns (its evidence) it reads
    regressor: Any | None  # log-hours to onset, on positives

    @property
    def classes(self) -> list[str]:
        return [NONE, *self.classifiers]

    def probabilities(self, X: FloatArray) -> FloatArray:
        """P(fails with each kind within the horizon), a column per kind in `classifiers` order."""
        cols = []
        for failure, clf in self.classifiers.items():
            proba = clf.predict_proba(X[:, self.columns[failure]])
            cols.append(proba[:, list(clf.classes_).index(True)])
        return np.column_stack(cols)


@dataclass
class Predictor:
    models: dict[str, KindModel]
    horizon_s: float
    card: dict[str, Any]

    def probabilities(self, kind: str, X: FloatArray) -> tuple[FloatArray, NDArray[np.object_], FloatArray]:
        """(P(fails within the horizon), most likely failure kind, expected seconds to it)."""
        model = self.models.get(kind)
        if model is None or not len(X):
            return np.zeros(len(X)), np.full(len(X), NONE, dtype=object), np.full(len(X), np.nan)
        # the most likely kind, at its own probability (not the sum over kinds: a warning of an
        # HBM failure rests on memory-error evidence alone)
        X = on_grid(kind, X)
        per_kind = model.probabilities(X)
        p_fail = per_kind.max(axis=1)
        which = np.asarray(list(model.classifiers), dtype=object)[np.argmax(per_kind, axis=1)]
        ttf = np.full(len(X), np.nan)
        if model.regressor is not None:
            ttf = np.exp(model.regressor.predict(X)) * HOUR
        return p_fail, which, ttf


# Failure kinds whose classifier is fitted with its classes weighted balanced (`balanced_classes`
# in vocab/faults.toml). Optic failures are 0.3 % of the optic samples: unweighted, early stopping
# held two of the three calibration folds' fits at 11 iterations (Newton steps on near-pure leaves
# swing the boosting), the folds' top calibrated answers were 0.69, 0.007 and 0.62, and a 7-dB
# receive-power sag read 0.44, under the 0.57 a drain needs, though every training sample with a
# sag of 0.5 dB or more was a failure's. Weighted, every fold reaches 1.0. The other kinds' folds
# already reach 0.99-1.0; weighting them too moved the thermal classifier until no validation
# setting met the threshold rule (docs/prediction.md, "Tried on 2026-12-05"). The card's
# `calibration_folds` shows the symptom.
BALANCED_CLASSES = registry.balanced_classes()


def _weighted() -> str:
    """The balanced classifiers as the model's description names them: by entity kind where it has
    one predictable failure kind ("optic"), else by failure kind."""
    names = [
        root if len(kinds) == 1 else kind
        for root, kinds in PREDICTABLE.items()
        for kind in kinds
        if kind in BALANCED_CLASSES
    ]
    return f" ({', '.join(sorted(names))}: balanced)" if names else ""


# What train() fits, on the card and in the fingerprint: a model file trained by other code is
# another model, even from the same data.
MODEL_DESCRIPTION = (
    "per failure kind, a binary HistGradientBoostingClassifier (200 iterations, 15 leaves) on the kind's "
    f"evidence features{_weighted()}, heat features on a {HEAT_GRID_C:g} C grid, calibrated with isotonic 3-fold CV; "
    "HistGradientBoostingRegressor for log time to onset"
)

# A classifier whose calibration folds' top answers differ by more than this says different things
# for the same evidence depending on which third of the data it was fitted on.
FOLD_DISAGREEMENT = 0.5


def train(dataset: Dataset, horizon: float = HORIZON_S, seed: int = 0, sources: list[str] | None = None) -> Predictor:
    # one OpenMP thread: gradient boosting's threads spin while they wait for each other, and on a
    # machine busy with anything else (a daemon, a test suite) that made fitting the default model
    # 21 min instead of 20-35 s on this 2-core machine (the same fit, the same load)
    with threadpool_limits(limits=1, user_api="openmp"):
        return _train(dataset, horizon, seed, sources)


def _train(dataset: Dataset, horizon: float, seed: int, sources: list[str] | None) -> Predictor:
    models: dict[str, KindModel] = {}
    metrics: dict[str, Any] = {}
    fold_tops: dict[str, list[float]] = {}
    for kind in FEATURES:
        X, y, ttf = dataset.arrays(kind)
        X = on_grid(kind, X)
        classifiers, columns = {}, {}
        for failure, cols in evidence_columns(kind).items():
            positive_samples = int(np.sum(y == failure))
            if positive_samples < 6 or len(y) - positive_samples < 6:
                continue  # not enough failures of this kind to learn from
            base = HistGradientBoostingClassifier(
                max_iter=200,
                learning_rate=0.08,
                max_leaf_nodes=15,
                l2_regularization=1.0,
                class_weight="balanced" if failure in BALANCED_CLASSES else None,
                random_state=seed,
            )
            classifiers[failure] = CalibratedClassifierCV(base, method="isotonic", cv=3).fit(X[:, cols], y == failure)
            columns[failure] = cols
            fold_tops[failure] = calibration_fold_tops(classifiers[failure])
        if not classifiers:
            continue
        classes = sorted(set(y.tolist()))
        # the time-to-failure regressor also sees failures beyond the horizon, so it can tell
        # "soon" from "coming, but later than the horizon"
        positive = ~np.isnan(ttf)
        reg = None
        if positive.sum() >= 10:
            reg = HistGradientBoostingRegressor(max_iter=150, random_state=seed).fit(
                X[positive], np.log(np.maximum(ttf[positive], 60.0) / HOUR)
            )
        models[kind] = KindModel(classifiers, columns, reg)
        metrics[kind] = {"samples": len(y), **{c: int(np.sum(y == c)) for c in classes}}
    card = {
        "format": FORMAT_VERSION,
        "horizon_s": horizon,
        "features": {k: list(v) for k, v in FEATURES.items()},
        "feature_version": FEATURE_VERSION,
        "warmup_s": WARMUP_S,
        "kinds": {k: m.classes for k, m in models.items()},
        "evidence": {
            k: {f: [FEATURES[k][c] for c in cols] for f, cols in m.columns.items()} for k, m in models.items()
        },
        "training_data": {"histories": dataset.histories, "sources": sources or [], "samples": metrics},
        "model": MODEL_DESCRIPTION,
        "calibration_folds": {"top_answer": fold_tops, "disagreeing": disagreeing_folds(fold_tops)},
        "versions": {"sklearn": sklearn.__version__, "numpy": np.__version__, "python": platform.python_version()},
    }
    return Predictor(models, horizon, card)


def calibration_fold_tops(classifier: CalibratedClassifierCV) -> list[float]:
    """The highest probability each calibration fold's classifier can say: isotonic calibration
    maps the fold's scores to a step function, and its top step is the most it will ever answer."""
    tops = []
    for fold in classifier.calibrated_classifiers_:
        (isotonic,) = fold.calibrators  # binary: one calibrator, for the failure class
        tops.append(round(float(np.max(isotonic.y_thresholds_)), 4))
    return tops


def disagreeing_folds(fold_tops: dict[str, list[float]]) -> list[str]:
    """The failure kinds whose calibration folds disagree about the strongest evidence: the
    model's answer for it is an average of fits that learned different things."""
    return sorted(f for f, tops in fold_tops.items() if max(tops) - min(tops) > FOLD_DISAGREEMENT)


# A model file: a one-line magic, a one-line JSON header (format, versions, SHA-256 of the body),
# then the body in skops' format, which rebuilds only the types it is told to trust instead of
# running whatever the file says (as pickle would). A swapped or edited file is refused.
MAGIC = b"AIOPS-PREDICTOR\n"
# skops rebuilds scikit-learn estimators, numpy arrays and builtins without being told; these are
# the only other types a calibrated gradient-boosting predictor holds. Anything else in a file
# (a function, an unknown class) is refused before any of it is loaded.
TRUSTED_TYPES = (
    "sklearn.calibration._CalibratedClassifier",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
)


def save(predictor: Predictor, path: Path) -> None:
    import zipfile

    import skops.io

    # deflated: a calibrated model's skops body is mostly JSON and tree arrays, 22 MB raw, 3 MB
    # deflated (the default model ships inside the package: aiops/models/)
    body = skops.io.dumps(
        {
            "horizon_s": predictor.horizon_s,
            "card": json.dumps(predictor.card, sort_keys=True),
            "kinds": {
                kind: {"classifiers": dict(m.classifiers), "columns": dict(m.columns), "regressor": m.regressor}
                for kind, m in predictor.models.items()
            },
        },
        compression=zipfile.ZIP_DEFLATED,
        compresslevel=9,
    )
    header = {
        "format": FORMAT_VERSION,
        "sklearn": sklearn.__version__,
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f"{path.suffix}.{os.getpid()}.tmp")  # two processes may train at once
    tmp.write_bytes(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + body)
    tmp.replace(path)
    card_path(path).write_text(json.dumps(predictor.card, indent=2, sort_keys=True) + "\n")


def card_path(path: Path) -> Path:
    return path.with_name(path.stem + ".card.json")


def load(path: Path) -> Predictor:
    """A model file written by save(); anything else (a pickle, an edited or truncated file, a
    file asking for types a predictor does not hold) is refused before any of it is run."""
    import skops.io

    hint = "retrain it with `aiops predictor train`, or delete it to get the default model trained again"
    if not path.is_file():
        raise ModelError(f"no model at {path}; {hint}")
    raw = path.read_bytes()
    if raw[:1] == b"\x80" or raw[:2] in (b"(d", b"}q", b"(l"):
        raise ModelError(f"model {path} is a pickle, which can run code when loaded: refused; {hint}")
    if not raw.startswith(MAGIC):
        raise ModelError(f"model {path} is unreadable (not an aiops model file); {hint}")
    head, _, body = raw[len(MAGIC) :].partition(b"\n")
    try:
        header = json.loads(head)
    except ValueError:
        raise ModelError(f"model {path} is unreadable (bad header); {hint}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        found = header.get("format") if isinstance(header, dict) else "?"
        raise ModelError(f"model {path} has format {found}, this version reads {FORMAT_VERSION}; {hint}")
    if header.get("sklearn") != sklearn.__version__:
        raise ModelError(
            f"model {path} was trained with scikit-learn {header.get('sklearn')}, this is {sklearn.__version__}; {hint}"
        )
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise ModelError(f"model {path} does not match its checksum (changed or truncated); {hint}")
    try:
        untrusted = set(skops.io.get_untrusted_types(data=body)) - set(TRUSTED_TYPES)
    except Exception as exc:
        raise ModelError(f"model {path} is unreadable ({type(exc).__name__}); {hint}") from None
    if untrusted:
        raise ModelError(
            f"model {path} asks for types a failure predictor does not hold ({', '.join(sorted(untrusted))}): "
            f"refused; {hint}"
        )
    try:
        stored = skops.io.loads(body, trusted=list(TRUSTED_TYPES))
        card = json.loads(stored["card"])
        models = {
            kind: KindModel(
                dict(m["classifiers"]), {f: [int(c) for c in cols] for f, cols in m["columns"].items()}, m["regressor"]
            )
            for kind, m in stored["kinds"].items()
        }
        predictor = Predictor(models, float(stored["horizon_s"]), card)
    except Exception as exc:
        raise ModelError(f"model {path} is unreadable ({type(exc).__name__}); {hint}") from None
    if (
        predictor.card.get("features") != {k: list(v) for k, v in FEATURES.items()}
        or predictor.card.get("feature_version", 1) != FEATURE_VERSION
    ):
        raise ModelError(f"model {path} was trained on other features; {hint}")
    return predictor


def fingerprint(**config: object) -> str:
    raw = json.dumps(
        {
            "format": FORMAT_VERSION,
            "sklearn": sklearn.__version__,
            "features": FEATURES,
            "feature_version": FEATURE_VERSION,
            "warmup_s": WARMUP_S,
            "horizon_s": HORIZON_S,
            "evidence": registry.precursor_evidence(),
            "model": MODEL_DESCRIPTION,
            **config,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:12]
