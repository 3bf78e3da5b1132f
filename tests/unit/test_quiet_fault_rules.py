"""The rules for faults that raise no Xid and no error counter (issue 29), table by table: what
each signal looks like on a healthy part (an idle GPU's PCIe link at Gen1, a lone link retrain, a
fabric manager starting after a reboot) stays quiet; the fault does not."""

from __future__ import annotations

import pickle

from detectors.stack import DetectorStack
from ingest.frames import Frame
from ingest.lineprotocol import decode
from vocab.thresholds import DetectorSettings, RuleThresholds

T0 = 1_767_225_600.0
Found = list[list[tuple[str, str]]]


def tick(t: int, lines: list[str]) -> dict[str, Frame]:
    return decode("".join(f"{line} {int((T0 + t) * 1e9)}\n" for line in lines).encode()).frames


def run(stack: DetectorStack, ticks: list[tuple[int, list[str]]]) -> Found:
    return [[(a.entity, a.metric) for a in stack.process(T0 + t, tick(t, lines))] for t, lines in ticks]


def pcie(gpu: str, util: int, gen: int = 5, width: int = 16) -> str:
    return (
        f"gpu,gpu={gpu},node=n1,job=j1 DCGM_FI_DEV_GPU_UTIL={util}i,DCGM_FI_DEV_PCIE_LINK_GEN={gen}i,"
        f"DCGM_FI_DEV_PCIE_LINK_WIDTH={width}i,DCGM_FI_DEV_PCIE_MAX_LINK_GEN=5i,DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH=16i"
    )


def test_an_idle_gpus_link_at_gen1_is_power_saving_and_a_busy_one_below_its_best_is_a_fault() -> None:
    stack = DetectorStack(30)
    idle = [(t, [pcie("g0", util=0, gen=1)]) for t in (0, 30, 60)]
    assert run(stack, idle) == [[], [], []]
    # one busy scrape a generation low: the link was caught lowering itself between two kernels
    blip = [(90, [pcie("g0", util=96, gen=4)]), (120, [pcie("g0", util=96)])]
    assert run(stack, blip) == [[], []]
    low = [(t, [pcie("g0", util=96, gen=3)]) for t in (150, 180, 210)]
    assert run(stack, low) == [[], [("g0", "DCGM_FI_DEV_PCIE_LINK_GEN")], []]


def test_a_link_at_half_width_is_a_fault_busy_or_not() -> None:
    stack = DetectorStack(30)
    narrow = [(t, [pcie("g0", util=0, gen=1, width=8)]) for t in (0, 30)]
    assert run(stack, narrow) == [[], [("g0", "DCGM_FI_DEV_PCIE_LINK_WIDTH")]]


def test_a_restored_stack_keeps_counting_a_low_link() -> None:
    stack = DetectorStack(30)
    assert run(stack, [(0, [pcie("g0", util=96, gen=3)])]) == [[]]
    restored = pickle.loads(pickle.dumps(stack))
    assert run(restored, [(30, [pcie("g0", util=96, gen=3)])]) == [[("g0", "DCGM_FI_DEV_PCIE_LINK_GEN")]]


def nvlinks(up: int) -> str:
    return f"gpu,gpu=g0,node=n1,job=j1 nvlink_links_up={up}i"


def test_nvlink_links_are_counted_against_the_gpu_model() -> None:
    assert run(DetectorStack(30), [(0, [nvlinks(18)]), (30, [nvlinks(17)])]) == [[], [("g0", "nvlink_links_up")]]
    # an H800 has 8 links: 8 Up is healthy there
    h800 = DetectorSettings(rules=RuleThresholds(gpu_model="H800"))
    assert run(DetectorStack(30, settings=h800), [(0, [nvlinks(8)]), (30, [nvlinks(7)])]) == [
        [],
        [("g0", "nvlink_links_up")],
    ]
    # a model the table does not know: no count to hold the links to, no guess
    unknown = DetectorSettings(rules=RuleThresholds(gpu_model="X9"))
    assert run(DetectorStack(30, settings=unknown), [(0, [nvlinks(2)])]) == [[]]


def fabric(status: int, gpus: int = 8) -> list[str]:
    return [f"gpu,gpu=n1-gpu{i},node=n1,job=j1 DCGM_FI_DEV_FABRIC_MANAGER_STATUS={status}i" for i in range(gpus)]


def test_a_fabric_manager_starting_is_not_a_fault_and_a_failed_one_is() -> None:
    stack = DetectorStack(30)
    assert run(stack, [(0, fabric(2)), (30, fabric(3))]) == [[], []]
    [failed] = run(stack, [(60, fabric(4))])
    assert sorted(failed) == [(f"n1-gpu{i}", "DCGM_FI_DEV_FABRIC_MANAGER_STATUS") for i in range(8)]
    # PCIe parts without NVSwitches report "not supported"
    assert run(DetectorStack(30), [(0, fabric(0))]) == [[]]


def ports(recoveries: dict[str, int], downed: int = 0, width: dict[str, int] | None = None) -> list[str]:
    lines = []
    for i in range(10):
        nic = f"n{i}-nic0"
        w = (width or {}).get(nic, 4)
        lines.append(
            f"nic,nic={nic},node=n{i} link_error_recovery={recoveries.get(nic, 0)}i,link_downed={downed}i,"
            f"link_width={w}i,link_rate_gbps={100.0 * w}"
        )
    return lines


def test_a_lone_link_retrain_is_not_a_fault_nor_a_pair_and_three_within_the_hour_are() -> None:
    stack = DetectorStack(30)

    # retrains at 30 s; a pair two hours later (ten minutes apart: what two lone retrains do on
    # some port of a big fabric every few days); a third twenty minutes after the pair
    def count(t: int) -> int:
        return sum(t >= at for at in (30, 7230, 7830, 9030))

    found = run(stack, [(t, ports({"n3-nic0": count(t)})) for t in range(0, 9060, 30)])
    fired = [(t, f) for t, f in zip(range(0, 9060, 30), found, strict=True) if f]
    assert fired == [(9030, [("n3-nic0", "link_error_recovery")])]


def test_a_retrain_that_ends_with_the_link_down_is_left_to_the_link_rules() -> None:
    stack = DetectorStack(30)
    found = run(stack, [(0, ports({})), (30, ports({"n3-nic0": 1}, downed=0)), (60, ports({"n3-nic0": 2}, downed=1))])
    assert ("n3-nic0", "link_error_recovery") not in [a for tick_found in found for a in tick_found]


def test_a_link_trained_below_the_fabrics_common_width_is_a_fault() -> None:
    stack = DetectorStack(30)
    [found] = run(stack, [(0, ports({}, width={"n5-nic0": 2}))])
    assert sorted(found) == [("n5-nic0", "link_rate_gbps"), ("n5-nic0", "link_width")]
    # a fabric whose common value is HDR-wide 2x (say) judges its ports against that
    two_wide = {f"n{i}-nic0": 2 for i in range(10)}
    assert run(DetectorStack(30), [(0, ports({}, width=two_wide))]) == [[]]
