"""When acting on a prediction pays (act/costs.py): the goodput bench's cost model, per kind and job."""

from __future__ import annotations

import math

from act.costs import CHECK_S, RESTART_S, WARNING_HORIZON_S, drain_break_even


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
