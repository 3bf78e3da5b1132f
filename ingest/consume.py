"""The ingest daemon's loop over a consumer: poll, decode, store, dead-letter, then commit."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from ingest.deadletter import DeadLetter, Source
from ingest.kafka import JOIN_TIMEOUT_S, MAX_REJOINS, QUIET_CHECK_S, KafkaIOError, TelemetryConsumer
from ingest.messages import Partition, Polled, _bounded, per_partition, process_messages
from ingest.pipeline import DeadLetterSink, FrameSink, IngestCore, SinkUnavailableError, WindowedSink

log = logging.getLogger(__name__)


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


def consume(
    consumer: TelemetryConsumer,
    core: IngestCore,
    frames: FrameSink,
    deadletters: DeadLetterSink,
    should_stop: Callable[[], bool],
    idle_stop_s: float | None = None,
    on_batch: Callable[[dict[str, object]], None] | None = None,
) -> None:
    """Poll, process, flush both sinks, then commit: a crash anywhere before the commit means
    the batch is read again (at-least-once); the database and the topics tolerate the repeat.

    A sink that holds rows until their window closes (a WindowedSink: downsampling) is told each
    row's partition and offset, and each partition is committed only up to its first message
    with rows still held. When the input has been quiet for the sink's `quiet_after_s`, or a run
    until idle ends, its open windows are closed and written: what arrived is what there is.
    Asked to stop, nothing open is written (it is read again on restart)."""
    windowed = frames if isinstance(frames, WindowedSink) else None

    def settle() -> bool:
        """Flush both sinks and commit what they stored; False if asked to stop meanwhile."""
        refused = store(frames, consumer, should_stop)
        if refused is None:
            return False  # asked to stop while the store was away: nothing committed, read again on restart
        if refused:
            deadletters.add([DeadLetter("store", f"refused by the database: {why}", line) for line, why in refused])
            core.stats.deadlettered += len(refused)
        try:
            deadletters.flush(should_stop)
        except KafkaIOError as exc:  # asked to stop while the broker was away: read again on restart
            log.warning("%s", exc)
            return False
        consumer.commit(cast(Mapping[Partition, int], windowed.held()) if windowed is not None else None)
        return True

    def close_windows() -> None:
        if windowed is not None:
            windowed.close_all()
            settle()

    quiet: dict[str, Any] = {}  # at full resolution nothing waits for a quiet input
    if windowed is not None:
        quiet = {"on_idle": close_windows, "idle_s": windowed.quiet_after_s}
    for messages in polls(consumer, should_stop, idle_stop_s, **quiet):
        values = letters = 0
        for partition, part in per_partition(messages):  # each judged against its own event time
            batch = process_messages(core, part, partition)
            if windowed is not None:
                windowed.write_stream(batch.frames, partition, line_offsets(part, batch.line_no))
            else:
                frames.write(batch.frames)
            deadletters.add(batch.deadletters)
            values, letters = values + batch.value_count, letters + len(batch.deadletters)
        if not settle():
            return
        if on_batch is not None:
            on_batch({"messages": len(messages), "values": values, "deadletters": letters})
    if windowed is not None and not should_stop():  # a run until idle ended: its windows are complete
        close_windows()
