"""Running the detector stack: offline over a recorded folder, or as a daemon between Kafka topics.

Both paths are the same loop: line protocol -> ingest core (decode, validate) -> tick assembler
-> detector stack -> anomalies. Scheduler events (maintenance announcements) come from the events
log; a real deployment gets them from its scheduler.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from detectors.anomaly import Anomaly, Prediction
from detectors.predict.online import OnlinePredictor
from detectors.stack import DetectorStack, DriftFactory, default_drift
from detectors.ticks import PartitionClock, TickAssembler
from ingest.deadletter import DeadLetter, Source
from ingest.frames import Frame
from ingest.pipeline import IngestCore
from vocab.settings import KafkaSettings
from vocab.thresholds import DetectorSettings

log = logging.getLogger(__name__)

CHUNK_BYTES = 32 << 20
DEFAULT_INTERVAL_S = 10.0


@dataclass(slots=True)
class DetectStats:
    ticks: int = 0
    values: int = 0
    anomalies: int = 0
    suppressed: int = 0
    late_rows: int = 0
    deadletters: int = 0
    seconds: float = 0.0


def read_chunks(path: Path, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """A line-protocol file in pieces that end on line boundaries."""
    with path.open("rb") as f:
        rest = b""
        while chunk := f.read(size):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                yield data[:cut]
                rest = data[cut:]
            else:
                rest = data
        if rest:
            yield rest


def load_events(path: Path) -> list[dict[str, object]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def apply_events(stack: DetectorStack, events: list[dict[str, object]]) -> None:
    for e in events:
        if e.get("type") == "maintenance":
            stack.announce_maintenance([str(n) for n in e["nodes"]], float(e["start"]), float(e["end"]))  # type: ignore[arg-type, attr-defined]


def ticks_from_folder(folder: Path) -> Iterator[tuple[float, dict[str, Frame]]]:
    """A recorded run's telemetry as (time, frames) ticks, through the ingest core."""
    core = IngestCore()
    assembler = TickAssembler(lateness_s=0.0)
    for chunk in read_chunks(folder / "telemetry.lp"):
        assembler.add(core.process(chunk).frames)
        for tick in assembler.ready():
            yield tick.t, tick.frames
    for tick in assembler.flush():
        yield tick.t, tick.frames


FAILING_FOR_S = 2 * 3600.0  # an entity with anomalies this recent is failing, not about to


class DetectLoop:
    """Bytes in, anomalies (and predictions) out; the part both runners share."""

    def __init__(
        self,
        drift_factory: DriftFactory | None = default_drift,
        interval: float | None = None,
        predictor: OnlinePredictor | None = None,
        settings: DetectorSettings | None = None,
    ) -> None:
        self.core = IngestCore()
        self.stack = DetectorStack(interval or DEFAULT_INTERVAL_S, drift_factory, settings)
        self.predictor = predictor
        self.predictions: list[Prediction] = []
        self._recent: dict[str, float] = {}
        self.assembler = TickAssembler(lateness_s=0.0)
        self.partitions = PartitionClock()  # from Kafka: the slowest partition holds the ticks back
        self.interval_known = interval is not None
        self._last_t: float | None = None
        self.stats = DetectStats()
        # called once per analysed tick with its anomalies and predictions (the RCA engine)
        self.tick_listener: Callable[[float, list[Anomaly], list[Prediction]], None] | None = None

    def feed(self, data: bytes) -> tuple[list[Anomaly], list[DeadLetter]]:
        batch = self.core.process(data)
        letters = list(batch.deadletters)
        for late in self.assembler.add(batch.frames):
            letters.append(DeadLetter("detect", f"late: tick {late.time_ns[0]} was already analysed", b"", None))
        anomalies: list[Anomaly] = []
        for tick in self.assembler.ready():
            anomalies += self.analyse(tick.t, tick.frames)
        self.stats.late_rows = self.assembler.late_rows
        self.stats.deadletters += len(letters)
        return anomalies, letters

    def feed_polled(self, messages: Sequence[tuple[Source, int, bytes]]) -> tuple[list[Anomaly], list[DeadLetter]]:
        """One Kafka poll: (source, event time in ms, value) per message."""
        from ingest.kafka_io import join_messages

        data, _, _ = join_messages(messages)
        self.assembler.cap_ns = self.partitions.observe([((src.topic, src.partition), ms) for src, ms, _ in messages])
        return self.feed(data)

    def finish(self) -> list[Anomaly]:
        out: list[Anomaly] = []
        for tick in self.assembler.flush():
            out += self.analyse(tick.t, tick.frames)
        return out

    def analyse(self, t: float, frames: dict[str, Frame]) -> list[Anomaly]:
        """One assembled tick: detectors, then the predictor (for entities not already failing)."""
        if not self.interval_known and self._last_t is not None and t > self._last_t:
            self.stack.interval = t - self._last_t  # the exporters' scrape interval, from the data
            self.interval_known = True
        self._last_t = t
        self.stats.ticks += 1
        self.stats.values += sum(f.value_count for f in frames.values())
        found = self.stack.process(t, frames)
        self.stats.anomalies += len(found)
        self.stats.suppressed = self.stack.suppressed
        predicted = len(self.predictions)
        if self.predictor is not None:
            for a in found:
                if not a.detector.startswith("warn:"):  # an early warning is what predictions are for
                    self._recent[a.entity] = t
            if len(self._recent) > 10_000:  # forget old ones now and then
                self._recent = {e: at for e, at in self._recent.items() if t - at < FAILING_FOR_S}
            failing = {e for e, at in self._recent.items() if t - at < FAILING_FOR_S}
            self.predictions += self.predictor.update(t, frames, failing)
        if self.tick_listener is not None:
            self.tick_listener(t, found, self.predictions[predicted:])
        return found


def detect_folder(
    input_dir: Path,
    out_dir: Path,
    drift_factory: DriftFactory | None = default_drift,
    on_tick: Callable[[], None] | None = None,
    predictor: OnlinePredictor | None = None,
    detector_settings: DetectorSettings | None = None,
) -> DetectStats:
    """Reads telemetry.lp and events.jsonl (never truth.jsonl); writes anomalies.jsonl,
    predictions.jsonl (empty without a predictor) and deadletters.jsonl."""
    telemetry = input_dir / "telemetry.lp"
    if not telemetry.is_file():
        raise FileNotFoundError(f"no telemetry.lp in {input_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    loop = DetectLoop(drift_factory, predictor=predictor, settings=detector_settings)
    apply_events(loop.stack, load_events(input_dir / "events.jsonl"))
    started = time.perf_counter()
    with (
        (out_dir / "anomalies.jsonl").open("wb") as out,
        (out_dir / "deadletters.jsonl").open("wb") as dead,
        (out_dir / "predictions.jsonl").open("wb") as predicted,
    ):
        for chunk in read_chunks(telemetry):
            anomalies, letters = loop.feed(chunk)
            out.writelines(a.to_json() + b"\n" for a in anomalies)
            dead.writelines(d.to_json() + b"\n" for d in letters)
            predicted.writelines(p.to_json() + b"\n" for p in loop.predictions)
            loop.predictions.clear()
            if on_tick is not None:
                on_tick()
        out.writelines(a.to_json() + b"\n" for a in loop.finish())
        predicted.writelines(p.to_json() + b"\n" for p in loop.predictions)
    loop.stats.seconds = time.perf_counter() - started
    return loop.stats


def read_anomalies(path: Path) -> list[Anomaly]:
    return [Anomaly.from_json(line) for line in path.read_bytes().splitlines() if line.strip()]


class KafkaAnomalySink:
    """Anomalies as JSON on `aiops.anomalies`, keyed by entity (one entity's history in order)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from ingest.kafka_io import TelemetryProducer

        self._producer = TelemetryProducer(bootstrap, client_id="aiops-detect")
        self._topic = topic

    def add(self, anomalies: list[Anomaly]) -> None:
        for a in anomalies:
            self._producer.send_raw(self._topic, a.to_json(), key=a.entity.encode())

    def add_predictions(self, predictions: list[Prediction]) -> None:
        for p in predictions:
            self._producer.send_raw(self._topic, p.to_json(), key=p.entity.encode())

    def flush(self) -> None:
        self._producer.flush()

    def close(self) -> None:
        self._producer.close()


def detect_kafka(
    settings: KafkaSettings,
    should_stop: Callable[[], bool],
    events: list[dict[str, object]] | None = None,
    idle_stop_s: float | None = None,
    lateness_s: float = 60.0,
    drift_factory: DriftFactory | None = default_drift,
    predictor: OnlinePredictor | None = None,
    detector_settings: DetectorSettings | None = None,
) -> DetectStats:
    """The daemon: telemetry topic in, anomalies and predictions (and late or bad lines as dead
    letters) out.
    Commits after the anomalies of a poll are flushed: at-least-once."""
    from ingest.kafka_io import (
        KafkaDeadLetterSink,
        TelemetryConsumer,
        TelemetryProducer,
        ensure_topics,
        polls,
    )

    ensure_topics(
        settings.bootstrap,
        [settings.telemetry_topic, settings.anomalies_topic, settings.predictions_topic, settings.deadletter_topic],
    )
    consumer = TelemetryConsumer(settings, group=settings.detect_group)
    sink = KafkaAnomalySink(settings.bootstrap, settings.anomalies_topic)
    dead_producer = TelemetryProducer(settings.bootstrap, client_id="aiops-detect-deadletters")
    dead = KafkaDeadLetterSink(dead_producer, settings.deadletter_topic)
    loop = DetectLoop(drift_factory, predictor=predictor, settings=detector_settings)
    loop.assembler.lateness_s = lateness_s
    predictions = KafkaAnomalySink(settings.bootstrap, settings.predictions_topic)
    apply_events(loop.stack, events or [])
    started = time.monotonic()
    try:
        for messages in polls(consumer, should_stop, idle_stop_s):
            anomalies, letters = loop.feed_polled(messages)
            sink.add(anomalies)
            dead.add(letters)
            predictions.add_predictions(loop.predictions)
            loop.predictions.clear()
            sink.flush()
            dead.flush()
            predictions.flush()
            consumer.commit()
        sink.add(loop.finish())
        predictions.add_predictions(loop.predictions)
        sink.flush()
        predictions.flush()
    finally:
        consumer.close()
        sink.close()
        predictions.close()
        dead_producer.close()
    loop.stats.seconds = time.monotonic() - started
    return loop.stats
