"""`aiops bench ...`: throughput measured on this machine, printed as tables.

Tests check behaviour; this is where speed is measured. Every figure is the best of a few runs
(the least disturbed by whatever else the machine is doing), stated with its inputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.table import Table

from aiops.settings import InfluxSettings, KafkaSettings
from detectors.anomaly import Anomaly
from ingest.lineprotocol import decode, encode

if TYPE_CHECKING:
    from rca.incidents import Incident, IncidentEngine
    from telemetry_gen.topology import Topology


@dataclass(frozen=True, slots=True)
class Row:
    what: str
    values: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.values / self.seconds if self.seconds > 0 else float("inf")


def _best(repeat: int, fn: Callable[[], int]) -> tuple[int, float]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        started = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - started)
    return count, best


def bench_ingest(args: argparse.Namespace, console: Console) -> list[Row]:
    from telemetry_gen.generator import GenConfig, Generation

    gen = Generation(GenConfig(gpus=args.gpus, hours=(args.ticks + 1) * 30 / 3600, interval=30, seed=1, faults=""))
    ticks_iter = gen.ticks()
    tick = next(ticks_iter).frames
    data = encode(tick)
    values = sum(f.value_count for f in tick)
    console.print(
        f"generated tick: {args.gpus:,} GPUs, {gen.topology.entity_count:,} entities, "
        f"{values:,} field values, {len(data) / 1e6:.1f} MB of line protocol"
    )
    rows: list[Row] = []
    decoded_values, seconds = _best(args.repeat, lambda: decode(data).value_count)
    rows.append(Row("decode (one core)", decoded_values, seconds, "one tick, vectorised path"))
    _, seconds = _best(args.repeat, lambda: len(encode(tick)))
    rows.append(Row("encode (one core)", values, seconds, "frames -> line protocol"))
    ticks = [encode(t.frames) for t in ticks_iter]
    if args.kafka:
        rows += bench_kafka(args.kafka, ticks)
    if args.influx:
        rows += bench_influx(args.influx, ticks)
    return rows


def _produce(bootstrap: str, topic: str, ticks: list[bytes]) -> int:
    from ingest.kafka_io import TelemetryProducer, messages_from_lines

    producer = TelemetryProducer(bootstrap)
    sent = sum(producer.send(topic, messages_from_lines(t)) for t in ticks)
    producer.flush()
    producer.close()
    return sent


def _consume_all(settings: KafkaSettings, total_values: int) -> tuple[int, float]:
    """Consume and decode until every value arrived; returns (values, seconds from first poll)."""
    from ingest.kafka_io import TelemetryConsumer, join_messages
    from ingest.pipeline import IngestCore

    consumer = TelemetryConsumer(settings)
    core = IngestCore()
    started = time.perf_counter()
    deadline = started + 300
    while core.stats.values < total_values and time.perf_counter() < deadline:
        messages = consumer.poll()
        if messages:
            data, default_times, source_of = join_messages(messages)
            core.process(data, default_times, source_of)
            consumer.commit()
    seconds = time.perf_counter() - started
    consumer.close()
    return core.stats.values, seconds


def bench_kafka(bootstrap: str, ticks: list[bytes]) -> list[Row]:
    """Producer alone, consumer alone, then both at once in two processes (as deployed: the
    exporter side and the ingest side are different processes, here on the machine's 2 cores)."""
    import multiprocessing

    from ingest.kafka_io import ensure_topics

    suffix = uuid.uuid4().hex[:8]
    first = KafkaSettings(bootstrap=bootstrap, telemetry_topic=f"bench.a.{suffix}", ingest_group=f"bench-a-{suffix}")
    second = KafkaSettings(bootstrap=bootstrap, telemetry_topic=f"bench.b.{suffix}", ingest_group=f"bench-b-{suffix}")
    ensure_topics(bootstrap, [first.telemetry_topic, second.telemetry_topic])
    total = sum(decode(t).value_count for t in ticks)
    note = f"{len(ticks)} ticks"

    started = time.perf_counter()
    sent = _produce(bootstrap, first.telemetry_topic, ticks)
    produce_s = time.perf_counter() - started
    consumed, consume_s = _consume_all(first, total)

    context = multiprocessing.get_context("fork")
    producer = context.Process(target=_produce, args=(bootstrap, second.telemetry_topic, ticks), daemon=True)
    started = time.perf_counter()
    producer.start()
    piped, _ = _consume_all(second, total)
    pipeline_s = time.perf_counter() - started
    producer.join(timeout=60)
    return [
        Row("kafka produce", total, produce_s, f"{sent:,} messages, {note}"),
        Row("kafka consume + decode + validate", consumed, consume_s, note),
        Row("kafka end to end, pipelined", piped, pipeline_s, f"producer process ∥ ingest, {note}"),
    ]


def bench_influx(url: str, ticks: list[bytes]) -> list[Row]:
    import requests

    from ingest.influx_writer import InfluxWriter
    from ingest.pipeline import IngestCore

    database = f"bench_{uuid.uuid4().hex[:8]}"
    requests.post(f"{url}/query", params={"q": f'CREATE DATABASE "{database}"'}, timeout=30).raise_for_status()
    core = IngestCore()
    batches = [core.process(t).frames for t in ticks]
    writer = InfluxWriter(InfluxSettings(url=url, database=database), core.stats)
    values = sum(f.value_count for b in batches for f in b.values())
    started = time.perf_counter()
    for frames in batches:
        writer.write(frames)
        writer.flush()
    seconds = time.perf_counter() - started
    writer.close()
    requests.post(f"{url}/query", params={"q": f'DROP DATABASE "{database}"'}, timeout=60)
    return [Row("influxdb write (encode + HTTP)", values, seconds, f"{core.stats.written:,} lines, {len(ticks)} ticks")]


def bench_gen(args: argparse.Namespace, console: Console) -> None:
    """Topology size and generation throughput per cluster size, to a file and to Kafka."""
    import tempfile
    from pathlib import Path

    from telemetry_gen.emit import to_kafka, write_folder
    from telemetry_gen.generator import GenConfig, Generation
    from telemetry_gen.topology import build

    sizes = Table(title="topology size (series = values per tick)")
    for col in ("GPUs", "topology", "entities", "edges", "series", "build s"):
        sizes.add_column(col, justify="right")
    speed = Table(title=f"aiops bench gen: {args.ticks} ticks at 30 s, all fault kinds active")
    for col in ("GPUs", "sink", "ticks", "values", "seconds", "values/s", "MB"):
        speed.add_column(col, justify="right")
    for gpus in args.sizes:
        hours = args.ticks * 30 / 3600
        for name in ("fat-tree", "torus", "dragonfly"):
            started = time.perf_counter()
            topology = build(name, gpus)
            build_s = time.perf_counter() - started
            one_tick = Generation(GenConfig(gpus=gpus, topology=name, hours=30 / 3600, interval=30, faults=""))
            series = sum(t.value_count for t in one_tick.ticks())
            sizes.add_row(
                f"{gpus:,}",
                name,
                f"{topology.entity_count:,}",
                f"{len(topology.edges):,}",
                f"{series:,}",
                f"{build_s:.2f}",
            )
        config = GenConfig(gpus=gpus, hours=hours, interval=30, seed=1, faults="" if gpus < 256 else "all=1")
        with tempfile.TemporaryDirectory() as tmp:
            stats = write_folder(Generation(config), Path(tmp))
        speed.add_row(
            f"{gpus:,}",
            "file",
            str(stats.ticks),
            f"{stats.values:,}",
            f"{stats.seconds:.2f}",
            f"{stats.values / stats.seconds:,.0f}",
            f"{stats.bytes / 1e6:,.0f}",
        )
        if args.kafka and gpus <= args.kafka_max_gpus:
            from ingest.kafka_io import ensure_topics

            topic = f"bench.gen.{uuid.uuid4().hex[:8]}"
            ensure_topics(args.kafka, [topic])
            stats = to_kafka(Generation(config), args.kafka, topic)
            speed.add_row(
                f"{gpus:,}",
                "kafka",
                str(stats.ticks),
                f"{stats.values:,}",
                f"{stats.seconds:.2f}",
                f"{stats.values / stats.seconds:,.0f}",
                f"{stats.bytes / 1e6:,.0f}",
            )
    console.print(sizes)
    console.print(speed)


def _state_bytes(state: object) -> int:
    if isinstance(state, dict):
        return sum(_state_bytes(v) for v in state.values())
    if isinstance(state, np.ndarray):
        return int(state.nbytes) if state.dtype != object else 0  # entity ids belong to the index
    return 8


def bench_detect(args: argparse.Namespace, console: Console) -> None:
    """The whole detector stack on a generated 10,000-GPU stream, beside river and pysad."""
    import pickle

    from detectors.stack import DetectorStack
    from telemetry_gen.generator import GenConfig, Generation

    gen = Generation(
        GenConfig(
            gpus=args.gpus,
            hours=(args.ticks + 1) * 30 / 3600,
            interval=30,
            seed=1,
            faults="all=1" if args.gpus >= 1024 else "",
        )
    )
    ticks = [(t.time_ns / 1e9, {f.measurement: f for f in t.frames}) for t in gen.ticks()]
    series = sum(f.value_count for f in ticks[0][1].values())
    stack = DetectorStack(30)
    stack.process(*ticks[0])  # first tick: entities register, counters get their reference
    started = time.perf_counter()
    samples = 0
    for t, frames in ticks[1:]:
        samples += sum(f.value_count for f in frames.values())
        stack.process(t, frames)
    ours_s = time.perf_counter() - started
    ours_rate = samples / ours_s
    state = _state_bytes(stack.state_dict())
    table = Table(title=f"aiops bench detect: {args.gpus:,} GPUs, {series:,} series, {len(ticks) - 1} ticks")
    for col in ("detector", "samples", "seconds", "samples/s", "state bytes/series", "ours ×"):
        table.add_column(col, justify="right" if col != "detector" else "left")
    table.add_row(
        "aiops detector stack (rules, peers, rates, drift)",
        f"{samples:,}",
        f"{ours_s:.2f}",
        f"{ours_rate:,.0f}",
        f"{state / series:.1f}",
        "1",
    )
    # The peers get the same values in the same order, one sample at a time, as their API takes them.
    flat = np.concatenate(
        [np.nan_to_num(c.as_float()) for _, frames in ticks[1:2] for f in frames.values() for c in f.fields.values()]
    )[: args.peer_samples]
    for name, step, model in _peers(flat):
        started = time.perf_counter()
        for v in flat.tolist():
            step(v)
        secs = time.perf_counter() - started
        rate = len(flat) / secs
        size = len(pickle.dumps(model))  # one model per series is what a per-series detector needs
        table.add_row(name, f"{len(flat):,}", f"{secs:.2f}", f"{rate:,.0f}", f"{size:,}", f"{ours_rate / rate:,.0f}")
    console.print(table)


def _peers(sample: np.ndarray) -> list[tuple[str, Callable[[float], object], object]]:
    out: list[tuple[str, Callable[[float], object], object]] = []
    try:
        from river import anomaly

        hst = anomaly.HalfSpaceTrees(seed=1)

        def river_step(v: float) -> object:
            x = {"v": v}
            score = hst.score_one(x)
            hst.learn_one(x)
            return score

        out.append(("river HalfSpaceTrees (learn_one/score_one)", river_step, hst))
    except ImportError:
        pass
    try:
        from pysad.models import HalfSpaceTrees as PysadHST
        from pysad.models import MedianAbsoluteDeviation

        lo, hi = float(np.min(sample)), float(np.max(sample)) + 1.0
        for name, model in (
            ("pysad HalfSpaceTrees (fit_partial/score_partial)", PysadHST(feature_mins=[lo], feature_maxes=[hi])),
            ("pysad MedianAbsoluteDeviation", MedianAbsoluteDeviation()),
        ):

            def pysad_step(v: float, m: object = model) -> object:
                x = np.array([v])
                m.fit_partial(x)  # type: ignore[attr-defined]
                return m.score_partial(x)  # type: ignore[attr-defined]

            out.append((name, pysad_step, model))
    except ImportError:
        pass
    return out


def bench_nab(args: argparse.Namespace, console: Console) -> int:
    """score-csv over every file of a NAB-layout folder, scored with our NAB implementation."""
    import tempfile
    from pathlib import Path

    import pandas as pd

    from detectors.nab import format_table, load_corpus, run_nab
    from detectors.scorecsv import score_csv

    root = Path(args.data)
    data = root / "data" if (root / "data").is_dir() else root
    windows = data.parent / "labels" / "combined_windows.json"
    if not windows.is_file():
        console.print(f"no labels at {windows}")
        return 2
    corpus = load_corpus(data, windows)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.csv"

        def score(f: object) -> np.ndarray:
            score_csv(data / f.name, out)  # type: ignore[attr-defined]
            scores: np.ndarray = pd.read_csv(out)["anomaly_score"].to_numpy(dtype=np.float64)
            return scores

        results = run_nab(corpus, score)
    console.print(f"NAB on {len(corpus)} files from {data} (score-csv per file, {time.perf_counter() - started:.1f}s)")
    print(format_table(results))
    return 0


def print_rows(title: str, rows: list[Row], console: Console) -> None:
    table = Table(title=title)
    table.add_column("stage")
    table.add_column("values", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("values/s", justify="right")
    table.add_column("note")
    for r in rows:
        table.add_row(r.what, f"{r.values:,}", f"{r.seconds:.3f}", f"{r.rate:,.0f}", r.note)
    console.print(table)


def run_bench(args: argparse.Namespace) -> int:
    console = Console()
    if args.bench == "ingest":
        print_rows("aiops bench ingest", bench_ingest(args, console), console)
        return 0
    if args.bench == "gen":
        bench_gen(args, console)
        return 0
    if args.bench == "detect":
        bench_detect(args, console)
        return 0
    if args.bench == "nab":
        return bench_nab(args, console)
    if args.bench == "rca":
        bench_rca(args, console)
        return 0
    console.print(f"unknown benchmark {args.bench!r}")
    return 2


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
        from detectors.xid import describe
        from telemetry_gen.topology import NICS_PER_NODE, NODES_PER_POD

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


def measure_rca(gpus: int, repeat: int = 3, background_ticks: int = 20, seed: int = 1) -> RcaRow:
    """Latency of IncidentEngine.process per tick on a fat-tree of `gpus`: a trickle of unrelated
    anomalies, a leaf switch going down (two ticks), a PFC storm (its first tick and a steady one)."""
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
    for gpus in args.sizes:
        rows.append(measure_rca(gpus, repeat=args.repeat, background_ticks=args.background_ticks, seed=args.seed))
    for table in rca_tables(rows):
        console.print(table)
    return rows
