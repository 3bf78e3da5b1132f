"""The detection daemon (`aiops detect --kafka`): telemetry topic in; anomalies, predictions and
dead letters out. One member of its group holds every partition (peer and cohort comparisons
span nodes); others stand by. Its state (baselines, persistence, held ticks) is checkpointed with
the offsets it belongs to, as the root-cause daemon's is (aiops.checkpoint): a restarted member,
or a standby taking over, carries on from there without relearning, and skips what was already
published since."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from aiops.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    Incarnation,
    Offsets,
    published_since,
    read_incarnation,
    topic_ends,
)
from aiops.events_feed import EventsFeed
from detectors.anomaly import Anomaly
from detectors.predict.online import OnlinePredictor
from detectors.runner import DetectLoop, DetectStats, KafkaAnomalySink, apply_events
from detectors.stack import DriftFactory, default_drift
from vocab.settings import KafkaSettings
from vocab.thresholds import DetectorSettings

log = logging.getLogger(__name__)


def detect_kafka(
    settings: KafkaSettings,
    interval_s: float,
    should_stop: Callable[[], bool],
    events: list[dict[str, object]] | None = None,
    idle_stop_s: float | None = None,
    lateness_s: float = 60.0,
    drift_factory: DriftFactory | None = default_drift,
    predictor: OnlinePredictor | None = None,
    detector_settings: DetectorSettings | None = None,
    state_dir: Path | None = None,
    checkpoint_every_s: float = 30.0,
) -> DetectStats:
    """Rows too late for their tick are counted and left out of detection. Commits after the
    outputs of a poll are flushed, and only up to the first message of a tick still held:
    at-least-once; with `state_dir`, checkpoints every `checkpoint_every_s` and on stopping."""
    from kafka.errors import KafkaError

    from ingest.kafka_io import (
        KafkaDeadLetterSink,
        KafkaIOError,
        TelemetryConsumer,
        TelemetryProducer,
        ensure_topics,
        polls,
        until_reachable,
    )

    outputs = [settings.anomalies_topic, settings.predictions_topic, settings.deadletter_topic]
    topics = [settings.telemetry_topic, *outputs]
    until_reachable(lambda: ensure_topics(settings.bootstrap, topics), should_stop)  # started during a broker restart
    born = until_reachable(lambda: read_incarnation(settings.bootstrap, topics), should_stop)
    store = CheckpointStore(state_dir, f"detect-{settings.detect_group}") if state_dir is not None else None

    def fresh() -> DetectLoop:
        loop = DetectLoop(interval_s, drift_factory, predictor, detector_settings, lateness_s)
        apply_events(loop, events or [])
        return loop

    loop = fresh()
    holding: set[tuple[str, int]] = set()
    unread_outputs: Offsets | None = None
    events_at: dict[int, int] = {}  # where the scheduler's events topic has been read to

    def assigned(partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """As in the root-cause daemon: partitions it did not hold come with the checkpoint
        (a start, or a standby taking over). Runs inside a poll: no Kafka calls here."""
        nonlocal loop, holding, unread_outputs, events_at
        if not partitions:
            if holding:  # it held them until now: what it learnt is the new holder's
                loop, events_at = fresh(), {}
            holding = set()
            return {}
        if partitions <= holding:
            holding = set(partitions)
            return {}
        holding = set(partitions)
        loop, events_at = fresh(), {}
        checkpoint = _load(store, interval_s, born)
        if checkpoint is None:
            return {}
        events_at = dict(checkpoint.state.get("events_offsets") or {})
        restored: DetectLoop = checkpoint.state["detect"]
        restored.predictor = _carry_predictor(restored.predictor, predictor)
        apply_events(restored, events or [])
        loop, unread_outputs = restored, checkpoint.outputs
        resume = {(t, p): o for t, parts in checkpoint.offsets.items() for p, o in parts.items()}
        where = ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(resume.items()))
        log.warning("resuming detection from the checkpoint (%s)", where)
        return resume

    consumer = until_reachable(
        lambda: TelemetryConsumer(
            settings,
            group=settings.detect_group,
            on_revoked=lambda parts: loop.forget_partitions(parts),  # noqa: PLW0108 (the loop of the moment)
            on_assigned=assigned,
            one_active=True,
        ),
        should_stop,
    )
    sink = KafkaAnomalySink(settings.bootstrap, settings.anomalies_topic)
    predictions = KafkaAnomalySink(settings.bootstrap, settings.predictions_topic)
    dead_producer = TelemetryProducer(settings.bootstrap, client_id="aiops-detect-deadletters")
    dead = KafkaDeadLetterSink(dead_producer, settings.deadletter_topic)
    started = last_checkpoint = time.monotonic()

    def publish(anomalies: list[Anomaly]) -> None:
        nonlocal unread_outputs
        if unread_outputs is not None:  # resumed: what was published since the checkpoint is skipped
            since = unread_outputs
            already = until_reachable(lambda: published_since(settings.bootstrap, since), should_stop)
            sink.producer.already_published = predictions.producer.already_published = already
            dead_producer.already_published = already
            unread_outputs = None
        sink.add(anomalies)
        predictions.add_predictions(loop.predictions)
        loop.predictions.clear()
        sink.flush(should_stop)
        predictions.flush(should_stop)

    def checkpoint() -> None:
        nonlocal last_checkpoint
        if store is not None and holding:
            offsets: Offsets = {}
            for (topic, partition), offset in consumer.done(loop.held.first_held()).items():
                offsets.setdefault(topic, {})[partition] = offset
            state = {"detect": loop, "interval_s": interval_s, "events_offsets": dict(events_at)}
            try:
                ends = topic_ends(settings.bootstrap, outputs)
            except KafkaError as exc:  # the broker is away: the next round checkpoints
                log.warning("checkpoint skipped: cannot read the output topics' ends (%s)", exc)
                return
            store.save(Checkpoint(state, offsets, ends, incarnation=born))
        consumer.commit(held=loop.held.first_held())
        last_checkpoint = time.monotonic()

    def let_go() -> None:
        """The input went quiet for a tick's lateness: analyse what is held, and commit."""
        publish(loop.finish())
        checkpoint()

    feed = EventsFeed(settings.bootstrap, settings.events_topic)

    def hear_scheduler() -> None:
        """What the scheduler said since the last batch, before the telemetry that follows it."""
        nonlocal events_at
        events, refused, events_at = feed.take(events_at)
        loop.add_events(events)
        dead.add(refused)

    try:
        for messages in polls(consumer, should_stop, idle_stop_s, on_idle=let_go, idle_s=max(lateness_s, 1.0)):
            hear_scheduler()
            anomalies, letters = loop.feed_polled(messages, consumer.backlogged())
            consumer.hold_back(loop.ahead_partitions())
            dead.add(letters)
            publish(anomalies)
            dead.flush(should_stop)
            # with a state directory, offsets are committed only with the state they belong to:
            # committed ahead of the checkpoint, a restart would carry on from there with
            # state that never saw what came between (or, before the first checkpoint, with none)
            if store is None or time.monotonic() - last_checkpoint >= checkpoint_every_s:
                checkpoint()
        if not should_stop():  # the input went idle (a replay, a test): what is held is all there is
            publish(loop.finish())
        # asked to stop: ticks still open are not analysed half-full; their messages are not
        # committed, so the next member reads them again
        checkpoint()
    except KafkaIOError as exc:  # asked to stop while the broker was away: nothing more committed
        log.warning("%s", exc)
    finally:
        consumer.close()
        feed.close()
        sink.close()
        predictions.close()
        dead_producer.close()
    loop.stats.seconds = time.monotonic() - started
    return loop.stats


def _carry_predictor(restored: OnlinePredictor | None, given: OnlinePredictor | None) -> OnlinePredictor | None:
    """The restored predictor's state under this start's model (models are files, not state)."""
    if given is None or restored is None:
        return given
    restored.model = given.model
    return restored


def _load(store: CheckpointStore | None, interval_s: float, born: Incarnation) -> Checkpoint | None:
    """The last checkpoint if it can be used here; None (logged) if not: the member then starts
    from nothing at the group's committed offsets."""
    if store is None:
        return None
    try:
        checkpoint = store.load()
    except CheckpointError as exc:
        log.error("checkpoint not used (%s): starting from nothing at the committed offsets", exc)
        return None
    if checkpoint is None:
        return None
    foreign = checkpoint.foreign(born)
    if foreign is not None:
        log.error("checkpoint not used (%s: %s): starting from nothing at the committed offsets", store.path, foreign)
        return None
    if checkpoint.state.get("interval_s") != interval_s:
        log.error("checkpoint not used: taken at a scrape interval of %s s", checkpoint.state.get("interval_s"))
        return None
    return checkpoint


__all__ = ["detect_kafka"]
