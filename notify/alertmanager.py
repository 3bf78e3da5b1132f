"""Incidents as Prometheus Alertmanager alerts, so a site's own routes, silences, inhibitions and
receivers apply to them.

Alertmanager keeps the state, not the messages: an alert is posted to `POST /api/v2/alerts` and
stays firing until its `endsAt` passes, so a client re-posts open alerts well within that time
and ends them with `endsAt` = now (Prometheus does the same, re-sending every minute with
`endsAt` four resend periods ahead). Grouping, waits and repeats are Alertmanager's; our routes
only choose which incidents go to it.

Alertmanager judges `startsAt`/`endsAt` against its wall clock, so this receiver is for the live
daemon; an offline replay of old telemetry skips it (and says so).

Alerts live in the outbox's database: a restarted daemon carries on re-posting what was open and
ending what resolved while it was down. URLs never reach a log line or a stored error."""

from __future__ import annotations

import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from notify.config import Receiver
from notify.message import IncidentNote

log = logging.getLogger(__name__)

RESEND_S = 60.0  # Prometheus's default resend delay
VALID_RESENDS = 4  # endsAt of a firing alert: this many resend periods ahead (Prometheus: 4)
END_POSTS = 2  # an ended alert is posted this often (one may be lost)
KEEP_ENDED_S = 3600.0  # ended alerts are remembered this long: a replay must not fire them again
BACKOFF_MAX_S = 300.0
ALERTNAME = "AiopsIncident"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS am_alerts (
    receiver TEXT NOT NULL,
    incident_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,    -- of the label set: Alertmanager's identity of an alert
    alert TEXT NOT NULL,          -- labels, annotations, startsAt, generatorURL
    at REAL NOT NULL,             -- event time of the incident state it shows
    ended_at REAL,                -- wall time it ended; NULL while firing
    posted_at REAL NOT NULL DEFAULT 0,
    end_posts INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL DEFAULT 0,  -- bumped by every change: a post marks only what it sent
    PRIMARY KEY (receiver, incident_id, fingerprint)
);
"""


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def alert_of(note: IncidentNote, where: dict[str, str], cluster: str | None) -> dict[str, Any]:
    """The alert for one incident: labels to route and silence on, annotations to read. A label
    set that changes (a warning that comes true, a root that moves) is a new alert to
    Alertmanager; the pusher ends the old one."""
    labels = {
        "alertname": ALERTNAME,
        "incident_id": note.incident_id,
        "kind": note.kind,
        "severity": note.severity,
        "entity": note.root,
        **{k: v for k, v in where.items() if k in ("rack", "pod", "plane") and v},
    }
    if cluster:
        labels["cluster"] = cluster
    facts = dict(note.facts())
    annotations = {
        "summary": note.headline,
        "description": f"{facts['Root cause']}; blast radius {facts['Blast radius']}",
        "action": note.action or "-",
        "state": "predicted" if note.status == "warning" else "failing",
        **{f"{label.lower()}_url": url for label, url in note.links},
    }
    if note.evidence:
        annotations["evidence"] = "\n".join(note.evidence)
    if note.no_data_since is not None:  # still firing: silence is not health
        annotations["no_data_since"] = _iso(note.no_data_since)
    alert: dict[str, Any] = {"labels": labels, "annotations": annotations, "startsAt": _iso(note.opened)}
    incident_link = next((url for label, url in note.links if label == "Incident"), None)
    if incident_link:
        alert["generatorURL"] = incident_link
    return alert


def _fingerprint(labels: dict[str, str]) -> str:
    return hashlib.blake2b(json.dumps(labels, sort_keys=True).encode(), digest_size=8).hexdigest()


@dataclass
class AlertStats:
    posts: int = 0
    alerts_posted: int = 0
    failures: int = 0  # posts not acknowledged (retried with backoff)
    refused: int = 0  # of those, refused with a 4xx (the request is wrong)


class AlertPusher:
    """Keeps the receivers' alerts in Alertmanager: upserts as incidents change, posts what is
    due (new, changed, a resend, an end)."""

    def __init__(self, db: Any, lock: Any, clock: Callable[[], float] = time.time) -> None:
        self._db, self._lock, self.clock = db, lock, clock
        with self._lock:
            self._db.executescript(_SCHEMA)
        self.stats = AlertStats()
        self._retry_at: dict[str, tuple[float, float]] = {}  # receiver -> (next attempt, delay)

    def upsert(self, receiver: str, note: IncidentNote, alert: dict[str, Any]) -> None:
        """The incident's latest state; posted at the next delivery round. A state older than
        one already taken (a replay after a restart) changes nothing."""
        now = self.clock()
        fingerprint = _fingerprint(alert["labels"])
        with self._lock:
            newest = self._db.execute(
                "SELECT MAX(at) FROM am_alerts WHERE receiver = ? AND incident_id = ?", (receiver, note.incident_id)
            ).fetchone()[0]
            if newest is not None and note.at < newest:
                return
            # whatever this incident showed under another label set is over
            self._db.execute(
                "UPDATE am_alerts SET ended_at = ?, posted_at = 0, version = version + 1 WHERE receiver = ? "
                "AND incident_id = ? AND ended_at IS NULL AND fingerprint != ?",
                (now, receiver, note.incident_id, "" if note.status == "resolved" else fingerprint),
            )
            if note.status == "resolved":
                self._db.execute(
                    "UPDATE am_alerts SET at = ? WHERE receiver = ? AND incident_id = ?",
                    (note.at, receiver, note.incident_id),
                )
                return
            self._db.execute(
                "INSERT INTO am_alerts (receiver, incident_id, fingerprint, alert, at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (receiver, incident_id, fingerprint) DO UPDATE SET alert = excluded.alert, "
                "at = excluded.at, ended_at = NULL, posted_at = 0, end_posts = 0, version = version + 1",
                (receiver, note.incident_id, fingerprint, json.dumps(alert, sort_keys=True), note.at),
            )

    def firing(self, receiver: str) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) FROM am_alerts WHERE receiver = ? AND ended_at IS NULL", (receiver,)
            ).fetchone()
        return int(row[0])

    def push_due(self, receiver: Receiver, post: Callable[[urllib.request.Request, float], int]) -> int:
        """Post every alert of `receiver` that is new, changed, due for a resend or ended; returns
        how many were acknowledged. A failed post is tried again with backoff (1 s doubling to
        5 min), without holding up the other receivers."""
        now = self.clock()
        retry_at, delay = self._retry_at.get(receiver.name, (0.0, 0.0))
        if now < retry_at:
            return 0
        resend = receiver.resend_s or RESEND_S
        with self._lock:
            rows = list(
                self._db.execute(
                    "SELECT incident_id, fingerprint, alert, ended_at, version FROM am_alerts WHERE receiver = ? AND "
                    "((ended_at IS NULL AND posted_at <= ?) OR (ended_at IS NOT NULL AND end_posts < ?)) "
                    "ORDER BY incident_id, fingerprint",
                    (receiver.name, now - resend, END_POSTS),
                )
            )
        if not rows:
            return 0
        batch = []
        for _, _, raw, ended_at, _ in rows:
            alert = json.loads(raw)
            alert["endsAt"] = _iso(ended_at if ended_at is not None else now + VALID_RESENDS * resend)
            batch.append(alert)
        url = receiver.url.get_secret_value().rstrip("/") + "/api/v2/alerts"
        self.stats.posts += 1
        status, reason = 0, ""
        try:
            request = urllib.request.Request(
                url, data=json.dumps(batch).encode(), headers={"Content-Type": "application/json"}, method="POST"
            )
            status = post(request, receiver.timeout_s)
        except urllib.error.HTTPError as exc:
            status = exc.code
            exc.close()
        except Exception as exc:  # refused, timed out, a malformed URL: the type only (a URL can hold secrets)
            reason = type(exc).__name__
        if not 200 <= status < 300:
            self.stats.failures += 1
            self.stats.refused += 400 <= status < 500
            delay = min(BACKOFF_MAX_S, max(1.0, delay * 2))
            self._retry_at[receiver.name] = (now + delay, delay)
            log.warning(
                "alertmanager receiver %s did not take %d alerts (%s); trying again in %.0f s",
                receiver.name,
                len(batch),
                f"HTTP {status}" if status else reason,
                delay,
            )
            return 0
        self._retry_at.pop(receiver.name, None)
        self.stats.alerts_posted += len(batch)
        with self._lock:
            for incident_id, fingerprint, _, ended_at, version in rows:
                column = "posted_at = ?" if ended_at is None else "end_posts = end_posts + 1, posted_at = ?"
                self._db.execute(  # unless it changed while the request was out: then it goes again
                    f"UPDATE am_alerts SET {column} WHERE receiver = ? AND incident_id = ? AND fingerprint = ? "
                    "AND version = ?",
                    (now, receiver.name, incident_id, fingerprint, version),
                )
            self._db.execute(
                "DELETE FROM am_alerts WHERE receiver = ? AND end_posts >= ? AND ended_at < ?",
                (receiver.name, END_POSTS, now - KEEP_ENDED_S),
            )
        return len(batch)
