"""The series behind an incident: which ones to draw (the evidence's entities and metrics, the
root's first), read from a recorded run's telemetry or from InfluxDB, counters as per-second
rates (a raw counter is a ramp that hides the burst)."""

from __future__ import annotations

import itertools
import json
import logging
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ingest.lineprotocol import decode
from vocab import registry
from vocab.catalog import MEASUREMENTS, MetricKind

log = logging.getLogger(__name__)

WINDOW_S = 1800.0  # drawn from half an hour before onset to half an hour after
SERIES_PER_INCIDENT = 4  # drawn
SERIES_ASKED = 8  # read, of which the first SERIES_PER_INCIDENT with samples are drawn
CHUNK = 32 << 20
# the measurement an entity of each topology kind reports in
MEASUREMENT_OF_KIND = {
    "gpu": "gpu",
    "nvswitch": "nvswitch",
    "nic": "nic",
    "optic": "optic",
    "port": "switch_port",
    "leaf": "switch",
    "spine": "switch",
    "node": "node",
    "psu": "psu",
    "cooling": "cooling",
}
_BY_NAME = {m.name: m for m in MEASUREMENTS}
Key = tuple[str, str]  # (entity, metric)


def window_of(record: Mapping[str, Any]) -> tuple[float, float]:
    """The span an incident's series are read and drawn over: half an hour either side of its
    opening, and from half an hour before its warning when it was warned of (an optic's sag that
    raised a warning 4.4 hours before the failure was left off its page: issue 66). One rule for
    the report and the daemon's pages."""
    opened = float(record["opened"])
    warned = record.get("warned")
    start = min(opened, float(warned)) if isinstance(warned, int | float) else opened
    return start - WINDOW_S, opened + WINDOW_S


Points = list[tuple[float, float]]


# what a network fault costs, drawn beside its own signals: a NIC's transmitted bytes (an
# operational choice: the throughput the jobs lose; the catalog's port_xmit_data)
THROUGHPUT = ("nic", "port_xmit_data")
_NETWORK = frozenset({"leaf", "spine", "port", "nic", "optic", "link"})


def _holder_of(
    root: str,
    measurement: str,
    kind_of: Callable[[str], str | None],
    parent_of: Callable[[str], str | None],
    others: Iterable[str],
) -> str | None:
    """The entity that reports `measurement` for an incident at `root`: the root, what holds it
    (an optic's NIC), or the first affected entity of that kind (a leaf's NIC)."""
    e: str | None = root
    while e is not None:
        if MEASUREMENT_OF_KIND.get(kind_of(e) or "") == measurement:
            return e
        e = parent_of(e)
    return next((o for o in others if MEASUREMENT_OF_KIND.get(kind_of(o) or "") == measurement), None)


def key_series(
    record: Mapping[str, Any],
    limit: int = SERIES_PER_INCIDENT,
    kind_of: Callable[[str], str | None] | None = None,
    parent_of: Callable[[str], str | None] | None = None,
) -> list[Key]:
    """The (entity, metric) pairs worth drawing. With the topology at hand (`kind_of`), first
    what shows the root's kind, as vocab/faults.toml's `needs` names it (an optic's receive
    power, a leaf's ports up and its hosts' link state), its states and levels before its
    counters, and a network fault's throughput; then the root's evidence, then the rest in the
    order the engine kept it."""
    root = str(record["root_cause"]["entity"])
    pairs = list(
        dict.fromkeys((str(e["entity"]), str(e["metric"])) for e in record.get("evidence", []) if "metric" in e)
    )
    chosen: list[Key] = []
    if kind_of is not None:
        parent = parent_of or (lambda _e: None)
        others = [str(a) for a in record.get("affected", [])] + [e for e, _ in pairs]
        kind = registry.KINDS.get(str(record["root_cause"].get("kind")))
        # "measurement.field" (a "measurement#tag" need names a tag, nothing to draw)
        needs: list[tuple[str, str]] = [
            (m, f) for n in (kind.needs if kind is not None else ()) if "#" not in n for m, _, f in [n.partition(".")]
        ]
        if (kind_of(root) or "") in _NETWORK:
            needs.append(THROUGHPUT)
        first = sorted(needs, key=lambda n: _is_counter(n[0], n[1]) and n != THROUGHPUT)
        for measurement, metric in first:
            holder = _holder_of(root, measurement, kind_of, parent, others)
            if holder is not None and (holder, metric) not in chosen:
                chosen.append((holder, metric))
    chosen += [p for p in pairs if p[0] == root and p not in chosen]
    # then one of each metric, then one of each entity: a storm's forty ports tell one story
    for part in (1, 0):
        seen = {p[part] for p in chosen}
        for p in pairs:
            if p not in chosen and p[part] not in seen:
                chosen.append(p)
                seen.add(p[part])
    chosen += [p for p in pairs if p not in chosen]
    return chosen[:limit]


def from_evidence(record: Mapping[str, Any]) -> dict[Key, Points]:
    """The evidence's own values, where nothing else is at hand (a daemon that writes no
    InfluxDB): the samples that tripped, not the whole series."""
    out: dict[Key, Points] = {}
    for e in record.get("evidence", []):
        value = e.get("value")
        if isinstance(value, int | float) and "metric" in e:
            out.setdefault((str(e["entity"]), str(e["metric"])), []).append((float(e["at"]), float(value)))
    return out


def _is_counter(measurement: str, metric: str) -> bool:
    m = _BY_NAME.get(measurement)
    return m is not None and any(x.name == metric and x.kind is MetricKind.COUNTER for x in m.metrics)


def as_rate(points: Points) -> Points:
    """A counter's samples as its per-second rate between them (a reset reads as no rate)."""
    pts = sorted(points)
    out = []
    for (t0, v0), (t1, v1) in itertools.pairwise(pts):
        if t1 > t0 and v1 >= v0:
            out.append((t1, (v1 - v0) / (t1 - t0)))
    return out


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        rest = b""
        while chunk := f.read(CHUNK):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            yield data[:cut]
            rest = data[cut:]
        if rest:
            yield rest


def from_telemetry(path: Path, wanted: Mapping[Key, tuple[float, float]]) -> dict[Key, Points]:
    """Each wanted (entity, metric)'s samples within its (from, to) window, in one pass over a
    recorded telemetry.lp; counters as rates."""
    entities = {e for e, _ in wanted}
    found: dict[Key, Points] = {}
    counters: set[Key] = set()
    for chunk in _chunks(path):
        for name, frame in decode(chunk).frames.items():
            m = _BY_NAME.get(name)
            if m is None or m.id_tag not in frame.tags:
                continue
            ids = frame.tags[m.id_tag]
            rows = np.flatnonzero(np.isin(ids, list(entities)))
            if not len(rows):
                continue
            times = frame.time_ns[rows] / 1e9
            for metric, column in frame.fields.items():
                for r, t in zip(rows.tolist(), times.tolist(), strict=True):
                    key = (str(ids[r]), metric)
                    window = wanted.get(key)
                    if window is None or not (window[0] <= t <= window[1]) or not column.present[r]:
                        continue
                    found.setdefault(key, []).append((t, float(column.values[r])))
                    if _is_counter(name, metric):
                        counters.add(key)
    return {k: as_rate(v) if k in counters else sorted(v) for k, v in found.items()}


class InfluxSeries:
    """The same series from InfluxDB 1.x (the daemon's `--influx`), by InfluxQL over HTTP."""

    def __init__(self, url: str, database: str, token: str | None = None, timeout_s: float = 5.0) -> None:
        self.url, self.database, self.token, self.timeout_s = url.rstrip("/"), database, token, timeout_s

    def get(self, kind_of: Mapping[str, str], keys: Iterable[Key], start: float, end: float) -> dict[Key, Points]:
        out: dict[Key, Points] = {}
        for entity, metric in keys:
            measurement = MEASUREMENT_OF_KIND.get(kind_of.get(entity, ""))
            m = _BY_NAME.get(measurement or "")
            if m is None:
                continue
            query = (
                f'SELECT "{metric}" FROM "{m.name}" WHERE "{m.id_tag}" = \'{entity.replace(chr(39), "")}\' '
                f"AND time >= {int(start * 1e9)} AND time <= {int(end * 1e9)}"
            )
            try:
                points = self._query(query)
            except (OSError, ValueError) as exc:  # InfluxDB away: the page shows the evidence instead
                log.warning("series of %s %s not read from InfluxDB: %s", entity, metric, exc)
                continue
            out[(entity, metric)] = as_rate(points) if _is_counter(m.name, metric) else points
        return out

    def _query(self, query: str) -> Points:
        args = urllib.parse.urlencode({"db": self.database, "q": query, "epoch": "ms"})
        request = urllib.request.Request(f"{self.url}/query?{args}")
        if self.token:
            request.add_header("Authorization", f"Token {self.token}")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # a configured URL
            body = json.loads(response.read())
        points: Points = []
        for result in body.get("results", []):
            for series in result.get("series", []) or []:
                for t, v in series.get("values", []):
                    if isinstance(v, int | float):
                        points.append((t / 1000.0, float(v)))
        return points


__all__ = [
    "SERIES_ASKED",
    "SERIES_PER_INCIDENT",
    "WINDOW_S",
    "InfluxSeries",
    "as_rate",
    "from_evidence",
    "from_telemetry",
    "key_series",
    "window_of",
]
