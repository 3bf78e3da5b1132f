"""Blind spots said out loud: which fault kinds the arriving telemetry can show, and what fixes a gap."""

from __future__ import annotations

from detectors.coverage import BLIND, DEGRADED, DETECTABLE, CoverageWatch
from detectors.detect_loop import DetectLoop, apply_events
from ingest.pipeline import IngestCore

# what a stock dcgm-exporter sends of the catalog's GPU fields (its default counters)
STOCK_GPU = (
    "DCGM_FI_DEV_GPU_TEMP=61,DCGM_FI_DEV_MEMORY_TEMP=55,DCGM_FI_DEV_POWER_USAGE=612.5,"
    "DCGM_FI_DEV_SM_CLOCK=1980i,DCGM_FI_DEV_MEM_CLOCK=2619i,DCGM_FI_DEV_GPU_UTIL=99i,"
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE=0.52,DCGM_FI_DEV_FB_USED=61234i,DCGM_FI_DEV_XID_ERRORS=0i,"
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS=0i,DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS=0i,"
    "DCGM_FI_DEV_ROW_REMAP_FAILURE=0i,DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL=123456789i,"
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER=0i"
)
NIC_SYSFS = "symbol_error=0i,port_rcv_errors=0i,link_downed=0i,link_error_recovery=0i,port_xmit_wait=10i"


def _lines(t: int, extra: str = "") -> bytes:
    ns = t * 10**9
    rows = [f"gpu,node=n1,gpu=n1-gpu{i} {STOCK_GPU} {ns}" for i in range(8)]
    rows += [f"nic,node=n1,nic=n1-nic{i} {NIC_SYSFS} {ns}" for i in range(8)]
    if extra:
        rows.append(f"{extra} {ns}")
    return ("\n".join(rows) + "\n").encode()


def _watch_over(ticks: int, extra: str = "") -> CoverageWatch:
    core, watch = IngestCore(), CoverageWatch(settle_ticks=3)
    for t in range(ticks):
        watch.observe(core.process(_lines(1000 + 10 * t, extra)).frames)
    return watch


def test_stock_exporter_and_sysfs_counters_leave_named_kinds_blind_or_degraded() -> None:
    verdicts = {c.kind: c for c in _watch_over(3).report()}
    # NVLink CRC and replay totals are commented out in the exporter's default counters
    assert verdicts["gpu_nvlink"].status == BLIND
    assert "enable DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL" in verdicts["gpu_nvlink"].fixes[0]
    # the ECC volatile totals are missing, the remapped rows are not
    assert verdicts["gpu_hbm_ecc"].status == DEGRADED
    assert set(verdicts["gpu_hbm_ecc"].missing) == {
        "gpu.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "gpu.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    }
    # no job tag and no schedule: the XID rule works, its blast radius does not
    assert verdicts["gpu_fell_off_bus"].status == DEGRADED
    assert verdicts["gpu_fell_off_bus"].missing == ("gpu#job",)
    # no BMC agent, no clock-event reasons: nothing to read for a PSU
    assert verdicts["psu_failure"].status == BLIND
    assert verdicts["gpu_fault"].status == DETECTABLE


def test_a_schedule_meets_the_job_need_and_a_later_field_closes_a_gap() -> None:
    watch = _watch_over(3)
    first = {n.subject: n for n in watch.notices(1030.0)}
    assert "gpu_fault" not in first  # covered from the start: no notice
    assert first["psu_failure"].status == BLIND
    watch.schedule_known = True
    core = IngestCore()
    watch.observe(core.process(_lines(1040, "psu,node=n1,psu=n1-psu0 status=1i,output_power_w=800")).frames)
    later = {n.subject: n for n in watch.notices(1040.0)}
    assert later["gpu_fell_off_bus"].status == DETECTABLE  # the gap closed: said once
    assert later["psu_failure"].status == DEGRADED
    assert watch.notices(1050.0) == []  # nothing changed since


def test_no_verdict_before_the_collectors_settle() -> None:
    watch = _watch_over(2)
    assert watch.notices(1010.0) == []


def test_missing_fields_never_raise_an_alarm() -> None:
    """Hours of a node that sends only the stock exporter's fields and sysfs counters: coverage
    notices, and not one anomaly."""
    loop = DetectLoop(10.0)
    apply_events(loop, [])
    anomalies = []
    for t in range(200):
        found, letters = loop.feed(_lines(1000 + 10 * t))
        assert letters == []
        anomalies += found
    anomalies += loop.finish()
    assert anomalies == []
    assert {n.subject for n in loop.notices} >= {"gpu_nvlink", "psu_failure", "pfc_storm"}
