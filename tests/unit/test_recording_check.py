"""The real H200 recording replayed as whole jobs (aiops/recording_check.py): healthy GPUs that
behave as the recorded one did raise nothing, at the scrape intervals sites use; a GPU that
stays slower than its job under the same physics is still found."""

from __future__ import annotations

import pytest

from aiops.recording_check import PHASES, RECORDING, load_trace, replay

pytestmark = pytest.mark.skipif(not RECORDING.is_file(), reason=f"the recording is not at {RECORDING}")


@pytest.mark.parametrize("interval", [10.0, 30.0, 60.0])
@pytest.mark.parametrize("phase", sorted(PHASES))
def test_a_job_that_runs_as_the_recorded_gpu_raises_nothing(phase: str, interval: float) -> None:
    # 120 scrapes: past the 50 busy ones after which each GPU is judged against its own place too
    result = replay(phase, interval_s=interval, ticks=120, seed=int(interval))
    assert result.raised == 0, (dict(result.anomalies), dict(result.incidents))


@pytest.mark.parametrize("interval", [30.0, 60.0])
def test_gpus_out_of_step_with_each_other_raise_nothing(interval: float) -> None:
    """Every GPU anywhere in the training trace (checkpoints and step boundaries at any time)."""
    result = replay("train", interval_s=interval, ticks=120, seed=11, desync=True)
    assert result.raised == 0, (dict(result.anomalies), dict(result.incidents))


def test_a_gpu_that_stays_slower_than_its_job_is_found_in_the_replay() -> None:
    result = replay("train", interval_s=30.0, ticks=40, seed=3, slow={5: 0.8})
    assert result.incidents == {"gpu_straggler": 1}
    assert set(result.anomalies) == {("peer:job", "DCGM_FI_DEV_SM_CLOCK")}


def test_the_trace_is_the_recorded_physics() -> None:
    """What the check replays: the power cap held while training, the clock wandering under it."""
    train = load_trace("train")
    busy = train.columns["gpu_util"] >= 50
    assert ((train.columns["clocks_event_reasons"][busy].astype(int) & 0x4) > 0).mean() > 0.9
    assert train.columns["sm_clock"][busy].max() - train.columns["sm_clock"][busy].min() >= 200
    assert (load_trace("membound").columns["sm_clock"] == 1980).all()
