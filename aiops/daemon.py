"""The skeleton every daemon between Kafka topics runs on (aiops run --kafka, aiops detect
--kafka): its topics made and their incarnation read, checkpoints loaded only where they belong,
saved with the offsets they go with and the ends of the outputs, what was published since a
checkpoint skipped on the way out, and the poll loop that lets held ticks go when the input
goes quiet. What each daemon does with a batch is its own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from aiops.daemon_state import (
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    Incarnation,
    Offsets,
    published_since,
    read_incarnation,
)
from ingest.consume import polls
from ingest.kafka import KafkaIOError, TelemetryConsumer, TelemetryProducer, ensure_topics, topic_ends, until_reachable
from ingest.messages import Partition

log = logging.getLogger(__name__)

Skip = Callable[[str, bytes | None, bytes], bool]  # (topic, key, value) -> published already


def open_topics(bootstrap: str, topics: Sequence[str], should_stop: Callable[[], bool]) -> Incarnation:
    """The topics, made if missing (a daemon may start during a broker restart: it waits), and
    their incarnation: the cluster and topic ids a checkpoint must match to be used."""
    until_reachable(lambda: ensure_topics(bootstrap, topics), should_stop)
    return until_reachable(lambda: read_incarnation(bootstrap, topics), should_stop)


def usable_checkpoint(
    store: CheckpointStore | None, born: Incarnation, interval_s: float | None = None
) -> Checkpoint | None:
    """The store's last checkpoint if it belongs here; None (logged) if there is none or it
    cannot be used: damaged, taken on another cluster or an earlier incarnation of the topics
    (whose offsets describe other records), or at another scrape interval. The daemon then
    starts from nothing at the group's committed offsets."""
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
    taken_at = checkpoint.state.get("interval_s")
    if interval_s is not None and taken_at != interval_s:
        log.error("checkpoint not used (%s): taken at a scrape interval of %s s", store.path, taken_at)
        return None
    return checkpoint


def resume_offsets(checkpoint: Checkpoint) -> dict[Partition, int]:
    """Where the checkpoint's input partitions carry on from."""
    return {(t, p): o for t, parts in checkpoint.offsets.items() for p, o in parts.items()}


def save_checkpoint(
    store: CheckpointStore,
    state: dict[str, Any],
    done: dict[Partition, int],
    bootstrap: str,
    outputs: list[str],
    born: Incarnation,
) -> bool:
    """State with the input offsets it belongs to and the outputs' ends (what a replay from it
    will publish again); False if the broker cannot say those ends (the next round saves)."""
    offsets: Offsets = {}
    for (topic, partition), offset in done.items():
        offsets.setdefault(topic, {})[partition] = offset
    started = time.monotonic()
    try:
        ends = topic_ends(bootstrap, outputs)
    except KafkaIOError as exc:
        log.warning("checkpoint skipped: cannot read the output topics' ends (%s)", exc)
        return False
    size = store.save(Checkpoint(state, offsets, ends, incarnation=born))
    log.info("checkpoint %s: %.1f MB in %.2f s", store.path.name, size / 1e6, time.monotonic() - started)
    return True


class PublishOnce:
    """Outputs after a restore: what was published since the checkpoint is read back before the
    first record goes out, and each record that is there already is skipped once. Several
    restores (split detection restores partition by partition) add up."""

    def __init__(self, bootstrap: str, producers: Iterable[TelemetryProducer]) -> None:
        self.bootstrap = bootstrap
        self.producers = list(producers)
        self._since: Offsets | None = None

    def replaying_from(self, outputs: Offsets) -> None:
        """A checkpoint with these output ends was restored: read back from there."""
        if self._since is None:
            self._since = {t: dict(parts) for t, parts in outputs.items()}
            return
        for topic, parts in outputs.items():
            held = self._since.setdefault(topic, {})
            for partition, offset in parts.items():
                held[partition] = min(offset, held.get(partition, offset))

    def arm(self, should_stop: Callable[[], bool]) -> None:
        """Before publishing: the skip test for what a restore will publish again."""
        if self._since is None:
            return
        since, self._since = self._since, None
        skip = until_reachable(lambda: published_since(self.bootstrap, since), should_stop)
        for producer in self.producers:
            before = producer.already_published
            producer.already_published = skip if before is None else _either(before, skip)


def _either(first: Skip, second: Skip) -> Skip:
    def skip(topic: str, key: bytes | None, value: bytes) -> bool:
        return first(topic, key, value) or second(topic, key, value)

    return skip


def serve(
    consumer: TelemetryConsumer,
    should_stop: Callable[[], bool],
    on_batch: Callable[[list[Any]], None],
    let_go: Callable[[], None],
    at_end: Callable[[bool], None],
    idle_stop_s: float | None,
    lateness_s: float,
    on_quiet: Callable[[], None] | None = None,
) -> None:
    """The poll loop: each non-empty poll to `on_batch`; `let_go` once the input has been quiet
    for a tick's lateness (the ticks held for late rows get nothing more); `on_quiet` after every
    poll that brought nothing; `at_end(idle)` when it stops: idle (the input went quiet for
    `idle_stop_s`: what is held is all there is) or asked to stop (ticks still open are not
    analysed half-full; their messages stay uncommitted, and the next member reads them again)."""
    for messages in polls(
        consumer, should_stop, idle_stop_s, on_idle=let_go, idle_s=max(lateness_s, 1.0), on_empty=on_quiet
    ):
        on_batch(messages)
    at_end(not should_stop())


__all__ = [
    "PublishOnce",
    "open_topics",
    "resume_offsets",
    "save_checkpoint",
    "serve",
    "usable_checkpoint",
]
