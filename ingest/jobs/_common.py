"""What the job-signal doors share: strict JSON, bounded lines, field checks that name the field
and the rule, and capped dead letters.

Strict JSON, because these documents are read by a service that acts on them:
- a key twice in one object is refused: which of the two values the writer meant is unknowable
  (Python's json keeps the last, other parsers the first);
- NaN, Infinity and -Infinity are refused: they are not JSON (RFC 8259 6), and none of these
  writers emits them (NCCL writes a NaN double as the string "nan", nlohmann::json as null);
- nesting is checked before parsing (vocab.bounds.json_depth), so a line of ten thousand "["
  costs a scan, not a RecursionError;
- the bytes must be UTF-8 (RFC 8259 8.1).
"""

from __future__ import annotations

import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Generic, TypeVar

from ingest.deadletter import DeadLetter
from vocab.bounds import MAX_GPUS_PER_NODE, MAX_HOSTS, MAX_JSON_DEPTH, json_depth
from vocab.ids import job_refusal, node_refusal, shown

T = TypeVar("T")

# A rank of a job is one GPU: no communicator has more ranks than the largest cluster the bounds
# allow has GPUs (vocab.bounds: MAX_HOSTS nodes of MAX_GPUS_PER_NODE), 6.4 million.
MAX_RANKS = MAX_HOSTS * MAX_GPUS_PER_NODE
# Event times are Unix time; a clock before 2000 or after 2100 is no clock (a zeroed RTC, a value
# in the wrong unit): refused, and the lateness bound downstream judges the rest.
EARLIEST_NS = 946_684_800 * 10**9
LATEST_NS = 4_102_444_800 * 10**9
INT64_MAX = 2**63 - 1
# What a dead letter carries of a refused document or line: enough for a person to see what it
# was, never the whole of a 100 MB line.
EXCERPT_BYTES = 4096
# Dead letters are for a person to read: at most this many a read, then one summary by reason
# (as the remote-write door does).
DEADLETTERS_PER_READ = 100


class RefusedError(ValueError):
    """Input a door will not read; the message is the dead letter's reason."""


@dataclass(slots=True)
class Read(Generic[T]):
    """What one read became: the records, the dead letters, and counts of what was seen."""

    records: list[T] = field(default_factory=list)
    deadletters: list[DeadLetter] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


class Letters:
    """A read's dead letters: one per refused line or document, at most `cap`; the rest counted
    by reason and said in one summary dead letter on `close`."""

    def __init__(self, stage: str, out: Read[Any], cap: int = DEADLETTERS_PER_READ) -> None:
        self.stage, self.out, self.cap = stage, out, cap
        self.dropped: Counter[str] = Counter()

    def add(self, reason: str, raw: bytes) -> None:
        self.out.counts["refused"] += 1
        letter = DeadLetter(self.stage, reason, raw[:EXCERPT_BYTES])
        if len(self.out.deadletters) < self.cap:
            self.out.deadletters.append(letter)
        else:
            self.dropped[letter.category] += 1

    def close(self) -> None:
        if not self.dropped:
            return
        n = sum(self.dropped.values())
        why = "; ".join(f"{k}: {v:,}" for k, v in self.dropped.most_common(10))
        self.out.deadletters.append(
            DeadLetter(
                self.stage,
                f"{n:,} more refused, not dead-lettered one by one (at most {self.cap}); by reason: {why}",
                b"",
            )
        )


# ---------------------------------------------------------------- strict JSON


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RefusedError(f"duplicate key {shown(key)} in one object (which value was meant is unknowable)")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise RefusedError(f"{name} is not JSON (RFC 8259 6)")


def strict_json(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of `data`, or RefusedError saying why not (see the module's docstring)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RefusedError(f"not UTF-8 (byte {exc.start})") from None
    # no deeper than its brackets are many: the scan is only needed past that (a C count is cheap)
    brackets = data.count(b"[") + data.count(b"{")
    depth = json_depth(data) if brackets > max_depth else 0
    if depth > max_depth:
        raise RefusedError(f"JSON nested {depth:,} deep, over the {max_depth} allowed [bound json_depth]")
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RefusedError:
        raise
    except (ValueError, RecursionError) as exc:
        raise RefusedError(f"not JSON ({str(exc)[:120]})") from None


# ---------------------------------------------------------------- fields


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RefusedError(f"{where}: expected an object, got {_kind(value)}")
    return value


def integer(value: Any, where: str, low: int, high: int) -> int:
    """An integer in low..high (a JSON bool is no integer)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RefusedError(f"{where}: expected an integer, got {_kind(value)}")
    if not low <= value <= high:
        raise RefusedError(f"{where}: {value:,} is outside {low:,}..{high:,}")
    return value


def number(value: Any, where: str, low: float, high: float) -> float:
    """A finite number in low..high."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RefusedError(f"{where}: expected a number, got {_kind(value)}")
    result = float(value)
    if not math.isfinite(result):
        raise RefusedError(f"{where}: {result} is not a finite number")
    if not low <= result <= high:
        raise RefusedError(f"{where}: {result:g} is outside {low:g}..{high:g}")
    return result


def text(value: Any, where: str, pattern: re.Pattern[str], what: str) -> str:
    """A string matching `pattern` (which bounds its length); `what` says what the pattern allows."""
    if not isinstance(value, str):
        raise RefusedError(f"{where}: expected a string, got {_kind(value)}")
    if not pattern.fullmatch(value):
        raise RefusedError(f"{where}: {shown(value)} is not {what}")
    return value


def time_ns(value: int, where: str) -> int:
    if not EARLIEST_NS <= value < LATEST_NS:
        raise RefusedError(f"{where}: {value:,} ns is no time between 2000 and 2100 (a clock unset, or another unit)")
    return value


def node(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise RefusedError(f"{where}: expected a host name, got {_kind(value)}")
    if problem := node_refusal(value):
        raise RefusedError(f"{where}: node {shown(value)}: {problem}")
    return value


def job(value: str | None, where: str) -> str | None:
    if value is None:
        return None
    if problem := job_refusal(value):
        raise RefusedError(f"{where}: job {shown(value)}: {problem}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__
    )


# ---------------------------------------------------------------- lines


@dataclass(frozen=True, slots=True)
class Line:
    number: int  # from 1, as an editor counts
    data: bytes  # without its newline; the first EXCERPT_BYTES of an overlong line
    overlong: int = 0  # the bytes of a line past the bound (0: within it)
    end: int = 0  # the offset just past this line: where a reader resumes


def lines(source: bytes | IO[bytes], max_bytes: int, start: int = 0) -> Iterator[Line]:
    """The lines of `source`, each read at most `max_bytes` at a time: a longer line is given as an
    excerpt and its length, never held whole. A last line without its newline is still being
    written (a JSON-lines or line-protocol writer appends whole lines): it is not given, and the
    reader resumes at its start (`Line.end` of the line before)."""
    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    offset, number_ = start, 0
    while True:
        chunk = stream.readline(max_bytes + 1)
        if not chunk:
            return
        number_ += 1
        if len(chunk) <= max_bytes or (chunk.endswith(b"\n") and len(chunk) == max_bytes + 1):
            if not chunk.endswith(b"\n"):
                return  # a line still being written
            offset += len(chunk)
            yield Line(number_, chunk.rstrip(b"\r\n"), 0, offset)
            continue
        head, size = chunk[:EXCERPT_BYTES], len(chunk)
        while not chunk.endswith(b"\n"):
            chunk = stream.readline(1 << 16)
            if not chunk:
                return  # still being written: read again, whole, once it ends
            size += len(chunk)
        offset += size
        yield Line(number_, head, size - 1, offset)
