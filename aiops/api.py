"""The root-cause daemon's HTTP API (FastAPI, served by uvicorn in a thread of the daemon):

- `/healthz` (the loop is alive), `/readyz` (it holds its partitions, or stands by),
- `/metrics` in the Prometheus text format (lag, samples/s, tick delay and duration, open
  incidents, notifications sent, refused and pending, outbox depth),
- `/api/incidents` (filter by status, severity, kind, entity pattern, time), `/api/incidents/{id}`,
  `POST /api/incidents/{id}/ack` and `/resolve`,
- `/api/silences` (create, list) and `DELETE /api/silences/{id}` (expire),
- OpenAPI at `/openapi.json`, its pages at `/docs`.

Reads are open to whoever reaches the port (compose binds it to loopback); every mutation needs
`Authorization: Bearer <AIOPS_API_TOKEN>`, and with no token configured mutations are refused."""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from html import escape
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from act.audit import AuditLog, Row
from act.loop import signed
from aiops.daemon_metrics import DaemonMetrics
from aiops.incident_index import IncidentIndex
from aiops.incident_index import Query as IncidentQuery
from notify.config import Match
from notify.service import Notifier
from notify.silences import SilenceStore
from rca.graph import TopologyGraph
from show.page import grafana_links, render_incident, render_list
from show.series import WINDOW_S, InfluxSeries, from_evidence, key_series
from show.topology_svg import Picture, neighbourhood
from vocab.settings import InfluxSettings

log = logging.getLogger(__name__)

# module level: FastAPI resolves the (string) annotations of dependencies in this module's globals
_bearer = HTTPBearer(auto_error=False)
LIVE_WITHIN_S = 120.0  # /healthz fails when the loop has not come round for this long
MAX_SILENCE_S = 366 * 86400.0
EVENT_TIME_SLACK_S = 3600.0  # a silence "from now" also covers states this far behind the wall clock


@dataclass(frozen=True)
class ApiOptions:
    host: str
    port: int  # 0: any free port (tests)
    token: SecretStr | None
    influx: InfluxSettings | None = None  # where the incident pages read their series, if written


@dataclass
class ActionsApi:
    """What the API reads and asks of the acting loop: the audit log (its own connection: the
    loop writes from the daemon's thread) and approvals, queued for the loop's next tick."""

    audit_path: Path | None
    approve_in_loop: Callable[[str, str], None]
    secret: bytes
    audit: AuditLog | None = None  # in memory (no state directory): the loop's own log, read here

    def _log(self) -> AuditLog:
        return AuditLog(self.audit_path) if self.audit_path is not None else (self.audit or AuditLog())

    def rows(self, state: str | None = None) -> list[Row]:
        log_ = self._log()
        try:
            return log_.rows(state)
        finally:
            if self.audit_path is not None:
                log_.close()

    def row(self, plan_id: str) -> dict[str, Any]:
        found = next((r for r in self.rows() if r.plan_id == plan_id), None)
        if found is None:
            raise HTTPException(404, f"no plan {plan_id}")
        return asdict(found)

    def signed(self, plan_id: str, signature: str) -> bool:
        return signed(self.secret, plan_id, signature)

    def approve(self, plan_id: str, who: str) -> dict[str, str]:
        row = self.row(plan_id)
        if row["decision"] != "awaiting_approval" or row["state"] != "held":
            raise HTTPException(409, f"plan {plan_id} is {row['decision']}, {row['state']}: nothing to approve")
        self.approve_in_loop(plan_id, who)
        return {"plan_id": plan_id, "status": "approved: acted on at the next tick", "by": who}


@dataclass
class PageContext:
    """What the incident pages draw from besides the index: the topology the daemon runs with
    (set once loaded, replaced on a reload), the series store, Grafana's address."""

    graph: TopologyGraph | None = None
    series: InfluxSeries | None = None
    grafana_url: str | None = None


class _Collector(Collector):
    def __init__(self, metrics: DaemonMetrics, index: IncidentIndex, notifier: Notifier | None) -> None:
        self.m, self.index, self.notifier = metrics, index, notifier

    def collect(self) -> Any:
        m = self.m
        yield CounterMetricFamily("aiops_values", "Telemetry values taken from Kafka", value=m.values)
        yield GaugeMetricFamily("aiops_samples_per_second", "Values taken per second, last minute", m.samples_per_s())
        yield GaugeMetricFamily("aiops_consumer_lag_messages", "Telemetry messages not taken yet", m.lag)
        yield CounterMetricFamily("aiops_ticks", "Ticks analysed", value=m.ticks)
        yield CounterMetricFamily(
            "aiops_tick_duration_seconds", "Wall time spent analysing ticks", value=m.tick_seconds_sum
        )
        delay = GaugeMetricFamily(
            "aiops_tick_delay_seconds", "Wall time now minus the event time of the newest analysed tick"
        )
        behind = m.tick_delay_s()
        if behind is not None:
            delay.add_metric([], behind)
        yield delay
        yield GaugeMetricFamily("aiops_assigned", "1 when this member holds the telemetry partitions", m.assigned)
        incidents = GaugeMetricFamily(
            "aiops_open_incidents", "Incidents (and warnings) not resolved", labels=["status", "severity"]
        )
        for (status, severity), n in sorted(self.index.counts().items()):
            incidents.add_metric([status, severity], n)
        yield incidents
        if self.notifier is None:
            return
        s, a = self.notifier.outbox.stats, self.notifier.outbox.alerts.stats
        sent = CounterMetricFamily("aiops_notifications_sent", "Notifications acknowledged by their receiver")
        sent.add_metric([], s.sent + a.alerts_posted)
        yield sent
        unrouted = CounterMetricFamily(
            "aiops_notifications_unrouted", "Incident changes no route matched (and no default receiver took)"
        )
        unrouted.add_metric([], self.notifier.router.stats.unrouted)
        yield unrouted
        failures = CounterMetricFamily(
            "aiops_notification_failures", "Delivery attempts that failed", labels=["reason"]
        )
        failures.add_metric(["refused_4xx"], s.failed + a.refused)
        failures.add_metric(["retried"], s.retries + a.failures - a.refused)
        yield failures
        yield GaugeMetricFamily(
            "aiops_outbox_depth", "Notifications waiting to be sent", value=self.notifier.outbox.depth()
        )


class Acknowledge(BaseModel):
    by: str = Field(min_length=1, max_length=100)
    comment: str = Field("", max_length=2000)


class NewSilence(BaseModel):
    """Times in epoch seconds. Without `starts` the silence is in force at once, also for states
    still on their way (the daemon works in event time, which trails the wall clock by the
    lateness window and more while it catches up)."""

    model_config = ConfigDict(allow_inf_nan=False)

    match: Match
    starts: float | None = Field(None, ge=0)
    ends: float | None = Field(None, ge=0)  # default: now + duration_s
    duration_s: float = Field(3600.0, gt=0, le=MAX_SILENCE_S)
    comment: str = Field(..., min_length=1, max_length=2000)
    created_by: str = Field(..., min_length=1, max_length=100)


def build_app(
    index: IncidentIndex,
    metrics: DaemonMetrics,
    notifier: Notifier | None,
    token: str | None,
    request_resolve: Callable[[str], None],
    pages: PageContext | None = None,
    actions: ActionsApi | None = None,
) -> FastAPI:
    app = FastAPI(title="aiops", summary="Incidents, silences and health of the GPU-cluster AIOps daemon")
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Collector(metrics, index, notifier))

    def operator(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
        if token is None:
            raise HTTPException(403, "mutations are disabled: no API token is configured (AIOPS_API_TOKEN)")
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
            raise HTTPException(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})

    def silences() -> SilenceStore:
        if notifier is None:
            raise HTTPException(404, "notifications are not configured (--notify-config): nothing to silence")
        return notifier.outbox.silences

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        idle = time.monotonic() - metrics.heartbeat
        if idle > LIVE_WITHIN_S:
            raise HTTPException(503, f"the daemon loop has not come round for {idle:.0f} s")
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> dict[str, Any]:
        if not (metrics.assigned or metrics.standing_by):
            raise HTTPException(503, "not yet a member of its consumer group")
        return {"status": "standby" if metrics.standing_by else "active"}

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/api/incidents")
    def incidents(
        status: str | None = None,
        severity: str | None = None,
        kind: str | None = None,
        entity: Annotated[str | None, Query(description="a shell pattern, e.g. leaf-p0-*")] = None,
        since: Annotated[float | None, Query(description="updated at or after (epoch seconds)")] = None,
        until: Annotated[float | None, Query(description="updated before (epoch seconds)")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        return index.find(IncidentQuery(status, severity, kind, entity, since, until, limit))

    @app.get("/api/incidents/{incident_id}")
    def incident(incident_id: str) -> dict[str, Any]:
        found = index.get(incident_id)
        if found is None:
            raise HTTPException(404, f"no incident {incident_id}")
        return found

    def acting() -> ActionsApi:
        if actions is None:
            raise HTTPException(404, "acting is not configured (--actions): no plans")
        return actions

    @app.get("/api/actions")
    def list_actions(state: str | None = None) -> list[dict[str, Any]]:
        """Every plan and action in the audit log (newest last), optionally of one state."""
        return [asdict(r) for r in acting().rows(state)]

    @app.post("/api/actions/{plan_id}/approve", status_code=202, dependencies=[Depends(operator)])
    def approve_action(plan_id: str, by: str = "api") -> dict[str, str]:
        return acting().approve(plan_id, f"{by} (API token)")

    @app.get("/actions/{plan_id}", response_class=HTMLResponse)
    def approval_page(plan_id: str, sig: str) -> str:
        """What a signed link in a notification opens: the plan and a button. Opening it (or a
        chat client unfurling it) changes nothing; the button's POST does."""
        api = acting()
        if not api.signed(plan_id, sig):
            raise HTTPException(403, "this link is not signed for this plan")
        row = api.row(plan_id)
        return (
            "<!doctype html><meta charset=utf-8><title>approve</title>"
            f"<p>{escape(row['action'])} <b>{escape(row['target'])}</b> for {escape(row['incident_id'])}: "
            f"{escape(row['reason'])}</p><p>now: {escape(row['decision'])}, {escape(row['state'])}</p>"
            f'<form method=post action="/actions/{quote(plan_id)}/approve?sig={quote(sig)}">'
            "<label>your name <input name=by required></label> <button>approve</button></form>"
        )

    @app.post("/actions/{plan_id}/approve", status_code=202)
    async def approve_signed(plan_id: str, sig: str, request: Request) -> dict[str, str]:
        api = acting()
        if not api.signed(plan_id, sig):
            raise HTTPException(403, "this link is not signed for this plan")
        form = parse_qs((await request.body()).decode())
        who = (form.get("by") or ["?"])[0][:80]
        return api.approve(plan_id, f"{who} (signed link)")

    @app.post("/api/incidents/{incident_id}/ack", dependencies=[Depends(operator)])
    def acknowledge(incident_id: str, body: Acknowledge) -> dict[str, Any]:
        if not index.acknowledge(incident_id, body.by, body.comment):
            raise HTTPException(404, f"no incident {incident_id}")
        return incident(incident_id)

    @app.post("/api/incidents/{incident_id}/resolve", dependencies=[Depends(operator)])
    def resolve(incident_id: str, body: Acknowledge) -> dict[str, Any]:
        """Resolved by hand: the engine closes it at its next tick (and says so on
        aiops.incidents and in chat); symptoms that go on afterwards open a new incident."""
        found = index.get(incident_id)
        if found is None:
            raise HTTPException(404, f"no incident {incident_id}")
        if found.get("resolved") is not None:
            raise HTTPException(409, f"{incident_id} is resolved already")
        index.request_resolve(incident_id, body.by, body.comment)
        request_resolve(incident_id)
        return incident(incident_id)

    shown = pages or PageContext()

    @app.get("/incidents", response_class=HTMLResponse)
    def incidents_page(
        status: str | None = None,
        severity: str | None = None,
        kind: str | None = None,
        entity: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> HTMLResponse:
        """The incidents as a page, with the API's filters."""
        rows = index.find(IncidentQuery(status, severity, kind, entity, since, until, limit))
        given = {"status": status, "severity": severity, "kind": kind, "entity": entity}
        filters = ", ".join(f"{k} {v}" for k, v in given.items() if v)
        return HTMLResponse(render_list(rows, lambda i: f"/incidents/{quote(i, safe='')}", filters=filters))

    @app.get("/incidents/{incident_id}", response_class=HTMLResponse)
    def incident_page(incident_id: str) -> HTMLResponse:
        """What a notification links to: the incident page (show/page.py)."""
        found = index.get(incident_id)
        if found is None:
            raise HTTPException(404, f"no incident {incident_id}")
        return HTMLResponse(incident_html(found, index.history(incident_id), shown))

    @app.get("/api/silences")
    def list_silences() -> list[dict[str, Any]]:
        now = time.time()
        return [s.record(now) for s in silences().all()]

    @app.post("/api/silences", status_code=201, dependencies=[Depends(operator)])
    def create_silence(body: NewSilence) -> dict[str, Any]:
        if not body.match.model_dump(exclude_none=True):
            raise HTTPException(422, "a silence needs at least one matcher")
        now = time.time()
        starts = now - EVENT_TIME_SLACK_S if body.starts is None else body.starts
        ends = now + body.duration_s if body.ends is None else body.ends
        try:
            made = silences().create(body.match, starts, ends, body.comment, body.created_by)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return made.record(time.time())

    @app.delete("/api/silences/{silence_id}", dependencies=[Depends(operator)])
    def expire_silence(silence_id: str) -> dict[str, Any]:
        expired = silences().expire(silence_id)
        if expired is None:
            raise HTTPException(404, f"no silence {silence_id}")
        return expired.record(time.time())

    return app


def incident_html(record: dict[str, Any], history: list[dict[str, Any]], pages: PageContext) -> str:
    """The page of one incident as the daemon knows it now."""
    root = str(record["root_cause"]["entity"])
    g = pages.graph
    picture = (
        neighbourhood(g, root, record.get("affected", [])) if g is not None else Picture([("root", [root])], root=root)
    )
    keys = key_series(record)
    opened = float(record["opened"])
    series = {}
    source = "evidence (no InfluxDB configured)"
    if pages.series is not None and g is not None:
        kinds = {e: g.kind(e) for e, _ in keys if e in g}
        series = pages.series.get(kinds, keys, opened - WINDOW_S, opened + WINDOW_S)
        source = "InfluxDB"
    if not any(series.values()):
        series, source = {k: v for k, v in from_evidence(record).items() if k in keys}, "evidence"
    node = g.node_of(root) if g is not None and root in g else None
    switch = (
        g.switch_of(root) if g is not None and root in g and g.kind(root) in ("leaf", "spine", "port", "nic") else None
    )
    rack = g.ancestor(root, "rack") if g is not None and root in g and g.kind(root) != "rack" else None
    return render_incident(
        record,
        picture,
        series,
        history,
        job_gpus=record.get("job_gpus"),
        live=True,
        index_href="/incidents",
        grafana=grafana_links(pages.grafana_url, node, switch, rack),
        series_source=source,
    )


class ApiServer:
    """uvicorn in a daemon thread; stopped with the daemon."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="aiops-api", daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.server.started:
            raise RuntimeError("the HTTP API did not start (is the port taken?)")
        log.info("HTTP API on http://%s:%d (OpenAPI at /docs)", self.server.config.host, self.port)

    @property
    def port(self) -> int:
        servers = getattr(self.server, "servers", [])
        if servers and servers[0].sockets:
            return int(servers[0].sockets[0].getsockname()[1])
        return int(self.server.config.port)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
