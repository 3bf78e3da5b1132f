"""The incident page: what an on-call engineer acts from. The root cause and the action first,
then the topology around the root (sick entities filled, the root outlined), the ranked
candidates with the evidence for each, sparklines of the series that tripped, the blast radius,
the history of states with the warning that came before, and the actions (acknowledge, resolve,
silence) with links to Grafana.

Server-rendered (Jinja2, autoescaped: entity ids come from the site's inventory), every style and
script inline, pictures as inline SVG: the page fetches nothing, from anywhere. The actions need
the API token; the page never holds it: the engineer types it into the form, and the page's script
sends it as the `Authorization` header of that one request (a site whose proxy adds the header
can leave the field empty).

Served by the daemon, a page comes with a Content-Security-Policy (`PAGE_CSP`) that lets it run
and style nothing but its own inline script and styles, named by their hashes: an entity id that
slipped past the escaping with a `<script>` in it would still not run, and the page cannot be
framed, post a form, or load anything from anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from show.blast import Blast
from show.series import SERIES_PER_INCIDENT, WINDOW_S
from show.spark import legend_of, metric_info, sparkline
from show.topology_svg import Picture, hidden_text, to_svg
from vocab.catalog import MetricKind
from vocab.incident_record import NO_DATA, OPEN, WARNING, IncidentRecord, as_record

_ENV = Environment(
    loader=PackageLoader("show", "templates"), autoescape=select_autoescape(default=True, default_for_string=True)
)
STYLE = (files("show") / "templates" / "page.css").read_text()
SCRIPT = (files("show") / "templates" / "actions.js").read_text()


def csp_hash(text: str) -> str:
    """A CSP source naming an inline script or style by its content (CSP level 3, 'sha256-')."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _inline_styles(html: str) -> tuple[list[str], list[str]]:
    """The <style> elements' texts and the style attributes' values in `html`."""
    return re.findall(r"<style>(.*?)</style>", html, re.S), re.findall(r'\sstyle="([^"]*)"', html)


# The topology picture (show/topology_svg.py) carries its own <style> and a style attribute; their
# text does not depend on the picture, so a one-box picture shows what to allow.
_SVG_ELEMENTS, _SVG_ATTRIBUTES = _inline_styles(to_svg(Picture([("root", ["x"])], root="x")))
# default-src 'none': nothing the policy does not name is allowed. The page's own script and
# styles by hash (no 'unsafe-inline'); the SVG's one style attribute by hash too ('unsafe-hashes'
# is what lets a hash allow an attribute, and only that one). img-src data: for the empty favicon
# (`<link rel="icon" href="data:,">`, which spares the browser a /favicon.ico request);
# connect-src 'self' for the actions' fetch to the same daemon; no form is ever posted, the page
# may not be framed (clickjacking the acknowledge button), and no <base> may redirect its links.
PAGE_CSP = "; ".join(
    [
        "default-src 'none'",
        f"script-src {csp_hash(SCRIPT)}",
        "style-src "
        + " ".join(
            [csp_hash(STYLE), *map(csp_hash, _SVG_ELEMENTS)]
            + (["'unsafe-hashes'", *map(csp_hash, _SVG_ATTRIBUTES)] if _SVG_ATTRIBUTES else [])
        ),
        "img-src data:",
        "connect-src 'self'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes = abs(seconds) / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


_ENV.filters["when"] = _when
_ENV.filters["ago"] = _ago


def _why(candidate: Mapping[str, Any], evidence: Sequence[Mapping[str, Any]], affected: set[str]) -> str:
    """What speaks for a candidate, in words: its own evidence, or how many symptoms it reaches."""
    entity = str(candidate["entity"])
    own = [e for e in evidence if e.get("entity") == entity]
    if own:
        metrics = sorted({str(e.get("metric")) for e in own})
        return f"its own {', '.join(metrics)} ({len(own)} samples)"
    others = len(affected - {entity})
    if entity in affected:
        return f"shows symptoms itself, and would explain those of the {others} other affected entities"
    return f"would explain the symptoms of {others} affected entities that depend on it"


def changes(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The history as its changes: a state written again every tick with nothing new is one row."""
    out: list[dict[str, Any]] = []
    for h in history:
        what = (h.get("status"), h.get("severity"), h.get("root"), h.get("gpus_hit"))
        if out and (out[-1]["status"], out[-1]["severity"], out[-1]["root"], out[-1]["gpus_hit"]) == what:
            out[-1]["repeats"] += 1
            continue
        out.append({**h, "repeats": 0})
    return out


@dataclass(frozen=True)
class PageFacts:
    """What the logs say of one incident besides its record: its states (the history table), its
    rows in the audit log (`plans`, act/audit.py `plans_by_incident`; None: there is no log, acting
    is off) read from `audit` (where, in words), the incidents before it, the scheduler's events
    and the predictions (for the on-call section)."""

    history: Sequence[Mapping[str, Any]] = ()
    plans: Sequence[Mapping[str, Any]] | None = None
    audit: str = ""
    # None: not read here (the page says "not known here"); empty: read, and nothing there
    earlier: Sequence[Mapping[str, Any]] | None = None
    events: Sequence[Mapping[str, Any]] | None = None
    predictions: Sequence[Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class PageLook:
    """How the page is served: live by the daemon (its actions work) or as a report's file."""

    live: bool = False
    api_base: str = ""
    index_href: str = "index.html"
    grafana: tuple[tuple[str, str], ...] = ()
    incident_href: Callable[[str], str] | None = None  # another incident's page, from this one


def shown(value: IncidentRecord | Mapping[str, Any]) -> dict[str, Any]:
    """A record as the templates read it: its wire form with the facts views show (`state`,
    `state_words`, `episode`) from the record's own rules, not recomputed in a template."""
    record = as_record(value)
    extra = (
        {k: v for k, v in value.items() if k in ("acknowledged", "resolved_by_operator")}
        if isinstance(value, Mapping)
        else {}
    )
    return {**record.to_dict(), **extra, "state_words": record.state_words, "episode": record.episode}


def render_incident(
    value: IncidentRecord | Mapping[str, Any],
    picture: Picture,
    series: Mapping[tuple[str, str], list[tuple[float, float]]],
    facts: PageFacts | None = None,
    look: PageLook | None = None,
    blast: Blast | None = None,
    series_source: str = "telemetry",
    rates: frozenset[tuple[str, str]] = frozenset(),
    oncall: Any = None,
) -> str:
    """The incident's page (show/incident_page.py `incident_page` gathers what it draws, the
    on-call section `oncall` too: show/oncall.py OnCall)."""
    facts, look = facts or PageFacts(), look or PageLook()
    record = shown(value)
    affected = set(record.get("affected", []))
    candidates = [{**c, "why": _why(c, record.get("evidence", []), affected)} for c in record.get("candidates", [])]
    sparks = _sparks(record, series, series_source, rates)
    jobs = [{"job": j, "gpus": (record.get("job_gpus") or {}).get(j)} for j in record.get("jobs", [])]
    shown_history = changes(facts.history) or [
        {
            "updated": record["updated"],
            "status": record["status"],
            "severity": record["severity"],
            "root": record["root_cause"]["entity"],
            "gpus_hit": record.get("gpus_hit", 0),
            "repeats": 0,
        }
    ]
    counts = picture.counts(record.get("affected", []))
    hidden = [hidden_text(picture, label) for label, _ in picture.rows if picture.hidden.get(label)]
    return _ENV.get_template("incident.html").render(
        r=record,
        picture=Markup(to_svg(picture)),
        counts=counts,
        hidden=hidden,
        listed=len(record.get("affected", [])),
        candidates=candidates,
        sparks=sparks,
        jobs=jobs,
        blast=blast,
        plans=list(facts.plans or []),
        audit=facts.audit if facts.plans is not None else None,
        history=shown_history,
        live=look.live,
        api_base=look.api_base,
        index_href=look.index_href,
        grafana=list(look.grafana),
        oncall=oncall,
        incident_href=look.incident_href,
        style=Markup(STYLE),
        script=Markup(SCRIPT),
    )


def _sparks(
    record: Mapping[str, Any],
    series: Mapping[tuple[str, str], list[tuple[float, float]]],
    series_source: str,
    rates: frozenset[tuple[str, str]],
) -> list[dict[str, Any]]:
    onset = float(record["opened"])
    with_samples = [k for k, v in series.items() if v]
    drawn = (with_samples or list(series))[:SERIES_PER_INCIDENT]
    silent = set(record.get("no_data_entities") or ()) if record.get("no_data_since") is not None else set()
    last = float(record.get("resolved") or record.get("updated") or onset)  # the data runs at least to its last state
    measurement_of = {(str(e["entity"]), str(e["metric"])): e.get("measurement") for e in record.get("evidence", [])}
    sparks = []
    for entity, metric in drawn:
        points = series[(entity, metric)]
        info = metric_info(metric, measurement_of.get((entity, metric)))
        rate = (entity, metric) in rates or (
            info is not None and info.kind is MetricKind.COUNTER and not series_source.startswith("evidence")
        )
        sparks.append(
            {
                "entity": entity,
                "metric": metric,
                "svg": Markup(
                    sparkline(
                        points,
                        onset,
                        "",
                        metric=metric,
                        rate=rate,
                        # still silent: the window drawn ends in "no data" from its last sample on
                        no_data_since=record["no_data_since"] if entity in silent else None,
                        until=onset + WINDOW_S if entity in silent else min(onset + WINDOW_S, last),
                        samples=not series_source.startswith("evidence"),
                    )
                ),
                "source": series_source,
                "rate": rate,
                "meaning": info.description if info is not None else "",
                "unit": (info.unit + ("/s" if rate else "")) if info is not None else "",
                "legend": legend_of(points, metric),
            }
        )
    return sparks


SEVERITY_ORDER = {"critical": 0, "major": 1, "minor": 2}


def list_order(rows: Sequence[IncidentRecord | Mapping[str, Any]]) -> list[IncidentRecord | Mapping[str, Any]]:
    """Unresolved first (open and silent alike: silence is not health), then warnings, then
    resolved; within each, by severity, then newest first. Each row's state is its record's."""
    order = {OPEN: 0, NO_DATA: 0, WARNING: 1}

    def key(r: IncidentRecord | Mapping[str, Any]) -> tuple[int, int, float]:
        record = as_record(r)
        return (order.get(record.state, 2), SEVERITY_ORDER.get(record.severity, 3), -record.opened)

    return sorted(rows, key=key)


def render_list(
    rows: Sequence[IncidentRecord | Mapping[str, Any]],
    href: Any,
    title: str = "Incidents",
    filters: str = "",
    plans: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> str:
    """The incidents, open first (`list_order`), each with its kind, root, confidence, jobs hit
    and the action with its state: its latest plan and how many it has where acting is on
    (`plans`: incident id -> its audit rows in the order planned, act/audit.py
    `plans_by_incident`), else the engine's recommended action."""
    return _ENV.get_template("list.html").render(
        rows=[shown(r) for r in list_order(rows)],
        plans=plans or {},
        href=href,
        title=title,
        filters=filters,
        style=Markup(STYLE),
    )


def grafana_links(
    base: str | None, node: str | None, switch: str | None, rack: str | None, incident: str | None = None
) -> list[tuple[str, str]]:
    """Links to the provisioned dashboards (dashboards/json): the incidents dashboard narrowed to
    this incident (its $incident, as chat's link), and the node, switch or rack chosen through the
    cluster dashboard's template variables."""
    if not base:
        return []
    base = base.rstrip("/")
    board = f"{base}/d/aiops-incidents/incidents"
    links = [("Incidents", board + (f"?var-incident={quote(incident, safe='')}" if incident else ""))]
    chosen = [
        f"var-{name}={quote(value, safe='')}"
        for name, value in (("node", node), ("switch", switch), ("rack", rack))
        if value
    ]
    if chosen:
        links.append(("Cluster telemetry", f"{base}/d/aiops-cluster-telemetry/cluster-telemetry?" + "&".join(chosen)))
    return links


__all__ = [
    "PAGE_CSP",
    "PageFacts",
    "PageLook",
    "changes",
    "csp_hash",
    "grafana_links",
    "list_order",
    "render_incident",
    "render_list",
    "shown",
]
