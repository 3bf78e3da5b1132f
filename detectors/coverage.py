"""Which fault kinds the telemetry that actually arrives can show: blind spots said out loud.

A stock dcgm-exporter leaves five of the catalog's GPU fields empty, and a node without the BMC
agent sends no PSU status. A detector that reads a field nobody sends does not fail; it just never
fires, and the operator believes the fleet is watched. This module watches which catalog fields
(and the `job` tag) arrive and, per fault kind (the registry's `needs`), says whether its
detection is complete (`detectable`), works on part of its evidence (`degraded`) or has nothing
to read (`blind`), and what would fix each gap. A missing field is a notice, never an alarm.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from ingest.frames import Frame
from vocab import registry

DETECTABLE, DEGRADED, BLIND = "detectable", "degraded", "blind"

# Where each kind of telemetry comes from, to say what fixes a gap (config/ holds the agents).
_BY_MEASUREMENT = {
    "gpu": "enable {field} in dcgm-exporter's counters CSV (config/dcgm-exporter/counters.csv)",
    "nvswitch": "the node agent's NVSwitch input (DCGM NVSwitch fields)",
    "nic": "the node agent's inputs.infiniband (config/telegraf/node.conf)",
    "optic": "transceiver DDM readings (the node agent's optics input)",
    "switch": "the switch agent (config/telegraf/switch.conf)",
    "switch_port": "the switch agent (config/telegraf/switch.conf)",
    "node": "the BMC agent (config/telegraf/bmc.conf)",
    "psu": "the BMC agent's inputs.redfish (config/telegraf/bmc.conf)",
    "cooling": "the facility's CDU / BMS feed for the rack's cooling loop",
}
_XMIT_WAIT = "an InfiniBand switch's PortXmitWait (UFM or perfquery); OpenConfig has no equivalent"
_SWITCH_PFC = "the switch vendor's PFC counters, as a further gNMI subscription (config/telegraf/switch.conf)"
_IB_RATE = (
    "the port's trained rate from sysfs (/sys/class/infiniband/<hca>/ports/<port>/rate, e.g. "
    "'400 Gb/sec (4X NDR)', as ibstat shows it) by a node agent input; Telegraf's inputs.infiniband "
    "does not read it"
)
_BY_FIELD = {
    "gpu#job": "give the scheduler's events (--events / config/events.jsonl), or a `job` label on the exporter",
    "nic.rx_prio3_pause": "the node agent's inputs.ethtool on the RoCE netdevs (config/telegraf/node.conf)",
    "nic.tx_prio3_pause": "the node agent's inputs.ethtool on the RoCE netdevs (config/telegraf/node.conf)",
    "nic.np_cnp_sent": "gather_rdma = true in the node agent's inputs.infiniband",
    "nic.link_state": (
        "on RoCE, the node agent's inputs.ethtool (its carrier becomes link_state); Telegraf's "
        "inputs.infiniband does not read the port state, link_downed still counts the downs"
    ),
    "switch.port_xmit_wait": _XMIT_WAIT,
    "switch_port.port_xmit_wait": _XMIT_WAIT,
    "switch_port.rx_prio3_pause": _SWITCH_PFC,
    "switch_port.tx_prio3_pause": _SWITCH_PFC,
    "node.inlet_temp_c": "the BMC agent's inputs.redfish thermal readings (config/telegraf/bmc.conf)",
    "gpu.nvlink_links_up": (
        "the links Up per GPU, counted from DCGM's per-link DCGM_FI_DEV_NVLINK_LINK_STATUS (a link-level "
        "field, no GPU field) or from nvidia-smi nvlink -s, by a node agent input"
    ),
    "nic.link_width": _IB_RATE,
    "nic.link_rate_gbps": _IB_RATE,
}


def fix_for(need: str) -> str:
    """What to deploy or enable so that `need` ("measurement.field" or "measurement#tag") arrives."""
    if need in _BY_FIELD:
        return _BY_FIELD[need]
    measurement, _, field = need.replace("#", ".").partition(".")
    return _BY_MEASUREMENT.get(measurement, "a collector for {measurement}").format(
        field=field, measurement=measurement
    )


@dataclass(frozen=True, slots=True)
class KindCoverage:
    kind: str
    status: str  # detectable | degraded | blind
    missing: tuple[str, ...]  # the registry's needs that never arrived
    fixes: tuple[str, ...]  # one per distinct remedy, in the order of `missing`

    @property
    def message(self) -> str:
        if self.status == DETECTABLE:
            return f"{self.kind}: detectable"
        return f"{self.kind}: {self.status}, missing {', '.join(self.missing)}; fix: {'; '.join(self.fixes)}"


@dataclass(frozen=True, slots=True)
class Notice:
    """A monitoring fact that is not a fault (a notice, docs/root-cause.md): here, a detector's coverage."""

    at: float
    kind: str  # "coverage"
    subject: str  # the fault kind it is about
    status: str
    message: str
    detail: dict[str, list[str]]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()


class CoverageWatch:
    """Records which catalog fields and tags have carried a value; judges each fault kind once
    `settle_ticks` ticks have been seen (a collector's inputs do not all land in the first tick),
    and again whenever the verdict for a kind changes (an agent deployed later, a counter enabled).
    """

    def __init__(self, settle_ticks: int = 3) -> None:
        self.settle_ticks = settle_ticks
        self.ticks = 0
        self.seen: set[str] = set()
        self.schedule_known = False  # jobs come from the scheduler's events: `gpu#job` is met
        self._reported: dict[str, KindCoverage] = {}
        self._needed = {need for k in registry.KINDS.values() for need in k.needs}

    def observe(self, frames: dict[str, Frame]) -> None:
        self.ticks += 1
        for name, frame in frames.items():
            if len(frame) == 0:
                continue
            for field, column in frame.fields.items():
                key = f"{name}.{field}"
                if key in self.seen or key not in self._needed:
                    continue
                values = column.values[column.present]
                if values.dtype.kind == "f":
                    values = values[np.isfinite(values)]
                if len(values):
                    self.seen.add(key)
            for tag, tag_values in frame.tags.items():
                key = f"{name}#{tag}"
                if key not in self.seen and key in self._needed and bool(np.any(tag_values != "")):
                    self.seen.add(key)

    def _has(self, need: str) -> bool:
        return need in self.seen or (need == "gpu#job" and self.schedule_known)

    def report(self) -> list[KindCoverage]:
        """Every kind's verdict from what has arrived so far."""
        out = []
        for name, spec in registry.KINDS.items():
            missing = tuple(n for n in spec.needs if not self._has(n))
            if not missing:
                status = DETECTABLE
            elif len(missing) == len(spec.needs):
                status = BLIND
            else:
                status = DEGRADED
            fixes = tuple(dict.fromkeys(fix_for(n) for n in missing))
            out.append(KindCoverage(name, status, missing, fixes))
        return out

    @property
    def settled(self) -> bool:
        return self.ticks >= self.settle_ticks

    def changes(self) -> list[KindCoverage]:
        """Verdicts that are new since the last call (all of them the first time), once settled."""
        if not self.settled:
            return []
        now = self.report()
        changed = [c for c in now if self._reported.get(c.kind) != c]
        self._reported.update((c.kind, c) for c in changed)
        return changed

    def notices(self, at: float) -> list[Notice]:
        """A notice per kind that is not fully covered, and per kind whose gap has closed; a kind
        that was detectable from the start needs no notice (run.json lists every verdict)."""
        before = dict(self._reported)
        out = []
        for c in self.changes():
            if c.status == DETECTABLE and c.kind not in before:
                continue
            detail = {"missing": list(c.missing), "fix": list(c.fixes)}
            out.append(Notice(at, "coverage", c.kind, c.status, c.message, detail))
        return out


__all__ = ["BLIND", "DEGRADED", "DETECTABLE", "CoverageWatch", "KindCoverage", "Notice", "fix_for"]
