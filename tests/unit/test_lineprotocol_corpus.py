"""InfluxData's line-protocol conformance corpus through our codec.

The corpus (`../shared/datasets/line-protocol-corpus/corpus.json`, from the Go package
github.com/influxdata/line-protocol) holds 6,615 decode cases, many from fuzzing, and 115 encode
cases. Every case must agree with the reference, except those listed below with the reason; a
listed case that starts agreeing fails the test too, so the list stays true.

What agreeing means:

- decode, the reference accepts the input: `decode` gives exactly its points (name, tags, fields
  with their types and values, time) in input order, and rejects nothing.
- decode, the reference rejects the input: its message names the first bad point ("cannot get
  metric N") and usually its line. The reference fails the whole input there; `decode` works per
  record and dead-letters bad ones, keeping the rest, by design. So it agrees if it accepts the
  records before N, rejects record N, and (when the message names a line) that record spans the
  line. What follows record N is not compared: the reference never read it.
- encode: the same bytes (or an error where the reference refuses), and decoding our bytes gives
  back the point, as the reference's own corpus test checks.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ingest.frames import Column, Frame
from ingest.lineprotocol import Decoded, EncodeError, decode, encode
from vocab.catalog import FieldType

CORPUS = Path(__file__).resolve().parents[3] / "shared/datasets/line-protocol-corpus/corpus.json"

Case = dict[str, Any]
# (name, tags, fields as key -> (type, value), time); the reference sorts tags, so a dict compares
Point = tuple[str, dict[str, str], dict[str, tuple[str, object]], int]

_TYPE_NAMES = {
    FieldType.FLOAT: "float",
    FieldType.INT: "int",
    FieldType.UINT: "uint",
    FieldType.BOOL: "bool",
    FieldType.STRING: "string",
}
_FIELD_TYPES = {name: ftype for ftype, name in _TYPE_NAMES.items()}

# ---------------------------------------------------------------- known differences, by reason

PRECISION = (
    "decode reads nanosecond timestamps only (the pipeline's one precision); the reference scales "
    "a timestamp by the write's precision and truncates the default time to it"
)
EMPTY_TAG = (
    "a frame holds an absent tag as the empty string, so an empty tag value encodes as no tag; "
    "the reference refuses an empty tag value"
)

DECODE_DIFFERENCES: dict[str, str] = {
    **dict.fromkeys(
        [
            "12cbe04300d26145a19219958aabbd46",  # 1s, default time
            "7d5cc2f47bfbcc3890e3d077a950aa1a",  # 1ms, default time
            "ff332bb8cae345b1bdb2b3870a19bed7",  # 1µs, default time
            "9d786a8e63d92d59cb75b7a5b62d6ddb",  # 1s, explicit time
            "406b0d0a7e504f8ac168e39a61f3a853",  # 1ms, explicit time
            "48252323ce3961d644315e4d8f38f6bd",  # 1µs, explicit time
        ],
        PRECISION,
    ),
}

ENCODE_DIFFERENCES: dict[str, str] = {
    "72fe529da6084a44692fe27cc2f105d1": EMPTY_TAG,
}


# ---------------------------------------------------------------- the corpus


@pytest.fixture(scope="module")
def corpus() -> dict[str, dict[str, Case]]:
    if not CORPUS.is_file():
        pytest.skip(f"line-protocol corpus not found at {CORPUS}")
    loaded: dict[str, dict[str, Case]] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return loaded


def _input_bytes(case: Case) -> bytes:
    text = case["input"]["text"]
    return base64.b64decode(text["binary"]) if isinstance(text, dict) else str(text).encode("utf-8")


def _reference_point(point: Case) -> Point:
    fields: dict[str, tuple[str, object]] = {}
    for f in point["fields"]:
        ((kind, value),) = f["value"].items()
        fields[f["key"]] = (kind, float(value) if kind == "float" else value)
    return point["name"], {t["key"]: t["value"] for t in point["tags"]}, fields, point["time"]


def _records(decoded: Decoded) -> list[tuple[int, Point | str]]:
    """Every record `decode` saw, in input order: its first line and its point or reject reason."""
    out: list[tuple[int, Point | str]] = [(r.line_no, r.reason) for r in decoded.rejects]
    for name, frame in decoded.frames.items():
        for row, line_no in enumerate(decoded.line_no[name].tolist()):
            tags = {k: str(v[row]) for k, v in frame.tags.items() if v[row] != ""}
            fields = {
                k: (_TYPE_NAMES[c.type], _plain(c.values[row])) for k, c in frame.fields.items() if c.present[row]
            }
            out.append((line_no, (name, tags, fields, int(frame.time_ns[row]))))
    return sorted(out, key=lambda r: r[0])


def _plain(value: object) -> object:
    """A Python value from a column cell (string columns hold Python strings already)."""
    return value.item() if isinstance(value, np.generic) else value


def _decode_difference(case: Case) -> str | None:
    """How `decode` departs from the reference on one case, or None if it agrees."""
    data = _input_bytes(case)
    decoded = decode(data, default_time_ns=case["input"]["defaultTime"])
    records = _records(decoded)
    output = case["output"]
    if "result" in output:
        want = [_reference_point(p) for p in output["result"]]
        got = [r for _, r in records]
        return None if got == want else f"got {got!r:.300}, want {want!r:.300}"
    error: str = output["error"]
    first_bad = re.match(r"cannot get metric (\d+)", error)
    assert first_bad is not None, error
    bad = int(first_bad.group(1))
    if len(records) <= bad or not isinstance(records[bad][1], str):
        return f"record {bad} not rejected: {records!r:.300}; reference: {error}"
    if any(isinstance(r, str) for _, r in records[:bad]):
        return f"a record before {bad} rejected: {records!r:.300}; reference: {error}"
    at_line = re.search(r"at line (\d+):", error)
    if at_line is not None:
        first = records[bad][0]
        last = first + decoded.line(first).count(b"\n")
        if not first <= int(at_line.group(1)) - 1 <= last:
            return f"rejected lines {first}-{last}, the reference's error is at line {at_line.group(1)}"
    return None


def _frame_of(point: Case) -> Frame:
    fields: dict[str, Column] = {}
    for f in point["fields"]:
        ((kind, value),) = f["value"].items()
        fields[f["key"]] = Column.of(_FIELD_TYPES[kind], [value])
    tags = {t["key"]: np.array([t["value"]], dtype=object) for t in point["tags"]}
    return Frame(point["name"], np.array([point["time"]], dtype=np.int64), tags, fields)


def _encode_difference(case: Case) -> str | None:
    point, output = case["input"]["point"], case["output"]
    try:
        data = encode([_frame_of(point)])
    except EncodeError as exc:
        return None if "error" in output else f"refused ({exc}), reference wrote {output['result']!r}"
    if "error" in output:
        return f"wrote {data!r}, reference refused: {output['error']}"
    if data != output["result"].encode("utf-8") + b"\n":
        return f"wrote {data!r}, reference wrote {output['result']!r}"
    back = [r for _, r in _records(decode(data))]
    want = [_reference_point(point)]
    return None if back == want else f"decoding our bytes gives {back!r}, not {want!r}"


def _check(differing: dict[str, str], known: dict[str, str], total: int) -> None:
    unexpected = {key: why for key, why in differing.items() if key not in known}
    now_agree = sorted(set(known) - set(differing))
    assert not unexpected, f"{len(unexpected)} of {total} cases differ from the reference: " + "\n".join(
        f"{key}: {why}" for key, why in sorted(unexpected.items())
    )
    assert not now_agree, f"listed as differing but now agree (take them off the list): {now_agree}"


# ---------------------------------------------------------------- the tests


def test_known_differences_name_corpus_cases(corpus: dict[str, dict[str, Case]]) -> None:
    assert set(DECODE_DIFFERENCES) <= set(corpus["decode"])
    assert set(ENCODE_DIFFERENCES) <= set(corpus["encode"])


def test_decoder_agrees_with_the_reference_on_the_corpus(corpus: dict[str, dict[str, Case]]) -> None:
    cases = corpus["decode"]
    differing = {key: why for key, case in cases.items() if (why := _decode_difference(case)) is not None}
    _check(differing, DECODE_DIFFERENCES, len(cases))


def test_encoder_agrees_with_the_reference_on_the_corpus(corpus: dict[str, dict[str, Case]]) -> None:
    cases = corpus["encode"]
    differing = {key: why for key, case in cases.items() if (why := _encode_difference(case)) is not None}
    _check(differing, ENCODE_DIFFERENCES, len(cases))
