"""Emitters: a generated history to a folder, to Kafka, or paced for a live demo.

Both send the line protocol of `Generation.lines`: what the configured collectors make of the
cluster (clock offsets, jitter, 1 s precision, no job tag, single-field lines; all off unless the
GenConfig turns them on).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ingest.kafka import TelemetryProducer
from ingest.lineprotocol import lines_to_bytes
from ingest.messages import Message
from telemetry_gen.collector import Encoded
from telemetry_gen.generator import Generation, write_jsonl, write_meta
from telemetry_gen.simulate import Tick
from vocab.catalog import measurement


@dataclass(slots=True)
class EmitStats:
    ticks: int = 0
    lines: int = 0
    values: int = 0
    bytes: int = 0
    messages: int = 0
    seconds: float = 0.0


def paced(ticks: Iterable[Tick], speed: float | None, sleep: Callable[[float], None] = time.sleep) -> Iterator[Tick]:
    """Release tick k at (its event time - the first's) / speed after the first: speed 60 is one
    simulated minute per second. None: as fast as possible."""
    started = time.monotonic()
    first: int | None = None
    for tick in ticks:
        if speed is not None:
            first = tick.time_ns if first is None else first
            due = started + (tick.time_ns - first) / 1e9 / speed
            wait = due - time.monotonic()
            if wait > 0:
                sleep(wait)
        yield tick


OnTick = Callable[[EmitStats], None]  # after each tick, with the totals so far (e.g. a progress bar)


def write_folder(gen: Generation, out: Path, speed: float | None = None, on_tick: OnTick | None = None) -> EmitStats:
    """meta.json, topology.json, telemetry.lp, events.jsonl, truth.jsonl.

    telemetry.lp is in tick order, as the lines would arrive; with clock offsets or jitter the
    timestamps within and across ticks are the hosts' and need not be ordered."""
    out.mkdir(parents=True, exist_ok=True)
    write_meta(out / "meta.json", gen)  # first: known before any tick, and a live reader needs it
    gen.topology.write(out / "topology.json")
    stats = EmitStats()
    started = time.perf_counter()
    with (out / "telemetry.lp").open("wb") as f:
        for tick in paced(gen.ticks(), speed):
            encoded = gen.lines(tick)
            data = b"".join(lines_to_bytes(e.lines) for e in encoded)
            f.write(data)
            stats.ticks += 1
            stats.lines += sum(len(e.lines) for e in encoded)
            stats.values += tick.value_count
            stats.bytes += len(data)
            if on_tick is not None:
                on_tick(stats)
    stats.seconds = time.perf_counter() - started
    write_jsonl(out / "events.jsonl", gen.events())
    write_jsonl(out / "truth.jsonl", gen.truth())
    return stats


def messages_from_lines(encoded: list[Encoded], max_lines: int = 4096) -> Iterator[Message]:
    """One message per partition key (node, switch or rack) per tick: a node's lines stay
    together and in order on one partition."""
    keys: list[np.ndarray] = []
    lines: list[bytes] = []
    for e in encoded:
        spec = measurement(e.frame.measurement)
        if spec is None:
            continue
        lines.extend(lines_to_bytes(e.lines).splitlines())
        keys.append(e.keys(spec.partition_tag))
    if not lines:
        return
    key = np.concatenate(keys)
    codes, uniques = pd.factorize(key)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    stamp = None
    for members in np.split(order, bounds):
        k = str(uniques[codes[members[0]]]).encode()
        for start in range(0, len(members), max_lines):
            chunk = members[start : start + max_lines]
            yield Message(k, b"\n".join(lines[i] for i in chunk.tolist()), stamp)


def to_kafka(
    gen: Generation, bootstrap: str, topic: str, speed: float | None = None, on_tick: OnTick | None = None
) -> EmitStats:
    producer = TelemetryProducer(bootstrap, client_id="aiops-gen")
    stats = EmitStats()
    started = time.perf_counter()
    try:
        for tick in paced(gen.ticks(), speed):
            ms = tick.time_ns // 1_000_000
            messages = [Message(m.key, m.value, ms) for m in messages_from_lines(gen.lines(tick))]
            stats.messages += producer.send(topic, messages)
            stats.ticks += 1
            stats.values += tick.value_count
            stats.bytes += sum(len(m.value) for m in messages)
            if on_tick is not None:
                on_tick(stats)
        producer.flush()
    finally:
        producer.close()
    stats.seconds = time.perf_counter() - started
    return stats
