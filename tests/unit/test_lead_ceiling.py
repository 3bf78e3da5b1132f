"""scripts/lead-ceiling: the most lead any predictor could show on a record, the bound the
accuracy page sets the predictor's median lead against."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest

from detectors.predict.features import WARMUP_S
from detectors.predict.online import OnlinePredictor

HOUR = 3600.0


@pytest.fixture
def ceiling(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    script = str(Path(__file__).parents[2] / "scripts" / "lead-ceiling")
    spec = importlib.util.spec_from_loader("lead_ceiling", SourceFileLoader("lead_ceiling", script))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "lead_ceiling", module)
    spec.loader.exec_module(module)
    return module


def _fault(kind: str, begun_h: float, onset_h: float) -> dict[str, object]:
    return {"kind": kind, "root": "g0", "onset": onset_h * HOUR, "precursor_start": begun_h * HOUR, "fault_id": "f"}


def test_a_record_caps_the_lead_of_a_precursor_that_began_before_it(ceiling: ModuleType) -> None:
    """A record starting at 0 with a 60-s scrape: the predictor first speaks after the warm-up
    and two rounds; a precursor begun 6 h before the record cannot be warned of earlier."""
    interval = 60.0
    first = WARMUP_S + OnlinePredictor(cast(Any, None)).every_ticks * interval
    truth = [
        _fault("gpu_hbm_ecc", -6.0, 4.0),  # capped by the record: onset - first
        _fault("gpu_hbm_ecc", 2.0, 5.0),  # inside the record: its whole ramp, or what shows of it
        _fault("gpu_hbm_ecc", -1.0, 0.5),  # onset before the predictor may speak: not counted
        _fault("gpu_lost", 1.0, 3.0),  # no precursor: not counted
    ]
    assert ceiling.oracle_leads(0.0, interval, truth, 0.0) == pytest.approx([(4.0 * HOUR - first) / HOUR, 3.0])
    # shown only a third of the way up its ramp: 2 h of a 3-h ramp are left
    assert ceiling.oracle_leads(0.0, interval, truth, 1 / 3)[1] == pytest.approx(2.0)


def test_the_share_of_its_ramp_a_fault_was_warned_at(ceiling: ModuleType) -> None:
    """How far up its precursor a fault was first warned of, per kind: only faults whose precursor
    began once the predictor could speak, warned of with 10 minutes of lead or more, by a warning
    on their own part within the horizon."""
    horizon = 12 * HOUR
    truth = [
        {**_fault("gpu_hbm_ecc", 2.0, 6.0), "root": "g0"},  # warned at 3 h: a quarter of its ramp
        {**_fault("gpu_thermal", 2.0, 4.0), "root": "g1"},  # warned at 3.5 h: three quarters
        {**_fault("gpu_thermal", 0.5, 4.0), "root": "g2"},  # began before the predictor could speak
        {**_fault("optic_degradation", 2.0, 3.0), "root": "g3"},  # warned 5 min before: too late
        {**_fault("rack_cooling", 2.0, 8.0), "root": "g4"},  # warned of on another part only
        {"kind": "gpu_lost", "root": "g5", "onset": 3 * HOUR, "fault_id": "f"},  # no precursor
        {"kind": "gpu_lost", "root": "g5", "onset": 3 * HOUR, "precursor_start": None, "fault_id": "f"},
    ]
    said = [("g0", 4.0 * HOUR), ("g0", 3.0 * HOUR), ("g1", 3.5 * HOUR), ("g2", 2.0 * HOUR)]
    said += [("g3", 3.0 * HOUR - 300.0), ("g9", 3.0 * HOUR), ("g5", 2.5 * HOUR)]
    shares = ceiling.ramp_shares(said, truth, 1.0 * HOUR, horizon)
    assert shares == {"gpu_hbm_ecc": [pytest.approx(0.25)], "gpu_thermal": [pytest.approx(0.75)]}
