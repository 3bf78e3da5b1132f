"""Remote-write bodies for the door's tests and hostile corpus: a unit repeated, snappy-compressed
with copies (about 21:1, as an attacker would), so a bomb is small on disk and on the wire."""

from __future__ import annotations

from ingest.remote_write import Series, _encode_varint, encode_write_request

NAN_LABELS = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "n00002"}


def snappy_repeated(unit: bytes, times: int) -> bytes:
    """A snappy block of `unit` * `times`: one literal, then copies of 64 bytes from `len(unit)`
    back (out[i] = out[i - len(unit)] continues the pattern, overlapping or not)."""
    assert 0 < len(unit) <= 256 and times > 0  # a literal with a one-byte length
    total = len(unit) * times
    out = bytearray(_encode_varint(total))
    if len(unit) <= 60:
        out.append((len(unit) - 1) << 2)
    else:
        out += bytes([60 << 2, len(unit) - 1])
    out += unit
    made = len(unit)
    while made < total:
        n = min(64, total - made)
        out.append(2 | ((n - 1) << 2))
        out += len(unit).to_bytes(2, "little")
        made += n
    return bytes(out)


def empty_series_bomb(series: int) -> bytes:
    """`series` empty TimeSeries (field 1, length 0: two bytes each)."""
    return snappy_repeated(b"\x0a\x00", series)


def nan_series(series: int, labels: dict[str, str] | None = None) -> bytes:
    """`series` TimeSeries of one NaN sample each, the same labels."""
    unit = encode_write_request([Series(labels or NAN_LABELS, [(float("nan"), 1_790_000_000_000)])])
    return snappy_repeated(unit, series)


def one_series(labels: dict[str, str], values: list[float]) -> bytes:
    """One series of these values (a second apart), compressed as literals."""
    from ingest.remote_write import snappy_compress_literal

    samples = [(v, 1_790_000_000_000 + 1000 * i) for i, v in enumerate(values)]
    return snappy_compress_literal(encode_write_request([Series(labels, samples)]))
