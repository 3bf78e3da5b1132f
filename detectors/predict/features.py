"""Precursor features per entity, updated every tick in event time, vectorised.

The failures that announce themselves do it slowly: correctable ECC errors and remapped rows
climb for hours before an HBM failure, a GPU's temperature creeps above its node-mates' before it
throttles, an optic's rx power sags before the link fails, a cooling loop's supply temperature
drifts up before the rack overheats. Each feature is an exponentially weighted average over a time
constant (so a "window" costs one float per entity, not a buffer), of a level, a rate or a
deviation from peers; trends are a fast average minus a slow one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from detectors.base import FloatArray, grow
from detectors.peers import robust_z
from detectors.rates import CounterRates
from detectors.stack.summary import CohortSummary
from ingest.frames import Frame
from vocab.entities import EntityIndex
from vocab.thresholds import BUSY_UTIL_PCT, GPU_UTIL_FIELD

MINUTE, HOUR = 60.0, 3600.0
# What the features mean, beyond their names: a model trained on other semantics is refused.
# 2: averages normalised by the weight seen (was: started from the first value).
# 3: a GPU's heat and power against mates in the same state (busy with busy, idle with idle) and
#    against its own past in that state; busy_now.
# 4: a GPU's heat at its power against all its node-mates (heat_vs_node_*), in place of its
#    temperature against its job-mates in the same state.
# 5: heat at the power the scrape interval burnt (the energy counter's delta), not the power
#    gauge's one second, wherever the exporter counts energy.
# 6: (a candidate, not shipped: heat against the node's GPUs in the same state;
#    docs/experiments/2026-12-06-same-state-heat.diff)
# 7: a GPU's heat trend and 12-h rise are its change against its own past in its state (busy or
#    idle), less the median of its node-mates' changes against theirs.
# 8: heat is read above the node's own inlet (its BMC's inlet temperature), and the site's degrees
#    per watt from busy against idle GPUs across the whole fleet, wherever nodes read their inlet;
#    a GPU's past in its state is read at today's slope, from samples that held their state.
FEATURE_VERSION = 8
# History the features need before a model may learn from them or speak on them: the fast
# averages (10-30 min) have settled and the slow ones hold a few of their own time constants' worth
# of the short ones. Chosen on validation seeds (scripts/predictor-validation), see online.py.
WARMUP_S = 1 * HOUR
COOLING_VS_ALL = ("supply_temp_c", "flow_lpm")  # a loop's readings against every loop's median
# a GPU's state, busy or idle, is vocab/thresholds.py's BUSY_UTIL_PCT (a kernel ran in the sample)
# the GPU features read in the GPU's current state (busy or idle), from per-state averages
_IN_STATE = ("power_vs_node_10m",)
# A GPU's heat at its power: its temperature above its node's inlet, less what its power explains
# (slope x power; a die sits above its coolant by a thermal resistance times the power it burns),
# against the median of its node's GPUs, all of them, busy or idle, in any job. Why against the
# node: against its job-mates in the same state, as before, the reference changed whenever a job
# ended or another began on the node (jobs that hold part of a node), and a GPU that had run 2
# degrees above one set of mates ran 4 above the next (validation history 2103: five of six false
# thermal warnings). The node's GPUs share its inlet air or coolant, and all eight are there in
# every tick. Why above the inlet: a GPU's rise is read against its own past in its state, and a
# GPU idle for hours has a busy past from when the room was cooler or warmer (a day's swing of the
# inlet is a few degrees, half a degree an hour at its steepest); above the inlet, that past is
# the GPU's own, not the room's (training history 1005: a rack's air went from 23 to 37 C for an
# hour, and four idle GPUs of a node "rose" 1.7 degrees against their four busy mates when their
# job reached them).
# The slope is the site's own (cooling differs by site): GPUs busy against GPUs idle, the median
# heat above the inlet of each less the other over the median powers, across the whole fleet
# wherever nodes read their inlet (a 10,000-GPU fleet has both at every tick, whole-node jobs or
# not; GPUs' own offsets are spread 1.5 degrees and cancel in the medians), averaged over an hour.
# Where no node reads its inlet, the nodes that hold busy and idle GPUs at once (one inlet, one
# chassis), as version 7 did. Until either has shown it, the recorded H200's: 36 C idle at 80 W,
# 60 C training at 690 W (datasets/real-gpu/h200/nvml-1s.csv), 0.039 C/W.
HEAT_SLOPE_PRIOR_C_PER_W = 0.039
# The power a GPU's heat is read at: its mean over the scrape interval, the delta of NVML's energy
# counter (mJ since the driver loaded; on in dcgm-exporter's default counters). The power gauge is
# one second's average: the recorded H200 read 279 W at 100 % utilisation when that second caught a
# step's pause, and a checkpoint's edge splits a second between 690 and 126 W. The die answers its
# load within seconds (the recorded H200: 37 to 60 C in the ten seconds after training began), not
# within a pause of under one: it stays at what the last seconds burnt. Read through the gauge, such
# a sample is a GPU 16 degrees "warmer" than its mates at 0.039 C/W; it was the widest part of a
# healthy GPU's heat spread on the validation histories at 4,096 GPUs (99.99th percentile of its
# rise 1.86 C through the gauge, 0.69 C through the counter; docs/prediction.md). Where the
# exporter does not count energy (a first scrape, an older exporter), the gauge is what there is.
ENERGY_FIELD = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
HEAT_SLOPE_MIN_GAP_W = 200.0  # busy against idle: a checkpoint's wait (126 W) still counts as idle
# GPUs in each state before the fleet's busy and idle medians read a slope (a node's eight at least)
HEAT_SLOPE_MIN_GPUS = 8
INLET_FIELD = "inlet_temp_c"  # the node's, from its BMC (vocab/catalog.py)

# Which entity kinds have models, and the features of each (names are part of the model card).
FEATURES: dict[str, tuple[str, ...]] = {
    "gpu": (
        "sbe_per_h_30m",
        "sbe_per_h_3h",
        "sbe_accel",
        "remap_per_h_3h",
        "heat_vs_node_10m",
        "heat_vs_node_3h",
        "heat_vs_node_trend",
        "heat_vs_node_rise_12h",
        "power_vs_node_10m",
        "busy_now",
    ),
    # an optic wears as a fall against its own past; its level against the fleet is manufacturing
    # spread (a healthy 400G optic's receive power varies by a dB or more from part to part and
    # with the link's loss), so no feature reads the level itself
    "optic": ("rx_vs_own_12h", "rx_vs_own_3h", "rx_trend", "symbol_err_per_h_30m"),
    "cooling": ("supply_vs_all_10m", "supply_vs_all_3h", "supply_trend", "flow_vs_all_10m"),
}


class Ewma:
    """Per-entity exponentially weighted means with time constant `tau` (seconds), exact for
    irregular sampling: a value seen `a` seconds ago weighs exp(-a / tau), and the mean is divided
    by the weights seen so far. Why the division: a plain EWMA that starts from its first value
    keeps exp(-3 / 12) = 78 % of that one value in a 12-hour average three hours in, so a GPU that
    was idle at the first scrape looked "risen" against its own past for hours; normalised, the
    average is the (recency-weighted) mean of what has been seen, meaningful from the start and
    the plain EWMA once history is long. NaN values leave the mean untouched."""

    def __init__(self, tau: float) -> None:
        self.tau = tau
        self.total = np.zeros(0)  # sum of weighted values
        self.weight = np.zeros(0)  # sum of weights
        self.time = np.zeros(0)

    @property
    def value(self) -> FloatArray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.weight > 0, self.total / np.where(self.weight > 0, self.weight, 1.0), np.nan)

    def update(self, t: float, rows: NDArray[np.int64], x: FloatArray) -> None:
        size = int(rows.max()) + 1 if len(rows) else 0
        self.total = grow(self.total, size, 0.0)
        self.weight = grow(self.weight, size, 0.0)
        self.time = grow(self.time, size, np.nan)
        ok = ~np.isnan(x)
        rows, x = rows[ok], x[ok]
        last = self.time[rows]
        decay = np.exp(-np.maximum(t - np.where(np.isnan(last), t, last), 0.0) / self.tau)
        self.total[rows] = decay * self.total[rows] + x
        self.weight[rows] = decay * self.weight[rows] + 1.0
        self.time[rows] = t


@dataclass
class _Kind:
    entities: EntityIndex = field(default_factory=EntityIndex)
    ewma: dict[str, Ewma] = field(default_factory=dict)

    def avg(self, name: str, tau: float) -> Ewma:
        if name not in self.ewma:
            self.ewma[name] = Ewma(tau)
        return self.ewma[name]

    def get(self, name: str) -> FloatArray:
        n = len(self.entities)
        v = self.ewma[name].value if name in self.ewma else np.zeros(0)
        out = np.full(n, np.nan)
        out[: min(n, len(v))] = v[:n]
        return out


class PrecursorFeatures:
    def __init__(self) -> None:
        self.kinds = {k: _Kind() for k in FEATURES}
        self._rates = {"gpu": CounterRates(3), "nic": CounterRates(1)}
        self._nic_rows = EntityIndex()
        # each node's last inlet reading: a BMC is scraped apart from the GPUs, and a tick that
        # misses it reads the one before, not no inlet at all (a GPU's heat would jump by 25 C)
        self._node_rows = EntityIndex()
        self._node_inlet = np.zeros(0)
        self._slope = Ewma(1 * HOUR)  # the fleet's degrees per watt (_heat_slope)
        # where an entity's trouble shows up in the detectors: an optic's on its NIC and port
        self.related: dict[str, str] = {}

    def __setstate__(self, state: dict[str, object]) -> None:
        """A daemon's checkpoint from feature version 7 has no node inlets: they fill in from the
        next node frame (and its pasts under the old names are left unread; the new ones fill in
        as the old did on a first start)."""
        self.__dict__.update(state)
        self.__dict__.setdefault("_node_rows", EntityIndex())
        self.__dict__.setdefault("_node_inlet", np.zeros(0))

    def summarise(self, t: float, frames: dict[str, Frame], summary: CohortSummary) -> None:
        """What the features compared across the fleet need from these entities, read before
        update() takes this tick in: the cooling loops against all the others (loops are keyed
        by rack, so they span partitions), and the busy and idle GPUs the site's slope is read
        from (_heat_slope), whichever partition holds them. A node's telemetry is on one
        partition, so each node's own slope is whole here."""
        cooling = frames.get("cooling")
        if cooling is not None and len(cooling):
            for name in COOLING_VS_ALL:
                summary.add_values(f"pred/cooling/{name}", _col(cooling, name))
        gpu = frames.get("gpu")
        if gpu is None or not len(gpu):
            return
        rows = self.kinds["gpu"].entities.lookup(gpu.tag("gpu"))
        energy = self._rates["gpu"].peek(t, rows, _col(gpu, ENERGY_FIELD), column=2)  # _gpu's counters
        heating = _heating(energy, _col(gpu, "DCGM_FI_DEV_POWER_USAGE"))
        temp, inlet = _col(gpu, "DCGM_FI_DEV_GPU_TEMP"), self._inlet_of(gpu.tag("node"), frames.get("node"))
        above_inlet = temp - inlet
        busy = _col(gpu, GPU_UTIL_FIELD) >= BUSY_UTIL_PCT
        read = ~np.isnan(above_inlet) & ~np.isnan(heating)
        for which, on in (("busy", read & busy), ("idle", read & ~busy)):
            summary.add_values(f"pred/gpu/{which}_above_inlet", above_inlet[on])
            summary.add_values(f"pred/gpu/{which}_power", heating[on])
        node = np.unique(gpu.tag("node"), return_inverse=True)[1].astype(np.int64)
        base = np.where(np.isnan(inlet), temp, above_inlet)
        summary.add_values("pred/gpu/node_slope", _node_slopes(node, base, heating, busy))

    def update(self, t: float, frames: dict[str, Frame], cohorts: CohortSummary | None = None) -> None:
        """`cohorts`: the tick's merged summary (None: these frames are the whole fleet)."""
        if cohorts is None:
            cohorts = CohortSummary()
            self.summarise(t, frames, cohorts)
        if "node" in frames:
            self._inlets(frames["node"])
        if "gpu" in frames:
            self._gpu(t, frames["gpu"], cohorts)
        if "optic" in frames:
            self._optic(t, frames["optic"], frames.get("nic"))
        if "cooling" in frames:
            self._cooling(t, frames["cooling"], cohorts)

    def matrix(self, kind: str) -> tuple[NDArray[np.object_], FloatArray]:
        """(entity ids, features) of every entity of `kind` seen so far."""
        k = self.kinds[kind]
        cols = [self._feature(kind, name) for name in FEATURES[kind]]
        return k.entities.ids, np.column_stack(cols) if cols and len(k.entities) else np.zeros((0, len(FEATURES[kind])))

    def _feature(self, kind: str, name: str) -> FloatArray:
        k = self.kinds[kind]
        if kind == "gpu" and name in _IN_STATE:
            return self._in_state(name)
        derived = {
            "sbe_accel": ("sbe_per_h_30m", "sbe_per_h_3h"),
            "rx_trend": ("rx_dbm_30m", "rx_dbm_3h"),
            "supply_trend": ("supply_vs_all_30m", "supply_vs_all_3h"),
        }
        if name in derived:
            fast, slow = derived[name]
            return k.get(fast) - k.get(slow)
        if name in ("heat_vs_node_trend", "heat_vs_node_rise_12h"):
            return k.get(f"{name}_now")
        if name == "rx_vs_own_12h":
            return k.get("rx_dbm_10m") - k.get("rx_dbm_12h")
        if name == "rx_vs_own_3h":
            return k.get("rx_dbm_10m") - k.get("rx_dbm_3h")
        return k.get(name)

    def _in_state(self, name: str) -> FloatArray:
        """A GPU's power against its mates, read in the state it is in now (busy or idle)."""
        k = self.kinds["gpu"]
        busy = k.get("busy_now") >= 0.5
        return np.where(busy, k.get("power_vs_node_busy_10m"), k.get("power_vs_node_idle_10m"))

    # ------------------------------------------------------------------ per kind

    def _gpu(self, t: float, frame: Frame, cohorts: CohortSummary) -> None:
        k = self.kinds["gpu"]
        rows = k.entities.add(frame.tag("gpu"))
        counters = np.column_stack(
            [
                _col(frame, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
                _col(frame, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"),
                _col(frame, ENERGY_FIELD),
            ]
        )
        energy_read_at = _last_time(self._rates["gpu"], rows, 2)  # before this tick's read
        rate, _ = self._rates["gpu"].update(t, rows, counters)
        k.avg("sbe_per_h_30m", 30 * MINUTE).update(t, rows, rate[:, 0] * HOUR)
        k.avg("sbe_per_h_3h", 3 * HOUR).update(t, rows, rate[:, 0] * HOUR)
        k.avg("remap_per_h_3h", 3 * HOUR).update(t, rows, rate[:, 1] * HOUR)
        temp, power = _col(frame, "DCGM_FI_DEV_GPU_TEMP"), _col(frame, "DCGM_FI_DEV_POWER_USAGE")
        busy = _col(frame, GPU_UTIL_FIELD) >= BUSY_UTIL_PCT
        node = np.unique(frame.tag("node"), return_inverse=True)[1].astype(np.int64)
        heating = _heating(rate[:, 2], power)
        inlet = self._inlet_of(frame.tag("node"))
        above_inlet = temp - inlet  # NaN where the node reads no inlet: there, its temperature
        base = np.where(np.isnan(inlet), temp, above_inlet)
        slope = self._heat_slope(t, cohorts)
        heat = base - slope * heating
        _, heat_median = robust_z(heat[:, None], node, min_size=2)
        heat_vs_node = heat - heat_median[:, 0]
        for name, tau in (("heat_vs_node_10m", 10 * MINUTE), ("heat_vs_node_3h", 3 * HOUR)):
            k.avg(name, tau).update(t, rows, heat_vs_node)
        # Its trend and rise: its heat's change against its own past in its state (busy or idle),
        # less the median of its node-mates' changes against theirs. Each healthy mate's change is
        # about zero whatever state or job it is in, so neither which mates share its state nor
        # their own offsets move the reference, and a change the whole node shares (its inlet) is
        # taken out. Why: as a level against the node's median (versions 4-5), a GPU "rose" by a
        # degree whenever the median crossed between a node's busy and idle GPUs (busy and idle
        # differ by 600 W, and a slope 0.003 C/W off a node's own puts them 2 degrees apart) or
        # between mates whose own offsets differ; on the harsh validation histories that was most
        # of the false thermal warnings (docs/prediction.md).
        # The past is kept as its temperature (above the inlet) and its power apart, and read at
        # today's slope: a heat averaged at the slope of its day would carry every change of the
        # site's slope into the GPU's change (a record's first minutes, before any GPU was idle,
        # read at the recorded H200's 0.039 where the site runs 0.06, left a busy past 14 degrees
        # "hotter"; validation history 2005, `n00005`: two idle GPUs "rose" 2 degrees when six
        # mates came back to work three hours later).
        # Only a sample whose GPU held its state since the one before is read or kept: the power
        # is the interval's mean and the temperature the moment's, so a sample that caught a job
        # starting or a checkpoint's wait pairs an idle die with a busy interval's watts (harsh
        # validation history 2109, `n00311-gpu1`: its idle past was one such sample, and it "rose"
        # 2.8 degrees when its node next went idle).
        # (And only where the power is that one interval's: a counter not read in the sample before
        # spans both states.)
        before = k.get("busy_now")[rows]
        seen_at = _seen_at(k, rows)
        one_interval = np.isnan(counters[:, 2]) | np.isnan(energy_read_at) | (energy_read_at == seen_at)
        held = ~np.isnan(before) & ((before >= 0.5) == busy) & one_interval
        for feature, tau in (("heat_vs_node_trend", 3 * HOUR), ("heat_vs_node_rise_12h", 12 * HOUR)):
            past_base = np.where(busy, k.get(f"base_busy_{feature}")[rows], k.get(f"base_idle_{feature}")[rows])
            past_power = np.where(busy, k.get(f"power_busy_{feature}")[rows], k.get(f"power_idle_{feature}")[rows])
            change = (base - past_base) - slope * (heating - past_power)  # NaN until it has a past in this state
            change[~held] = np.nan
            _, mates_change = robust_z(change[:, None], node, min_size=2)
            k.avg(f"{feature}_now", 10 * MINUTE).update(t, rows, change - mates_change[:, 0])
            read = held & ~np.isnan(base) & ~np.isnan(heating)
            for which, on in (("busy", busy & read), ("idle", ~busy & read)):
                k.avg(f"base_{which}_{feature}", tau).update(t, rows, np.where(on, base, np.nan))
                k.avg(f"power_{which}_{feature}", tau).update(t, rows, np.where(on, heating, np.nan))
        # power against mates in the same state: a busy GPU against the busy GPUs of its job on
        # its node, an idle GPU against the idle ones there (a 4-GPU job on an 8-GPU node leaves
        # four GPUs idle at a tenth of the power). Under a power cap (the recorded H200 holds
        # 675-702 W of 700 busy; datasets/real-gpu/README.md) busy mates draw the same power. A
        # busy GPU alone in its job on the node is held against the node's other busy GPUs (the
        # same cap); where the job is unknown (""), the node's GPUs in the same state.
        job = frame.tag("job")
        state = np.where(busy, "\x01b", "\x01i")
        node_state = frame.tag("node") + state
        mates = node_state + np.where(job == "", "", "\x00" + job)
        _, inverse, counts = np.unique(mates, return_inverse=True, return_counts=True)
        mates = np.where(counts[inverse] >= 2, mates, node_state)
        mate_group = np.unique(mates, return_inverse=True)[1].astype(np.int64)
        _, median = robust_z(power[:, None], mate_group, min_size=2)
        power_vs_mates = power - median[:, 0]
        k.avg("busy_now", 1.0).update(t, rows, busy.astype(np.float64))
        for name, on in (("busy", busy), ("idle", ~busy)):  # a busy sample updates the busy average only
            k.avg(f"power_vs_node_{name}_10m", 10 * MINUTE).update(t, rows, np.where(on, power_vs_mates, np.nan))

    def _inlets(self, frame: Frame) -> None:
        rows = self._node_rows.add(frame.tag("node"))
        self._node_inlet = grow(self._node_inlet, len(self._node_rows), np.nan)
        inlet = _col(frame, INLET_FIELD)
        seen = ~np.isnan(inlet)
        self._node_inlet[rows[seen]] = inlet[seen]

    def _inlet_of(self, nodes: NDArray[np.object_], tick: Frame | None = None) -> FloatArray:
        """Each GPU's node's inlet, NaN where its node has never read one; `tick`: this tick's
        node frame, not yet taken in, read over the inlets known before it."""
        inlet = _known(self._node_inlet, self._node_rows.lookup(nodes))
        if tick is not None and len(tick):
            read = _col(tick, INLET_FIELD)
            seen = ~np.isnan(read)
            now = EntityIndex()
            now.add(tick.tag("node")[seen])
            rows = now.lookup(nodes)
            fresh = np.full(len(now), np.nan)
            fresh[now.lookup(tick.tag("node")[seen])] = read[seen]
            inlet = np.where(rows >= 0, _known(fresh, rows), inlet)
        return inlet

    def _heat_slope(self, t: float, cohorts: CohortSummary) -> float:
        """Degrees per watt: the fleet's busy GPUs against its idle ones, (median heat above the
        inlet - the idle one) / (median power - the idle one), where nodes read their inlet; else
        the median over nodes with busy and idle GPUs of the same within the node (temperatures,
        one inlet); averaged over an hour. Read from the tick's merged summary (summarise): every
        partition's GPUs, so split detection reads the slope one process reads."""
        keys = [f"pred/gpu/{which}_{name}" for which in ("busy", "idle") for name in ("above_inlet", "power")]
        stats = cohorts.stats(keys)
        busy_heat, busy_power, idle_heat, idle_power = stats.median.tolist()
        estimate = math.nan
        if min(stats.count[0], stats.count[2]) >= HEAT_SLOPE_MIN_GPUS:
            gap = busy_power - idle_power
            if gap >= HEAT_SLOPE_MIN_GAP_W:
                estimate = (busy_heat - idle_heat) / gap
        if math.isnan(estimate):  # no inlets: the nodes with busy and idle GPUs
            estimate = float(cohorts.stats(["pred/gpu/node_slope"]).median[0])
        self._slope.update(t, np.zeros(1, dtype=np.int64), np.array([estimate]))
        return self.heat_slope

    @property
    def heat_slope(self) -> float:
        """Degrees per watt as the features read them now."""
        slope = float(self._slope.value[0]) if len(self._slope.value) else math.nan
        return HEAT_SLOPE_PRIOR_C_PER_W if math.isnan(slope) else slope

    def _optic(self, t: float, frame: Frame, nic: Frame | None) -> None:
        k = self.kinds["optic"]
        known = len(k.entities)
        rows = k.entities.add(frame.tag("optic"))
        if len(k.entities) > known:
            new = rows >= known
            self.related.update(zip(frame.tag("optic")[new].tolist(), frame.tag("nic")[new].tolist(), strict=True))
        rx = _col(frame, "rx_power_dbm")
        for name, tau in (
            ("rx_dbm_10m", 10 * MINUTE),
            ("rx_dbm_30m", 30 * MINUTE),
            ("rx_dbm_3h", 3 * HOUR),
            ("rx_dbm_12h", 12 * HOUR),
        ):
            k.avg(name, tau).update(t, rows, rx)
        if nic is not None and len(nic):
            nic_rows = self._nic_rows.add(nic.tag("nic"))
            rate, _ = self._rates["nic"].update(t, nic_rows, _col(nic, "symbol_error")[:, None])
            # an optic's NIC is its `nic` tag; map the NIC rates onto optic rows
            optic_nic = self._nic_rows.lookup(frame.tag("nic"))
            per_nic = np.full(len(self._nic_rows), np.nan)
            per_nic[nic_rows] = rate[:, 0]
            sym = np.where(optic_nic >= 0, per_nic[np.maximum(optic_nic, 0)], np.nan)
            k.avg("symbol_err_per_h_30m", 30 * MINUTE).update(t, rows, sym * HOUR)

    def _cooling(self, t: float, frame: Frame, cohorts: CohortSummary) -> None:
        k = self.kinds["cooling"]
        rows = k.entities.add(frame.tag("cooling"))
        values = np.column_stack([_col(frame, name) for name in COOLING_VS_ALL])
        stats = cohorts.stats([f"pred/cooling/{name}" for name in COOLING_VS_ALL])
        resid = values - stats.median
        for name, tau in (
            ("supply_vs_all_10m", 10 * MINUTE),
            ("supply_vs_all_30m", 30 * MINUTE),
            ("supply_vs_all_3h", 3 * HOUR),
        ):
            k.avg(name, tau).update(t, rows, resid[:, 0])
        k.avg("flow_vs_all_10m", 10 * MINUTE).update(t, rows, resid[:, 1])


def _heating(energy_rate: FloatArray, power: FloatArray) -> FloatArray:
    """Watts from the energy counter's rate (mJ/s) where it has one, else the power gauge."""
    return np.where(np.isnan(energy_rate), power, energy_rate / 1000.0)


def _node_slopes(node: NDArray[np.int64], temp: FloatArray, power: FloatArray, busy: NDArray[np.bool_]) -> FloatArray:
    """Per node with busy and idle GPUs: (mean busy temperature - mean idle one) / (mean busy
    power - mean idle one); one inlet, so no inlet reading is needed."""
    seen = ~np.isnan(temp) & ~np.isnan(power)
    nodes = int(node.max()) + 1 if len(node) else 0

    def mean(on: NDArray[np.bool_], values: FloatArray) -> tuple[FloatArray, FloatArray]:
        count = np.bincount(node[on], minlength=nodes).astype(np.float64)
        return np.bincount(node[on], values[on], minlength=nodes) / np.maximum(count, 1.0), count

    (busy_temp, busy_n), (idle_temp, idle_n) = mean(seen & busy, temp), mean(seen & ~busy, temp)
    gap = mean(seen & busy, power)[0] - mean(seen & ~busy, power)[0]
    mixed = (busy_n > 0) & (idle_n > 0) & (gap >= HEAT_SLOPE_MIN_GAP_W)
    slopes: FloatArray = (busy_temp - idle_temp)[mixed] / gap[mixed]
    return slopes


def _seen_at(k: _Kind, rows: NDArray[np.int64]) -> FloatArray:
    """When each row was last sampled (NaN: never): busy_now is updated with every sample."""
    return _known(k.ewma["busy_now"].time if "busy_now" in k.ewma else np.zeros(0), rows)


def _last_time(rates: CounterRates, rows: NDArray[np.int64], column: int) -> FloatArray:
    """When each row's counter in `column` was last read (NaN: never)."""
    return _known(rates.last_time[:, column], rows)


def _known(values: FloatArray, rows: NDArray[np.int64]) -> FloatArray:
    """`values[rows]`, NaN for a row not there (-1, or beyond what has grown so far)."""
    out = np.full(len(rows), np.nan)
    there = (rows >= 0) & (rows < len(values))
    out[there] = values[rows[there]]
    return out


def _col(frame: Frame, name: str) -> FloatArray:
    col = frame.fields.get(name)
    return col.as_float() if col is not None else np.full(len(frame), np.nan)


def reference_ewma(times: list[float], values: list[float], tau: float) -> list[float]:
    """The same mean, one value at a time and from its definition (every past value weighted by
    its age): what the vectorised version is checked against."""
    out: list[float] = []
    seen: list[tuple[float, float]] = []
    for t, x in zip(times, values, strict=True):
        if not math.isnan(x):
            seen.append((t, x))
        if not seen:
            out.append(math.nan)
            continue
        now = seen[-1][0]
        weights = [math.exp(-(now - ts) / tau) for ts, _ in seen]
        out.append(sum(w * v for w, (_, v) in zip(weights, seen, strict=True)) / sum(weights))
    return out
