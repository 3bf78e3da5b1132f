"""The ingest daemon on the skeleton (ingest/daemon.py): poll, decode, store, dead-letter, then commit."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import cast

import numpy as np
from numpy.typing import NDArray

from ingest.daemon import KafkaDaemon
from ingest.deadletter import DeadLetter, Source
from ingest.kafka import KafkaIOError, TelemetryConsumer
from ingest.messages import Partition, Polled, _bounded, per_partition, process_messages
from ingest.pipeline import DeadLetterSink, FrameSink, IngestCore, SinkUnavailableError, WindowedSink

log = logging.getLogger(__name__)


STORE_RETRY_MAX_S = 30.0


def store(
    frames: FrameSink, consumer: TelemetryConsumer, should_stop: Callable[[], bool]
) -> Sequence[tuple[bytes, str]] | None:
    """Flush until the store takes the batch; while it is away, pause the consumer (Kafka is the
    buffer) and retry with backoff. None if asked to stop before it came back."""
    delay, since = 1.0, time.monotonic()
    paused = False
    while True:
        try:
            refused = frames.flush()
            break
        except SinkUnavailableError as exc:
            if not paused:
                log.error("the store is unavailable (%s); pausing consumption until it is back", exc)
                consumer.pause()
                paused = True
            if should_stop():
                return None
            consumer.wait_paused(delay)
            delay = min(delay * 2, STORE_RETRY_MAX_S)
    if paused:
        consumer.resume()
        log.warning("the store is back after %.0f s; consumption resumed", time.monotonic() - since)
    return refused


def line_offsets(
    messages: Sequence[tuple[Source, int, bytes]], line_no: Mapping[str, NDArray[np.int64]]
) -> dict[str, NDArray[np.int64]]:
    """Per measurement, the offset of the message each row came from (rows named by their line
    in the batch `join_messages` made of these messages)."""
    counts = np.array(
        [(v := _bounded(value)).count(b"\n") + (not v.endswith(b"\n")) for _, _, value in messages], dtype=np.int64
    )
    ends = np.cumsum(counts)
    offsets = np.array([source.offset for source, _, _ in messages], dtype=np.int64)
    last = len(offsets) - 1
    return {
        name: offsets[np.minimum(np.searchsorted(ends, rows, side="right"), last)] for name, rows in line_no.items()
    }


class IngestDaemon(KafkaDaemon):
    """Poll, process, flush both sinks, then commit: a crash anywhere before the commit means
    the batch is read again (at-least-once); the database and the topics tolerate the repeat.

    A sink that holds rows until their window closes (a WindowedSink: downsampling) is told each
    row's partition and offset, and each partition is committed only up to its first message
    with rows still held. When the input has been quiet for the sink's `quiet_after_s`, or a run
    until idle ends, its open windows are closed and written: what arrived is what there is.
    Asked to stop, nothing open is written (it is read again on restart)."""

    def __init__(
        self,
        consumer: TelemetryConsumer,
        core: IngestCore,
        frames: FrameSink,
        deadletters: DeadLetterSink,
        should_stop: Callable[[], bool],
        idle_stop_s: float | None = None,
        on_batch_done: Callable[[dict[str, object]], None] | None = None,
    ) -> None:
        self.windowed = frames if isinstance(frames, WindowedSink) else None
        # at full resolution nothing waits for a quiet input
        quiet = self.windowed.quiet_after_s if self.windowed is not None else None
        super().__init__(should_stop, idle_stop_s=idle_stop_s, quiet_after_s=quiet, consumer=consumer)
        self.core, self.frames, self.deadletters = core, frames, deadletters
        self.on_batch_done = on_batch_done

    def settle(self) -> bool:
        """Flush both sinks and commit what they stored; False if asked to stop meanwhile."""
        refused = store(self.frames, self.consumer, self.should_stop)
        if refused is None:
            return False  # asked to stop while the store was away: nothing committed, read again on restart
        if refused:
            self.deadletters.add(
                [DeadLetter("store", f"refused by the database: {why}", line) for line, why in refused]
            )
            self.core.stats.deadlettered += len(refused)
        try:
            self.deadletters.flush(self.should_stop)
        except KafkaIOError as exc:  # asked to stop while the broker was away: read again on restart
            log.warning("%s", exc)
            return False
        held = cast(Mapping[Partition, int], self.windowed.held()) if self.windowed is not None else None
        self.consumer.commit(held)
        return True

    def on_batch(self, messages: Polled) -> None:
        values = letters = 0
        for partition, part in per_partition(messages):  # each judged against its own event time
            batch = process_messages(self.core, part, partition)
            if self.windowed is not None:
                self.windowed.write_stream(batch.frames, partition, line_offsets(part, batch.line_no))
            else:
                self.frames.write(batch.frames)
            self.deadletters.add(batch.deadletters)
            values, letters = values + batch.value_count, letters + len(batch.deadletters)
        if not self.settle():
            self.halted = True
            return
        if self.on_batch_done is not None:
            self.on_batch_done({"messages": len(messages), "values": values, "deadletters": letters})

    def let_go(self) -> None:
        """The input has been quiet for the sink's `quiet_after_s`: its open windows are closed."""
        if self.windowed is not None:
            self.windowed.close_all()
            self.settle()

    def at_end(self, idle: bool) -> None:
        if idle:  # a run until idle ended: its windows are complete
            self.let_go()


def consume(
    consumer: TelemetryConsumer,
    core: IngestCore,
    frames: FrameSink,
    deadletters: DeadLetterSink,
    should_stop: Callable[[], bool],
    idle_stop_s: float | None = None,
    on_batch: Callable[[dict[str, object]], None] | None = None,
) -> None:
    """The ingest daemon over a consumer its caller made (and closes): see IngestDaemon."""
    IngestDaemon(consumer, core, frames, deadletters, should_stop, idle_stop_s, on_batch).serve()
