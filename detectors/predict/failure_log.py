"""A site's failure log, to train the predictor on its own history: one JSON object per line in
the truth format (docs/generator.md), of which training reads four keys:

    {"kind": "gpu_hbm_ecc", "root": "n00012-gpu3", "onset": 1767225600, "end": 1767229200}

`kind` is a fault kind of the registry (vocab/faults.toml), `root` the failed entity's id as the
telemetry tags it, `onset` when it failed and `end` when it was repaired (epoch seconds, or ISO
8601 with a zone, as a ticketing system exports it; `end` may be left out: one hour after onset).
Kinds that do not announce themselves are kept out of training and counted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from vocab import registry

REPAIR_DEFAULT_S = 3600.0  # a failure without an end: the entity is out for an hour after onset


class FailureLogError(ValueError):
    """A failure log that cannot be trained on, with the file and line that says why."""


@dataclass
class FailureLog:
    records: list[dict[str, Any]]  # kind, root, onset, end (epoch seconds) of predictable kinds
    unpredictable: dict[str, int] = field(default_factory=dict)  # kinds kept out, and how many


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{what} is {value!r}, not a time")
    if isinstance(value, int | float):
        t = float(value)
    elif isinstance(value, str):
        try:
            t = float(value)
        except ValueError:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if stamp.tzinfo is None:
                raise ValueError(f"{what} {value!r} has no time zone") from None
            t = stamp.timestamp()
    else:
        raise ValueError(f"{what} is {value!r}, not epoch seconds or ISO 8601")
    if not math.isfinite(t):
        raise ValueError(f"{what} is {value!r}")
    return t


def parse_failure(raw: object) -> dict[str, Any]:
    """One record to {kind, root, onset, end}; ValueError naming what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    missing = [k for k in ("kind", "root", "onset") if raw.get(k) in (None, "")]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    kind = str(raw["kind"])
    if kind not in registry.KINDS:
        known = ", ".join(sorted(registry.KINDS))
        raise ValueError(f"kind {kind!r} is not in the registry (vocab/faults.toml): {known}")
    onset = _seconds(raw["onset"], "onset")
    end = _seconds(raw["end"], "end") if raw.get("end") not in (None, "") else onset + REPAIR_DEFAULT_S
    if end < onset:
        raise ValueError(f"end {raw['end']!r} is before onset {raw['onset']!r}")
    return {**raw, "kind": kind, "root": str(raw["root"]), "onset": onset, "end": end}


def read_failure_log(path: Path) -> FailureLog:
    """Every record or a FailureLogError naming the first bad line: a failure log half read would
    teach the model that the unread failures were healthy."""
    records: list[dict[str, Any]] = []
    unpredictable: dict[str, int] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FailureLogError(f"{path}: {exc}") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = parse_failure(json.loads(line))
        except (json.JSONDecodeError, ValueError) as exc:
            raise FailureLogError(f"{path}:{number}: {exc}") from None
        if registry.KINDS[record["kind"]].precursor:
            records.append(record)
        else:
            unpredictable[record["kind"]] = unpredictable.get(record["kind"], 0) + 1
    return FailureLog(records, unpredictable)


__all__ = ["REPAIR_DEFAULT_S", "FailureLog", "FailureLogError", "parse_failure", "read_failure_log"]
