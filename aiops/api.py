"""The root-cause daemon's HTTP API (FastAPI, served by uvicorn in a thread of the daemon):

- `/healthz` (the loop is alive), `/readyz` (it holds its partitions, or stands by),
- `/metrics` in the Prometheus text format (lag, samples/s, tick delay and duration, open
  incidents, notifications sent, refused and pending, outbox depth),
- `/api/incidents` (filter by status, severity, kind, entity pattern, time), `/api/incidents/{id}`,
  `POST /api/incidents/{id}/ack` and `/resolve`,
- `/api/silences` (create, list) and `DELETE /api/silences/{id}` (expire),
- OpenAPI at `/openapi.json` (no `/docs` or `/redoc`: FastAPI's pages load Swagger UI and ReDoc
  from a CDN, scripts the daemon's origin would run with no integrity check).

Reads are open to whoever reaches the port (compose binds it to loopback); every mutation needs
`Authorization: Bearer <AIOPS_API_TOKEN>`, and with no token configured mutations are refused.

What a client may make the daemon hold is bounded before any route runs (`Guard`, an ASGI
middleware ahead of FastAPI's parsing): a body over `MAX_BODY_BYTES` is refused (413) from its
Content-Length, or, sent chunked, at the byte that crosses the limit, and the rest is never read;
a mutation without the token (or a signed link without its signature) is refused before one byte
of its body is read; a body not whole within `BODY_TIMEOUT_S` is refused (408); beyond
`MAX_IN_FLIGHT` requests at once, 503 (but /healthz). Before that, the connection (uvicorn, with
aiops/api_connections.py): a request head must be whole within `HEAD_TIMEOUT_S` and at most
`MAX_HEADER_BYTES`, an idle keep-alive connection is closed after `KEEP_ALIVE_S`, and at most
`MAX_CONNECTIONS` are open, a new one displacing the one that has waited longest for a head. So
clients that connect and stall hold nothing for long, and never keep /healthz out. Free text
(names, notes) has a length limit and no control characters; ids in paths and silence matchers
follow the id grammar (vocab/ids.py), and a refusal names the rule. Every response says
`X-Content-Type-Options: nosniff` and has a Content-Security-Policy: `API_CSP` (nothing may load
or frame it), or the page's own (show/page.py); pages add `X-Frame-Options: DENY` and
`Referrer-Policy: no-referrer`."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from html import escape
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from act.audit import AuditLog, Row, plans_by_incident
from act.loop import signed
from aiops.api_connections import guarded_protocol
from aiops.daemon_metrics import DaemonMetrics
from aiops.incident_index import IncidentIndex
from aiops.incident_index import Query as IncidentQuery
from notify.config import Match
from notify.service import Notifier
from notify.silences import SilenceStore
from rca.graph import TopologyGraph
from show.incident_page import PageSources, incident_page
from show.page import PAGE_CSP, PageFacts, PageLook, render_list
from show.series import InfluxSeries
from vocab.ids import MAX_ID_LENGTH, Refusal, entity_refusal, record_id_refusal, shown
from vocab.schedule import Schedule
from vocab.settings import InfluxSettings

log = logging.getLogger(__name__)

# incidents read for a page's "what changed" (the latest states before it opened): the page lists
# ten near its root (show/oncall.py MAX_EARLIER); a thousand is the index's own page bound
MAX_EARLIER_READ = 1000

# module level: FastAPI resolves the (string) annotations of dependencies in this module's globals
_bearer = HTTPBearer(auto_error=False)
LIVE_WITHIN_S = 120.0  # /healthz fails when the loop has not come round for this long
MAX_SILENCE_S = 366 * 86400.0
EVENT_TIME_SLACK_S = 3600.0  # a silence "from now" also covers states this far behind the wall clock

# The largest body a client has a reason to send is a silence with its matchers: a few KB even
# with a hundred entity patterns (the notes below are at most 2,000 characters, 8 KB in UTF-8).
# 64 KB is ten times that, and what the daemon holds per request if every one in flight sends it:
# MAX_IN_FLIGHT x 64 KB = 4 MB. (Before this limit a 300 MB POST was read whole and parsed
# before the token was checked: the daemon went from 146 MB to 1.29 GB.)
MAX_BODY_BYTES = 64 * 1024
# A 64 KB body arrives in milliseconds on any network an operator works from; a client that takes
# longer is holding a connection open (slowloris), so it is answered 408 and closed. A deadline
# for the whole body from the request's start, not per read: a byte every 29 s would pass that.
BODY_TIMEOUT_S = 30.0
# The request line and headers: a browser's with a bearer token are under 2 KB; uvicorn (h11)
# answers 400 beyond this (its default is 16 KB too: stated here so it stays so).
MAX_HEADER_BYTES = 16 * 1024
# A request head (under 2 KB, one packet) arrives in milliseconds from a browser, curl or
# Prometheus, across an ocean within a second; 10 s leaves room for a stalled network. A head not
# whole by then (sent nothing, or stopped before its blank line: the half-open connections of
# issue 64) is closed: uvicorn has no such deadline of its own and held them for ever.
HEAD_TIMEOUT_S = 10.0
# An idle keep-alive connection after its response (uvicorn's own default, stated so it stays so):
# a browser reopens one in a round trip; Prometheus scrapes every 15 s or more and reconnects.
KEEP_ALIVE_S = 5
# Open sockets, each a file descriptor and at most MAX_HEADER_BYTES of unparsed head: 512 x 16 KB
# = 8 MB at worst, and half the 1,024 descriptors a process often gets by default (leaving the
# daemon's Kafka, database and file handles their room). Far above what a few engineers, their
# browsers and Prometheus open; a client stalling to fill it gets each of its sockets closed in
# HEAD_TIMEOUT_S, and sooner, oldest first, by every new connection (aiops/api_connections.py):
# so it does not keep others out, as uvicorn's limit_concurrency did (it counts open connections:
# 64 silent sockets answered /healthz 503).
MAX_CONNECTIONS = 512
# Requests being answered at once (their routes run in a thread pool of 40 or read a body): 64 is
# far above the API's users; beyond it 503 rather than queueing. /healthz is answered regardless:
# it reads one number, and a liveness probe refused under load would have the daemon restarted.
MAX_IN_FLIGHT = 64
# A person's name as the chat message, the audit log and the page show it: 100 characters hold any
# real name or e-mail address; more is a paste, or an attempt to bury the message it is quoted in.
MAX_NAME_CHARS = 100
# An operator's note: a paragraph. 2,000 characters fit one chat message (Slack's block is 3,000).
MAX_NOTE_CHARS = 2000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# The approval page: no script or style at all; its one form posts back to the daemon.
APPROVAL_CSP = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
# Every other response (JSON, text, errors): nothing to run, load, post or frame. A JSON answer
# opened in a browser tab is inert under it, and is not framed for clickjacking.
API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
UNLIMITED_PATHS = frozenset({"/healthz"})  # answered beyond MAX_IN_FLIGHT (see there)
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SIGNED_APPROVE = re.compile(r"^/actions/([^/]+)/approve$")


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
        # hmac.compare_digest raises on a str that is not ASCII; such a signature is simply wrong
        return signature.isascii() and signed(self.secret, plan_id, signature)

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
    # what the scheduler said (the engine's schedule, shared): the blast radius at onset
    schedule: Schedule | None = None
    # the scheduler's latest events as the daemon heard them (the pipeline's, shared): "what changed"
    events: Sequence[Mapping[str, Any]] | None = None


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


def _name(value: str) -> str:
    if found := _CONTROL.search(value):
        raise ValueError(
            f"a name holds no control characters (U+{ord(found.group()):04X}): a newline in it would"
            " start a line of its own in chat and in the audit log"
        )
    return value


def _note(value: str) -> str:
    if found := _CONTROL_BUT_LINES.search(value):
        raise ValueError(f"a note holds no control characters but newlines and tabs (U+{ord(found.group()):04X})")
    return value


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(_name)]
Note = Annotated[str, Field(max_length=MAX_NOTE_CHARS), AfterValidator(_note)]
_NAME: TypeAdapter[str] = TypeAdapter(Name)


class Acknowledge(BaseModel):
    by: Name
    comment: Note = ""


def matcher_refusal(name: str, value: str) -> Refusal | None:
    """Why a silence matcher's value can match no entity, or None. Entity values are shell
    patterns: their wildcards stand for id characters, and the rest must be what an id may hold."""
    probe = re.sub(r"[*?\[\]!]", "a", value) if name == "entity" else value
    return entity_refusal(probe)


class NewSilence(BaseModel):
    """Times in epoch seconds. Without `starts` the silence is in force at once, also for states
    still on their way (the daemon works in event time, which trails the wall clock by the
    lateness window and more while it catches up)."""

    model_config = ConfigDict(allow_inf_nan=False)

    match: Match
    starts: float | None = Field(None, ge=0)
    ends: float | None = Field(None, ge=0)  # default: now + duration_s
    duration_s: float = Field(3600.0, gt=0, le=MAX_SILENCE_S)
    comment: Annotated[Note, Field(min_length=1)]
    created_by: Name

    @field_validator("match")
    @classmethod
    def _ids(cls, match: Match) -> Match:
        # entity ids, and the rack, pod and plane names entity ids are made of (vocab/ids.py)
        for name in ("entity", "rack", "pod", "plane"):
            for value in getattr(match, name) or ():
                if problem := matcher_refusal(name, value):
                    raise ValueError(f"match.{name} {shown(value)}: {problem}")
        return match


# incident, plan and silence ids: the service's own, one grammar with every other id (vocab.ids)
route_id_refusal = record_id_refusal


def _checked(kind: str, value: str) -> str:
    if problem := route_id_refusal(value):
        raise HTTPException(422, f"{kind} id {shown(value)}: {problem}")
    return value


def _bearer_of(authorization: str | None) -> str | None:
    """The credentials of an `Authorization: Bearer <credentials>` header, as HTTPBearer reads them."""
    scheme, _, credentials = (authorization or "").partition(" ")
    return credentials if scheme.lower() == "bearer" and credentials else None


class _AnsweredError(Exception):
    """The guard has answered the request itself; the route must stop."""


Gate = Callable[[str, str, Headers, bytes], HTTPException | None]


class Guard:
    """An ASGI middleware ahead of routing and parsing (FastAPI reads and parses a whole body
    before it runs a route's dependencies, the token check among them), so what it refuses was
    never read:

    - a Content-Length over `limit`: 413 at once;
    - a body of no stated length (chunked): its bytes counted as the route reads them, 413 at the
      chunk that crosses `limit`; nothing after it is read;
    - a request `gate` refuses (a mutation without the token): its answer, before the body;
    - a body not whole `body_timeout_s` after the request's head: 408;
    - a request beyond `max_in_flight` being answered at once: 503 (but `UNLIMITED_PATHS`).

    Each of these answers says `Connection: close` (the unread rest of the body is not read to
    find the next request). Every response gets `X-Content-Type-Options: nosniff` and, unless it
    states its own, `Content-Security-Policy: API_CSP`; HTML ones `X-Frame-Options: DENY` and
    `Referrer-Policy: no-referrer`."""

    def __init__(
        self,
        app: ASGIApp,
        gate: Gate,
        limit: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.app, self.gate, self.limit, self.body_timeout_s = app, gate, limit, body_timeout_s
        self.max_in_flight, self.in_flight = max_in_flight, 0  # (one event loop: no lock needed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = answered = False

        async def send_(message: Message) -> None:
            nonlocal started
            if answered:
                return  # the route's own answer to a request refused under it
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                headers.setdefault("x-content-type-options", "nosniff")
                headers.setdefault("content-security-policy", API_CSP)
                if headers.get("content-type", "").startswith("text/html"):
                    headers.setdefault("x-frame-options", "DENY")
                    headers.setdefault("referrer-policy", "no-referrer")
            await send(message)

        async def answer(status: int, detail: str, extra: dict[str, str] | None = None) -> None:
            nonlocal answered
            if started:
                raise _AnsweredError  # (a route that answers before reading its body: uvicorn closes)
            body = json.dumps({"detail": detail}).encode()
            headers = {
                "content-type": "application/json",
                "content-length": str(len(body)),
                "connection": "close",
                **(extra or {}),
            }
            await send_(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(k.encode(), v.encode("latin-1")) for k, v in headers.items()],
                }
            )
            await send_({"type": "http.response.body", "body": body})
            answered = True

        if self.in_flight >= self.max_in_flight and scope["path"] not in UNLIMITED_PATHS:
            busy = f"{self.in_flight} requests in flight (MAX_IN_FLIGHT): ask again later"
            await answer(503, busy, {"retry-after": "1"})
            return
        self.in_flight += 1
        try:
            await self._guarded(scope, receive, send_, answer)
        finally:
            self.in_flight -= 1

    async def _guarded(
        self, scope: Scope, receive: Receive, send_: Send, answer: Callable[..., Awaitable[None]]
    ) -> None:
        headers = Headers(scope=scope)
        stated = headers.get("content-length")
        # (h11 has refused a Content-Length that is not a number, or two that differ)
        if stated is not None and stated.isdigit() and int(stated) > self.limit:
            await answer(413, f"a body of {stated} bytes: the limit is {self.limit:,} (MAX_BODY_BYTES)")
            return
        refused = self.gate(scope["method"], scope["path"], headers, scope.get("query_string", b""))
        if refused is not None:
            await answer(refused.status_code, str(refused.detail), dict(refused.headers or {}))
            return

        read, complete = 0, False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s

        async def receive_() -> Message:
            nonlocal read, complete
            if complete:
                return await receive()  # (waiting for the client to go away: no body left to bound)
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                await answer(408, f"the body did not arrive within {self.body_timeout_s:.0f} s (BODY_TIMEOUT_S)")
                raise _AnsweredError from None
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                complete = not message.get("more_body", False)
                if read > self.limit:
                    await answer(413, f"a body over {self.limit:,} bytes (MAX_BODY_BYTES): not read further")
                    raise _AnsweredError
            return message

        with contextlib.suppress(_AnsweredError):
            await self.app(scope, receive_, send_)


def build_app(
    index: IncidentIndex,
    metrics: DaemonMetrics,
    notifier: Notifier | None,
    token: str | None,
    request_resolve: Callable[[str], None],
    pages: PageContext | None = None,
    actions: ActionsApi | None = None,
    body_timeout_s: float = BODY_TIMEOUT_S,
    max_in_flight: int = MAX_IN_FLIGHT,
) -> FastAPI:
    """The API's routes behind its guard (`body_timeout_s` and `max_in_flight` for tests)."""
    app = FastAPI(
        title="aiops",
        summary="Incidents, silences and health of the GPU-cluster AIOps daemon",
        # no /docs, /redoc: their pages load Swagger UI and ReDoc from a CDN with no integrity
        # check, to run on this origin; the OpenAPI document alone is served, for any viewer
        docs_url=None,
        redoc_url=None,
    )
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Collector(metrics, index, notifier))

    def operator_refusal(credentials: str | None) -> HTTPException | None:
        if token is None:
            return HTTPException(403, "mutations are disabled: no API token is configured (AIOPS_API_TOKEN)")
        if credentials is None or not hmac.compare_digest(credentials.encode(), token.encode()):
            return HTTPException(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})
        return None

    def operator(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
        # (the guard has checked already, before the body; this states it in the OpenAPI too)
        if problem := operator_refusal(None if creds is None else creds.credentials):
            raise problem

    def gate(method: str, path: str, headers: Headers, query: bytes) -> HTTPException | None:
        """What the guard refuses before a body is read: every mutation under /api/ without the
        token, a signed link's approval without its signature."""
        if method not in MUTATING:
            return None
        if path.startswith("/api/"):
            return operator_refusal(_bearer_of(headers.get("authorization")))
        link = _SIGNED_APPROVE.match(path)
        if link and actions is not None:
            sig = (parse_qs(query.decode("latin-1")).get("sig") or [""])[0]
            if not actions.signed(link.group(1), sig):
                return HTTPException(403, "this link is not signed for this plan")
        return None

    app.add_middleware(Guard, gate=gate, body_timeout_s=body_timeout_s, max_in_flight=max_in_flight)

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
        entity: Annotated[
            str | None, Query(description="a shell pattern, e.g. leaf-p0-*", max_length=MAX_ID_LENGTH)
        ] = None,
        since: Annotated[float | None, Query(description="updated at or after (epoch seconds)")] = None,
        until: Annotated[float | None, Query(description="updated before (epoch seconds)")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[dict[str, Any]]:
        return index.find(IncidentQuery(status, severity, kind, entity, since, until, limit))

    @app.get("/api/incidents/{incident_id}")
    def incident(incident_id: str) -> dict[str, Any]:
        found = index.get(_checked("incident", incident_id))
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
    def approve_action(plan_id: str, by: Annotated[Name, Query()] = "api") -> dict[str, str]:
        return acting().approve(_checked("plan", plan_id), f"{by} (API token)")

    @app.get("/actions/{plan_id}", response_class=HTMLResponse)
    def approval_page(plan_id: str, sig: str) -> HTMLResponse:
        """What a signed link in a notification opens: the plan and a button. Opening it (or a
        chat client unfurling it) changes nothing; the button's POST does."""
        api = acting()
        if not api.signed(_checked("plan", plan_id), sig):
            raise HTTPException(403, "this link is not signed for this plan")
        row = api.row(plan_id)
        html = (
            "<!doctype html><meta charset=utf-8><title>approve</title>"
            f"<p>{escape(row['action'])} <b>{escape(row['target'])}</b> for {escape(row['incident_id'])}: "
            f"{escape(row['reason'])}</p><p>now: {escape(row['decision'])}, {escape(row['state'])}</p>"
            f'<form method=post action="/actions/{quote(plan_id)}/approve?sig={quote(sig)}">'
            f"<label>your name <input name=by required maxlength={MAX_NAME_CHARS}></label>"
            " <button>approve</button></form>"
        )
        return HTMLResponse(html, headers={"Content-Security-Policy": APPROVAL_CSP})

    @app.post("/actions/{plan_id}/approve", status_code=202)
    async def approve_signed(plan_id: str, sig: str, request: Request) -> dict[str, str]:
        api = acting()
        if not api.signed(_checked("plan", plan_id), sig):
            raise HTTPException(403, "this link is not signed for this plan")
        try:
            form = parse_qs((await request.body()).decode(), strict_parsing=False)
        except UnicodeDecodeError:
            raise HTTPException(422, "the form is not UTF-8") from None
        try:
            who = _NAME.validate_python((form.get("by") or [""])[0])
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False)
            raise RequestValidationError([{**e, "loc": ("body", "by")} for e in errors]) from None
        return api.approve(plan_id, f"{who} (signed link)")

    @app.post("/api/incidents/{incident_id}/ack", dependencies=[Depends(operator)])
    def acknowledge(incident_id: str, body: Acknowledge) -> dict[str, Any]:
        if not index.acknowledge(_checked("incident", incident_id), body.by, body.comment):
            raise HTTPException(404, f"no incident {incident_id}")
        return incident(incident_id)

    @app.post("/api/incidents/{incident_id}/resolve", dependencies=[Depends(operator)])
    def resolve(incident_id: str, body: Acknowledge) -> dict[str, Any]:
        """Resolved by hand: the engine closes it at its next tick (and says so on
        aiops.incidents and in chat); symptoms that go on afterwards open a new incident."""
        found = index.get(_checked("incident", incident_id))
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
        entity: Annotated[str | None, Query(max_length=MAX_ID_LENGTH)] = None,
        since: float | None = None,
        until: float | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> HTMLResponse:
        """The incidents as a page, with the API's filters."""
        rows = index.find(IncidentQuery(status, severity, kind, entity, since, until, limit))
        given = {"status": status, "severity": severity, "kind": kind, "entity": entity}
        filters = ", ".join(f"{k} {v}" for k, v in given.items() if v)
        html = render_list(rows, lambda i: f"/incidents/{quote(i, safe='')}", filters=filters, plans=_plans(actions))
        return HTMLResponse(html, headers={"Content-Security-Policy": PAGE_CSP})

    @app.get("/incidents/{incident_id}", response_class=HTMLResponse)
    def incident_page_html(incident_id: str) -> HTMLResponse:
        """What a notification links to: the incident page (show/page.py)."""
        found = index.get(_checked("incident", incident_id))
        if found is None:
            raise HTTPException(404, f"no incident {incident_id}")
        plans = _plans(actions).get(incident_id, []) if actions is not None else None
        # the incidents before it, for "what changed" (the index's latest states; bounded)
        opened = float(found["opened"])
        earlier = [r for r in index.find(IncidentQuery(limit=MAX_EARLIER_READ)) if float(r["opened"]) < opened]
        html = incident_html(found, index.history(incident_id), shown, plans, earlier)
        return HTMLResponse(html, headers={"Content-Security-Policy": PAGE_CSP})

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
        expired = silences().expire(_checked("silence", silence_id))
        if expired is None:
            raise HTTPException(404, f"no silence {silence_id}")
        return expired.record(time.time())

    return app


def _plans(actions: ActionsApi | None) -> dict[str, list[dict[str, Any]]]:
    """Each incident's plans in the audit log, in the order planned (none when acting is off):
    act/audit.py `plans_by_incident`, as the report reads a run's log."""
    if actions is None:
        return {}
    return {i: [asdict(r) for r in rows] for i, rows in plans_by_incident(actions.rows()).items()}


def incident_html(
    record: dict[str, Any],
    history: list[dict[str, Any]],
    pages: PageContext,
    plans: list[dict[str, Any]] | None = None,
    earlier: list[dict[str, Any]] | None = None,
) -> str:
    """The page of one incident as the daemon knows it now (show/incident_page.py, the builder
    the run report uses too); `plans`: its rows in the audit log (None: acting is off)."""
    sources = PageSources(
        graph=pages.graph,
        schedule=pages.schedule,
        series=pages.series if pages.graph is not None else None,
        series_name="InfluxDB",
        grafana_url=pages.grafana_url,
        look=PageLook(live=True, index_href="/incidents", incident_href=lambda i: f"/incidents/{quote(i, safe='')}"),
    )
    facts = PageFacts(
        history=history,
        plans=plans,
        audit="the daemon's audit log",
        earlier=earlier,
        events=list(pages.events) if pages.events is not None else None,
    )
    return incident_page(record, sources, facts)


class ApiServer:
    """uvicorn in a daemon thread; stopped with the daemon. Its connections are bounded by
    aiops/api_connections.py (`max_connections`, `head_timeout_s`: smaller in tests)."""

    def __init__(
        self,
        app: FastAPI,
        host: str,
        port: int,
        max_connections: int = MAX_CONNECTIONS,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        self.protocol = guarded_protocol(max_connections, head_timeout_s)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            # uvicorn's h11 protocol with a head deadline and a connection cap that displaces
            # stalled sockets (h11, so that the header bound below applies)
            http=self.protocol,
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
            timeout_keep_alive=KEEP_ALIVE_S,
            # None: uvicorn's own limit counts open connections, so stalled sockets starved every
            # request (issue 64); connections are capped by the protocol, requests by the guard
            limit_concurrency=None,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="aiops-api", daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.server.started:
            raise RuntimeError("the HTTP API did not start (is the port taken?)")
        log.info("HTTP API on http://%s:%d (OpenAPI at /openapi.json)", self.server.config.host, self.port)

    @property
    def port(self) -> int:
        servers = getattr(self.server, "servers", [])
        if servers and servers[0].sockets:
            return int(servers[0].sockets[0].getsockname()[1])
        return int(self.server.config.port)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
