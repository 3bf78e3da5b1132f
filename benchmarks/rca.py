"""`aiops bench rca`: root-cause ranking latency per tick on fat-tree clusters of growing size,
through a trickle of unrelated anomalies, a leaf switch going down and a PFC storm spreading over
its rail plane, with a check that each burst's incident names its root."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.table import Table

from aiops.progress_bar import Progress
from detectors.anomaly import Anomaly

if TYPE_CHECKING:
    from rca.incidents import Incident, IncidentEngine
    from telemetry_gen.topology import Topology

# ---------------------------------------------------------------------------------------- rca

RCA_INTERVAL_S = 10.0
RCA_LEAF_RAIL = 3  # the leaf that goes down: middle pod, this rail
RCA_STORM_RAIL = 5  # the NIC that starts a PFC storm: a third of the way in, this rail


@dataclass(frozen=True, slots=True)
class RcaRow:
    """Root-cause ranking latency on one fat-tree size; (cold, warm) pairs are the first run on
    fresh graph caches and the best of the runs after it (fresh engine each run, same graph)."""

    gpus: int
    entities: int
    edges: int
    load_s: float
    background_ms: float  # median tick of the trickle, all runs
    leaf_anomalies: int  # first tick of the leaf going down (the second adds the leaf's "silent")
    leaf_ms: tuple[float, float]
    leaf_silent_ms: tuple[float, float]
    storm_anomalies: int
    storm_first_ms: tuple[float, float]
    storm_steady_ms: tuple[float, float]
    leaf_root: str  # what the incidents named
    storm_root: str
    leaf: str  # what they should have named
    storm_origin: str

    @property
    def root_ok(self) -> bool:
        return self.leaf_root == self.leaf and self.storm_root == self.storm_origin


def _anomaly(t: float, entity: str, metric: str, detector: str, measurement: str, value: float = 1.0) -> Anomaly:
    return Anomaly(t, entity, metric, detector, 1.0, value, 0.0, measurement)


@dataclass(slots=True)
class _RcaScenario:
    """The anomalies of one fat-tree size, built from the topology's index arrays (not from the
    graph, whose caches would then be warm for the entities of the burst)."""

    topology: Topology
    leaf: str
    leaf_nics: list[str]
    spine_ports: list[str]  # spine ports facing the leaf
    origin: str
    storm_nics: list[str]  # the other NICs of the origin's rail
    storm_ports_tx: list[str]
    storm_ports_rx: list[str]
    trickle: list[list[Anomaly]]  # per background tick, event time 0

    @staticmethod
    def build(topology: Topology, background_ticks: int, seed: int) -> _RcaScenario:
        from telemetry_gen.topology import NICS_PER_NODE, NODES_PER_POD
        from vocab.registry import describe_xid as describe

        t = topology
        switches, nics, ports = t.switches, t.ids["nic"], t.ids["port"]
        pods = -(-len(t.ids["node"]) // NODES_PER_POD)
        leaf_i = (pods // 2) * NICS_PER_NODE + RCA_LEAF_RAIL
        leaf_nic_i = np.flatnonzero(t.nic_switch == leaf_i)
        spine_ports = [ports[p] for p in np.flatnonzero(t.port_peer_switch == leaf_i).tolist()]
        origin_node = (pods // 3) * NODES_PER_POD
        origin_i = origin_node * NICS_PER_NODE + RCA_STORM_RAIL
        origin_leaf = int(t.nic_switch[origin_i])
        rail_nics = np.flatnonzero(t.nic_rail == RCA_STORM_RAIL)
        # pauses spread as the simulator spreads them (telemetry_gen/effects.py, _pfc_storm): the
        # origin's leaf pauses its other downlinks and its uplinks, the spines pause the other
        # leaves, which see them on their uplinks.
        downlinks = np.flatnonzero(t.port_peer_nic >= 0)
        siblings = downlinks[(t.port_switch[downlinks] == origin_leaf) & (t.port_peer_nic[downlinks] != origin_i)]
        uplinks = np.flatnonzero((t.port_switch == origin_leaf) & (t.port_peer_switch >= 0))
        spines = np.unique(t.port_peer_switch[uplinks])
        on_spines = np.isin(t.port_switch, spines)
        spine_side = np.flatnonzero(on_spines & (t.port_peer_switch == origin_leaf))
        other_leaf_side = np.flatnonzero(on_spines & (t.port_peer_switch >= 0) & (t.port_peer_switch != origin_leaf))
        other_leaves = np.unique(t.port_peer_switch[other_leaf_side])
        their_uplinks = np.flatnonzero(np.isin(t.port_switch, other_leaves) & np.isin(t.port_peer_switch, spines))
        origin_port = downlinks[t.port_peer_nic[downlinks] == origin_i]
        tx = np.concatenate([siblings, uplinks, other_leaf_side])
        rx = np.concatenate([origin_port, spine_side, their_uplinks])

        # The trickle: a few GPUs slower than their job's peers (two of them every tick), an XID,
        # a NIC's symbol errors; never on the entities of the bursts.
        rng = np.random.default_rng(seed)
        gpus = t.ids["gpu"]
        spared_nics = set(leaf_nic_i.tolist()) | set(rail_nics.tolist())
        picks = rng.choice(len(nics), size=min(len(nics), 2 * background_ticks + 8), replace=False).tolist()
        nic_pool = [i for i in picks if i not in spared_nics]
        stragglers = [gpus[i] for i in rng.choice(len(gpus), size=2, replace=False).tolist()]
        trickle: list[list[Anomaly]] = []
        for k in range(background_ticks):
            tick = [_anomaly(0.0, g, "DCGM_FI_DEV_SM_CLOCK", "peer:job", "gpu", 1400.0) for g in stragglers]
            for g in rng.choice(len(gpus), size=3, replace=False).tolist():
                tick.append(_anomaly(0.0, gpus[g], "DCGM_FI_DEV_SM_CLOCK", "peer:job", "gpu", 1500.0))
            code = int(rng.choice([13, 31, 48, 63, 74, 79]))
            xid = describe(code)
            tick.append(
                Anomaly(
                    0.0,
                    gpus[int(rng.integers(len(gpus)))],
                    "DCGM_FI_DEV_XID_ERRORS",
                    "rule:xid",
                    1.0,
                    float(code),
                    None,
                    "gpu",
                    {"xid": str(code), "meaning": xid.meaning, "severity": xid.severity, "suggests": xid.suggests},
                )
            )
            if nic_pool:
                nic = nics[nic_pool[k % len(nic_pool)]]
                tick.append(_anomaly(0.0, nic, "symbol_error", "rule:error_counter", "nic", 3.0))
            trickle.append(tick)
        return _RcaScenario(
            topology,
            switches[leaf_i],
            [nics[i] for i in leaf_nic_i.tolist()],
            spine_ports,
            nics[origin_i],
            [nics[i] for i in rail_nics.tolist() if i != origin_i],
            [ports[p] for p in tx.tolist()],
            [ports[p] for p in rx.tolist()],
            trickle,
        )

    def background(self, k: int) -> tuple[float, list[Anomaly]]:
        t = k * RCA_INTERVAL_S
        return t, [dataclasses.replace(a, at=t) for a in self.trickle[k % len(self.trickle)]]

    def leaf_down(self, t: float) -> list[Anomaly]:
        """The first tick: every link to the leaf goes down, seen from the NICs and the spines."""
        out: list[Anomaly] = []
        for nic in self.leaf_nics:
            out.append(_anomaly(t, nic, "link_downed", "rule:error_counter", "nic"))
            out.append(_anomaly(t, nic, "link_state", "rule:state", "nic", 0.0))
        for port in self.spine_ports:
            out.append(_anomaly(t, port, "link_downed", "rule:error_counter", "switch_port"))
            out.append(_anomaly(t, port, "link_state", "rule:state", "switch_port", 0.0))
        return out

    def leaf_silent(self, t: float) -> list[Anomaly]:
        return [Anomaly(t, self.leaf, "silent", "rule:silent", 2.0, None, None, "switch")]

    def storm(self, t: float) -> list[Anomaly]:
        """Every tick of the storm (rate rules fire as long as the rate stays up)."""
        out = [_anomaly(t, self.origin, "tx_prio3_pause", "rule:rate", "nic", 2e5)]
        out += [_anomaly(t, nic, "rx_prio3_pause", "rule:rate", "nic", 6e4) for nic in self.storm_nics]
        out += [_anomaly(t, p, "tx_prio3_pause", "rule:rate", "switch_port", 1e4) for p in self.storm_ports_tx]
        out += [_anomaly(t, p, "rx_prio3_pause", "rule:rate", "switch_port", 1e4) for p in self.storm_ports_rx]
        return out


def _timed(engine: IncidentEngine, t: float, anomalies: list[Anomaly]) -> tuple[float, list[Incident]]:
    started = time.perf_counter()
    changed = engine.process(t, anomalies)
    return (time.perf_counter() - started) * 1e3, changed


def _burst_root(first: list[Incident], t: float, second: list[Incident], t2: float) -> str:
    """What a burst's two ticks opened: the root entity of its one incident, or what went wrong
    (no incident or several on the first tick, a new one on the second, the root moved)."""
    opened = [i for i in first if i.status == "open" and i.opened == t]
    if len(opened) != 1:
        return f"{len(opened)} incidents: " + ", ".join(i.root.entity for i in opened[:3])
    again = [i.root.entity for i in second if i.status == "open" and i.opened == t2]
    if again:
        return f"2nd tick opened {', '.join(again[:3])}"
    return opened[0].root.entity


def measure_rca(
    gpus: int, repeat: int = 3, background_ticks: int = 20, seed: int = 1, on_run: Callable[[], None] | None = None
) -> RcaRow:
    """Latency of IncidentEngine.process per tick on a fat-tree of `gpus`: a trickle of unrelated
    anomalies, a leaf switch going down (two ticks), a PFC storm (its first tick and a steady one).
    `on_run` is called after each of the `repeat` runs (e.g. a progress bar)."""
    from rca.graph import TopologyGraph
    from rca.incidents import IncidentEngine
    from telemetry_gen.topology import build_fat_tree

    topology = build_fat_tree(gpus)
    data = topology.to_json()
    started = time.perf_counter()
    graph = TopologyGraph.from_json(data)
    load_s = time.perf_counter() - started
    del data
    sc = _RcaScenario.build(topology, background_ticks, seed)
    gc.collect()  # as the daemon does after loading its topology (rca/runner.py)
    gc.freeze()
    burst_t = background_ticks * RCA_INTERVAL_S
    background: list[float] = []
    leaf_ms: list[float] = []
    silent_ms: list[float] = []
    storm_ms: list[float] = []
    steady_ms: list[float] = []
    leaf_root = storm_root = "-"
    leaf_count = storm_count = 0
    for _ in range(max(1, repeat)):
        engine = IncidentEngine(graph)
        for k in range(background_ticks):
            background.append(_timed(engine, *sc.background(k))[0])
        burst = sc.leaf_down(burst_t)
        leaf_count = len(burst)
        t2 = burst_t + RCA_INTERVAL_S
        ms, first = _timed(engine, burst_t, burst)
        leaf_ms.append(ms)
        ms, second = _timed(engine, t2, sc.leaf_silent(t2))
        silent_ms.append(ms)
        if leaf_root in ("-", sc.leaf):  # keep the first wrong answer of any run
            leaf_root = _burst_root(first, burst_t, second, t2)

        engine = IncidentEngine(graph)
        for k in range(background_ticks):
            background.append(_timed(engine, *sc.background(k))[0])
        storm = sc.storm(burst_t)
        storm_count = len(storm)
        ms, first = _timed(engine, burst_t, storm)
        storm_ms.append(ms)
        ms, second = _timed(engine, t2, sc.storm(t2))
        steady_ms.append(ms)
        if storm_root in ("-", sc.origin):
            storm_root = _burst_root(first, burst_t, second, t2)
        if on_run is not None:
            on_run()

    def cold_warm(ms: list[float]) -> tuple[float, float]:
        return ms[0], min(ms[1:]) if len(ms) > 1 else ms[0]

    return RcaRow(
        gpus=gpus,
        entities=len(graph),
        edges=len(topology.edges),
        load_s=load_s,
        background_ms=float(np.median(background)),
        leaf_anomalies=leaf_count,
        leaf_ms=cold_warm(leaf_ms),
        leaf_silent_ms=cold_warm(silent_ms),
        storm_anomalies=storm_count,
        storm_first_ms=cold_warm(storm_ms),
        storm_steady_ms=cold_warm(steady_ms),
        leaf_root=leaf_root,
        storm_root=storm_root,
        leaf=sc.leaf,
        storm_origin=sc.origin,
    )


def rca_tables(rows: list[RcaRow], target_ms: float = 50.0) -> tuple[Table, Table]:
    """The graph per size, and the latency per tick (ms cells: cold caches over warm)."""
    graphs = Table(title="aiops bench rca: fat-tree graphs (TopologyGraph.from_json)")
    for col in ("GPUs", "entities", "edges", "graph load s", "leaf down", "storm origin"):
        graphs.add_column(col, justify="right")
    latency = Table(
        title="IncidentEngine.process, ms per tick",
        caption=(
            "bg: median tick of a trickle of unrelated anomalies. leaf: a leaf switch goes down (n anomalies "
            "on its first tick; the 2nd adds the leaf silent). storm: a PFC storm (n anomalies on its first "
            "tick; the 2nd repeats them). ms: the first run (cold graph caches) over the best of the others; "
            f"target ≤ {target_ms:g} ms"
        ),
    )
    for col in (
        "GPUs",
        "bg ms",
        "leaf n",
        "leaf ms",
        "leaf 2nd ms",
        "storm n",
        "storm ms",
        "storm 2nd ms",
        "root ok",
    ):
        latency.add_column(col, justify="right")

    def ms(pair: tuple[float, float]) -> str:
        cells = [f"{v:,.1f}" for v in pair]
        return "\n".join(f"[red]{c}[/red]" if v > target_ms else c for c, v in zip(cells, pair, strict=True))

    for r in rows:
        graphs.add_row(f"{r.gpus:,}", f"{r.entities:,}", f"{r.edges:,}", f"{r.load_s:.2f}", r.leaf, r.storm_origin)
        latency.add_row(
            f"{r.gpus:,}",
            f"{r.background_ms:.2f}",
            f"{r.leaf_anomalies:,}",
            ms(r.leaf_ms),
            ms(r.leaf_silent_ms),
            f"{r.storm_anomalies:,}",
            ms(r.storm_first_ms),
            ms(r.storm_steady_ms),
            "yes" if r.root_ok else f"[red]no[/red]\n{r.leaf_root}\n{r.storm_root}",
        )
    return graphs, latency


def bench_rca(args: argparse.Namespace, console: Console) -> list[RcaRow]:
    """Root-cause ranking latency per tick at each of args.sizes GPUs; the table, and its rows."""
    rows: list[RcaRow] = []
    with Progress(len(args.sizes) * max(1, args.repeat), "aiops bench rca", "runs") as progress:
        for gpus in args.sizes:
            rows.append(
                measure_rca(
                    gpus,
                    repeat=args.repeat,
                    background_ticks=args.background_ticks,
                    seed=args.seed,
                    on_run=progress.advance,
                )
            )
    for table in rca_tables(rows):
        console.print(table)
    return rows
