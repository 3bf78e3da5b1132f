"""`aiops bench hostile-poll`: ingest stays linear in its input whatever the input.

A poll of N messages (one node's tick each: 64 lines, 1,280 values, about 16 KB) in which one
message carries a string field never closed (`note="x,...`), decoded through the daemon's path
(`process_messages`: the poll's messages joined, each message's end a record's end) and through
the offline path (the same bytes as one recorded chunk, no message ends); then a poll where every
10th line opens a string that the next quote does not close into a record. Before the fix, 10
messages with one open quote took 19 s and kept nothing, 20 took 90 s; here the seconds double
with N, and every line but the open ones is kept.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from ingest.deadletter import Source
from ingest.messages import process_messages
from ingest.pipeline import IngestCore
from vocab.ids import gpu_id

TOPIC = "aiops.telemetry"
FIELDS = 20  # per line; 64 lines a message: 1,280 values, about 16 KB, a node's tick


def node_message(node: int, now_ns: int, open_quote_every: int = 0) -> bytes:
    lines = []
    name = f"n{node:05d}"
    for k in range(64):
        fields = ",".join(f"F{f}={node + k + f}.25" for f in range(FIELDS))
        line = f"gpu,gpu={gpu_id(name, k)},node={name},job=idle {fields} {now_ns}"
        if open_quote_every and k % open_quote_every == 0:
            line = line.replace(" F0=", ' note="x,F0=', 1)
        lines.append(line)
    return ("\n".join(lines) + "\n").encode()


def hostile_poll(n: int, now_ns: int, every: int = 0) -> list[tuple[Source, int, bytes]]:
    now_ms = now_ns // 1_000_000
    values = [node_message(i, now_ns, every) for i in range(n)]
    if not every:  # one message with one line left open, in the middle of the poll
        middle = values[n // 2].split(b"\n")
        middle[1] = middle[1].replace(b" F0=", b' note="x,F0=', 1)
        values[n // 2] = b"\n".join(middle)
    return [(Source(TOPIC, 0, i), now_ms, v) for i, v in enumerate(values)]


def _run(poll: list[tuple[Source, int, bytes]], daemon: bool) -> tuple[float, int, int]:
    core = IngestCore()
    joined = b"".join(v for _, _, v in poll)
    started = time.perf_counter()
    batch = process_messages(core, poll, (TOPIC, 0)) if daemon else core.process(joined)
    return time.perf_counter() - started, batch.value_count, len(batch.deadletters)


def bench_hostile_poll(args: argparse.Namespace, console: Console) -> list[dict[str, object]]:
    table = Table(title="aiops bench hostile-poll: a poll with strings never closed")
    for column in ("poll", "messages", "MB", "path", "seconds", "values kept", "dead-lettered", "ms per MB"):
        table.add_column(column, justify="left" if column in ("poll", "path") else "right")
    rows: list[dict[str, object]] = []
    now = time.time_ns()
    for kind, every in (("one open quote", 0), ("every 10th line open", 10)):
        for n in args.messages:
            poll = hostile_poll(n, now, every)
            size = sum(len(v) for _, _, v in poll) / 1e6
            for path, daemon in (("daemon", True), ("offline", False)):
                seconds, kept, letters = min((_run(poll, daemon) for _ in range(args.repeat)), key=lambda r: r[0])
                rows.append(
                    {
                        "poll": kind,
                        "messages": n,
                        "mb": size,
                        "path": path,
                        "seconds": seconds,
                        "values": kept,
                        "deadletters": letters,
                    }
                )
                table.add_row(
                    kind,
                    str(n),
                    f"{size:.2f}",
                    path,
                    f"{seconds:.3f}",
                    f"{kept:,}",
                    f"{letters:,}",
                    f"{seconds * 1e3 / size:.0f}",
                )
    console.print(table)
    return rows
