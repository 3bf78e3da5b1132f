"""InfluxDB line protocol <-> columnar frames."""

from ._decode import Decoded, DefaultTime, Reject, decode
from ._encode import EncodeError, encode, encode_frame
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
    "parse_line",
]
