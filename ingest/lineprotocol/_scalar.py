"""The reference line-protocol parser: one line at a time, every rule, a reason for every reject.

The vectorised decoder hands this parser every line it cannot prove simple (escapes, quoted
strings, odd shapes, anything that failed a check), so this is where correctness lives and where
the error messages come from. It never raises on input; it returns a reason instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vocab.catalog import FieldType

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
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
# Escapes this codec understands; a backslash before any other character is a literal backslash,
# as in InfluxDB's parser.
_ESCAPABLE = frozenset("\\, =")

FieldValue = float | int | bool | str


@dataclass(frozen=True, slots=True)
class ParsedLine:
    measurement: str
    tags: dict[str, str]
    fields: dict[str, tuple[FieldType, FieldValue]]
    time_ns: int | None


class LineError(ValueError):
    """A line that is not valid line protocol; the message is the dead-letter reason."""


def parse_line(raw: bytes) -> ParsedLine:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LineError(f"not valid UTF-8 at byte {exc.start}") from None
    return _Parser(text).line()


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text.lstrip(" \t")
        if self.s.endswith("\r"):
            self.s = self.s[:-1]
        self.i = 0

    def fail(self, what: str) -> LineError:
        return LineError(f"{what} at column {self.i + 1}")

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def token(self, stops: str) -> str:
        """Read up to an unescaped stop character, resolving escapes."""
        s, n, out = self.s, len(self.s), []
        while self.i < n:
            c = s[self.i]
            if c == "\\" and self.i + 1 < n and s[self.i + 1] in _ESCAPABLE:
                out.append(s[self.i + 1])
                self.i += 2
                continue
            if c in stops:
                break
            out.append(c)
            self.i += 1
        return "".join(out)

    def line(self) -> ParsedLine:
        if not self.s:
            raise LineError("empty line")
        measurement = self.token(", ")
        if not measurement:
            raise self.fail("missing measurement")
        tags: dict[str, str] = {}
        while self.peek() == ",":
            self.i += 1
            key = self.token(",= ")
            if not key:
                raise self.fail("missing tag key")
            if self.peek() != "=":
                raise self.fail(f"missing tag separator after key {key!r}")
            self.i += 1
            tag_value = self.token(",= ")
            if self.peek() == "=":
                raise self.fail(f"unescaped equals sign in tag value of {key!r}")
            if not tag_value:
                raise self.fail(f"missing tag value for {key!r}")
            if key in tags:
                raise self.fail(f"duplicate tag key {key!r}")
            tags[key] = tag_value
        if self.peek() != " ":
            raise self.fail("missing fields")
        self.i += 1
        fields: dict[str, tuple[FieldType, FieldValue]] = {}
        while True:
            key = self.token(",= ")
            if not key:
                raise self.fail("missing field key")
            if self.peek() != "=":
                raise self.fail(f"missing field separator after key {key!r}")
            self.i += 1
            value = self.field_value(key)
            if key in fields:
                raise self.fail(f"duplicate field key {key!r}")
            fields[key] = value
            if self.peek() != ",":
                break
            self.i += 1
        time_ns: int | None = None
        if self.i < len(self.s):
            if self.peek() != " ":
                raise self.fail("unexpected character after field value")
            self.i += 1
            text = self.s[self.i :]
            if not _TIMESTAMP.fullmatch(text):
                raise self.fail(f"invalid timestamp {text[:40]!r}")
            time_ns = int(text)
            if not INT64_MIN <= time_ns <= INT64_MAX:
                raise self.fail("timestamp out of int64 range")
        return ParsedLine(measurement, tags, fields, time_ns)

    def field_value(self, key: str) -> tuple[FieldType, FieldValue]:
        if self.peek() == '"':
            return FieldType.STRING, self.quoted_string(key)
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in ", ":
            self.i += 1
        text = self.s[start : self.i]
        if not text:
            raise self.fail(f"missing value for field {key!r}")
        last = text[-1]
        if last == "i" and _INT.fullmatch(text[:-1]):
            value = int(text[:-1])
            if not INT64_MIN <= value <= INT64_MAX:
                raise self.fail(f"integer out of int64 range in field {key!r}")
            return FieldType.INT, value
        if last == "u" and _UINT.fullmatch(text[:-1]):
            value = int(text[:-1])
            if value > UINT64_MAX:
                raise self.fail(f"unsigned out of uint64 range in field {key!r}")
            return FieldType.UINT, value
        if text in TRUE_LITERALS:
            return FieldType.BOOL, True
        if text in FALSE_LITERALS:
            return FieldType.BOOL, False
        if _FLOAT.fullmatch(text):
            number = float(text)
            if number in (float("inf"), float("-inf")):
                raise self.fail(f"float out of range in field {key!r}")
            return FieldType.FLOAT, number
        raise self.fail(f"invalid value {text[:40]!r} for field {key!r}")

    def quoted_string(self, key: str) -> str:
        s, n = self.s, len(self.s)
        self.i += 1
        out = []
        while self.i < n:
            c = s[self.i]
            if c == "\\" and self.i + 1 < n and s[self.i + 1] in '"\\':
                out.append(s[self.i + 1])
                self.i += 2
                continue
            if c == '"':
                self.i += 1
                return "".join(out)
            out.append(c)
            self.i += 1
        raise self.fail(f"unterminated string in field {key!r}")
