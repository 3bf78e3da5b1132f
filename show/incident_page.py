"""The one builder of an incident's page: the daemon's live page (aiops/api.py) and the run
report's page (show/report.py) are both `incident_page(record, sources, facts)`, from the same
typed record (vocab/incident_record.py). Before issue 66 each built its own, and they drifted:
the blast radius read twice, the plans in one and not the other, the series windowed twice.

What differs between the two is only where things come from, said by `PageSources` (the topology,
the scheduler, a series store: InfluxDB for the daemon, the run's telemetry.lp for the report) and
`PageFacts` (the incident's history, its plans in the audit log, the incidents before it, the
scheduler's events and the predictions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rca.graph import TopologyGraph
from show.blast import blast_radius
from show.oncall import oncall_for, peer_keys, peer_span
from show.page import PageFacts, PageLook, grafana_links, render_incident
from show.series import SERIES_ASKED, Key, Points, from_evidence, key_series, window_of
from show.topology_svg import Picture, neighbourhood
from vocab.incident_record import IncidentRecord, as_record
from vocab.schedule import Schedule

_SWITCH_SIDE = frozenset({"leaf", "spine", "port", "nic"})


class SeriesStore(Protocol):
    """Series by (entity, metric) over a span: InfluxDB (show/series.py InfluxSeries) or a run's
    recorded telemetry (`RecordedSeries`)."""

    def get(self, kind_of: Mapping[str, str], keys: Iterable[Key], start: float, end: float) -> dict[Key, Points]: ...


@dataclass(frozen=True)
class RecordedSeries:
    """Series read once from a run's telemetry.lp (show/series.py from_telemetry), cut to each
    page's window."""

    series: Mapping[Key, Points]

    def get(self, kind_of: Mapping[str, str], keys: Iterable[Key], start: float, end: float) -> dict[Key, Points]:
        return {k: [(t, v) for t, v in self.series.get(k, []) if start <= t <= end] for k in keys}


@dataclass(frozen=True)
class PageSources:
    """Where a page's parts come from besides the record; `series_name` says where in words."""

    graph: TopologyGraph | None = None
    schedule: Schedule | None = None
    series: SeriesStore | None = None
    series_name: str = "telemetry"
    grafana_url: str | None = None
    look: PageLook = field(default_factory=PageLook)


def series_keys(record: IncidentRecord | Mapping[str, Any], graph: TopologyGraph | None) -> list[Key]:
    """The series an incident's page draws (show/series.py key_series with the topology's help)."""
    wire = record.to_dict() if isinstance(record, IncidentRecord) else record
    if graph is None:
        return key_series(wire)
    return key_series(
        wire,
        SERIES_ASKED,
        lambda e: graph.kind(e) if e in graph else None,
        lambda e: graph.parent(e) if e in graph else None,
    )


def incident_page(
    value: IncidentRecord | Mapping[str, Any], sources: PageSources, facts: PageFacts | None = None
) -> str:
    """The incident's page as HTML."""
    record = as_record(value)
    wire = record.to_dict()
    g = sources.graph
    root = record.entity
    picture = neighbourhood(g, root, list(record.affected)) if g is not None else Picture([("root", [root])], root=root)
    keys = series_keys(wire, g)
    peers = peer_keys(record, g, sources.schedule) if g is not None else []
    series: dict[Key, Points] = {}
    peer_series: dict[Key, Points] | None = None
    source = "no series store configured"
    if sources.series is not None:
        kinds = {e: g.kind(e) for e, _ in [*keys, *peers] if g is not None and e in g}
        series = sources.series.get(kinds, keys, *window_of(wire))
        peer_series = sources.series.get(kinds, peers, *peer_span(record)) if peers else {}
        source = sources.series_name
    if not any(series.values()):
        found = {k: v for k, v in from_evidence(wire).items() if k in keys}
        if any(found.values()):
            series, source = found, "evidence"
    facts = facts or PageFacts()
    oncall = oncall_for(
        record,
        g,
        sources.schedule,
        facts.events,
        facts.earlier,
        {**series, **peer_series} if peer_series is not None else None,
        facts.predictions,
        sources.grafana_url,
    )
    return render_incident(
        record,
        picture,
        series,
        facts=facts,
        look=PageLook(
            live=sources.look.live,
            api_base=sources.look.api_base,
            index_href=sources.look.index_href,
            grafana=tuple(_grafana(record, g, sources.grafana_url)),
            incident_href=sources.look.incident_href,
        ),
        blast=blast_radius(wire, g, sources.schedule) if g is not None and sources.schedule is not None else None,
        series_source=source,
        oncall=oncall,
    )


def _grafana(record: IncidentRecord, g: TopologyGraph | None, base: str | None) -> list[tuple[str, str]]:
    root = record.entity
    known = g is not None and root in g
    node = g.node_of(root) if g is not None and known else None
    switch = g.switch_of(root) if g is not None and known and g.kind(root) in _SWITCH_SIDE else None
    rack = g.ancestor(root, "rack") if g is not None and known and g.kind(root) != "rack" else None
    return grafana_links(base, node, switch, rack, incident=record.incident_id)


def history_of(states: Sequence[IncidentRecord | Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each incident's states as the page's history table reads them (what the daemon's index
    keeps: aiops/incident_index.py `history`)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for value in states:
        r = as_record(value)
        out.setdefault(r.incident_id, []).append(
            {"updated": r.updated, "status": r.status, "severity": r.severity, "root": r.entity, "gpus_hit": r.gpus_hit}
        )
    return out


__all__ = [
    "PageFacts",
    "PageLook",
    "PageSources",
    "RecordedSeries",
    "SeriesStore",
    "history_of",
    "incident_page",
    "series_keys",
]
