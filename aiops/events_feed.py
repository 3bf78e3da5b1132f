"""The scheduler's events topic, as the daemons read it beside the telemetry.

`aiops scheduler follow` publishes what Slurm or Kubernetes says to `aiops.events`; every daemon
reads all of it (whichever telemetry partitions it holds), before each batch of telemetry it
analyses, so a job that starts after the daemon has its cohort from its first tick. Where it has
read to is part of the daemon's checkpoint, never committed to a group: a restart carries on from
the state it checkpointed, and a daemon without a checkpoint reads the topic from its beginning.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ingest.daemon import Broker
from ingest.deadletter import DeadLetter, Source
from ingest.kafka import KafkaIOError, TopicReader
from vocab.schedule import event_problem

log = logging.getLogger(__name__)


def decode_events(records: list[tuple[int, int, bytes]], topic: str) -> tuple[list[dict[str, Any]], list[DeadLetter]]:
    """The usable events of some records, and a dead letter with the reason for each other one."""
    events: list[dict[str, Any]] = []
    letters: list[DeadLetter] = []
    for partition, offset, raw in records:
        try:
            event = json.loads(raw)
            problem = event_problem(event)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, TypeError) as exc:
            problem = f"not a JSON event: {exc}"[:300]
        if problem is None:
            events.append(event)
        else:
            letters.append(DeadLetter("events", problem, raw or b"", Source(topic, partition, offset)))
    return events, letters


class EventsFeed:
    """New scheduler events since a position; the broker being away skips a round, never more."""

    def __init__(self, broker: Broker, topic: str) -> None:
        self.broker, self.topic = broker, topic
        self._reader: TopicReader | None = None
        self.read = 0  # events taken
        self.refused = 0  # records that were no usable event (dead-lettered)

    def take(self, since: dict[int, int]) -> tuple[list[dict[str, Any]], list[DeadLetter], dict[int, int]]:
        try:
            if self._reader is None:
                self.broker.ensure_topics([self.topic], partitions=1)
                self._reader = self.broker.reader(self.topic, "aiops-events")
            records, positions = self._reader.read_new(since)
        except KafkaIOError as exc:
            log.warning("scheduler events not read this round: %s", exc)
            return [], [], since
        events, letters = decode_events(records, self.topic)
        self.read += len(events)
        self.refused += len(letters)
        if letters:
            log.warning("%d scheduler events dead-lettered: %s", len(letters), letters[0].reason)
        return events, letters, positions

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
