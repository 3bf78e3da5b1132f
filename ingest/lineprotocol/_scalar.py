"""The reference line-protocol parser: one record at a time, every rule, a reason for every reject.

The vectorised decoder hands this parser every line it cannot prove simple (escapes, quotes,
control characters, odd shapes, anything that failed a check), so this is where correctness lives
and where the error messages come from. It never raises on input; it returns a reason instead.

The grammar is InfluxData's own (the Go package github.com/influxdata/line-protocol, whose
conformance corpus tests/unit/test_lineprotocol_corpus.py runs): leading spaces and blank lines
are skipped, a comment is `#` and printable characters, names stop at control characters, a
backslash escapes only the characters that would end the token it stands in (so `\\` outside a
string is two backslashes), a string field may hold raw newlines (so a record can span lines), and
spaces may repeat between sections and trail the line.

Two bounds the reference does not have keep the cost of any input linear in its size (docs/ingest.md):
a record is at most MAX_RECORD_BYTES, and a string carried over several lines is scanned once, line
by line, and joined once (re-scanning what was gathered for each new line made one unclosed quote
quadratic in everything after it). Where a record may stop (its message's end) is the caller's
`following`: it answers None there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from vocab.catalog import FieldType

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The most bytes one record (a line, or the lines a string carries it over) may take. The longest
# line an exporter we read writes is a DCGM `gpu` line with every field, about 2 KB; 64 KiB is
# thirty times that, and InfluxDB refuses a series key (measurement and tags) past 64 KiB anyway.
# Past it a record is dead-lettered unread: what a parser does with a line must not grow with
# whatever a sender chose to put on it.
MAX_RECORD_BYTES = 64 * 1024
UINT64_MAX = 2**64 - 1

FLOAT_PATTERN = r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
INT_PATTERN = r"-?[0-9]+"
UINT_PATTERN = r"[0-9]+"
TIMESTAMP_PATTERN = r"-?[0-9]+"
TRUE_LITERALS = ("t", "T", "true", "True", "TRUE")
FALSE_LITERALS = ("f", "F", "false", "False", "FALSE")

_FLOAT = re.compile(FLOAT_PATTERN)
_INT = re.compile(INT_PATTERN)
_UINT = re.compile(UINT_PATTERN)
_TIMESTAMP = re.compile(TIMESTAMP_PATTERN)

# A token runs until a character that ends it; a backslash followed by one of those characters
# escapes it, a backslash followed by anything else is itself a literal (and does not swallow the
# next character, so a stop character after it still stops the token). Control characters end
# every name, which is why a name containing one is rejected where the next separator is expected.
_MEASUREMENT = re.compile(r"(?:[^\\, \x00-\x1f\x7f]|\\[, ]?)*")
_NAME = re.compile(r"(?:[^\\,= \x00-\x1f\x7f]|\\[,= ]?)*")  # tag keys, tag values, field keys
_MEASUREMENT_ESCAPE = re.compile(r"\\([, ])")
_NAME_ESCAPE = re.compile(r"\\([,= ])")
# Inside a string only a quote ends it; newlines and control characters are content.
_STRING = re.compile(r'(?:[^"\\]|\\[\\"nrt]?)*')
_STRING_ESCAPE = re.compile(r'\\([\\"nrt])')
_STRING_UNESCAPED = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
_VALUE = re.compile(r"[^, \r\n]*")
_TIME = re.compile(r"[-0-9]*")
_NUMBER_START = frozenset("-0123456789.")
_BOOL_START = frozenset("tTfF")
_CONTROL = frozenset([*map(chr, range(0x20)), "\x7f"])
_COMMENT = re.compile(rb"#[^\x00-\x1f\x7f]*\r?")
# Lines are decoded with surrogateescape so a bad byte need not stop the scan for where the record
# ends; a bad byte shows up as a lone surrogate, which valid UTF-8 never decodes to.
_BAD_BYTE = re.compile("[\udc80-\udcff]")

FieldValue = float | int | bool | str


@dataclass(frozen=True, slots=True)
class ParsedLine:
    measurement: str
    tags: dict[str, str]
    fields: dict[str, tuple[FieldType, FieldValue]]
    time_ns: int | None


@dataclass(frozen=True, slots=True)
class Record:
    """What one record, starting at a line, turned out to be: a point, a reject, or nothing
    (a blank line or a comment), and how many physical lines it spans."""

    parsed: ParsedLine | None
    error: str | None
    lines: int

    @property
    def blank(self) -> bool:
        return self.parsed is None and self.error is None


class LineError(ValueError):
    """A line that is not valid line protocol; the message is the dead-letter reason."""


# Given k >= 1, the k-th physical line after the record's first (without its newline), or None
# past the end of the input. Only called while a string is still open at the end of a line.
Following = Callable[[int], bytes | None]


def _nothing_follows(_: int) -> bytes | None:
    return None


def read_record(line: bytes, following: Following = _nothing_follows, max_bytes: int = MAX_RECORD_BYTES) -> Record:
    """Read the record that starts at `line`, pulling in further lines only for a string left open
    (and never more than `max_bytes` in all)."""
    if len(line) > max_bytes:
        return Record(None, overlong_reason(len(line), max_bytes), 1)
    body = line.lstrip(b" ")
    if body in (b"", b"\r"):
        return Record(None, None, 1)
    if body.startswith(b"#"):
        if _COMMENT.fullmatch(body):
            return Record(None, None, 1)
        return Record(None, "control character in comment line", 1)
    parser = _Parser(line, following, max_bytes)
    try:
        return Record(parser.record(), None, parser.lines)
    except LineError as exc:
        return Record(None, str(exc), parser.lines)


def parse_line(raw: bytes) -> ParsedLine:
    """Parse a single record (which may contain newlines inside a string field)."""
    lines = raw.split(b"\n")
    if len(lines) > 1 and lines[-1] == b"":
        lines.pop()
    record = read_record(lines[0], lambda k: lines[k] if k < len(lines) else None)
    if record.error is not None:
        raise LineError(record.error)
    if record.parsed is None:
        raise LineError("blank line or comment")
    if record.lines < len(lines):
        raise LineError("more than one record")
    return record.parsed


def overlong_reason(size: int, bound: int) -> str:
    return f"line of {size:,} bytes is over the bound of {bound:,} bytes a record may take"


class _Parser:
    def __init__(self, line: bytes, following: Following, max_bytes: int = MAX_RECORD_BYTES) -> None:
        self.s = line.decode("utf-8", "surrogateescape")
        self.bad_bytes = _has_bad_bytes(line, self.s)
        self.following = following
        self.max_bytes = max_bytes
        self.size = len(line)  # bytes of the record's lines read so far, newlines included
        self.lines = 1
        self.i = len(self.s) - len(self.s.lstrip(" "))

    def fail(self, what: str) -> LineError:
        return LineError(f"{what} at column {self.i + 1}")

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def at_end_of_line(self) -> bool:
        """End of the record: the end of its last line, or a carriage return just before it."""
        return self.i == len(self.s) or self.s[self.i :] == "\r"

    def skip_spaces(self) -> None:
        while self.peek() == " ":
            self.i += 1

    def check_utf8(self, start: int, end: int) -> None:
        """The reference rejects a name or string with bytes that are not UTF-8."""
        if not self.bad_bytes:
            return
        bad = _BAD_BYTE.search(self.s, start, end)
        if bad is not None:
            offset = len(self.s[: bad.start()].encode("utf-8", "surrogateescape"))
            raise LineError(f"not valid UTF-8 at byte {offset}")

    def name(self, pattern: re.Pattern[str], escape: re.Pattern[str], what: str) -> str:
        start = self.i
        self.i = _match_end(pattern, self.s, start)
        stop = self.peek()
        # A control character ends a name where no separator may follow, so the reference fails
        # there; say why (a CR that ends the line is the line ending, and gets its own message).
        if stop in _CONTROL and not (stop == "\r" and self.i == len(self.s) - 1):
            raise self.fail(f"control character {stop!r} in {what}")
        self.check_utf8(start, self.i)
        text = self.s[start : self.i]
        return escape.sub(r"\1", text) if "\\" in text else text

    def record(self) -> ParsedLine:
        measurement = self.name(_MEASUREMENT, _MEASUREMENT_ESCAPE, "measurement")
        if not measurement:
            raise self.fail("missing measurement")
        tags = self.tags() if self.peek() == "," else {}
        if self.peek() != " ":
            raise self.fail("missing fields")
        self.skip_spaces()
        fields = self.fields()
        return ParsedLine(measurement, tags, fields, self.timestamp())

    def tags(self) -> dict[str, str]:
        tags: dict[str, str] = {}
        while self.peek() == ",":
            self.i += 1
            key = self.name(_NAME, _NAME_ESCAPE, "tag key")
            if not key:
                raise self.fail("missing tag key")
            if self.peek() != "=":
                raise self.fail(f"missing tag separator after key {key!r}")
            self.i += 1
            value = self.name(_NAME, _NAME_ESCAPE, "tag value")
            if self.peek() == "=":
                raise self.fail(f"unescaped equals sign in tag value of {key!r}")
            if not value:
                raise self.fail(f"missing tag value for {key!r}")
            if key in tags:
                raise self.fail(f"duplicate tag key {key!r}")
            tags[key] = value
        return tags

    def fields(self) -> dict[str, tuple[FieldType, FieldValue]]:
        fields: dict[str, tuple[FieldType, FieldValue]] = {}
        while True:
            key = self.name(_NAME, _NAME_ESCAPE, "field key")
            if not key:
                raise self.fail("missing field key")
            if self.peek() != "=":
                raise self.fail(f"missing field separator after key {key!r}")
            self.i += 1
            value = self.field_value(key)
            # (the reference keeps both values of a repeated key; a frame column holds one)
            if key in fields:
                raise self.fail(f"duplicate field key {key!r}")
            fields[key] = value
            if self.peek() != ",":
                break
            self.i += 1
        if self.peek() not in ("", " ", "\r"):
            raise self.fail("unexpected character after field value")
        return fields

    def timestamp(self) -> int | None:
        """Optional: spaces, digits, spaces, end of line (any of them may be missing)."""
        self.skip_spaces()
        if self.at_end_of_line():
            return None
        start = self.i
        self.i = _match_end(_TIME, self.s, start)
        text = self.s[start : self.i]
        if self.peek() not in ("", " ", "\r"):
            raise self.fail(f"invalid timestamp {self.s[start : start + 40]!r}")
        self.skip_spaces()
        if not self.at_end_of_line():
            raise self.fail(f"invalid timestamp: unexpected text {self.s[self.i : self.i + 40]!r} after it")
        if not text:
            return None
        if not _TIMESTAMP.fullmatch(text):
            raise LineError(f"invalid timestamp {text[:40]!r} at column {start + 1}")
        time_ns = int(text)
        if not INT64_MIN <= time_ns <= INT64_MAX:
            raise LineError(f"timestamp out of int64 range at column {start + 1}")
        return time_ns

    def field_value(self, key: str) -> tuple[FieldType, FieldValue]:
        first = self.peek()
        if first == '"':
            return FieldType.STRING, self.quoted_string(key)
        start = self.i
        self.i = _match_end(_VALUE, self.s, start)
        text = self.s[start : self.i]
        if not text:
            raise self.fail(f"missing value for field {key!r}")
        self.check_utf8(start, self.i)
        if first in _BOOL_START:
            if text in TRUE_LITERALS:
                return FieldType.BOOL, True
            if text in FALSE_LITERALS:
                return FieldType.BOOL, False
        elif first in _NUMBER_START:
            return self.number(key, text)
        raise self.fail(f"invalid value {text[:40]!r} for field {key!r}")

    def number(self, key: str, text: str) -> tuple[FieldType, FieldValue]:
        """The suffix decides the type; the digits must then parse as that type."""
        last = text[-1]
        if last == "i" and _INT.fullmatch(text, 0, len(text) - 1):
            value = int(text[:-1])
            if not INT64_MIN <= value <= INT64_MAX:
                raise self.fail(f"integer out of int64 range in field {key!r}")
            return FieldType.INT, value
        if last == "u" and _UINT.fullmatch(text, 0, len(text) - 1):
            value = int(text[:-1])
            if value > UINT64_MAX:
                raise self.fail(f"unsigned out of uint64 range in field {key!r}")
            return FieldType.UINT, value
        if _FLOAT.fullmatch(text):
            number = float(text)
            if number in (float("inf"), float("-inf")):
                raise self.fail(f"float out of range in field {key!r}")
            return FieldType.FLOAT, number
        raise self.fail(f"invalid value {text[:40]!r} for field {key!r}")

    def quoted_string(self, key: str) -> str:
        start = self.i + 1
        end = _match_end(_STRING, self.s, start)
        if end == len(self.s):  # no closing quote on this line: the string goes on
            end = self.carry_string(key, start)
        self.i = end + 1
        self.check_utf8(start, end)
        text = self.s[start:end]
        return _STRING_ESCAPE.sub(_unescape_in_string, text) if "\\" in text else text

    def carry_string(self, key: str, start: int) -> int:
        """Take in following lines until one closes the string (a newline in a string is
        content); returns where its closing quote is in the record, now joined into `self.s`.

        Each line is scanned once, from its own start: a newline ends any escape (a backslash
        before it stands alone), so a quote's meaning never depends on the lines before. The
        record is joined once, when the quote is found, so the cost is linear in what is read."""
        pieces = [self.s]
        while True:
            more = self.following(self.lines)
            if more is None:
                # never closed: the record is its first line alone, and the lines taken in to look
                # for the quote are read on their own (as the batch decoder reads them)
                self.i, self.lines = len(self.s), 1
                raise LineError(
                    f"unterminated string in field {key!r} at column {start}:"
                    " no closing quote before the end of its message"
                )
            self.size += 1 + len(more)
            if self.size > self.max_bytes:
                self.i = len(self.s)
                raise LineError(
                    f"unterminated string in field {key!r} at column {start}: no closing quote"
                    f" within the bound of {self.max_bytes:,} bytes a record may take"
                )
            text = more.decode("utf-8", "surrogateescape")
            self.bad_bytes = self.bad_bytes or _has_bad_bytes(more, text)
            self.lines += 1
            pieces.append(text)
            end = _match_end(_STRING, text, 0)
            if end < len(text):
                self.s = "\n".join(pieces)
                return len(self.s) - len(text) + end


def _match_end(pattern: re.Pattern[str], text: str, start: int) -> int:
    """Where a token that starts at `start` ends (every token pattern matches the empty string)."""
    match = pattern.match(text, start)
    return start if match is None else match.end()


def _has_bad_bytes(raw: bytes, text: str) -> bool:
    return not raw.isascii() and _BAD_BYTE.search(text) is not None


def _unescape_in_string(match: re.Match[str]) -> str:
    return _STRING_UNESCAPED[match.group(1)]
