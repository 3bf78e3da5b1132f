"""The default failure predictor ships inside the package (aiops/models/), so a first run loads it
instead of training it for minutes; it is used only where it is the model this version would
train, and read only by the scikit-learn that wrote it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sklearn

from aiops import default_model
from aiops.default_model import DEFAULT_TRAINING, load_or_train_default, shipped_model_fits, shipped_model_path
from detectors.predict.model import ModelError, card_path, fingerprint, load

PINNED = next(
    line.split("==", 1)[1].strip()
    for line in (Path(__file__).parents[2] / "constraints.txt").read_text().splitlines()
    if line.startswith("scikit-learn==")
)
pytestmark = pytest.mark.skipif(
    sklearn.__version__ != PINNED,
    reason=f"the shipped model is read by scikit-learn {PINNED} (constraints.txt); this is {sklearn.__version__}",
)


def test_the_shipped_default_model_is_the_one_this_version_trains() -> None:
    """Changing the training data, features or training code without `scripts/ship-default-model`
    fails here (a stale shipped model would be skipped at run time and trained anyway)."""
    predictor = load(shipped_model_path())
    assert predictor.card["training"]["fingerprint"] == fingerprint(**DEFAULT_TRAINING)
    assert predictor.card["versions"]["sklearn"] == PINNED
    assert card_path(shipped_model_path()).is_file()


def test_the_default_model_is_trained_on_what_the_generator_emits_now() -> None:
    """The default model learns from generated histories: a change to what the generator emits is
    a change to its training data, so it must change the model's fingerprint (and so make the
    shipped model stale until it is trained again and evaluated)."""
    from telemetry_gen.simulate import BEHAVIOUR_VERSION

    assert DEFAULT_TRAINING["generator_behaviour"] == BEHAVIOUR_VERSION


def test_a_first_run_copies_the_shipped_model_and_does_not_train(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_training(*_: object, **__: object) -> None:
        raise AssertionError("trained although the shipped model fits")

    monkeypatch.setattr(default_model, "train_default", no_training)
    target = tmp_path / "cache" / "models" / "predictor.skops"
    predictor = load_or_train_default(target)
    assert target.read_bytes() == shipped_model_path().read_bytes()
    assert card_path(target).is_file()
    # the card says where this model was measured (the figures in the README are for it)
    assert predictor.card["evaluated_on"]["model"] == fingerprint(**DEFAULT_TRAINING)


def test_a_shipped_model_for_other_training_or_tampered_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = {**DEFAULT_TRAINING, "seeds": [1001, 1002, 1004]}
    assert shipped_model_fits(other) is None  # what this config would train is another model

    tampered = tmp_path / "default-predictor.skops"
    raw = bytearray(shipped_model_path().read_bytes())
    raw[-100] ^= 0xFF
    tampered.write_bytes(bytes(raw))
    shutil.copyfile(card_path(shipped_model_path()), card_path(tampered))
    monkeypatch.setattr(default_model, "shipped_model_path", lambda: tampered)
    assert shipped_model_fits() is None
    with pytest.raises(ModelError, match="checksum"):
        load(tampered)


def test_every_classifier_of_the_shipped_model_agrees_with_itself_across_calibration_folds() -> None:
    """A classifier whose calibration folds top out far apart averages fits that learned different
    things: the optic classifier shipped before `9dcb21c4e45b` topped out at 0.69, 0.007 and 0.62,
    so a 7-dB receive-power sag read 0.44, under the 0.57 a drain needs. Each fold must also be
    able to say a failure is likely."""
    folds = load(shipped_model_path()).card["calibration_folds"]
    assert folds["disagreeing"] == []
    for failure, tops in folds["top_answer"].items():
        assert len(tops) == 3, failure
        assert min(tops) >= 0.5, (failure, tops)
