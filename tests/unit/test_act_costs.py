"""When acting on a prediction pays (act/costs.py): the goodput bench's cost model, per kind and job."""

from __future__ import annotations

import math

from act.costs import CHECK_S, RESTART_S, WARNING_HORIZON_S, checkpoint_drain_pays, drain_break_even, onset_before


def test_acting_on_a_prediction_follows_the_cost_of_a_false_drain_against_a_lost_job() -> None:
    # break-even: at the threshold, the expected saving equals the expected waste
    p = drain_break_even("optic_degradation", 256)
    wasted, saved = 256 * RESTART_S + 8 * CHECK_S, 256 * (45 * 60 / 4)
    assert math.isclose(p * saved, (1 - p) * wasted)
    # the remediation loop returns a wrongly drained node after its check: acting pays far sooner
    # than when the node stays out until the warning lapses, most for the smallest jobs
    checked, left_out = (
        drain_break_even("gpu_hbm_ecc", 8),
        drain_break_even("gpu_hbm_ecc", 8, node_out_s=WARNING_HORIZON_S),
    )
    assert 0.5 < checked < 0.6 and left_out > 0.95
    # a bigger job loses more to a failure, and to a wrong restart too: a little less sure suffices
    assert 0.45 < drain_break_even("gpu_hbm_ecc", 1024) < checked
    # a kind that slows or warns but does not kill its job: a drain saves nothing in this model
    assert drain_break_even("gpu_thermal", 1024) == 1.0 and drain_break_even("rack_cooling", 8) == 1.0


def test_a_drain_at_the_checkpoint_pays_only_for_a_job_the_failure_is_likely_to_strike() -> None:
    hour = 3600.0
    # a job that outlives the horizon (or says no limit) meets the failure if it comes: the plain
    # break-even, restart / (restart + the steps since a checkpoint)
    plain = RESTART_S / (RESTART_S + 45 * 60 / 4)
    assert checkpoint_drain_pays(plain + 0.01, {"j": 64}, {"j": 24 * hour})
    assert checkpoint_drain_pays(plain + 0.01, {"j": 64}, {})
    assert not checkpoint_drain_pays(plain - 0.01, {"j": 64}, {})
    # a job due to end within the hour, at p = 0.99: the failure, somewhere in 12 h, most likely
    # finds it gone; a restart now would be for nothing
    assert not checkpoint_drain_pays(0.99, {"j": 128}, {"j": 0.9 * hour})
    # the even spread over the horizon: a job with 8 h of 12 left, at p = 0.99, is struck with 0.66
    assert math.isclose(onset_before(8 * hour), 8 / 12)
    assert checkpoint_drain_pays(0.99, {"j": 128}, {"j": 8 * hour})
    assert not checkpoint_drain_pays(0.99, {"j": 128}, {"j": 4 * hour})  # struck with 0.33: wait
    assert onset_before(-60.0) == 0.0 and onset_before(WARNING_HORIZON_S * 2) == 1.0
    # two jobs on the node: the large one ending soon outweighs the small one that runs on
    assert not checkpoint_drain_pays(0.99, {"big": 512, "small": 8}, {"big": 0.5 * hour})
    assert checkpoint_drain_pays(0.99, {"big": 512, "small": 8}, {"small": 0.5 * hour})
