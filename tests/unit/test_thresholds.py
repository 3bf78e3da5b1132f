"""Every detector threshold is typed settings with a reason and a source, and a site can
override it through the environment like any other setting."""

from __future__ import annotations

import pytest

from detectors.stack import DetectorStack
from ingest.frames import Frame
from ingest.lineprotocol import decode
from vocab.settings import Settings
from vocab.thresholds import DetectorSettings, describe

T0 = 1_767_225_600.0


def test_every_threshold_has_a_reason_and_a_source() -> None:
    rows = describe(DetectorSettings())
    assert len(rows) >= 15
    for name, _value, why, source in rows:
        assert why.strip(), f"{name} has no reason"
        assert source.strip(), f"{name} has no source"


def test_values_set_against_the_generator_say_so() -> None:
    sources = {name: source for name, _v, _w, source in describe(DetectorSettings())}
    assert "provisional" in sources["peers.rules.gpu.DCGM_FI_DEV_GPU_TEMP@job"]
    assert "provisional" in sources["sag.drop_db"]


def test_a_site_overrides_a_threshold_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOPS_DETECTORS__SAG__DROP_DB", '{"optic": {"rx_power_dbm": 3.0}}')
    monkeypatch.setenv("AIOPS_DETECTORS__PEERS__PERSIST_TICKS", "4")
    settings = Settings()
    assert settings.detectors.sag.drop_db == {"optic": {"rx_power_dbm": 3.0}}
    assert settings.detectors.peers.persist_ticks == 4
    assert settings.detectors.sag.tau_s == DetectorSettings().sag.tau_s  # the rest stays


def test_an_unknown_threshold_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOPS_DETECTORS__SAG__DROP_DBM", "3")
    with pytest.raises(ValueError, match="drop_dbm"):
        Settings()


def _pause_frame(t: float, pauses: int) -> dict[str, Frame]:
    line = f"nic,nic=n0-nic0,node=n0,rail=0 tx_prio3_pause={pauses}i {int(t * 1e9)}".encode()
    frame = decode(line + b"\n").frames["nic"]
    return {"nic": frame}


def test_the_stack_uses_the_thresholds_it_is_given() -> None:
    low = DetectorSettings().model_copy(
        update={
            "rules": DetectorSettings().rules.model_copy(update={"pause_rate_per_s": {"nic": {"tx_prio3_pause": 10.0}}})
        }
    )
    fired = {}
    for name, settings in (("default", DetectorSettings()), ("low", low)):
        stack = DetectorStack(30, settings=settings)
        stack.process(T0, _pause_frame(T0, 0))
        fired[name] = [a.metric for a in stack.process(T0 + 30, _pause_frame(T0 + 30, 30 * 50))]  # 50 pauses/s
    assert fired == {"default": [], "low": ["tx_prio3_pause"]}
