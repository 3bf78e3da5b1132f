"""`aiops demo --sample`: the ingest path alone, in-process, on a line-protocol file (by default
the sample shipped with the tests, which ends with the bad input real exporters produce).

A producer thread puts the file's batches on an in-process queue (standing in for Kafka), the
ingest core decodes and validates them, and a memory sink stands in for InfluxDB. It prints what
arrived and what was dead-lettered, with the reasons. The full pipeline demo is demo.py.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from aiops.progress_bar import output_console
from ingest.pipeline import IngestCore, MemoryDeadLetterSink, MemoryFrameSink

SAMPLE = Path(__file__).resolve().parents[2] / "tests" / "data" / "sample.lp"
_DONE = b""


def _batches(data: bytes, lines_per_batch: int = 500) -> list[bytes]:
    lines = data.splitlines(keepends=True)
    return [b"".join(lines[i : i + lines_per_batch]) for i in range(0, len(lines), lines_per_batch)]


def run_demo(path: Path | None = None, console: Console | None = None) -> int:
    console = console or output_console()  # piped or to a file: every column whole
    path = path or SAMPLE
    if not path.is_file():
        console.print(f"[red]aiops demo: no input at {path}[/red]")
        return 2
    data = path.read_bytes()
    inbox: queue.Queue[bytes] = queue.Queue(maxsize=8)
    core = IngestCore()
    frames, letters = MemoryFrameSink(), MemoryDeadLetterSink()

    def produce() -> None:
        for batch in _batches(data):
            inbox.put(batch)
        inbox.put(_DONE)

    started = time.perf_counter()
    threading.Thread(target=produce, name="demo-producer", daemon=True).start()
    while (batch := inbox.get()) != _DONE:
        result = core.process(batch)
        frames.write(result.frames)
        letters.add(result.deadletters)
    elapsed = time.perf_counter() - started

    console.print(f"[bold]aiops demo[/bold]: ingest path in-process on {path.name} ({len(data):,} bytes)")
    rows: Counter[str] = Counter()
    values: Counter[str] = Counter()
    entities: dict[str, set[str]] = {}
    from vocab.catalog import measurement

    for written in frames.batches:
        for name, frame in written.items():
            rows[name] += len(frame)
            values[name] += frame.value_count
            spec = measurement(name)
            if spec is not None:
                entities.setdefault(name, set()).update(frame.tag(spec.id_tag).tolist())
    table = Table(title="Telemetry accepted")
    for col in ("measurement", "entities", "rows", "values"):
        table.add_column(col, justify="left" if col == "measurement" else "right")
    for name in rows:
        table.add_row(name, f"{len(entities.get(name, ())):,}", f"{rows[name]:,}", f"{values[name]:,}")
    console.print(table)
    dead = Table(title="Dead letters (bad input, kept with the reason)")
    for col in ("stage", "reason", "line"):
        dead.add_column(col)
    for letter in letters.letters:
        dead.add_row(letter.stage, letter.reason, letter.line[:70].decode("utf-8", "replace"))
    console.print(dead)
    s = core.stats
    console.print(
        f"{s.lines:,} lines, {s.values:,} values accepted, {s.deadlettered} dead-lettered, "
        f"{s.sentinels_masked} DCGM blank sentinels masked; {s.values / elapsed:,.0f} values/s"
    )
    return 0
