"""Line protocol escaping for the points the stages write themselves (incidents, actions), as
InfluxDB's line protocol reference says: in a tag value, backslash, comma, equals sign and space
are escaped; a string field is double-quoted with backslash and double quote escaped. An empty
tag value is not allowed, so it is written "-"; a newline in a string field becomes a space."""

from __future__ import annotations


def tag_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ") or "-"


def string_field(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


__all__ = ["string_field", "tag_value"]
