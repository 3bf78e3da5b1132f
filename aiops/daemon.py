"""Daemons that checkpoint (aiops run --kafka, aiops detect --kafka), on the skeleton of
ingest/daemon.py: their topics made and their incarnation read, checkpoints loaded only where
they belong, saved with the offsets they go with and the ends of the outputs before those offsets
are committed (save, then commit), and what was published since a checkpoint skipped on the way
out (publish once). What each daemon does with a batch is its own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from aiops.daemon_state import Checkpoint, CheckpointError, CheckpointStore, Incarnation, Offsets, PublishedSince
from ingest.daemon import Broker, KafkaDaemon
from ingest.kafka import KafkaIOError, TelemetryProducer, until_reachable
from ingest.messages import Partition

log = logging.getLogger(__name__)

Save = tuple[CheckpointStore, dict[str, Any], set[Partition]]  # a store, its state, the partitions it covers
Skip = Callable[[str, bytes | None, bytes], bool]  # (topic, key, value) -> published already


def open_topics(broker: Broker, topics: Sequence[str], should_stop: Callable[[], bool]) -> Incarnation:
    """The topics, made if missing (a daemon may start during a broker restart: it waits), and
    their incarnation: the cluster and topic ids a checkpoint must match to be used."""
    until_reachable(lambda: broker.ensure_topics(topics), should_stop)
    cluster, ids = until_reachable(lambda: broker.incarnation(topics), should_stop)
    return Incarnation(cluster, ids)


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
    broker: Broker,
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
        ends = broker.ends(outputs)
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

    def __init__(self, broker: Broker, producers: Iterable[TelemetryProducer]) -> None:
        self.broker = broker
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
        skip = until_reachable(lambda: self._published_since(since), should_stop)
        for producer in self.producers:
            before = producer.already_published
            producer.already_published = skip if before is None else _either(before, skip)

    def _published_since(self, since: Offsets) -> Skip:
        records, complete = self.broker.records_since(since)
        if not complete:
            log.warning("could not read back all outputs since the checkpoint; some may be published twice")
        return PublishedSince.of(records).already


def _either(first: Skip, second: Skip) -> Skip:
    def skip(topic: str, key: bytes | None, value: bytes) -> bool:
        return first(topic, key, value) or second(topic, key, value)

    return skip


class CheckpointedDaemon(KafkaDaemon):
    """A daemon whose state goes into checkpoints: its topics opened and their incarnation read
    at the start, the producer made, publish-once armed on restores, and `save_then_commit`."""

    def __init__(
        self,
        should_stop: Callable[[], bool],
        broker: Broker,
        topics: Sequence[str],
        outputs: Sequence[str],
        client_id: str,
        idle_stop_s: float | None,
        lateness_s: float,
    ) -> None:
        super().__init__(should_stop, broker, idle_stop_s, quiet_after_s=max(lateness_s, 1.0))
        self.outputs = list(outputs)
        # the cluster and topic ids every checkpoint records, and a checkpoint must match to be used
        self.born = open_topics(broker, topics, self.stopping)
        self.producer = self.connect_producer(client_id)
        self.once = PublishOnce(broker, [self.producer])  # a checkpoint's outputs, read back before publishing

    def save_then_commit(self, saves: Sequence[Save] | None, held: Mapping[Partition, int]) -> set[Partition]:
        """Save, then commit. Each (store, state, its partitions) saved with those partitions'
        offsets (not past `held`: the first message of a tick still held); then only the
        partitions whose state was saved are committed: a state that could not be saved (the
        broker cannot say the outputs' ends) keeps its partitions uncommitted for the next round.
        `saves` None: no state directory, everything done is committed. The partitions committed."""
        done = self.consumer.done(held)
        if saves is None:
            self.consumer.commit(held=held)
            return set(done)
        saved: set[Partition] = set()
        for store, state, partitions in saves:
            mine = {p: o for p, o in done.items() if p in partitions}
            if save_checkpoint(store, state, mine, self._broker(), self.outputs, self.born):
                saved |= partitions
        self.consumer.commit(held=held, only=saved)
        return saved

    def close(self) -> None:
        if self.connected:
            self.consumer.close()
        self.producer.close()


__all__ = [
    "CheckpointedDaemon",
    "PublishOnce",
    "open_topics",
    "resume_offsets",
    "save_checkpoint",
    "usable_checkpoint",
]
