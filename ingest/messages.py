"""Kafka messages as line protocol, without a Kafka client: grouping a file's lines into
messages, joining a poll's messages into one decodable batch, and the ingest core over them.

Messages carry line protocol, one or more lines each (Telegraf writes one; we group the lines of
one node or switch at one tick, which keeps per-entity order and cuts per-message overhead). The
key is the node or switch id, so all of a node's telemetry lands on one partition in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from ingest.deadletter import DeadLetter, Source
from ingest.lineprotocol import MAX_RECORD_BYTES, decode
from ingest.pipeline import Batch, IngestCore
from vocab.catalog import measurement

log = logging.getLogger(__name__)

# The most bytes one message may take, both ways: what our producer may send (its request size)
# and what the consumer decodes. Kafka's own default is 1 MiB and our producer groups at most 1 MiB
# of lines per message (messages_from_lines); 8 MiB leaves room for a site whose Telegraf sends
# bigger batches. A message over it is dead-lettered whole, unread: the poll's joined buffer, and
# the work on it, stay bounded whatever one sender does.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024

Partition = tuple[str, int]  # (topic, partition)
Polled = list[tuple[Source, int, bytes]]


@dataclass(frozen=True, slots=True)
class Message:
    key: bytes | None
    value: bytes
    timestamp_ms: int | None


def messages_from_lines(data: bytes, max_bytes: int = 1 << 20) -> Iterator[Message]:
    """Group a line-protocol file into messages: one per (partition key, timestamp), in file order.

    Lines whose key cannot be told (unknown measurement, not valid line protocol) are still sent,
    alone and without a key, so the consumer can dead-letter them with the reason.
    """
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    decoded = decode(data)
    n = len(lines)
    keys = np.full(n, "", dtype=object)
    stamps = np.full(n, -1, dtype=np.int64)
    for name, frame in decoded.frames.items():
        spec = measurement(name)
        rows = decoded.line_no[name]
        stamps[rows] = frame.time_ns
        if spec is not None:
            keys[rows] = frame.tag(spec.partition_tag)
    group = _runs_per_key(keys, stamps)
    order = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(group[order])) + 1
    for members in np.split(order, bounds):
        first = int(members[0])
        key = str(keys[first])
        chunk: list[bytes] = []
        size = 0
        for i in members.tolist():
            line = lines[i]
            if not line.strip() or line.startswith(b"#"):
                continue
            if not key:  # unkeyed lines travel one per message
                yield Message(None, line, None)
                continue
            if chunk and size + len(line) > max_bytes:
                yield Message(key.encode(), b"\n".join(chunk), int(stamps[first] // 1_000_000))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line) + 1
        if chunk:
            yield Message(key.encode(), b"\n".join(chunk), int(stamps[first] // 1_000_000))


def _runs_per_key(keys: NDArray[np.object_], stamps: NDArray[np.int64]) -> NDArray[np.int64]:
    """Group ids for lines: one group per run of equal timestamps within each key's own lines,
    numbered in order of first appearance. A line that comes back to an old timestamp later in
    the file starts a new group, so grouping never moves a line ahead of its key's later lines."""
    key_code, _ = pd.factorize(keys)
    order = np.argsort(key_code, kind="stable")
    k, t = key_code[order], stamps[order]
    new_run = np.ones(len(order), dtype=np.bool_)
    new_run[1:] = (k[1:] != k[:-1]) | (t[1:] != t[:-1])
    run = np.empty(len(order), dtype=np.int64)
    run[order] = np.cumsum(new_run)
    group, _ = pd.factorize(run)
    return np.asarray(group, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Joined:
    """A poll's messages as one decodable batch."""

    data: bytes
    default_times: NDArray[np.int64]  # each line's default time: its message's timestamp
    record_ends: NDArray[np.int64]  # byte offset of each message's end: no record runs past one
    source_of: Callable[[int], Source | None]  # the message a batch line came from


def joined(messages: Sequence[tuple[Source, int, bytes]]) -> Joined:
    """One decodable batch from many messages. A message boundary is a line boundary (a message
    without a final newline gets one) and a record boundary (decode's `record_ends`: a quote left
    open never reaches into the next message). A message over MAX_MESSAGE_BYTES stands as one
    blank line (`process_messages` dead-letters it), which keeps the line count `line_offsets`
    finds for it."""
    values = [_bounded(v) for _, _, v in messages]
    values = [v if v.endswith(b"\n") else v + b"\n" for v in values]
    counts = np.array([v.count(b"\n") for v in values], dtype=np.int64)
    ends = np.cumsum(counts)
    default_times = np.repeat(np.array([ts for _, ts, _ in messages], dtype=np.int64) * 1_000_000, counts)
    record_ends = np.cumsum(np.array([len(v) for v in values], dtype=np.int64))

    def source_of(line_no: int) -> Source | None:
        i = int(np.searchsorted(ends, line_no, side="right"))
        return messages[i][0] if i < len(messages) else None

    return Joined(b"".join(values), default_times, record_ends, source_of)


def join_messages(
    messages: Sequence[tuple[Source, int, bytes]],
) -> tuple[bytes, NDArray[np.int64], Callable[[int], Source | None]]:
    """One decodable batch from many messages, each line's default time (its message's
    timestamp, for lines that carry none, as Telegraf does), and a map from line to message.
    (Without the message ends: `joined` has them, and `process_messages` uses it.)"""
    batch = joined(messages)
    return batch.data, batch.default_times, batch.source_of


def _bounded(value: bytes) -> bytes:
    return value if len(value) <= MAX_MESSAGE_BYTES else b""


def oversized(messages: Sequence[tuple[Source, int, bytes]]) -> list[DeadLetter]:
    """A dead letter for each message over MAX_MESSAGE_BYTES, keeping its head (its offset in the
    source finds the rest: a dead letter must fit in a message of the dead-letter topic)."""
    return [
        DeadLetter(
            "decode",
            f"message of {len(v):,} bytes is over the bound of {MAX_MESSAGE_BYTES:,} bytes a message may take",
            v[:MAX_RECORD_BYTES],
            source,
        )
        for source, _, v in messages
        if len(v) > MAX_MESSAGE_BYTES
    ]


def per_partition(messages: Sequence[tuple[Source, int, bytes]]) -> list[tuple[Partition, Polled]]:
    """A poll's messages by partition, each partition's in their order."""
    out: dict[Partition, Polled] = {}
    for message in messages:
        out.setdefault((message[0].topic, message[0].partition), []).append(message)
    return list(out.items())


def process_messages(core: IngestCore, messages: Sequence[tuple[Source, int, bytes]], partition: Partition) -> Batch:
    """The ingest core over one partition's messages of a poll; a failure of ours dead-letters
    them whole (with the reason) instead of stopping the cluster's monitoring."""
    batch = joined(messages)
    try:
        out = core.process(
            batch.data,
            default_time_ns=batch.default_times,
            source_of=batch.source_of,
            stream=partition,
            record_ends=batch.record_ends,
        )
        if too_big := oversized(messages):  # each stands as one line of the batch, refused unread
            core.stats.lines += len(too_big)
            core.stats.rejected += len(too_big)
            core.stats.deadlettered += len(too_big)
            core.stats.reasons.update(letter.category for letter in too_big)
            out.deadletters[:0] = too_big
        return out
    except Exception as exc:
        log.exception("ingest failed on a batch of %d messages; dead-lettering them whole", len(messages))
        letters = [DeadLetter("internal", f"internal error: {exc!r}"[:500], v, src) for src, _, v in messages]
        core.stats.deadlettered += len(letters)
        return Batch({}, letters)


def event_time_ms(value: bytes, fallback_ms: int) -> int:
    """The event time of a message: the timestamp of its last line (a producer groups one
    entity's lines of one time per message, as ours and Telegraf's do). The record's own
    timestamp is the broker's append time on the project's topics, so it is only the fallback,
    for lines that carry no timestamp."""
    last = value.rstrip(b"\n").rpartition(b"\n")[2]
    token = last.rpartition(b" ")[2]
    if last.count(b" ") >= 2 and token.isdigit() and len(token) <= 19:
        return int(token) // 1_000_000
    return fallback_ms
