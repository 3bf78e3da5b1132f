"""Slurm's host lists: `sl390lin[1-5,7-11]`, `cn[001-080,101-532]`, `a1,b[2-3]` (zero padding kept).

A host list is counted before it is expanded: `n[0-999999999]` names a billion hosts in 14
characters, and is refused by its count (`vocab.bounds.MAX_HOSTS`) without building one of them.
A reader of many lists (a Slurm body's jobs) charges each list's `count` to one budget for the
whole document (`vocab.bounds.MAX_HOSTS_PER_DOCUMENT`) before expanding it.
"""

from __future__ import annotations

import re

from vocab.bounds import MAX_HOSTS

_PART = re.compile(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*")
_GROUP = re.compile(r"^([^\[]*)\[([^\]]*)\](.*)$")


def expand(hostlist: str, limit: int = MAX_HOSTS) -> list[str]:
    """Every host a Slurm host list names, in order; ValueError on a malformed one, or on one
    that names more than `limit` hosts (counted first, never built)."""
    total = count(hostlist)
    if total > limit:
        raise ValueError(
            f"host list {hostlist[:80]!r} names {total:,} hosts, over the {limit:,} one list may name [bound hosts]"
        )
    out: list[str] = []
    for part in _PART.findall(hostlist):
        out += _expand_one(part.strip())
    return out


def count(hostlist: str) -> int:
    """How many hosts a host list names, by arithmetic (nothing built); ValueError on a malformed
    one. What a caller spending a budget shared by several lists charges before `expand`."""
    parts = _PART.findall(hostlist)
    if ",".join(parts) != hostlist.strip():
        raise ValueError(f"malformed host list {hostlist[:80]!r}")
    return sum(_count(part.strip()) for part in parts)


def _ranges(ranges: str, pattern: str) -> list[tuple[int, int, int]]:
    """(low, high, zero-padded width) of each item of a bracket group."""
    out = []
    for item in ranges.split(","):
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"malformed range {item[:40]!r} in host list {pattern[:80]!r}")
        low, high = int(lo), int(hi or lo)
        if high < low:
            raise ValueError(f"range {item[:40]!r} runs backwards in host list {pattern[:80]!r}")
        out.append((low, high, len(lo) if lo.startswith("0") else 0))
    return out


def _count(pattern: str) -> int:
    """How many hosts one part names: the product of its groups' sizes, by arithmetic."""
    total = 1
    rest = pattern
    while (m := _GROUP.match(rest)) is not None:
        _, ranges, rest = m.groups()
        total *= sum(high - low + 1 for low, high, _ in _ranges(ranges, pattern))
    if "[" in rest or "]" in rest:
        raise ValueError(f"malformed host list {pattern[:80]!r}")
    return total if pattern else 0


def _expand_one(pattern: str) -> list[str]:
    m = _GROUP.match(pattern)
    if m is None:
        if "[" in pattern or "]" in pattern:
            raise ValueError(f"malformed host list {pattern[:80]!r}")
        return [pattern] if pattern else []
    prefix, ranges, rest = m.groups()
    tails = _expand_one(rest) if rest else [""]
    out = []
    for low, high, width in _ranges(ranges, pattern):
        for n in range(low, high + 1):
            out += [f"{prefix}{n:0{width}d}{tail}" for tail in tails]
    return out


__all__ = ["count", "expand"]
