"""Slurm's host lists: `sl390lin[1-5,7-11]`, `cn[001-080,101-532]`, `a1,b[2-3]` (zero padding kept)."""

from __future__ import annotations

import re


def expand(hostlist: str) -> list[str]:
    """Every host a Slurm host list names, in order; ValueError on a malformed one."""
    parts = re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", hostlist)
    if ",".join(parts) != hostlist.strip():
        raise ValueError(f"malformed host list {hostlist!r}")
    out: list[str] = []
    for part in parts:
        out += _expand_one(part.strip())
    return out


def _expand_one(pattern: str) -> list[str]:
    m = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", pattern)
    if m is None:
        if "[" in pattern or "]" in pattern:
            raise ValueError(f"malformed host list {pattern!r}")
        return [pattern] if pattern else []
    prefix, ranges, rest = m.groups()
    tails = _expand_one(rest) if rest else [""]
    out = []
    for item in ranges.split(","):
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"malformed range {item!r} in host list {pattern!r}")
        width = len(lo) if lo.startswith("0") else 0
        for n in range(int(lo), int(hi or lo) + 1):
            out += [f"{prefix}{n:0{width}d}{tail}" for tail in tails]
    return out


__all__ = ["expand"]
