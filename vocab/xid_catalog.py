"""NVIDIA's Xid catalog (xid_catalog.tsv, every Xid of the published table) turned into what the
engine needs per Xid: a class, a severity, an action in our words, the fault kind it points to,
and whether it is an alarm at once, only when it repeats, or not at all.

How a catalog row becomes that (our reading of the catalog's columns, written here so it can be
argued with):
- class: *memory* for the ECC, row-remapping, page-retirement and containment Xids; *fabric* for
  NVLink and the C2C/CHI links; *application* where the catalog's immediate action is to restart
  the application and its investigation is the application's code (CHECK_APP/CUDA,
  WORKFLOW_XID_13/31); *driver* where the investigation is the software (INVESTIGATE_SW*,
  UPDATE_SWFW) or the description names the driver or its firmware (GSP); *hardware* otherwise.
- when it alarms: the catalog's immediate action IGNORE (or none, for the informational power
  smoothing and confidential-computing entries) means nothing is to be done now: such an Xid is
  an alarm only when it repeats (REPEAT_COUNT within REPEAT_WINDOW_S on one GPU, our threshold;
  the catalog's own where it gives one). An Xid the catalog lists as "Unused" on A100, H100,
  B100 and GB200 is unexpected: an alarm, as is any code the catalog does not list.
- severity: critical where the GPU is lost or its memory corrupt (a node reboot or an
  uncontained error), major where it must be reset, minor where the application restarts or
  nothing is to be done.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources

CATALOG_SOURCE = (
    "NVIDIA Xid catalog for Ampere and newer GPUs (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), "
    "the edition listing Xids 1-172 (GPU driver R575)"
)
REPEAT_COUNT = 3  # ours: an informational Xid three times in a day on one GPU is worth a look
REPEAT_WINDOW_S = 86_400.0

MEMORY = frozenset({48, 63, 64, 92, 94, 95, 140, 156, 157, 168, 171, 172})
LINKS = frozenset({121, 136, 159})  # C2C, NVLink training, CHI: links, though not named NVLINK
CRITICAL = frozenset({48, 79, 95, 140})
# the catalog's trigger text says PCI quality, not the application, though its buckets read like one
HARDWARE = frozenset({32})
# the catalog's own repeat threshold: NETIR link-down "REPORT_ISSUE (if seen >1 per day)"
CATALOG_REPEAT = {149: (2, 86_400.0)}
# pairs that undo each other: power smoothing re-engaged after it disengaged
CANCELS = {162: 163}

ACTIONS = {
    "RESTART_APP": "restart the job; if the same GPU repeats it, reset the GPU",
    "RESET_GPU": "reset the GPU (nvidia-smi -r) once its job is off; if it repeats, drain and replace",
    "RESTART_BM": "drain the node and reboot it (the GPU is gone until then); if it repeats, replace the GPU",
    "RESTART_VM": "restart the VM",
    "CHECK_MECHANICALS": "check the GPU's auxiliary power connection",
    "UPDATE_SWFW": "update the driver and the GPU firmware",
    "WORKFLOW_XID_45": "look for the Xid that came just before it; alone, restart the fabric manager",
    "WORKFLOW_XID_48": "drain the node at the next checkpoint and run the GPU field diagnostics (dcgmi diag -r 3)",
    "WORKFLOW_NVLINK_ERR": "reset the GPU; if NVLink errors persist, check the link and the device at its far end",
    "WORKFLOW_NVLINK5_ERR": "reset the GPU; if NVLink errors persist, check the link and the device at its far end",
    "XID_154": "do the recovery action it names (drain, reset or reboot)",
    "CHECK_UVM": "check the job's unified-memory use; reset the GPU if it repeats",
    "IGNORE": "nothing now; look at the GPU if it repeats",
    "": "nothing now; look at the GPU if it repeats",
    "CONTACT_SUPPORT": "unexpected on this GPU generation: collect nvidia-bug-report and ask NVIDIA",
}


@dataclass(frozen=True, slots=True)
class CatalogRow:
    code: int
    mnemonic: str
    description: str
    immediate: str
    investigatory: str

    @property
    def used(self) -> bool:
        return self.description != "Unused"


def rows() -> dict[int, CatalogRow]:
    text = resources.files("vocab").joinpath("xid_catalog.tsv").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    out = {}
    for r in csv.DictReader(lines, delimiter="\t"):
        row = CatalogRow(
            int(r["code"]), r["mnemonic"], r["description"], r["immediate"] or "", r["investigatory"] or ""
        )
        out[row.code] = row
    return out


def xid_class(row: CatalogRow) -> str:
    if row.code in MEMORY:
        return "memory"
    if "NVLINK" in row.mnemonic or row.code in LINKS:
        return "fabric"
    if row.code in HARDWARE:
        return "hardware"
    if row.immediate == "RESTART_APP" and (
        row.investigatory.startswith("CHECK_APP")
        or row.investigatory.startswith("WORKFLOW_XID_1")
        or row.investigatory.startswith("WORKFLOW_XID_3")
    ):
        return "application"
    if (
        row.investigatory.startswith("INVESTIGATE_SW")
        or row.immediate == "UPDATE_SWFW"
        or "driver" in row.description.lower()
        or row.mnemonic.startswith("GSP")
    ):
        return "driver"
    return "hardware"


# no bucket in the catalog, but fatal by what they say: a PCIe fatal timeout, a micro-controller
# halt (as Xid 62, whose bucket is RESET_GPU), errors in the write-protected region at boot
FATAL_WITHOUT_BUCKET = frozenset({167, 168, 169})


def informational(row: CatalogRow) -> bool:
    """Nothing to be done when it is seen once: the catalog's immediate action IGNORE, or none."""
    return row.used and row.immediate in ("IGNORE", "") and row.code not in FATAL_WITHOUT_BUCKET


def severity(row: CatalogRow) -> str:
    if row.code in CRITICAL:
        return "critical"
    if not row.used or row.immediate in ("RESET_GPU", "RESTART_BM", "RESTART_VM", "CHECK_MECHANICALS"):
        return "major"
    if row.code in FATAL_WITHOUT_BUCKET:
        return "major"
    if row.immediate.startswith("WORKFLOW_NVLINK") or row.immediate in ("WORKFLOW_XID_48", "XID_154"):
        return "major"
    return "minor"


def action(row: CatalogRow) -> str:
    if row.code in FATAL_WITHOUT_BUCKET:
        return ACTIONS["RESET_GPU"]
    return ACTIONS.get(row.immediate, ACTIONS["CONTACT_SUPPORT"])


def meaning(row: CatalogRow) -> str:
    if not row.used:
        return f"{row.mnemonic} (listed as unused on A100/H100/B100/GB200)"
    return f"{row.description} ({row.mnemonic})"


__all__ = ["CANCELS", "CATALOG_REPEAT", "CATALOG_SOURCE", "REPEAT_COUNT", "REPEAT_WINDOW_S", "CatalogRow", "rows"]
