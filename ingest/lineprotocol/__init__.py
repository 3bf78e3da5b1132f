"""InfluxDB line protocol <-> columnar frames."""

from ._decode import Decoded, DefaultTime, Reject, decode
from ._encode import EncodeError, encode, encode_frame, encode_heads, encode_lines, lines_to_bytes
from ._scalar import LineError, ParsedLine, parse_line

__all__ = [
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
