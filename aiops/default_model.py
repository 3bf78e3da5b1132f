"""The default failure predictor: trained on generated histories by a command (`aiops predictor
default`), shipped inside the package (aiops/models/, written by scripts/ship-default-model) and
copied to the cache on first use; trained there instead when the shipped file cannot serve (another
scikit-learn, or training data changed without shipping again). This is the program layer: it may
drive the generator; the production scorer (detectors/predict) only reads files.

What it is trained on is data (default_model.json), so the model card can say it and the cache
key changes when it does.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiops.progress_bar import Progress
from detectors.predict.model import (
    Dataset,
    ModelError,
    Predictor,
    card_path,
    collect,
    fingerprint,
    load,
    save,
    train,
)
from detectors.predict.online import OnlinePredictor, PredictionReport, evaluate_predictions
from ingest.frames import Frame
from ingest.validate import _mask_dcgm_blanks
from vocab.catalog import MEASUREMENT_BY_NAME

if TYPE_CHECKING:
    from telemetry_gen.generator import Generation

log = logging.getLogger(__name__)

_DEFAULT: dict[str, Any] = json.loads(
    resources.files("aiops").joinpath("default_model.json").read_text(encoding="utf-8")
)
# where the default model was evaluated (held-out clusters, the command, the figures): on its card,
# and not part of what it is trained on (the cache key)
DEFAULT_EVALUATION: dict[str, Any] = _DEFAULT.pop("evaluated_on", {})
DEFAULT_TRAINING: dict[str, Any] = _DEFAULT


def default_model_path() -> Path:
    cache = Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops"))
    return cache / "models" / f"predictor-{fingerprint(**DEFAULT_TRAINING)}.skops"


def shipped_model_path() -> Path:
    """The default model as the package ships it (a file beside this module once installed)."""
    return Path(str(resources.files("aiops").joinpath("models", "default-predictor.skops")))


def shipped_model_fits(config: dict[str, Any] = DEFAULT_TRAINING) -> Predictor | None:
    """The shipped model, when it is the one `config` would train here: the same training data,
    features and code (its card's fingerprint) and a scikit-learn that reads it (load() checks
    the version and the checksum). None otherwise: the caller trains."""
    try:
        predictor = load(shipped_model_path())
    except ModelError as exc:
        log.info("the shipped default model cannot serve here: %s", exc)
        return None
    if predictor.card.get("training", {}).get("fingerprint") != fingerprint(**config):
        log.info("the shipped default model was trained on other data or code than this version's; training")
        return None
    return predictor


def install_shipped(target: Path, config: dict[str, Any] = DEFAULT_TRAINING) -> bool:
    """Copy the shipped default model to `target` (the cache) when it fits; True when it did."""
    if config is not DEFAULT_TRAINING or shipped_model_fits(config) is None:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f"{target.suffix}.{os.getpid()}.tmp")  # two processes may start at once
    shutil.copyfile(shipped_model_path(), tmp)
    tmp.replace(target)
    shutil.copyfile(card_path(shipped_model_path()), card_path(target))
    return True


def generated_history(
    seed: int, config: dict[str, Any] = DEFAULT_TRAINING
) -> tuple[Iterator[tuple[float, dict[str, Frame]]], list[dict[str, Any]]]:
    return _history(_generation(seed, config))


def per_seed(config: dict[str, Any], key: str, seed: int, default: str) -> str:
    """A setting that may differ per history: a string for every seed, or a list beside
    `seeds` (a seed not listed, e.g. a validation seed, takes the entry its number picks)."""
    value = config.get(key, default)
    if not isinstance(value, list):
        return str(value)
    seeds = [int(s) for s in config.get("seeds", [])]
    return str(value[seeds.index(seed)] if seed in seeds else value[seed % len(value)])


def _generation(seed: int, config: dict[str, Any]) -> Generation:
    from telemetry_gen.generator import GenConfig, Generation

    return Generation(
        GenConfig(
            realism=per_seed(config, "realism", seed, "clean"),
            job_shapes=per_seed(config, "job_shapes", seed, "nodes"),
            gpus=int(per_seed(config, "gpus", seed, "")),
            topology=str(config.get("topology", "fat-tree")),
            hours=float(per_seed(config, "hours", seed, "")),
            interval=float(config["interval"]),
            seed=seed,
            faults=per_seed(config, "faults", seed, ""),
        )
    )


def _history(gen: Generation) -> tuple[Iterator[tuple[float, dict[str, Frame]]], list[dict[str, Any]]]:
    truth = gen.truth()  # fault times are fixed at scheduling; jobs are filled in while running

    def ticks() -> Iterator[tuple[float, dict[str, Frame]]]:
        for tick in gen.ticks():
            frames = {f.measurement: f for f in tick.frames}
            if "gpu" in frames:  # as ingest serves them: DCGM's "no value" sentinels are missing
                _mask_dcgm_blanks(frames["gpu"], MEASUREMENT_BY_NAME["gpu"])
            yield tick.time_ns / 1e9, frames

    return ticks(), truth


def _histories(
    seeds: list[int], config: dict[str, Any], progress: Progress
) -> Iterator[tuple[Iterator[tuple[float, dict[str, Frame]]], list[dict[str, Any]]]]:
    """Each seed's history, its ticks counted by `progress` (whose total the first one sets)."""
    gens = [_generation(seed, config) for seed in seeds]  # cheap: the ticks are made as they are read
    if progress.total is None:
        progress.update(total=sum(gen.sim.steps for gen in gens))
    for gen in gens:
        ticks, truth = _history(gen)
        yield progress.track(ticks), truth


def train_default(path: Path | None = None, config: dict[str, Any] = DEFAULT_TRAINING) -> Predictor:
    """Train on generated histories (deterministic: fixed seeds, fixed model seeds) and save.
    The histories' ticks show as progress on stderr (one line when it is not a terminal)."""
    dataset = Dataset()
    seeds = [int(s) for s in config["seeds"]]
    with Progress(None, "training the default failure predictor", "ticks") as progress:
        for ticks, truth in _histories(seeds, config, progress):
            collect(ticks, truth, dataset)
    # the fit is a stretch of its own (a model per fault kind): shown, not silent after the bar above
    with Progress(None, "fitting the default failure predictor", "models"):
        predictor = train(dataset, sources=[_source(s, config) for s in seeds])
    # what it was trained on, so a shipped copy can be told apart from what this version trains
    predictor.card["training"] = {"fingerprint": fingerprint(**config), "config": config}
    _with_evaluation(predictor, config)
    save(predictor, path or default_model_path())
    return predictor


def _source(seed: int, config: dict[str, Any]) -> str:
    shapes = per_seed(config, "job_shapes", seed, "nodes")
    realism = per_seed(config, "realism", seed, "clean")
    gpus, hours = per_seed(config, "gpus", seed, ""), float(per_seed(config, "hours", seed, ""))
    return (
        f"generated seed {seed}: {gpus} GPUs, {hours:g} h at {config['interval']:g} s, "
        f"{realism} realism, jobs holding {'whole nodes' if shapes == 'nodes' else 'any number of GPUs'}, "
        f"faults {per_seed(config, 'faults', seed, '')}"
    )


def _with_evaluation(predictor: Predictor, config: dict[str, Any]) -> Predictor:
    """The card says where the default model was evaluated, when these figures are for it."""
    if config is DEFAULT_TRAINING and DEFAULT_EVALUATION.get("model") == fingerprint(**config):
        predictor.card["evaluated_on"] = DEFAULT_EVALUATION
    return predictor


def load_or_train_default(path: Path | None = None, config: dict[str, Any] = DEFAULT_TRAINING) -> Predictor:
    """The model a fresh checkout uses: the shipped one copied to the cache on first use (or
    trained there when the shipped one cannot serve), then read from the cache."""
    target = path or default_model_path()
    try:
        return _with_evaluation(load(target), config)
    except ModelError as exc:
        if target.exists():
            log.warning("%s; replacing the default model", exc)
    if install_shipped(target, config):
        return _with_evaluation(load(target), config)
    log.info("training the default failure predictor (first start) into %s", target)
    return train_default(target, config)


def evaluate_on_generated(
    predictor: Predictor, seeds: list[int], threshold: float | None = None
) -> list[PredictionReport]:
    """Held-out histories (never the training seeds), through the detectors and the predictor
    together as the pipeline runs them; predictions for entities already failing are withheld."""
    from detectors.detect_loop import DetectLoop

    reports = []
    for seed in seeds:
        if seed in DEFAULT_TRAINING["seeds"]:
            raise ValueError(f"seed {seed} is a training seed")
    with Progress(None, "held-out histories", "ticks") as progress:
        for ticks, truth in _histories(seeds, DEFAULT_TRAINING, progress):
            online = (
                OnlinePredictor(predictor)
                if threshold is None
                else OnlinePredictor(predictor, threshold=threshold, thresholds={})
            )
            loop = DetectLoop(interval=float(DEFAULT_TRAINING["interval"]), predictor=online)
            start: float | None = None
            for t, frames in ticks:
                start = t if start is None else start
                loop.analyse(t, frames)
            assert start is not None
            reports.append(evaluate_predictions(loop.predictions, truth, earliest=start + online.warmup_s))
    return reports


__all__ = [
    "DEFAULT_EVALUATION",
    "DEFAULT_TRAINING",
    "default_model_path",
    "evaluate_on_generated",
    "install_shipped",
    "load_or_train_default",
    "shipped_model_fits",
    "shipped_model_path",
    "train_default",
]
