"""InfluxDB line protocol <-> columnar frames."""

from ._decode import Decoded, DefaultTime, Reject, decode
from ._encode import EncodeError, encode, encode_frame, encode_heads, encode_lines, lines_to_bytes
from ._scalar import MAX_RECORD_BYTES, LineError, ParsedLine, parse_line

__all__ = [
    "MAX_RECORD_BYTES",
    "Decoded",
    "DefaultTime",
    "EncodeError",
    "LineError",
    "ParsedLine",
    "Reject",
    "decode",
    "encode",
    "encode_frame",
    "encode_heads",
    "encode_lines",
    "lines_to_bytes",
    "parse_line",
]
