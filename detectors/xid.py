"""NVIDIA XID errors: what each means, how bad it is, what to do.

From NVIDIA's "XID Errors" catalog (docs.nvidia.com/deploy/xid-errors) and the GPU memory error
management guide. Severity: "critical" = the GPU or its job is lost; "major" = the job likely
fails or must restart; "minor" = watch it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    meaning: str
    severity: str
    action: str
    suggests: str  # the fault kind it most often points to


_DRAIN = "drain the node at the next checkpoint and run the GPU field diagnostics (dcgmi diag -r 3)"
_RESET = "reset the GPU (nvidia-smi -r) once its job is off; if it repeats, drain and replace"

XIDS: dict[int, Xid] = {
    x.code: x
    for x in (
        Xid(
            13,
            "graphics engine exception (often an application bug)",
            "minor",
            "check the job's code and inputs",
            "application",
        ),
        Xid(
            31,
            "GPU memory page fault (often an application bug)",
            "minor",
            "check the job's code and inputs",
            "application",
        ),
        Xid(43, "GPU stopped processing (a reset channel after another error)", "major", _RESET, "gpu"),
        Xid(45, "preemptive cleanup after an earlier error", "minor", "look for the XID that preceded it", "gpu"),
        Xid(48, "double-bit (uncorrectable) ECC error", "critical", _DRAIN, "gpu_hbm_ecc"),
        Xid(61, "internal micro-controller breakpoint/warning", "major", _RESET, "gpu"),
        Xid(62, "internal micro-controller halt", "critical", _DRAIN, "gpu"),
        Xid(
            63,
            "ECC page retirement or row remapping recorded",
            "minor",
            "schedule a GPU reset to apply the remap; watch correctable error rates",
            "gpu_hbm_ecc",
        ),
        Xid(64, "ECC page retirement or row remapping failed", "critical", _DRAIN, "gpu_hbm_ecc"),
        Xid(
            74,
            "NVLink error",
            "major",
            "check the NVLink/NVSwitch fabric of the node (nvidia-smi nvlink -e)",
            "gpu_nvlink",
        ),
        Xid(
            79,
            "GPU has fallen off the bus",
            "critical",
            "drain the node and power-cycle it; reseat or replace the GPU if it recurs",
            "gpu_fell_off_bus",
        ),
        Xid(92, "high single-bit ECC error rate", "major", _DRAIN, "gpu_hbm_ecc"),
        Xid(94, "contained uncorrectable ECC error (the application was killed)", "critical", _DRAIN, "gpu_hbm_ecc"),
        Xid(95, "uncontained uncorrectable ECC error (the GPU must be reset)", "critical", _DRAIN, "gpu_hbm_ecc"),
        Xid(119, "GSP RPC timeout", "critical", _RESET, "gpu"),
        Xid(120, "GSP error", "critical", _RESET, "gpu"),
    )
}


def describe(code: int) -> Xid:
    return XIDS.get(code, Xid(code, f"XID {code}", "major", "look it up in NVIDIA's XID catalog", "gpu"))
