"""The skeleton every daemon between Kafka topics runs on: ingest (`aiops ingest`), detection
(`aiops detect --kafka`) and the whole pipeline (`aiops run --kafka`).

A daemon is a `KafkaDaemon` subclass. The skeleton owns the broker's clients (made through a
`Broker`, waiting for a broker that is away), routes the consumer's rebalance callbacks to
methods, and runs the poll loop; a subclass fills the named hooks:

- `on_assigned(partitions)`: partitions this member now holds; returns where to read any of
  them from (a checkpoint's offsets), instead of the group's committed offsets;
- `on_revoked(partitions)`: partitions taken away (called first, while the consumer's positions
  still say where this member stood);
- `on_batch(messages)`: a non-empty poll; commits what it has safely processed, and nothing else;
- `on_quiet()`: after each poll that brought nothing (work that waits on others);
- `let_go()`: the input has been quiet for `quiet_after_s` (what is held for late rows gets
  nothing more);
- `at_end(idle)`: the loop ended: idle (the input went quiet for `idle_stop_s`: what is held is
  all there is) or asked to stop (nothing open is finished half-full; it is read again).

Both rebalance hooks run inside a poll, so they make no Kafka calls. The daemons checkpoint
through `aiops.daemon.CheckpointedDaemon`, which adds save-then-commit and publish-once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol, TypeVar

from ingest.kafka import (
    JOIN_TIMEOUT_S,
    MAX_REJOINS,
    QUIET_CHECK_S,
    KafkaIOError,
    Offsets,
    Record,
    TelemetryConsumer,
    TelemetryProducer,
    TopicReader,
    cluster_and_topic_ids,
    ensure_topics,
    records_since,
    topic_beginnings,
    topic_ends,
    until_reachable,
)
from ingest.messages import Partition, Polled
from vocab.settings import KafkaSettings

log = logging.getLogger(__name__)
T = TypeVar("T")


def polls(
    consumer: TelemetryConsumer,
    should_stop: Callable[[], bool],
    idle_stop_s: float | None = None,
    on_idle: Callable[[], None] | None = None,
    idle_s: float = 60.0,
    on_empty: Callable[[], None] | None = None,
) -> Iterator[Polled]:
    """Non-empty polls until asked to stop, or until nothing arrived for `idle_stop_s` once the
    group gave this member partitions (joining a group takes a while and is not idleness).
    `on_idle` is called once when the input has been quiet for `idle_s` (it stopped: a stage
    that holds data for late arrivals lets it go), and again after the next quiet spell. Quiet
    (for either) means the broker confirms, every `QUIET_CHECK_S` of the spell and at its end,
    that there is nothing more to take: while the broker is away, producers buffer, and what they
    buffered arrives after it is back, so a spell counts only from the broker's return.
    `on_empty` is called after every poll that brought nothing (work that waits on others)."""
    # idle: nothing more to take (stopping waits for it); quiet: nothing more but what is held
    # back (letting held ticks go waits only for that: the held-back records wait on those ticks)
    idle_since = quiet_since = joining_since = quiet_checked = time.monotonic()
    idle_told = False
    rejoins = 0
    while not should_stop():
        messages = consumer.poll()
        now = time.monotonic()
        if messages:
            idle_since = quiet_since = quiet_checked = now
            idle_told = False
            yield messages
            continue
        if on_empty is not None:
            on_empty()
        telling = on_idle is not None and not idle_told
        spell_over = (telling and now - quiet_since > idle_s) or (
            idle_stop_s is not None and now - idle_since > idle_stop_s
        )
        watching = telling or idle_stop_s is not None
        if watching and consumer.assigned and (spell_over or now - quiet_checked >= QUIET_CHECK_S):
            if not consumer.caught_up(held_back_taken=True):
                idle_since = quiet_since = now
            elif consumer.holding_back and not consumer.caught_up():
                idle_since = now
            now = quiet_checked = time.monotonic()
        if on_idle is not None and not idle_told and consumer.assigned and now - quiet_since > idle_s:
            idle_told = True
            on_idle()
        if not consumer.assigned:
            idle_since = now
            if consumer.standing_by:
                joining_since = now
            elif now - joining_since > JOIN_TIMEOUT_S:
                rejoins += 1
                if idle_stop_s is not None and rejoins > MAX_REJOINS:
                    raise KafkaIOError(f"no partitions assigned after {rejoins} attempts to join the group")
                if not consumer.rejoin(should_stop):
                    return
                joining_since = time.monotonic()
        elif idle_stop_s is not None and now - idle_since > idle_stop_s:
            return
        if consumer.assigned:
            joining_since = now


class Broker(Protocol):
    """Where a daemon's Kafka clients and answers come from: the real broker (`KafkaBroker`) or,
    in the daemons' broker-free tests, one that plays assignments, polls and failures."""

    def ensure_topics(self, topics: Sequence[str], partitions: int = 6) -> None: ...

    def incarnation(self, topics: Sequence[str]) -> tuple[str, dict[str, str]]: ...

    def ends(self, topics: Sequence[str]) -> Offsets: ...

    def beginnings(self, topics: Sequence[str]) -> Offsets: ...

    def records_since(self, since: Offsets) -> tuple[list[Record], bool]: ...

    def producer(self, client_id: str) -> TelemetryProducer: ...

    def consumer(
        self,
        topics: Sequence[str],
        group: str,
        on_revoked: Callable[[set[Partition]], None],
        on_assigned: Callable[[set[Partition]], Mapping[Partition, int]],
        one_active: bool = False,
        sticky: bool = False,
    ) -> TelemetryConsumer: ...

    def reader(self, topic: str, client_id: str) -> TopicReader: ...


class KafkaBroker:
    """The broker the settings name (every call a KafkaIOError while it is away)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.bootstrap = settings.bootstrap

    def ensure_topics(self, topics: Sequence[str], partitions: int = 6) -> None:
        ensure_topics(self.bootstrap, topics, partitions)

    def incarnation(self, topics: Sequence[str]) -> tuple[str, dict[str, str]]:
        return cluster_and_topic_ids(self.bootstrap, topics)

    def ends(self, topics: Sequence[str]) -> Offsets:
        return topic_ends(self.bootstrap, topics)

    def beginnings(self, topics: Sequence[str]) -> Offsets:
        return topic_beginnings(self.bootstrap, topics)

    def records_since(self, since: Offsets) -> tuple[list[Record], bool]:
        return records_since(self.bootstrap, since)

    def producer(self, client_id: str) -> TelemetryProducer:
        return TelemetryProducer(self.bootstrap, client_id=client_id)

    def consumer(
        self,
        topics: Sequence[str],
        group: str,
        on_revoked: Callable[[set[Partition]], None],
        on_assigned: Callable[[set[Partition]], Mapping[Partition, int]],
        one_active: bool = False,
        sticky: bool = False,
    ) -> TelemetryConsumer:
        return TelemetryConsumer(
            self.settings,
            list(topics),
            group,
            on_revoked=on_revoked,
            on_assigned=lambda given: dict(on_assigned(given)),
            one_active=one_active,
            sticky=sticky,
        )

    def reader(self, topic: str, client_id: str) -> TopicReader:
        return TopicReader(self.bootstrap, topic, client_id=client_id)


class KafkaDaemon:
    """The poll loop and the clients of a daemon between Kafka topics; see the module's doc."""

    def __init__(
        self,
        should_stop: Callable[[], bool],
        broker: Broker | None = None,
        idle_stop_s: float | None = None,
        quiet_after_s: float | None = None,
        consumer: TelemetryConsumer | None = None,
    ) -> None:
        self.should_stop = should_stop
        self.broker = broker
        self.idle_stop_s = idle_stop_s
        self.quiet_after_s = quiet_after_s  # None: nothing is held for late rows, let_go is never due
        self._consumer = consumer
        self.halted = False  # a hook asked the loop to end now, without at_end (nothing committed)

    # ---------------------------------------------------------------- clients

    def waiting(self, connect: Callable[[], T]) -> T:
        """`connect()`, again while the broker is away, until it answers or the daemon is stopped."""
        return until_reachable(connect, self.stopping)

    def _broker(self) -> Broker:
        if self.broker is None:
            raise RuntimeError("this daemon was given its consumer, and no broker to make more clients")
        return self.broker

    def connect_producer(self, client_id: str) -> TelemetryProducer:
        broker = self._broker()
        return self.waiting(lambda: broker.producer(client_id))

    def connect(self, topics: Sequence[str], group: str, one_active: bool = False, sticky: bool = False) -> None:
        """The consumer, its rebalances told to `on_revoked` and `on_assigned`."""
        broker = self._broker()
        self._consumer = self.waiting(
            lambda: broker.consumer(topics, group, self.on_revoked, self.on_assigned, one_active, sticky)
        )

    @property
    def consumer(self) -> TelemetryConsumer:
        if self._consumer is None:
            raise RuntimeError("the daemon's consumer is not connected yet")
        return self._consumer

    @property
    def connected(self) -> bool:
        return self._consumer is not None

    def stopping(self) -> bool:
        """Asked whenever the daemon waits or loops (a subclass beats its liveness here)."""
        return self.should_stop()

    # ---------------------------------------------------------------- hooks

    def on_assigned(self, partitions: set[Partition]) -> Mapping[Partition, int]:
        return {}

    def on_revoked(self, partitions: set[Partition]) -> None:
        return None

    def on_batch(self, messages: Polled) -> None:
        raise NotImplementedError

    def on_quiet(self) -> None:
        return None

    def let_go(self) -> None:
        return None

    def at_end(self, idle: bool) -> None:
        return None

    # ---------------------------------------------------------------- the loop

    def serve(self) -> None:
        """Polls until asked to stop or idle, each to `on_batch`; then `at_end`, unless a hook
        halted the loop. KafkaIOError (the broker away while stopping) is the caller's."""
        telling = self.quiet_after_s is not None
        for messages in polls(
            self.consumer,
            self.stopping,
            self.idle_stop_s,
            on_idle=self.let_go if telling else None,
            idle_s=self.quiet_after_s if self.quiet_after_s is not None else 60.0,
            on_empty=self.on_quiet,
        ):
            self.on_batch(messages)
            if self.halted:
                return
        self.at_end(not self.stopping())


__all__ = ["Broker", "KafkaBroker", "KafkaDaemon", "polls"]
