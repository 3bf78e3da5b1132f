"""Decode a batch of line protocol into frames, vectorised where the batch allows it.

Exporters write the same shape of line over and over: one measurement, the same tag keys, the
same field keys, a timestamp. The fast path groups lines by that shape (with Arrow's C++ string
kernels: strip the values, dictionary-encode what is left), then splits each group on its
separators and converts whole columns at once. A line that could need the full grammar (a
backslash, a quote or a control character anywhere) or that fails any check on the way goes to
the scalar reference parser, which either accepts it or says why not. So the fast path never
decides a line is bad; it only decides a line is simple.

A record is normally one line, but a string field may hold raw newlines, so before anything else
the lines with a quote are read by the scalar parser to find where their records end, and the
lines a record swallows are folded into it. Line numbers (`Reject.line_no`, `Decoded.line_no`)
are those of a record's first line.

Whatever the input, the work is linear in its size (docs/ingest.md): a record never runs past
the end of its message (`record_ends`) nor past MAX_RECORD_BYTES; a longer line is dead-lettered
unread; and a string left open that does not make a valid record with the lines after it is
dead-lettered alone, its line only, so one stray quote costs one line, not the rest of the batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from ingest.frames import Column, Frame, concat
from vocab.catalog import FieldType

from ._scalar import (
    FALSE_LITERALS,
    FLOAT_PATTERN,
    INT_PATTERN,
    MAX_RECORD_BYTES,
    TRUE_LITERALS,
    UINT_PATTERN,
    ParsedLine,
    Record,
    read_record,
)


@dataclass(frozen=True, slots=True)
class Reject:
    """A line that was not accepted, with why. `line_no` counts from 0 within the batch."""

    line_no: int
    line: bytes
    reason: str


@dataclass(slots=True)
class Decoded:
    frames: dict[str, Frame] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)
    lines: int = 0  # records seen (non-blank, non-comment lines; a multi-line record counts once)
    fast_lines: int = 0  # of which decoded by the vectorised path
    # For each frame, the batch line each row came from, so later stages can dead-letter the
    # original line rather than a re-encoding of it.
    line_no: dict[str, NDArray[np.int64]] = field(default_factory=dict)
    _batch: _Tokens | None = None

    def line(self, line_no: int) -> bytes:
        """The original bytes of a batch line (without its newline)."""
        if self._batch is None:
            raise IndexError(line_no)
        return self._batch.line(line_no)

    @property
    def value_count(self) -> int:
        return sum(f.value_count for f in self.frames.values())


@dataclass(slots=True)
class _Part:
    """Rows of one measurement decoded together, remembering which input lines they came from."""

    line_no: NDArray[np.int64]
    frame: Frame


DefaultTime = int | NDArray[np.int64] | None


def decode(
    data: bytes, default_time_ns: DefaultTime = None, record_ends: Sequence[int] | NDArray[np.int64] | None = None
) -> Decoded:
    """Decode newline-separated line protocol.

    Lines without a timestamp get `default_time_ns`: one time for the batch, or one per line
    (each Kafka message's time, say; a multi-line record takes its first line's); without a
    default they are rejected. Blank lines and `#` comments are skipped. Rows come out in input
    order within each measurement.

    `record_ends`: byte offsets in `data`, each just past a newline, where every record ends
    whatever it holds (the ends of the messages a batch was joined from): a string open there is
    unterminated, never continued by the next message. None: only the end of `data`.
    """
    out = Decoded()
    if not data:
        return out
    batch = _Tokens(data, record_ends)
    out._batch = batch
    if not isinstance(default_time_ns, int | None) and len(default_time_ns) < len(batch.line_end):
        raise ValueError(f"{len(default_time_ns)} default times for {len(batch.line_end)} lines")
    out.lines = int((~batch.skip).sum())
    parts: dict[str, list[_Part]] = defaultdict(list)
    slow = np.flatnonzero(~batch.skip & batch.complex_)
    pending = np.flatnonzero(~batch.skip & ~batch.complex_)
    rounds = 0
    unshaped: list[NDArray[np.int64]] = []
    for bucket in batch.buckets(pending):
        waiting = bucket
        while len(waiting) and rounds < _MAX_SHAPES_PER_BATCH:
            rounds += 1
            group, waiting, left = batch.take_shape(waiting)
            slow = np.concatenate([slow, left])
            if group is None:
                continue
            part, left = batch.decode_group(*group, default_time_ns)
            slow = np.concatenate([slow, left])
            if part is not None:
                parts[part.frame.measurement].append(part)
                out.fast_lines += len(part.line_no)
        unshaped.append(waiting)
    slow = np.sort(np.concatenate([slow, *unshaped])).astype(np.int64)
    scalar_parts, blank = _decode_scalar(batch, slow.tolist(), default_time_ns, out.rejects)
    out.lines -= blank
    for part in scalar_parts:
        parts[part.frame.measurement].append(part)
    # measurements in the order they first appear in the input, whatever order shapes were found in
    first_line = {
        name: min((int(p.line_no.min()) for p in group if len(p.line_no)), default=0) for name, group in parts.items()
    }
    for name in sorted(parts, key=first_line.__getitem__):
        frame, rows = _merge(parts[name], batch, out.rejects)
        if len(frame):
            out.frames[name] = frame
            out.line_no[name] = rows
    out.rejects.sort(key=lambda r: r.line_no)
    return out


# ---------------------------------------------------------------- fast path

# A batch rarely holds more than a few dozen shapes (measurements x which fields are present);
# past this many, the rest is not the regular exporter output the fast path is for.
_MAX_SHAPES_PER_BATCH = 512

_COMMA, _EQUALS, _SPACE, _NEWLINE = (ord(c) for c in ",= \n")


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where keys and values sit among a line's tokens, for one shape of line."""

    measurement: str
    tag_keys: tuple[str, ...]
    tag_cols: tuple[int, ...]
    field_keys: tuple[str, ...]
    field_cols: tuple[int, ...]
    time_col: int | None
    key_cols: tuple[int, ...]  # every token that must equal the lead line's: measurement and keys


class _Tokens:
    """A batch cut into tokens at every separator byte, as one zero-copy Arrow string array.

    Token k is data[sep[k-1]+1 : sep[k]]; the Arrow array holds it with its leading separator
    (the buffer gets a leading newline so every token has one), which column conversion strips.
    """

    def __init__(self, data: bytes, record_ends: Sequence[int] | NDArray[np.int64] | None = None) -> None:
        if not data.endswith(b"\n"):
            data += b"\n"
        self.data = data
        buf = np.frombuffer(data, dtype=np.uint8)
        sep, self.sep_byte, controls = _separators(buf)
        newlines = sep[self.sep_byte == _NEWLINE]
        self.line_end = newlines.copy()  # a record's end, once multi-line records are joined
        self.line_start = np.concatenate(([0], newlines[:-1] + 1))
        self.complex_ = np.zeros(len(newlines), dtype=np.bool_)
        special = _special_bytes(buf, data, controls)
        if special is not None:
            self.complex_[np.searchsorted(newlines, special)] = True
        if not data.isascii():
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:  # let the scalar parser find and name the bad bytes
                self.complex_[np.searchsorted(newlines, np.flatnonzero(buf >= 0x80))] = True
        # A line past the bound is not tokenised by anyone: the scalar parser refuses it unread.
        self.complex_ |= self.line_end - self.line_start > MAX_RECORD_BYTES
        # For each line, the last line its record may reach: its message's last line.
        if record_ends is None:
            self.last_line = np.full(len(newlines), len(newlines) - 1, dtype=np.int64)
        else:
            ends = np.asarray(record_ends, dtype=np.int64)
            message = np.searchsorted(ends, newlines, side="right")  # the message holding each line
            last_of_message = np.searchsorted(newlines, ends - 1)  # the line ending at each message's end
            self.last_line = np.append(last_of_message, len(newlines) - 1)[message]
        first_byte = buf[np.minimum(self.line_start, len(buf) - 1)]
        # A comment with a control character is an error, so only a simple one is skipped here.
        self.skip = (self.line_start == self.line_end) | ((first_byte == ord("#")) & ~self.complex_)
        self.first_token = np.searchsorted(sep, self.line_start)
        self.token_count = np.searchsorted(sep, self.line_end, side="right") - self.first_token
        offsets = np.concatenate(([0], sep + 1)).astype(np.int64)
        self.tokens = pa.LargeStringArray.from_buffers(len(sep), pa.py_buffer(offsets), pa.py_buffer(b"\n" + data))
        # Records the scalar parser has already read (to find where they end), by first line.
        self.records: dict[int, Record] = {}
        if b'"' in data:
            self._join_records(np.flatnonzero(buf == ord('"')), newlines)

    def line(self, i: int) -> bytes:
        return self.data[self.line_start[i] : self.line_end[i]]

    def _join_records(self, quotes: NDArray[np.intp], newlines: NDArray[np.intp]) -> None:
        """Find the records that run over several lines and make each one line.

        Only a string opened and not closed on a line carries its record onto the next, so only
        lines with a quote need reading, in order, skipping those already swallowed. A record
        that fails after taking in lines is refused as its first line alone, and the lines after
        it are read as they are: a stray quote must not take its neighbours with it. (Reading is
        linear: a scan started on one line stops at the first quote that closes a string, and
        every line that opens a string has one, so no line is scanned for two others.)
        """
        resume = 0
        for i in np.unique(np.searchsorted(newlines, quotes)).tolist():
            if i < resume:
                continue
            record = read_record(self.line(i), partial(self._physical_after, i, newlines))
            if record.lines > 1 and record.error is not None:
                record = Record(None, _alone(read_record(self.line(i)), record), 1)
            self.records[i] = record
            resume = i + record.lines
            if record.lines > 1:
                self.line_end[i] = newlines[resume - 1]
                self.skip[i + 1 : resume] = True

    def _physical_after(self, i: int, newlines: NDArray[np.intp], k: int) -> bytes | None:
        """The k-th line after line i, or None past the end of line i's message."""
        j = i + k
        if j > self.last_line[i]:
            return None
        return self.data[self.line_start[j] : newlines[j]]

    def buckets(self, pending: NDArray[np.int64]) -> list[NDArray[np.int64]]:
        """Lines that may share a shape, together: same token count, measurement and third-last
        token (a line's last field key when it has one field). A shape is then looked for among
        its bucket's lines only, so Telegraf's one-sample-per-line output (dozens of shapes) costs
        one pass, not one pass per shape. Only a partition: take_shape still checks every line."""
        if len(pending) < 2:
            return [pending]
        width = self.token_count[pending].astype(np.int64)
        first = self.first_token[pending]
        head = pc.dictionary_encode(self.tokens.take(pa.array(first))).indices.to_numpy(zero_copy_only=False)
        tail = self.tokens.take(pa.array(first + np.maximum(width - 3, 0)))
        last_key = pc.dictionary_encode(tail).indices.to_numpy(zero_copy_only=False)
        key = (width * (int(head.max()) + 1) + head) * (int(last_key.max()) + 1) + last_key
        order = np.argsort(key, kind="stable")
        bounds = np.flatnonzero(np.diff(key[order])) + 1
        return [pending[np.sort(part)] for part in np.split(order, bounds)]

    def take_shape(
        self, pending: NDArray[np.int64]
    ) -> tuple[tuple[NDArray[np.int64], NDArray[np.int64], _Layout] | None, NDArray[np.int64], NDArray[np.int64]]:
        """Pick the lines shaped like the first pending one.

        Returns (group or None, still pending, lines for the scalar parser).
        """
        lead = int(pending[0])
        width = int(self.token_count[lead])
        pattern = self.sep_byte[self.first_token[lead] : self.first_token[lead] + width]
        layout = _layout(pattern.tobytes(), [self._text(lead, j) for j in range(width)])
        if layout is None:
            return None, pending[1:], pending[:1]
        same_width = pending[self.token_count[pending] == width]
        index = self.first_token[same_width][:, None] + np.arange(width)
        match = (self.sep_byte[index] == pattern).all(axis=1)
        group, index = same_width[match], index[match]
        # Keys from the last (field keys, the most selective: Telegraf's one-sample-per-line
        # output differs only there) to the first, comparing only the lines still in the running.
        lead_token = int(self.first_token[lead])
        for j in reversed(layout.key_cols):
            column = self.tokens.take(pa.array(index[:, j]))
            keep = pc.equal(column, self.tokens[lead_token + j]).to_numpy(zero_copy_only=False)
            if not keep.all():
                group, index = group[keep], index[keep]
        rest = np.setdiff1d(pending, group, assume_unique=True)
        return (group, index, layout), rest, np.zeros(0, dtype=np.int64)

    def _text(self, line: int, j: int) -> str | None:
        k = int(self.first_token[line]) + j
        raw = self.tokens[k].as_py()
        return raw[1:] if raw else None

    def decode_group(
        self,
        lines: NDArray[np.int64],
        index: NDArray[np.int64],
        layout: _Layout,
        default_time_ns: DefaultTime,
    ) -> tuple[_Part | None, NDArray[np.int64]]:
        """Convert a group's columns at once; lines failing a check go to the scalar parser."""
        n = len(lines)
        if layout.time_col is None and default_time_ns is None:
            return None, lines

        def column(j: int) -> pa.Array:
            return pc.utf8_slice_codeunits(self.tokens.take(pa.array(index[:, j])), 1)

        valid = np.ones(n, dtype=np.bool_)
        tags: dict[str, NDArray[np.object_]] = {}
        for key, j in zip(layout.tag_keys, layout.tag_cols, strict=True):
            values = column(j)
            valid &= pc.greater(pc.utf8_length(values), 0).to_numpy(zero_copy_only=False)
            tags[key] = values.to_numpy(zero_copy_only=False)
        fields: dict[str, Column] = {}
        for key, j in zip(layout.field_keys, layout.field_cols, strict=True):
            converted = _convert_field(column(j))
            if converted is None:
                return None, lines  # mixed types in one column: the scalar parser sorts it out
            fields[key], ok = converted
            valid &= ok
        if layout.time_col is not None:
            stamps = _to_int(column(layout.time_col), INT_PATTERN, pa.int64())
            if stamps is None:
                return None, lines
            time_ns, ok = stamps
            valid &= ok
        else:
            assert default_time_ns is not None
            time_ns = _default_times(default_time_ns, lines)
        frame = Frame(layout.measurement, time_ns.astype(np.int64), tags, fields)
        if valid.all():
            return _Part(lines, frame), np.zeros(0, dtype=np.int64)
        keep = np.flatnonzero(valid)
        return _Part(lines[keep], frame.take(keep)), lines[~valid]


def _alone(alone: Record, carried: Record) -> str:
    """Why a line whose string the lines after it did not complete is refused (by itself)."""
    opened = (alone.error or "").partition(": no closing quote")[0]  # "unterminated string in field 'k' at column c"
    if carried.error is not None and carried.error.startswith(opened + ":"):
        return f"{carried.error}; the lines after it are read on their own"
    return (
        f"{opened}: no closing quote on its line, and the {carried.lines - 1} lines after it do not complete"
        f" the record ({carried.error}); they are read on their own"
    )


def _separators(buf: NDArray[np.uint8]) -> tuple[NDArray[np.intp], NDArray[np.uint8], NDArray[np.intp] | None]:
    """Separator positions and bytes (comma, equals, space, newline), and where any control
    characters are (None if there are none).

    A few SIMD compares beat a 256-entry lookup table by a wide margin on large batches. Space
    and newline are found with one compare for every byte up to the space, which also catches
    the control characters (a CR, a tab, a NUL: the reference rejects them in names) at no cost
    of its own; they are then taken out of the separators, which are far fewer than the bytes.
    """
    found = np.flatnonzero((buf <= _SPACE) | (buf == _COMMA) | (buf == _EQUALS))
    found_byte = buf[found]
    control = (found_byte < _SPACE) & (found_byte != _NEWLINE)
    if not control.any():
        return found, found_byte, None
    return found[~control], found_byte[~control], found[control]


def _special_bytes(buf: NDArray[np.uint8], data: bytes, controls: NDArray[np.intp] | None) -> NDArray[np.intp] | None:
    """Positions of the bytes that need the full grammar: backslashes, quotes, DEL and the
    control characters (None if there are none: regular exporter output costs three memchr)."""
    if not (b"\\" in data or b'"' in data or b"\x7f" in data):
        return controls
    found = np.flatnonzero((buf == ord("\\")) | (buf == ord('"')) | (buf == 0x7F))
    return found if controls is None else np.concatenate([found, controls])


def _default_times(default: int | NDArray[np.int64], lines: NDArray[np.int64]) -> NDArray[np.int64]:
    if isinstance(default, int):
        return np.full(len(lines), default, dtype=np.int64)
    return np.asarray(default, dtype=np.int64)[lines]


def _layout(pattern: bytes, texts: list[str | None]) -> _Layout | None:
    """Read a line's structure off its separator bytes: which tokens are keys, values, time."""
    width = len(pattern)
    if width < 3 or pattern[-1] != _NEWLINE or any(t is None or t == "" for t in texts):
        return None
    measurement = texts[0]
    assert measurement is not None
    p = 0
    tag_keys: list[str] = []
    tag_cols: list[int] = []
    while pattern[p] == _COMMA:  # ,key=value
        if p + 2 >= width or pattern[p + 1] != _EQUALS or pattern[p + 2] not in (_COMMA, _SPACE):
            return None
        tag_keys.append(texts[p + 1] or "")
        tag_cols.append(p + 2)
        p += 2
    if pattern[p] != _SPACE:
        return None
    field_keys: list[str] = []
    field_cols: list[int] = []
    while True:  # key=value then ',' for more, ' ' for a timestamp, end of line for none
        if p + 2 >= width or pattern[p + 1] != _EQUALS:
            return None
        field_keys.append(texts[p + 1] or "")
        field_cols.append(p + 2)
        p += 2
        if pattern[p] != _COMMA:
            break
    time_col: int | None = None
    if pattern[p] == _SPACE:
        if p + 1 != width - 1:
            return None
        time_col = p + 1
    elif p != width - 1:
        return None
    if len(set(tag_keys)) != len(tag_keys) or len(set(field_keys)) != len(field_keys):
        return None
    key_cols = (0, *(c - 1 for c in tag_cols), *(c - 1 for c in field_cols))
    return _Layout(
        measurement, tuple(tag_keys), tuple(tag_cols), tuple(field_keys), tuple(field_cols), time_col, key_cols
    )


_BOOL_LITERALS = pa.array(TRUE_LITERALS + FALSE_LITERALS)
_TRUE = pa.array(TRUE_LITERALS)


def _to_int(
    digits: pa.Array, pattern: str, arrow_type: pa.DataType
) -> tuple[NDArray[np.generic], NDArray[np.bool_]] | None:
    """Integers from text; the happy path is one cast, a failed cast finds the bad rows."""
    if not pc.any(pc.starts_with(digits, "+")).as_py():
        try:
            return pc.cast(digits, arrow_type).to_numpy(), np.ones(len(digits), dtype=np.bool_)
        except pa.ArrowInvalid:
            pass
    ok = pc.match_substring_regex(digits, "^" + pattern + "$").to_numpy(zero_copy_only=False)
    try:
        values = pc.cast(pc.if_else(pa.array(ok), digits, "0"), arrow_type).to_numpy()
    except pa.ArrowInvalid:  # out of range: let the scalar parser name the row
        return None
    return values, ok


def _convert_field(values: pa.Array) -> tuple[Column, NDArray[np.bool_]] | None:
    """Type a column from its literals; returns the column and which rows were valid."""
    n = len(values)
    last = pc.utf8_slice_codeunits(values, -1)
    uniq = pc.unique(last).to_pylist()
    if uniq in (["i"], ["u"]):
        signed = uniq == ["i"]
        converted = _to_int(
            pc.utf8_slice_codeunits(values, 0, -1),
            INT_PATTERN if signed else UINT_PATTERN,
            pa.int64() if signed else pa.uint64(),
        )
        if converted is None:
            return None
        ints, ok = converted
        return Column(FieldType.INT if signed else FieldType.UINT, ints, ok.copy()), ok
    if any(u in ("e", "E", "t", "T") for u in uniq) or not all(u.isdigit() or u == "." for u in uniq):
        is_bool = pc.is_in(values, value_set=_BOOL_LITERALS).to_numpy(zero_copy_only=False)
        if is_bool.all():
            truth = pc.is_in(values, value_set=_TRUE).to_numpy(zero_copy_only=False)
            return Column(FieldType.BOOL, truth, np.ones(n, dtype=np.bool_)), np.ones(n, dtype=np.bool_)
        if is_bool.any() or "i" in uniq or "u" in uniq:
            return None
    floats: NDArray[np.float64] | None = None
    if not pc.any(pc.starts_with(values, "+")).as_py():
        try:
            floats = pc.cast(values, pa.float64()).to_numpy()
            ok = np.ones(n, dtype=np.bool_)
        except pa.ArrowInvalid:
            floats = None
    if floats is None:
        ok = pc.match_substring_regex(values, "^" + FLOAT_PATTERN + "$").to_numpy(zero_copy_only=False)
        floats = pc.cast(pc.if_else(pa.array(ok), values, "0"), pa.float64()).to_numpy()
    ok = ok & np.isfinite(floats)
    return Column(FieldType.FLOAT, floats, ok.copy()), ok


# ---------------------------------------------------------------- scalar path


def _decode_scalar(
    batch: _Tokens, which: list[int], default_time_ns: DefaultTime, rejects: list[Reject]
) -> tuple[list[_Part], int]:
    """Parse records one by one and assemble frames of what parsed; also returns how many of
    the lines turned out blank or comments (leading spaces, a CR, a quote in a comment)."""
    by_measurement: dict[str, list[tuple[int, ParsedLine]]] = defaultdict(list)
    blank = 0
    for i in which:
        record = batch.records.get(i)
        if record is None:  # no quote, so the record is this one line
            record = read_record(batch.line(i))
        if record.error is not None:
            # an overlong line is kept in its dead letter up to the bound (its message's offset
            # finds the rest): a dead letter must fit in a message of the dead-letter topic
            rejects.append(Reject(i, batch.line(i)[:MAX_RECORD_BYTES], record.error))
            continue
        parsed = record.parsed
        if parsed is None:
            blank += 1
            continue
        if parsed.time_ns is None:
            if default_time_ns is None:
                rejects.append(Reject(i, batch.line(i), "missing timestamp"))
                continue
            default = default_time_ns if isinstance(default_time_ns, int) else int(default_time_ns[i])
            parsed = ParsedLine(parsed.measurement, parsed.tags, parsed.fields, default)
        by_measurement[parsed.measurement].append((i, parsed))
    return [_frame_of_parsed(name, rows, batch, rejects) for name, rows in by_measurement.items()], blank


def _frame_of_parsed(
    name: str,
    rows: list[tuple[int, ParsedLine]],
    batch: _Tokens,
    rejects: list[Reject],
) -> _Part:
    types: dict[str, FieldType] = {}
    kept: list[tuple[int, ParsedLine]] = []
    for i, parsed in rows:
        conflict = next(
            (k for k, (t, _) in parsed.fields.items() if types.get(k, t) != t),
            None,
        )
        if conflict is not None:
            rejects.append(
                Reject(i, batch.line(i), _conflict_reason(conflict, types[conflict], parsed.fields[conflict][0]))
            )
            continue
        for k, (t, _) in parsed.fields.items():
            types.setdefault(k, t)
        kept.append((i, parsed))
    n = len(kept)
    tag_keys = list(dict.fromkeys(k for _, p in kept for k in p.tags))
    tags = {k: np.array([p.tags.get(k, "") for _, p in kept], dtype=object) for k in tag_keys}
    fields: dict[str, Column] = {}
    for key, ftype in types.items():
        col = Column.empty(ftype, n)
        for r, (_, p) in enumerate(kept):
            if key in p.fields:
                col.values[r] = p.fields[key][1]
                col.present[r] = True
        fields[key] = col
    time_ns = np.array([p.time_ns for _, p in kept], dtype=np.int64)
    return _Part(np.array([i for i, _ in kept], dtype=np.int64), Frame(name, time_ns, tags, fields))


def _conflict_reason(key: str, first: FieldType, got: FieldType) -> str:
    return f"field type conflict: {key!r} is {first} earlier in this batch, got {got}"


# ---------------------------------------------------------------- merge


def _merge(parts: list[_Part], batch: _Tokens, rejects: list[Reject]) -> tuple[Frame, NDArray[np.int64]]:
    """Concatenate parts of one measurement in input order, rejecting field type conflicts.

    The first line (in input order) that carries a field fixes its type for the batch, as a
    database shard would; rows of later parts that disagree are rejected whole.
    """
    first_type: dict[str, tuple[int, FieldType]] = {}
    for part in parts:
        for key, col in part.frame.fields.items():
            rows = part.line_no[col.present]
            if len(rows):
                start = int(rows[0])
                if key not in first_type or start < first_type[key][0]:
                    first_type[key] = (start, col.type)
    kept: list[_Part] = []
    for original in parts:
        part = original
        bad = np.zeros(len(part.line_no), dtype=np.bool_)
        reasons: dict[int, str] = {}
        for key, col in part.frame.fields.items():
            want = first_type.get(key)
            if want is None or want[1] == col.type:
                continue
            clash = col.present & ~bad
            for r in np.flatnonzero(clash):
                reasons[int(r)] = _conflict_reason(key, want[1], col.type)
            bad |= clash
        for row, reason in reasons.items():
            i = int(part.line_no[row])
            rejects.append(Reject(i, batch.line(i), reason))
        if bad.any():
            keep = np.flatnonzero(~bad)
            part = _Part(part.line_no[keep], part.frame.take(keep))
        # drop columns that ended up empty of the losing type
        part.frame.fields = {k: c for k, c in part.frame.fields.items() if first_type.get(k, (0, c.type))[1] == c.type}
        if len(part.line_no):
            kept.append(part)
    if not kept:
        empty = np.zeros(0, dtype=np.int64)
        return Frame(parts[0].frame.measurement, empty), empty
    rows = np.concatenate([p.line_no for p in kept])
    merged = concat([p.frame for p in kept])
    if len(kept) == 1:
        return merged, rows
    order = np.argsort(rows, kind="stable")
    return merged.take(order), rows[order]
