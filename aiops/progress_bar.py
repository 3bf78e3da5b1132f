"""Progress of long work on stderr, and a console for tables on stdout.

On a terminal, a bar with the count, the rate and the time left; anywhere else (a log, CI, a
pipe) a line every few seconds while it runs (`aiops gen: 120/480 ticks (25%), 39 ticks/s, 0:00:09
left`: a long step that said nothing for minutes looked hung) and one summary line at the end;
stdout holds only the command's output. The loop pays a counter and a clock read per `advance`;
rich hears of it at most ten times a second and redraws four times a second.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from datetime import timedelta
from types import TracebackType
from typing import TextIO, TypeVar

from rich.console import Console
from rich.progress import BarColumn, ProgressColumn, Task, TaskID, TextColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

T = TypeVar("T")

PUSH_EVERY_S = 0.1  # how often the count is handed to rich (it redraws on its own clock)
PIPED_WIDTH = 1000  # a pipe or a file has no width: wide enough that no table cell is cut
PIPED_EVERY_S = 5.0  # not on a terminal: a progress line this often (a step shorter than this says one line)


def is_live_terminal(stream: TextIO) -> bool:
    """A terminal that can redraw a line: a tty whose TERM is not dumb."""
    isatty = getattr(stream, "isatty", None)
    try:
        tty = bool(isatty()) if isatty is not None else False
    except ValueError:  # closed
        return False
    return tty and os.environ.get("TERM", "").lower() not in ("dumb", "unknown")


def output_console(stream: TextIO | None = None) -> Console:
    """The console for a command's tables: its terminal's width, or, on a pipe or in a file,
    wide enough that every column stays whole (rich would otherwise fit them to 80 columns and
    cut cells with "…")."""
    target = stream if stream is not None else sys.stdout
    if is_live_terminal(target):
        return Console(file=stream)
    return Console(file=stream, width=PIPED_WIDTH)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 or float(value).is_integer() else f"{value:,.1f}"


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=max(0, round(seconds))))


class _Count(ProgressColumn):
    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        total = f"/{_number(task.total)}" if task.total is not None else ""
        return Text(f"{_number(task.completed)}{total} {self.unit}", style="progress.download")


class _Rate(ProgressColumn):
    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed  # rich's: over the last 30 s
        if speed is None and task.completed and task.elapsed:  # too few samples yet: on average
            speed = task.completed / task.elapsed
        shown = _number(speed) if speed is not None else "?"
        return Text(f"{shown} {self.unit}/s", style="progress.data.speed")


class _TimeLeft(ProgressColumn):
    max_refresh = 0.5  # an estimate that changes every frame is unreadable

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text(f"done in {_clock(task.finished_time or task.elapsed or 0.0)}", style="progress.elapsed")
        left = task.time_remaining
        return Text(f"{_clock(left) if left is not None else '?'} left", style="progress.remaining")


class Progress:
    """`with Progress(total, "aiops gen", "ticks") as p: ... p.advance()`.

    `total` may be None (unknown: no time left) or set later with `update(total=...)`. The summary
    line is printed on a normal exit only: after an error, the error is the line."""

    def __init__(
        self,
        total: float | None,
        what: str,
        unit: str = "items",
        stream: TextIO | None = None,
        every_s: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.total = total
        self.what = what
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = PIPED_EVERY_S if every_s is None else every_s  # read here: a test may set it
        self.clock = clock
        self.done = 0.0
        self._started = 0.0
        self._pushed = 0.0
        self._said = 0.0
        self._bar: RichProgress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> Progress:
        self._started = self._said = self.clock()
        if is_live_terminal(self.stream):
            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                _Count(self.unit),
                _Rate(self.unit),
                _TimeLeft(),
                console=Console(file=self.stream, force_terminal=True),
                refresh_per_second=4,
                redirect_stdout=is_live_terminal(sys.stdout),  # the same screen: print above the bar
                redirect_stderr=False,
            )
            self._task = self._bar.add_task(self.what, total=self.total)
            self._bar.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        seconds = self.clock() - self._started
        if self._bar is not None and self._task is not None:
            if exc_type is None:  # finished: the bar full, however the estimate of the total went
                self._bar.update(self._task, completed=self.done, total=max(self.done, self.total or 0.0))
            self._bar.stop()
        elif exc_type is None:
            self.stream.write(self.summary(seconds) + "\n")
            self.stream.flush()

    def summary(self, seconds: float) -> str:
        """`aiops gen: 480 ticks in 12.3 s (39 ticks/s)`."""
        rate = self.done / seconds if seconds > 0 else float("inf")
        return f"{self.what}: {_number(self.done)} {self.unit} in {seconds:.1f} s ({_number(rate)} {self.unit}/s)"

    def line(self, seconds: float) -> str:
        """`aiops gen: 120/480 ticks (25%), 39 ticks/s, 0:00:09 left`: where a step is, in a log."""
        rate = self.done / seconds if seconds > 0 else 0.0
        if self.total:
            left = f", {_clock((self.total - self.done) / rate)} left" if rate > 0 and self.done < self.total else ""
            count = f"{_number(self.done)}/{_number(self.total)} {self.unit} ({100 * self.done / self.total:.0f}%)"
        else:
            left, count = "", f"{_number(self.done)} {self.unit} so far"
        return f"{self.what}: {count}, {_number(rate)} {self.unit}/s{left}"

    def advance(self, n: float = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._push()
        else:
            self._say()

    def update(self, completed: float | None = None, total: float | None = None) -> None:
        """Set the count done so far, or the total once it is known."""
        if completed is not None:
            self.done = completed
        if total is not None:
            self.total = total
            if self._bar is not None and self._task is not None:
                self._bar.update(self._task, total=total)
        if self._bar is not None:
            self._push()
        else:
            self._say()

    def track(self, items: Iterable[T]) -> Iterator[T]:
        """The items, one `advance` each."""
        for item in items:
            yield item
            self.advance()

    def _say(self) -> None:
        """Not on a terminal: the line, when `every_s` has passed since the last (or the start)."""
        now = self.clock()
        if now - self._said >= self.every_s:
            self._said = now
            self.stream.write(self.line(now - self._started) + "\n")
            self.stream.flush()

    def _push(self) -> None:
        now = self.clock()
        if now - self._pushed >= PUSH_EVERY_S and self._bar is not None and self._task is not None:
            self._pushed = now
            self._bar.update(self._task, completed=self.done)


def track(items: Iterable[T], what: str, unit: str = "items", total: float | None = None) -> Iterator[T]:
    """`for size in track(sizes, "aiops bench gen", "sizes"):` the items with their progress,
    from the first to the summary after the last (a loop left early prints no summary)."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    with Progress(total, what, unit) as progress:
        yield from progress.track(items)


__all__ = ["Progress", "is_live_terminal", "output_console", "track"]
