"""Record a real GPU's NVML fields once a second while it trains, checkpoints, runs at half duty
and cools: what dcgm-exporter would read (DCGM's own source is NVML), so the trace can be set
beside the project's `gpu` telemetry and the physics the predictor reads (heat above the inlet
against power; tests/data/real-gpu/README.md).

Runs where a GPU, PyTorch and nvidia-ml-py are (python3 scripts/record-gpu.py OUTDIR); the way
../shared/datasets/real-gpu/h200/capture.py recorded the H200, with the energy counter read
both ways it can be (nvmlDeviceGetTotalEnergyConsumption and field 83, which that capture missed:
it asked for field 158) and the 1-s average and instant power apart.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pynvml as nvml  # type: ignore[import-not-found]  # on the GPU machine only
import torch  # type: ignore[import-not-found]

OUT = sys.argv[1]
FIELDS = {  # NVML field ids (nvml.h): read by number, so an older binding's missing names do not matter
    "total_energy_fv": 83,  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ since the driver loaded
    "mem_temp": 82,  # NVML_FI_DEV_MEMORY_TEMP
    "pcie_replay": 94,  # NVML_FI_DEV_PCIE_REPLAY_COUNTER
    "power_average": 185,  # NVML_FI_DEV_POWER_AVERAGE, mW over the last second
    "power_instant": 186,  # NVML_FI_DEV_POWER_INSTANT, mW
}
# the H200 recording's columns and phase names (idle, train, train-checkpoint, membound, cooldown),
# so aiops/recording_check.py and telemetry_gen/recording.py read either (AIOPS_RECORDING=...)
COLUMNS = [
    *("t", "phase", "gpu_util", "mem_copy_util", "gpu_temp", "power_w", "power_limit_w", "sm_clock", "mem_clock"),
    *("clocks_event_reasons", "pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width", "fb_used_mib"),
    *("fb_free_mib", "ecc_sbe_vol", "ecc_dbe_vol", "ecc_sbe_agg", "power_violation_us", "thermal_violation_us"),
    *("remapped_corr", "remapped_unc", "remap_pending", "total_energy", *FIELDS),
]

nvml.nvmlInit()
gpu = nvml.nvmlDeviceGetHandleByIndex(0)
phase = {"name": "idle"}
stop = threading.Event()


def safe(call: Callable[..., Any], *args: object) -> Any:
    try:
        return call(*args)
    except Exception:
        return None


def field_values() -> list[Any]:
    try:
        values = nvml.nvmlDeviceGetFieldValues(gpu, list(FIELDS.values()))
    except Exception:
        return [None] * len(FIELDS)
    out: list[Any] = []
    for v in values:
        if v.nvmlReturn != 0:
            out.append(None)
            continue
        u = v.value
        out.append({0: u.dval, 1: u.uiVal, 2: u.ulVal, 3: u.ullVal, 4: u.sllVal}.get(v.valueType, u.ullVal))
    return out


def reasons() -> Any:
    if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons"):
        return safe(nvml.nvmlDeviceGetCurrentClocksEventReasons, gpu)
    return safe(nvml.nvmlDeviceGetCurrentClocksThrottleReasons, gpu)


def sample(writer: csv.DictWriter[str]) -> None:
    while not stop.is_set():
        now = time.time()
        util = safe(nvml.nvmlDeviceGetUtilizationRates, gpu)
        mem = safe(nvml.nvmlDeviceGetMemoryInfo, gpu)
        vio_p = safe(nvml.nvmlDeviceGetViolationStatus, gpu, nvml.NVML_PERF_POLICY_POWER)
        vio_t = safe(nvml.nvmlDeviceGetViolationStatus, gpu, nvml.NVML_PERF_POLICY_THERMAL)
        remap = safe(nvml.nvmlDeviceGetRemappedRows, gpu)
        power = safe(nvml.nvmlDeviceGetPowerUsage, gpu)
        limit = safe(nvml.nvmlDeviceGetEnforcedPowerLimit, gpu)
        row = {
            "t": round(now, 3),
            "phase": phase["name"],
            "gpu_util": util.gpu if util else None,
            "mem_copy_util": util.memory if util else None,
            "gpu_temp": safe(nvml.nvmlDeviceGetTemperature, gpu, nvml.NVML_TEMPERATURE_GPU),
            "power_w": power / 1000.0 if power is not None else None,
            "power_limit_w": limit / 1000.0 if limit is not None else None,
            "sm_clock": safe(nvml.nvmlDeviceGetClockInfo, gpu, nvml.NVML_CLOCK_SM),
            "mem_clock": safe(nvml.nvmlDeviceGetClockInfo, gpu, nvml.NVML_CLOCK_MEM),
            "clocks_event_reasons": reasons(),
            "pcie_gen": safe(nvml.nvmlDeviceGetCurrPcieLinkGeneration, gpu),
            "pcie_width": safe(nvml.nvmlDeviceGetCurrPcieLinkWidth, gpu),
            "pcie_max_gen": safe(nvml.nvmlDeviceGetMaxPcieLinkGeneration, gpu),
            "pcie_max_width": safe(nvml.nvmlDeviceGetMaxPcieLinkWidth, gpu),
            "fb_used_mib": mem.used // 2**20 if mem else None,
            "fb_free_mib": mem.free // 2**20 if mem else None,
            "ecc_sbe_vol": safe(nvml.nvmlDeviceGetTotalEccErrors, gpu, 0, 0),  # corrected, volatile
            "ecc_dbe_vol": safe(nvml.nvmlDeviceGetTotalEccErrors, gpu, 1, 0),  # uncorrected, volatile
            "ecc_sbe_agg": safe(nvml.nvmlDeviceGetTotalEccErrors, gpu, 0, 1),  # corrected, aggregate
            "power_violation_us": vio_p.violationTime / 1000 if vio_p else None,
            "thermal_violation_us": vio_t.violationTime / 1000 if vio_t else None,
            "remapped_corr": remap[0] if remap else None,
            "remapped_unc": remap[1] if remap else None,
            "remap_pending": remap[2] if remap else None,
            "total_energy": safe(nvml.nvmlDeviceGetTotalEnergyConsumption, gpu),  # mJ
        }
        row.update(zip(FIELDS, field_values(), strict=True))
        writer.writerow(row)
        time.sleep(max(0.0, 1.0 - (time.time() - now)))


steps: list[dict[str, object]] = []


def idle(name: str, seconds: float) -> None:
    phase["name"] = name
    time.sleep(seconds)


def train(name: str, seconds: float, duty: float = 1.0, checkpoint_at: float | None = None) -> None:
    """A transformer training loop (bf16, forward, backward, AdamW); at `duty` < 1 it trains for
    a second and waits the rest (a job starved by its input or its peers); at `checkpoint_at`
    seconds it copies the weights to host memory and idles 6 s (a synchronous checkpoint)."""
    phase["name"] = name
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(2048, 16, 8192, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 8).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(32, 1024, 2048, device="cuda", dtype=torch.bfloat16)
    start = time.time()
    window = start
    while time.time() < start + seconds:
        t = time.time()
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        steps.append({"t": round(t, 3), "phase": phase["name"], "step_s": round(time.time() - t, 4)})
        if checkpoint_at is not None and time.time() - start > checkpoint_at:
            checkpoint_at = None
            phase["name"] = name + "-checkpoint"
            held = {k: v.detach().cpu() for k, v in model.state_dict().items()}
            time.sleep(max(0.0, 6.0 - (time.time() - t)))
            del held
            phase["name"] = name
        if duty < 1.0 and time.time() - window >= 1.0:
            time.sleep((1.0 - duty) / duty)
            window = time.time()
    del model, opt, x
    torch.cuda.empty_cache()


def membound(name: str, seconds: float) -> None:
    """A 2 GiB copy and scale: memory-bandwidth bound, the SM clock free of the power cap."""
    phase["name"] = name
    a = torch.randn(2 * 1024**3 // 4, device="cuda")
    b = torch.empty_like(a)
    end = time.time() + seconds
    while time.time() < end:
        b.copy_(a)
        a.mul_(1.0000001)
        torch.cuda.synchronize()
    del a, b
    torch.cuda.empty_cache()


def smi(*args: str) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=False).stdout


with open(f"{OUT}/nvidia-smi-q.xml", "w") as fh:
    fh.write(smi("-q", "-x"))
with open(f"{OUT}/nvidia-smi-info.txt", "w") as fh:
    fh.write(smi("-q") + "\n")
    fh.write(smi("--query-gpu=name,vbios_version,driver_version,power.limit,temperature.gpu", "--format=csv"))

plan: list[tuple[str, Callable[[], None]]] = [
    ("idle", lambda: idle("idle", 20)),  # no CUDA context yet
    ("train", lambda: train("train", 120, 1.0, 60.0)),
    ("train-half-duty", lambda: train("train-half-duty", 45, 0.5)),
    ("membound", lambda: membound("membound", 20)),
    ("cooldown", lambda: idle("cooldown", 60)),  # the context alive, no kernels
]
with open(f"{OUT}/nvml-1s.csv", "w", newline="") as table:
    writer = csv.DictWriter(table, fieldnames=COLUMNS)
    writer.writeheader()
    sampler = threading.Thread(target=sample, args=(writer,), daemon=True)
    sampler.start()
    for name, run in plan:
        began = time.time()
        run()
        print(f"{name}: {time.time() - began:.1f} s", flush=True)
    stop.set()
    sampler.join()
with open(f"{OUT}/train-steps.csv", "w", newline="") as fh:
    step_writer = csv.DictWriter(fh, fieldnames=["t", "phase", "step_s"])
    step_writer.writeheader()
    step_writer.writerows(steps)
print("samples written; steps", len(steps), flush=True)
