"""The synthetic cluster: determinism, topology shape, realism invariants, and every fault kind
showing its documented symptoms on the right entities and only there."""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ingest.frames import Frame, concat, to_pandas
from ingest.lineprotocol import decode, encode, lines_to_bytes
from telemetry_gen.effects import GPU_IDLE, HW_POWER_BRAKE, SW_THERMAL
from telemetry_gen.emit import write_folder
from telemetry_gen.faults import KINDS, Fault, FaultSpecError, parse_spec
from telemetry_gen.generator import GenConfig, Generation
from telemetry_gen.topology import build
from vocab.catalog import DCGM_FP64_BLANK, DCGM_INT32_BLANK, MEASUREMENTS, MetricKind

GPUS = 256


@cache
def run(
    faults: str, hours: float = 1.5, seed: int = 11, maintenance_per_day: float = 2.0
) -> tuple[Generation, dict[str, pd.DataFrame]]:
    gen = Generation(
        GenConfig(
            realism="clean",
            gpus=GPUS,
            hours=hours,
            interval=30,
            seed=seed,
            faults=faults,
            maintenance_per_day=maintenance_per_day,
        )
    )
    parts: dict[str, list[Frame]] = defaultdict(list)
    for tick in gen.ticks():
        for frame in tick.frames:
            parts[frame.measurement].append(frame)
    return gen, {name: to_pandas(concat(frames)) for name, frames in parts.items()}


def increments(df: pd.DataFrame, id_tag: str, field: str) -> pd.Series:
    """Total increase of a counter per entity over the run."""
    ordered = df.sort_values("time")
    return ordered.groupby(id_tag)[field].agg(lambda s: s.max() - s.min())


def fault_of(gen: Generation, kind: str) -> Fault:
    (fault,) = [f for f in gen.faults if f.kind == kind]
    return fault


def after(df: pd.DataFrame, t: float) -> pd.DataFrame:
    return df[df["time"] >= int(t * 1e9)]


def between(df: pd.DataFrame, a: float, b: float) -> pd.DataFrame:
    return df[(df["time"] >= int(a * 1e9)) & (df["time"] < int(b * 1e9))]


# ---------------------------------------------------------------- determinism and outputs


def test_same_seed_gives_byte_identical_outputs_and_another_seed_differs(tmp_path: Path) -> None:
    outputs = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        gen = Generation(
            GenConfig(
                realism="clean", gpus=64, hours=0.5, interval=30, seed=seed, faults="gpu_straggler=1,psu_failure=1"
            )
        )
        write_folder(gen, tmp_path / name)
        outputs.append(
            {
                f: (tmp_path / name / f).read_bytes()
                for f in ("topology.json", "telemetry.lp", "events.jsonl", "truth.jsonl")
            }
        )
    assert outputs[0] == outputs[1]
    assert outputs[0]["truth.jsonl"] != outputs[2]["truth.jsonl"]
    assert outputs[0]["events.jsonl"] != outputs[2]["events.jsonl"]  # jobs placed elsewhere


def test_output_folder_is_complete_and_telemetry_is_time_ordered_valid_line_protocol(tmp_path: Path) -> None:
    gen = Generation(GenConfig(realism="clean", gpus=64, hours=0.25, interval=30, seed=1, faults="nic_link_flap=1"))
    write_folder(gen, tmp_path)
    decoded = decode((tmp_path / "telemetry.lp").read_bytes())
    assert decoded.rejects == []
    times = np.concatenate([f.time_ns for f in decoded.frames.values()])
    order = np.concatenate([decoded.line_no[n] for n in decoded.frames])
    assert np.all(np.diff(times[np.argsort(order)]) >= 0)
    topology = json.loads((tmp_path / "topology.json").read_text())
    assert {"nodes", "links", "graph"} <= set(topology)
    truth = [json.loads(line) for line in (tmp_path / "truth.jsonl").read_text().splitlines()]
    assert [t["kind"] for t in truth] == ["nic_link_flap"]
    assert set(truth[0]) >= {"fault_id", "kind", "root", "onset", "end", "precursor_start", "affected", "jobs"}


# ---------------------------------------------------------------- topology


@pytest.mark.parametrize("topology", ["fat-tree", "torus", "dragonfly"])
@pytest.mark.parametrize("gpus", [8, 1024])
def test_topologies_build_with_consistent_ids_and_edges(topology: str, gpus: int) -> None:
    t = build(topology, gpus)
    data: Any = t.to_json()
    ids = [n["id"] for n in data["nodes"]]
    assert len(ids) == len(set(ids))
    known = set(ids)
    for link in data["links"]:
        assert link["source"] in known and link["target"] in known, link
    assert t.count("gpu") == gpus and t.count("node") == gpus // 8
    assert len(t.gpu_node) == gpus and len(t.nic_node) == t.count("nic")
    if topology == "fat-tree":
        rails = {int(t.attrs[n]["rail"]) for n in t.ids["nic"]}
        assert rails == set(range(8))
        # NIC i of every node sits on a leaf of rail i
        for nic, leaf in zip(t.ids["nic"][:64], t.nic_switch[:64].tolist(), strict=True):
            assert t.attrs[t.switches[leaf]]["rail"] == t.attrs[nic]["rail"]
    if topology == "torus" and gpus == 1024:
        assert sum(1 for n in ids if n.startswith("link-")) == 3 * 128  # 6 neighbours, each cable shared


def test_fault_spec_is_parsed_and_checked() -> None:
    assert parse_spec("gpu_hbm_ecc=3, leaf_down=1") == {"gpu_hbm_ecc": 3, "leaf_down": 1}
    assert parse_spec("all=1") == dict.fromkeys(KINDS, 1)
    for bad in ("gpu_hbm_ecc", "nope=1", "leaf_down=x"):
        with pytest.raises(FaultSpecError):
            parse_spec(bad)
    # "all" on a topology means every kind it has a root for: a dragonfly has no spine
    dragonfly = build("dragonfly", 512)
    assert parse_spec("all=1", dragonfly) == {k: 1 for k in KINDS if k != "spine_congestion"}
    with pytest.raises(FaultSpecError, match="needs a spine"):
        Generation(GenConfig(topology="dragonfly", gpus=512, hours=1, faults="spine_congestion=1"))


# ---------------------------------------------------------------- realism


VALUE_RANGES = {
    ("gpu", "DCGM_FI_DEV_GPU_TEMP"): (10, 110),
    ("gpu", "DCGM_FI_DEV_POWER_USAGE"): (0, 750),
    ("gpu", "DCGM_FI_DEV_SM_CLOCK"): (0, 2100),
    ("gpu", "DCGM_FI_DEV_GPU_UTIL"): (0, 100),
    ("gpu", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"): (0, 1),
    ("optic", "rx_power_dbm"): (-40, 5),
    ("optic", "temperature_c"): (20, 80),
    ("node", "inlet_temp_c"): (10, 50),
    ("psu", "input_voltage_v"): (200, 260),
    ("cooling", "supply_temp_c"): (20, 60),
}


def test_values_stay_in_realistic_ranges_apart_from_dcgm_blanks() -> None:
    _, data = run("all=1", hours=4.0, seed=3)
    for (name, field), (lo, hi) in VALUE_RANGES.items():
        values = data[name][field].dropna()
        values = values[(values < DCGM_INT32_BLANK) & (values < DCGM_FP64_BLANK)]
        assert values.between(lo, hi).all(), (name, field, values.min(), values.max())


def test_counters_are_monotonic_per_entity() -> None:
    _, data = run("all=1", hours=4.0, seed=3)
    for m in MEASUREMENTS:
        if m.name not in data:
            continue
        df = data[m.name].sort_values("time")
        for metric in m.metrics:
            if metric.kind is not MetricKind.COUNTER:
                continue
            series = df[[m.id_tag, metric.name]].dropna()
            series = series[series[metric.name] < DCGM_INT32_BLANK]
            steps = series.groupby(m.id_tag)[metric.name].diff().dropna()
            assert (steps >= 0).all(), (m.name, metric.name)


def test_temperature_follows_power_and_idle_gpus_are_cool_and_flagged() -> None:
    _, data = run("", hours=1.0, seed=4)
    gpu = data["gpu"]
    gpu = gpu[(gpu["DCGM_FI_DEV_GPU_TEMP"] < 200) & (gpu["DCGM_FI_DEV_POWER_USAGE"] < 2000)]  # no blanks
    late = gpu[gpu["time"] > gpu["time"].min() + 900 * 10**9]  # past the thermal lag
    assert np.corrcoef(late["DCGM_FI_DEV_POWER_USAGE"], late["DCGM_FI_DEV_GPU_TEMP"])[0, 1] > 0.8
    idle = late[late["job"] == "idle"]
    busy = late[late["job"] != "idle"]
    assert len(idle) and len(busy)
    assert idle["DCGM_FI_DEV_GPU_TEMP"].mean() < busy["DCGM_FI_DEV_GPU_TEMP"].mean() - 15
    assert (idle["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"].astype(int) & GPU_IDLE).all()


def test_checkpoints_pause_every_job_for_a_minute_every_15_to_30_minutes() -> None:
    gen, data = run("", hours=1.5, seed=4)
    gpu = data["gpu"]
    per_job = gpu[gpu["job"] != "idle"].groupby(["job", "time"])["DCGM_FI_DEV_GPU_UTIL"].mean().reset_index()
    for job, rows in per_job.groupby("job"):
        spec = next(j for j in gen.workload.jobs if j.id == job)
        if spec.end - spec.start < 3600 or len(rows) < 120:
            continue
        paused = rows[rows["DCGM_FI_DEV_GPU_UTIL"] < 20]["time"].to_numpy() / 1e9
        gaps = np.diff(paused)
        gaps = gaps[gaps > 120]
        assert len(paused) >= 2
        assert ((gaps > 850) & (gaps < 1900)).all(), (job, gaps)


def test_non_fault_events_produce_no_error_counters_in_clean_mode() -> None:
    """Clean mode, for exact fault signatures: churn, checkpoints and drains move no error
    counter (the realism model adds a healthy fleet's noise on top; tests/unit/test_realism.py)."""
    gen, data = run("", hours=3.0, seed=8, maintenance_per_day=24)
    events = gen.events()
    assert {"job_end", "job_start", "maintenance"} <= {str(e["type"]) for e in events}
    errors = {
        "gpu": [
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        ],
        "nic": ["symbol_error", "port_rcv_errors", "link_downed", "rx_prio3_pause", "tx_prio3_pause"],
        "switch_port": ["symbol_error", "link_downed", "rx_prio3_pause", "tx_prio3_pause"],
    }
    ids = {"gpu": "gpu", "nic": "nic", "switch_port": "port"}
    for name, fields in errors.items():
        for field in fields:
            assert (increments(data[name], ids[name], field) == 0).all(), (name, field)
    assert (data["gpu"]["DCGM_FI_DEV_XID_ERRORS"] == 0).all()
    assert (data["psu"]["status"] == 1).all()


def test_maintenance_drains_nodes_and_the_reboot_is_a_gap_not_an_error() -> None:
    gen, data = run("", hours=3.0, seed=8, maintenance_per_day=24)
    m = gen.workload.maintenance[0]
    node = gen.topology.ids["node"][int(m.nodes[0])]
    gpu = between(data["gpu"], m.start, min(m.end, gen.workload.t_end))
    rows = gpu[gpu["node"] == node]
    assert (rows["job"] == "idle").all()
    stamps = np.unique(rows["time"]) / 1e9
    assert len(stamps) and np.diff(stamps).max() >= 600 - 30  # the reboot


# ---------------------------------------------------------------- each fault kind


def test_every_kind_is_scheduled_with_root_affected_and_precursor_rules() -> None:
    gen = Generation(GenConfig(realism="clean", gpus=1024, hours=3, interval=30, seed=2, faults="all=1"))
    assert sorted(f.kind for f in gen.faults) == sorted(KINDS)
    for f in gen.faults:
        kind = KINDS[f.kind]
        assert f.root in f.affected
        assert gen.topology.attrs[f.root]["kind"] == kind.root
        if kind.precursor:
            assert f.precursor_start is not None
            assert 3600 <= f.onset - f.precursor_start <= 12 * 3600
        else:
            assert f.precursor_start is None
        assert f.end > f.onset
    assert [t["fault_id"] for t in gen.truth()] == [f.fault_id for f in gen.faults]


def _only(series: pd.Series, expected: set[str]) -> None:
    hit = set(series[series > 0].index)
    assert hit == expected, (hit, expected)


def test_gpu_fell_off_bus() -> None:
    gen, d = run("gpu_fell_off_bus=1")
    f = fault_of(gen, "gpu_fell_off_bus")
    gpu = d["gpu"]
    xid = gpu[gpu["DCGM_FI_DEV_XID_ERRORS"] > 0]
    assert set(xid["gpu"]) == {f.root} and set(xid["DCGM_FI_DEV_XID_ERRORS"]) == {79}
    gone = between(gpu, f.onset + 60, f.end)
    assert f.root not in set(gone["gpu"])
    assert f.jobs  # the job died with it
    ends = [e for e in gen.events() if e["type"] == "job_end" and e["job"] in f.jobs]
    assert ends and ends[0]["reason"] == "failed"


def test_gpu_hbm_ecc_precursor_then_uncorrectable() -> None:
    gen, d = run("gpu_hbm_ecc=1", hours=2.0)
    f = fault_of(gen, "gpu_hbm_ecc")
    gpu = d["gpu"].sort_values("time")
    _only(increments(gpu, "gpu", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), {f.root})
    sbe = increments(between(gpu, gen.workload.t0, f.onset), "gpu", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
    assert sbe.idxmax() == f.root and sbe.drop(f.root).max() == 0
    root = gpu[gpu["gpu"] == f.root]
    assert 48 in set(root["DCGM_FI_DEV_XID_ERRORS"])
    assert (between(root, gen.workload.t0, f.onset)["DCGM_FI_DEV_XID_ERRORS"] == 0).all()


def test_gpu_thermal_creeps_then_throttles() -> None:
    gen, d = run("gpu_thermal=1", hours=2.0)
    f = fault_of(gen, "gpu_thermal")
    gpu = d["gpu"]
    gpu = gpu[gpu["DCGM_FI_DEV_GPU_TEMP"] < 200]
    hot = after(gpu, f.onset + 300)
    hot = hot[hot["time"] < int(f.end * 1e9)]
    throttled = hot[(hot["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"].astype(int) & SW_THERMAL) > 0]
    assert set(throttled["gpu"]) == {f.root}
    root = hot[hot["gpu"] == f.root]
    assert root["DCGM_FI_DEV_GPU_TEMP"].median() > 87
    assert root["DCGM_FI_DEV_SM_CLOCK"].median() < 1900


def test_gpu_nvlink_errors_on_the_root_only() -> None:
    gen, d = run("gpu_nvlink=1")
    f = fault_of(gen, "gpu_nvlink")
    _only(increments(d["gpu"], "gpu", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"), {f.root})


def test_gpu_straggler_is_slow_without_any_error_counter() -> None:
    gen, d = run("gpu_straggler=1")
    f = fault_of(gen, "gpu_straggler")
    gpu = between(d["gpu"], f.onset + 60, f.end)
    job = gpu[gpu["job"] == f.jobs[0]]
    clocks = job.groupby("gpu")["DCGM_FI_DEV_SM_CLOCK"].median()
    assert clocks.idxmin() == f.root
    assert clocks[f.root] < clocks.drop(f.root).median() * 0.9
    before = between(d["gpu"], gen.workload.t0, f.onset)
    power_before = before[before["job"] == f.jobs[0]]["DCGM_FI_DEV_POWER_USAGE"].median()
    assert job["DCGM_FI_DEV_POWER_USAGE"].median() < power_before  # every peer waits for it
    for field in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"):
        assert (increments(d["gpu"], "gpu", field) == 0).all()
    assert (d["gpu"]["DCGM_FI_DEV_XID_ERRORS"] == 0).all()


def test_nic_link_flap_bounces_one_link() -> None:
    gen, d = run("nic_link_flap=1")
    f = fault_of(gen, "nic_link_flap")
    _only(increments(d["nic"], "nic", "link_downed"), {f.root})
    _only(increments(d["nic"], "nic", "symbol_error"), {f.root})
    ports = increments(d["switch_port"], "port", "link_downed")
    assert set(ports[ports > 0].index) <= set(f.affected)


def test_optic_degradation_sags_then_errors_then_fails() -> None:
    gen, d = run("optic_degradation=1", hours=2.0)
    f = fault_of(gen, "optic_degradation")
    optic = d["optic"]
    root = optic[optic["optic"] == f.root].sort_values("time")
    pre = between(root, gen.workload.t0, f.onset)
    assert pre["rx_power_dbm"].iloc[-5:].mean() < pre["rx_power_dbm"].iloc[:5].mean() - 0.2
    nic = f.root.removesuffix("-optic")
    _only(increments(d["nic"], "nic", "symbol_error"), {nic})
    errors_before = between(d["nic"], gen.workload.t0, f.onset)
    assert (increments(errors_before, "nic", "symbol_error") == 0).all()


def test_leaf_down_takes_every_nic_under_it() -> None:
    gen, d = run("leaf_down=1")
    f = fault_of(gen, "leaf_down")
    under = {n for n in f.affected if "-nic" in n}
    assert len(under) == 32
    _only(increments(d["nic"], "nic", "link_downed"), under)
    during = between(d["switch"], f.onset + 30, f.end)
    assert f.root not in set(during["switch"])


def test_pfc_storm_origin_sends_pauses_and_they_spread_upstream() -> None:
    gen, d = run("pfc_storm=1")
    f = fault_of(gen, "pfc_storm")
    _only(increments(d["nic"], "nic", "tx_prio3_pause"), {f.root})
    rx = increments(d["nic"], "nic", "rx_prio3_pause")
    assert (rx > 0).sum() >= 7  # its leaf pauses the other senders
    port_tx = increments(d["switch_port"], "port", "tx_prio3_pause")
    assert any(":u" in p for p in port_tx[port_tx > 0].index)  # and its uplinks


def test_spine_congestion_is_on_one_spine() -> None:
    gen, d = run("spine_congestion=1")
    f = fault_of(gen, "spine_congestion")
    switches = d["switch"]
    spines = switches[switches["role"] == "spine"]
    wait = increments(after(spines, f.onset), "switch", "port_xmit_wait")
    assert wait.idxmax() == f.root
    assert wait[f.root] > 3 * wait.drop(f.root).max()


def test_psu_failure_brakes_every_gpu_of_its_node_only() -> None:
    gen, d = run("psu_failure=1")
    f = fault_of(gen, "psu_failure")
    psu = d["psu"]
    assert set(psu[psu["status"] == 0]["psu"]) == {f.root}
    node = gen.topology.attrs[f.root]["node"]
    gpu = d["gpu"]
    braked = gpu[(gpu["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"].astype(int) & HW_POWER_BRAKE) > 0]
    assert set(braked["node"]) == {node}
    assert braked["gpu"].nunique() == 8


def test_rack_cooling_heats_every_node_of_the_rack() -> None:
    gen, d = run("rack_cooling=1", hours=2.0)
    f = fault_of(gen, "rack_cooling")
    rack = gen.topology.attrs[f.root]["rack"]
    node = between(d["node"], f.onset + 300, f.end)
    inlet = node.groupby("rack")["inlet_temp_c"].mean()
    assert inlet.idxmax() == rack and inlet[rack] > inlet.drop(rack).max() + 4
    cooling = d["cooling"]
    pre = between(cooling[cooling["cooling"] == f.root], gen.workload.t0, f.onset)
    assert pre["supply_temp_c"].iloc[-5:].mean() > pre["supply_temp_c"].iloc[:5].mean()  # coolant creeps first


def test_cached_line_heads_encode_exactly_like_the_general_encoder() -> None:
    gen = Generation(GenConfig(realism="clean", gpus=64, hours=0.1, interval=30, seed=2, faults="gpu_fell_off_bus=1"))
    for tick in gen.ticks():
        fast = b"".join(lines_to_bytes(lines) for _, lines in gen.sim.lines(tick))
        assert fast == encode(tick.frames)


def test_jobs_ask_for_their_run_in_whole_hours_and_the_scheduler_events_say_when_the_limit_runs_out() -> None:
    gen = Generation(GenConfig(gpus=256, hours=12, interval=60, seed=5))
    starts = {e["job"]: e for e in gen.events() if e["type"] in ("job_start", "job_running")}
    assert starts
    for job in gen.workload.jobs:
        asked = job.limit_end - job.start
        assert asked % 3600 == 0 and asked >= 3600  # sbatch --time in whole hours
        assert job.end <= job.limit_end  # no job runs past its limit
        if job.id in starts:
            assert starts[job.id]["expected_end"] == job.limit_end
