"""From anomalies to symptoms, and from a symptom to the root causes that could explain it.

A symptom is what an anomaly says about one entity, reduced to a family ("link" errors on a NIC,
"pause" frames on a port, a GPU running "slow"). Each family on each kind of entity has a short,
explicit list of suspects: the entity itself and the things in the topology whose failure looks
like that (a NIC's link errors: the NIC, its optic, its leaf). The ranking (rank.py) then decides
among the suspects by what else is going on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from detectors.anomaly import Anomaly
from rca.graph import TopologyGraph
from vocab import registry

if TYPE_CHECKING:
    from rca.rank import Context

ECC = {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"}
NVLINK = {
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "nvlink_crc_errors",
    "nvlink_replay_errors",
}
LINK = {"symbol_error", "port_rcv_errors", "link_downed", "link_state", "port_xmit_discards", "link_error_recovery"}
LINK_DOWN = {"link_downed", "link_state"}  # the link went down: a flap, not errors on a link that stays up
PCIE_LINK = {"DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH"}
LINK_TRAINED = {"link_width", "link_rate_gbps"}
PAUSE = {"rx_prio3_pause", "tx_prio3_pause"}
ENV = {"inlet_temp_c", "supply_temp_c"}

# Families that are early warnings, not failures: they rank suspects, they never open an incident.
SOFT = frozenset({"optic_rx", "warm", "predicted"})

# The ranking prior per kind lives in the registry with its source (field interruption shares).
PRIOR = registry.PRIOR
_POWER_BRAKE = registry.clock_reason("hw_power_brake_slowdown")
_THERMAL = registry.clock_reason("sw_thermal_slowdown") | registry.clock_reason("hw_thermal_slowdown")


class Symptom(NamedTuple):  # a tuple: hashed in C, and a storm hashes tens of thousands a tick
    entity: str
    family: str  # xid, ecc, nvlink, pcie, slow, hot, power_brake, silent, link, pause, pause_tx, wait, env, psu, ...
    hint: str = ""  # a fault kind the evidence itself names (an XID's usual cause), or ""


def symptom_of(a: Anomaly) -> Symptom:
    m = a.metric
    if m == "silent":
        return Symptom(a.entity, "silent")
    if m == "DCGM_FI_DEV_XID_ERRORS":
        suggests = a.detail.get("suggests", "")
        return Symptom(a.entity, "xid", suggests if suggests in registry.KINDS else "")
    if m in ECC:
        return Symptom(a.entity, "ecc", "gpu_hbm_ecc")
    if m in NVLINK:
        return Symptom(a.entity, "nvlink", "gpu_nvlink")
    if m == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER":
        return Symptom(a.entity, "pcie")
    if m in PCIE_LINK:
        return Symptom(a.entity, "pcie_link", "gpu_pcie_downtrained")
    if m == "nvlink_links_up":
        return Symptom(a.entity, "nvlink_down", "gpu_nvlink_down")
    if m == "DCGM_FI_DEV_ROW_REMAP_PENDING":
        return Symptom(a.entity, "remap_pending", "gpu_row_remap_pending")
    if m == "DCGM_FI_DEV_FABRIC_MANAGER_STATUS":  # the GPU's own links, or its node's fabric manager
        return Symptom(a.entity, "fabric")
    if m in LINK_TRAINED:
        return Symptom(a.entity, "link_degraded", "ib_link_degraded")
    if m == "DCGM_FI_DEV_CLOCKS_EVENT_REASONS":
        reasons = int(a.value or 0)
        if reasons & _POWER_BRAKE:
            return Symptom(a.entity, "power_brake")
        return Symptom(a.entity, "hot" if reasons & _THERMAL else "slow")
    if m in ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_POWER_USAGE"):
        return Symptom(a.entity, "slow")
    if m == "DCGM_FI_DEV_GPU_TEMP":  # the detectors say when it is only warmer than its peers
        return Symptom(a.entity, "warm" if a.detector.startswith("warn:") else "hot")
    if m in LINK:
        return Symptom(a.entity, "link", "nic_link_flap" if m in LINK_DOWN else "ib_link_errors")
    if m in PAUSE:
        sending = m == "tx_prio3_pause" and a.measurement == "nic"  # a host sending pauses: a storm's source
        return Symptom(a.entity, "pause_tx" if sending else "pause")
    if m == "port_xmit_wait":
        return Symptom(a.entity, "wait")
    if m in ENV:
        return Symptom(a.entity, "env")
    if m == "status" and a.measurement == "psu":
        return Symptom(a.entity, "psu")
    if m == "rx_power_dbm":
        # receive power moving (a sag, a drift) while the link still carries traffic without
        # errors is wear, not yet a failure: the link fails when errors or drops follow, and
        # the link rules report those
        return Symptom(a.entity, "optic_rx")
    return Symptom(a.entity, "other")


# what a GPU's own evidence names, strongest first: a lost GPU or a memory failure outweighs a
# link that trained low, which outweighs a remap waiting for a reset
_GPU_HINTS = (
    "gpu_fell_off_bus",
    "gpu_hbm_ecc",
    "gpu_nvlink",
    "gpu_nvlink_down",
    "gpu_pcie_downtrained",
    "gpu_row_remap_pending",
)
# the same for a NIC's link: down is a flap; up but trained narrow or slow; up but retraining
_NIC_HINTS = ("nic_link_flap", "ib_link_degraded", "ib_link_errors")


def gpu_kind(families: set[str], hints: set[str]) -> str:
    """What is wrong with a GPU, from everything it shows (strongest evidence first)."""
    for kind in _GPU_HINTS[:3]:
        if kind in hints:
            return kind
    if "silent" in families:  # gone without Xid 79: the driver lost it, or its exporter did
        return "gpu_lost"
    for kind in _GPU_HINTS[3:]:
        if kind in hints:
            return kind
    if "hot" in families:
        return "gpu_thermal"
    if "slow" in families or "power_brake" in families:
        return "gpu_straggler"
    return "gpu_fault"


def nic_kind(hints: set[str]) -> str | None:
    """Which of a NIC's link faults its evidence names, or None when it names none."""
    return next((kind for kind in _NIC_HINTS if kind in hints), None)


def switch_kind(graph: TopologyGraph, switch: str) -> str:
    return "leaf_down" if graph.kind(switch) == "leaf" else "switch_down"


class Suspects:
    """Who could explain a symptom. The context carries what is going on in each fabric plane
    (NICs sending pause frames, spines congested), since a pause or a wait anywhere in a plane
    is explained by whoever causes it there."""

    def __init__(self, graph: TopologyGraph) -> None:
        self.graph = graph

    def of(self, s: Symptom, ctx: Context) -> list[tuple[str, str]]:
        found = ctx.suspects.get(s)
        if found is None:
            found = ctx.suspects[s] = self._of(s, ctx)
        return found

    def _of(self, s: Symptom, ctx: Context) -> list[tuple[str, str]]:
        g = self.graph
        talkers = ctx.talkers
        if s.entity not in g:
            return [(s.entity, "unknown")]
        kind = g.kind(s.entity)
        if kind == "gpu":
            return self._gpu(s)
        if kind == "nvswitch" and s.family == "nvlink":
            node = g.parent(s.entity)
            return [(gpu, "gpu_nvlink") for gpu in (g.children(node, "gpu") if node else [])]
        if s.family == "pause":
            plane = g.plane(s.entity)
            by_plane = ctx.suspects.get(("pause", plane))
            if by_plane is None:
                by_plane = ctx.suspects[("pause", plane)] = [
                    (nic, "pfc_storm") for nic in sorted(talkers.get(plane, ()))
                ]
            if by_plane:
                return by_plane
            nic = s.entity if kind == "nic" else g.nic_of_port(s.entity) if kind == "port" else None
            return [(nic or s.entity, "pfc_storm")]
        if s.family == "pause_tx":
            return [(s.entity, "pfc_storm")]
        if kind == "nic" and s.family in ("link", "other"):
            return self._cable(s.entity, s.hint)
        if kind == "nic" and s.family == "link_degraded":
            return [(s.entity, "ib_link_degraded")]
        if kind == "port" and s.family in ("link", "other", "wait"):
            nic = g.nic_of_port(s.entity)
            if nic is not None:
                return self._cable(nic, s.hint)
            own, far = g.parent(s.entity), g.far_switch(s.entity)
            out = [(sw, switch_kind(g, sw)) for sw in (far, own) if sw is not None]
            return out or [(s.entity, "unknown")]
        if kind == "optic":
            return [(s.entity, "optic_degradation")]
        if kind in ("leaf", "spine"):
            if s.family != "wait":
                return [(s.entity, switch_kind(g, s.entity))]
            if kind == "spine":
                return [(s.entity, "spine_congestion")]
            # a leaf waiting on its uplinks: a congested spine of its plane, or a storm's source
            plane = g.plane(s.entity)
            out = [(spine, "spine_congestion") for spine in sorted(ctx.congested.get(plane, ()))]
            out += [(nic, "pfc_storm") for nic in sorted(talkers.get(plane, ()))]
            return [*out, (s.entity, "switch_congestion")]
        if kind == "psu":
            return [(s.entity, "psu_failure")]
        if kind == "cooling":
            return [(s.entity, "rack_cooling")]
        if kind == "node" and s.family == "env":
            cdu = g.cooling_of(s.entity)
            return [(cdu, "rack_cooling")] if cdu else [(s.entity, "unknown")]
        return [(s.entity, "unknown")]

    def _gpu(self, s: Symptom) -> list[tuple[str, str]]:
        g = self.graph
        out = [(s.entity, s.hint or gpu_kind({s.family}, set()))]
        node = g.parent(s.entity)
        if node is not None and s.family in ("slow", "power_brake"):
            out += [(psu, "psu_failure") for psu in g.psus_of(node)]
        if node is not None and s.family == "fabric":  # the node's fabric manager serves all its GPUs
            out.append((node, "nvswitch_fabric_manager"))
        if node is not None and s.family in ("hot", "warm"):
            cdu = g.cooling_of(node)
            if cdu is not None:
                out.append((cdu, "rack_cooling"))
        return out

    def _cable(self, nic: str, hint: str = "") -> list[tuple[str, str]]:
        g = self.graph
        out = [(nic, hint or "nic_link_flap")]
        out += [(optic, "optic_degradation") for optic in g.children(nic, "optic")]
        switch = g.switch_of(nic)
        if switch is not None:
            out.append((switch, switch_kind(g, switch)))
        return out


__all__ = ["PRIOR", "SOFT", "Suspects", "Symptom", "gpu_kind", "nic_kind", "switch_kind", "symptom_of"]
