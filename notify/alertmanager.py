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
END_POSTS = 2  # an ended alert is posted this often before it is forgotten (one may be lost)
ALERTNAME = "AiopsIncident"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    receiver TEXT NOT NULL,
    incident_id TEXT NOT NULL,
    alert TEXT NOT NULL,          -- labels, annotations, startsAt, generatorURL
    ended_at REAL,                -- wall time the incident resolved; NULL while firing
    posted_at REAL NOT NULL DEFAULT 0,
    end_posts INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (receiver, incident_id)
);
"""


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def alert_of(note: IncidentNote, where: dict[str, str], cluster: str | None) -> dict[str, Any]:
    """The alert for one incident: labels to route and silence on, annotations to read."""
    labels = {
        "alertname": ALERTNAME,
        "incident_id": note.incident_id,
        "kind": note.kind,
        "severity": note.severity,
        "entity": note.root,
        "status": "predicted" if note.status == "warning" else "firing",
        **{k: v for k, v in where.items() if k in ("rack", "pod", "plane") and v},
    }
    if cluster:
        labels["cluster"] = cluster
    facts = dict(note.facts())
    annotations = {
        "summary": note.headline,
        "description": f"{facts['Root cause']}; blast radius {facts['Blast radius']}",
        "action": note.action or "-",
        **{f"{label.lower()}_url": url for label, url in note.links},
    }
    if note.evidence:
        annotations["evidence"] = "\n".join(note.evidence)
    alert: dict[str, Any] = {"labels": labels, "annotations": annotations, "startsAt": _iso(note.opened)}
    incident_link = next((url for label, url in note.links if label == "Incident"), None)
    if incident_link:
        alert["generatorURL"] = incident_link
    return alert


@dataclass
class AlertStats:
    posts: int = 0
    alerts_posted: int = 0
    failures: int = 0  # posts not acknowledged (retried at the next resend)
    refused: int = 0  # of those, refused with a 4xx (the request is wrong)
    skipped_offline: int = 0


class AlertPusher:
    """Keeps one receiver's alerts in Alertmanager: upserts as incidents change, posts what is
    due (new, changed, a resend, an end)."""

    def __init__(self, db: Any, lock: Any, clock: Callable[[], float] = time.time) -> None:
        self._db, self._lock, self.clock = db, lock, clock
        with self._lock:
            self._db.executescript(_SCHEMA)
        self.stats = AlertStats()

    def upsert(self, receiver: str, note: IncidentNote, alert: dict[str, Any]) -> None:
        """The incident's latest state; posted at the next delivery round."""
        ended = self.clock() if note.status == "resolved" else None
        with self._lock:
            if ended is not None:  # keep what was firing; only its end is news
                cur = self._db.execute(
                    "UPDATE alerts SET ended_at = ?, posted_at = 0 WHERE receiver = ? AND incident_id = ? "
                    "AND ended_at IS NULL",
                    (ended, receiver, note.incident_id),
                )
                if cur.rowcount:
                    return
            self._db.execute(
                "INSERT INTO alerts (receiver, incident_id, alert, ended_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (receiver, incident_id) DO UPDATE SET alert = excluded.alert, "
                "ended_at = excluded.ended_at, posted_at = 0, end_posts = 0",
                (receiver, note.incident_id, json.dumps(alert, sort_keys=True), ended),
            )

    def firing(self, receiver: str) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) FROM alerts WHERE receiver = ? AND ended_at IS NULL", (receiver,)
            ).fetchone()
        return int(row[0])

    def push_due(self, receiver: Receiver, post: Callable[[urllib.request.Request, float], int]) -> int:
        """Post every alert of `receiver` that is new, changed, due for a resend or ended; returns
        how many were acknowledged."""
        now = self.clock()
        resend = receiver.resend_s or RESEND_S
        with self._lock:
            rows = list(
                self._db.execute(
                    "SELECT incident_id, alert, ended_at FROM alerts WHERE receiver = ? AND "
                    "(posted_at <= ? OR ended_at IS NOT NULL) ORDER BY incident_id",
                    (receiver.name, now - resend),
                )
            )
        if not rows:
            return 0
        batch = []
        for _, raw, ended_at in rows:
            alert = json.loads(raw)
            alert["endsAt"] = _iso(ended_at if ended_at is not None else now + VALID_RESENDS * resend)
            batch.append(alert)
        url = receiver.url.get_secret_value().rstrip("/") + "/api/v2/alerts"
        body = json.dumps(batch).encode()
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
        self.stats.posts += 1
        try:
            status = post(request, receiver.timeout_s)
        except urllib.error.HTTPError as exc:
            status = exc.code
            exc.close()
        except (OSError, TimeoutError) as exc:
            status = 0
            reason = type(exc).__name__
        if not 200 <= status < 300:
            self.stats.failures += 1
            self.stats.refused += 400 <= status < 500
            reason = f"HTTP {status}" if status else reason
            log.warning("alertmanager receiver %s did not take %d alerts (%s)", receiver.name, len(batch), reason)
            return 0
        self.stats.alerts_posted += len(batch)
        with self._lock:
            for incident_id, _, ended_at in rows:
                if ended_at is None:
                    self._db.execute(
                        "UPDATE alerts SET posted_at = ? WHERE receiver = ? AND incident_id = ?",
                        (now, receiver.name, incident_id),
                    )
                else:
                    self._db.execute(
                        "UPDATE alerts SET end_posts = end_posts + 1 WHERE receiver = ? AND incident_id = ?",
                        (receiver.name, incident_id),
                    )
            self._db.execute("DELETE FROM alerts WHERE receiver = ? AND end_posts >= ?", (receiver.name, END_POSTS))
        return len(batch)
