"""A durable outbox (SQLite): notifications are written before they are sent and marked when the
receiver acknowledged them, so a restart of the daemon or an outage of the chat service loses
nothing, and a key is never sent again once acknowledged.

The window: a message the receiver took but whose acknowledgement was not recorded (the daemon
died between the two) is sent once more after the restart, with the same key in its payload and
`Idempotency-Key` header, so the receiver can drop it. At most one repeat per key, and only then.

Delivery: 2xx acknowledged; timeouts, connection errors, 429 and 5xx retried with exponential
backoff (1 s doubling to 5 min, and a 429's Retry-After); other 4xx are not retried (the request
is wrong: retrying cannot help) and are counted. Per receiver, at most its rate a minute (WeCom
and DingTalk document 20). URLs and secrets never reach a log line or a stored error."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from notify import apprise_send
from notify.alertmanager import AlertPusher
from notify.config import NotifyConfig
from notify.formats import build
from notify.message import IncidentNote, Notification
from notify.safe_text import valid_unicode
from notify.silences import SilenceStore

log = logging.getLogger(__name__)

BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 300.0
LEASE_MARGIN_S = 30.0  # beyond the request timeout, before an unfinished attempt may be retried
_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    key TEXT PRIMARY KEY,
    receiver TEXT NOT NULL,
    body TEXT NOT NULL,
    created REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',   -- pending | sent | failed
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL,
    sent_at REAL,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (status, next_at);
"""


@dataclass
class DeliveryStats:
    queued: int = 0
    duplicates: int = 0  # keys already in the outbox (a replay after a restart)
    sent: int = 0
    retries: int = 0
    failed: int = 0  # refused with a 4xx: not retried
    rate_limited: int = 0


def to_json(note: Notification) -> str:
    return json.dumps(asdict(note), sort_keys=True)


def from_json(raw: str) -> Notification:
    d = json.loads(raw)
    incidents = tuple(
        IncidentNote(
            **{**n, "jobs": tuple(n["jobs"]), "evidence": tuple(n["evidence"]), "links": tuple(map(tuple, n["links"]))}
        )
        for n in d["incidents"]
    )
    return Notification(d["key"], d["receiver"], incidents, d["repeat"], d.get("extra", {}))


class Outbox:
    def __init__(self, path: Path, config: NotifyConfig, clock: Callable[[], float] = time.time) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # an acknowledged key must survive a crash
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self.config = config
        self.clock = clock
        self.stats = DeliveryStats()
        self._secrets = config.secrets()
        self._sent_at: dict[str, deque[float]] = {}
        self.alerts = AlertPusher(self._db, self._lock, clock)  # Alertmanager receivers' state
        self.silences = SilenceStore(self._db, self._lock, clock)  # made through the API

    def put(self, note: Notification) -> None:
        """Record a notification to send (idempotent by key)."""
        # a lone surrogate (JSON's "\\ud800" in an incident id) is no UTF-8 SQLite can store:
        # the key column takes it as U+FFFD; the body (JSON, ASCII-escaped) keeps it exactly
        key, receiver = valid_unicode(note.key), valid_unicode(note.receiver)
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO outbox (key, receiver, body, created, next_at) VALUES (?, ?, ?, ?, ?)",
                (key, receiver, to_json(note), self.clock(), 0.0),
            )
        if cur.rowcount:
            self.stats.queued += 1
        else:
            self.stats.duplicates += 1

    def depth(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM outbox WHERE status = 'pending'").fetchone()[0])

    def rows(self) -> list[tuple[str, str, int]]:
        """(key, status, attempts) of every notification, oldest first."""
        with self._lock:
            return list(self._db.execute("SELECT key, status, attempts FROM outbox ORDER BY created, key"))

    def deliver_due(self, post: Callable[[urllib.request.Request, float], int] | None = None) -> int:
        """Try every pending notification that is due; returns how many were acknowledged."""
        post = post or _post
        now = self.clock()
        with self._lock:
            due = list(
                self._db.execute(
                    "SELECT key, receiver, body, attempts FROM outbox WHERE status = 'pending' AND next_at <= ? "
                    "ORDER BY created, key",
                    (now,),
                )
            )
        acknowledged = 0
        for key, receiver_name, body, attempts in due:
            receiver = next((r for r in self.config.receivers if r.name == receiver_name), None)
            if receiver is None:
                self._finish(key, "failed", attempts, f"receiver {receiver_name!r} is no longer configured")
                continue
            if not self._has_room(receiver_name, receiver.rate, now):
                self.stats.rate_limited += 1
                continue
            if not self._claim(key, now, receiver.timeout_s):
                continue  # another process on the same outbox (a standby, a restart) took it
            self._sent_at[receiver_name].append(now)
            note = from_json(body)
            secret = receiver.secret.get_secret_value() if receiver.secret else None
            try:
                retry_after = None
                if receiver.kind == "apprise":  # delivered or not: a failure is retried
                    status = 200 if apprise_send.send(receiver.url.get_secret_value(), note) else 503
                else:
                    request = build(receiver.kind, receiver.url.get_secret_value(), note, secret, now)
                    http = urllib.request.Request(
                        request.url, data=request.body, headers=request.headers, method="POST"
                    )
                    status = post(http, receiver.timeout_s)
            except urllib.error.HTTPError as exc:
                status = exc.code
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
                exc.close()  # it holds the connection
            except (OSError, TimeoutError) as exc:  # refused, reset, timed out, DNS
                self._retry(key, attempts, f"{type(exc).__name__}: {self._redact(str(exc))}", None)
                continue
            except Exception as exc:  # a malformed URL, a broken response: its type only (URLs hold secrets)
                self._retry(key, attempts, type(exc).__name__, None)
                continue
            if 200 <= status < 300:
                self._finish(key, "sent", attempts + 1, None)
                acknowledged += 1
            elif status == 429 or status >= 500:
                self._retry(key, attempts, f"HTTP {status}", retry_after)
            else:
                self._finish(key, "failed", attempts + 1, f"HTTP {status} (not retried)")
                log.error("receiver %s refused notification %s with HTTP %d; not retried", receiver_name, key, status)
        for am in (r for r in self.config.receivers if r.kind == "alertmanager"):  # after chat: never holds it up
            acknowledged += self.alerts.push_due(am, post)
        return acknowledged

    def _claim(self, key: str, now: float, timeout_s: float) -> bool:
        """Lease the row for the length of one attempt: two processes sharing an outbox (the
        active daemon and a standby, or a restart while the old one winds down) never send the
        same row at once. A sender that dies mid-attempt leaves a lease that simply runs out."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE outbox SET next_at = ? WHERE key = ? AND status = 'pending' AND next_at <= ?",
                (now + timeout_s + LEASE_MARGIN_S, key, now),
            )
        return cur.rowcount == 1

    def _has_room(self, receiver: str, per_minute: int | None, now: float) -> bool:
        sent = self._sent_at.setdefault(receiver, deque())
        while sent and sent[0] <= now - 60.0:
            sent.popleft()
        return per_minute is None or len(sent) < per_minute

    def _retry(self, key: str, attempts: int, error: str, retry_after: str | None) -> None:
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**attempts)
        if retry_after is not None and retry_after.strip().isdigit():
            delay = max(delay, float(retry_after))
        self.stats.retries += 1
        with self._lock:
            self._db.execute(
                "UPDATE outbox SET attempts = ?, next_at = ?, last_error = ? WHERE key = ?",
                (attempts + 1, self.clock() + delay, error, key),
            )
        if attempts == 0 or attempts % 10 == 0:
            log.warning("notification %s not delivered (%s); retrying in %.0f s", key, error, delay)

    def _finish(self, key: str, status: str, attempts: int, error: str | None) -> None:
        if status == "sent":
            self.stats.sent += 1
        else:
            self.stats.failed += 1
        with self._lock:
            self._db.execute(
                "UPDATE outbox SET status = ?, attempts = ?, sent_at = ?, last_error = ? WHERE key = ?",
                (status, attempts, self.clock(), error, key),
            )

    def _redact(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "<redacted>")
        return text

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _post(request: urllib.request.Request, timeout_s: float) -> int:
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return int(response.status)


class DeliveryWorker(threading.Thread):
    """Sends from the outbox in the background while the pipeline runs."""

    def __init__(self, outbox: Outbox, every_s: float = 0.5) -> None:
        super().__init__(name="aiops-notify", daemon=True)
        self.outbox = outbox
        self.every_s = every_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.outbox.deliver_due()
            except Exception as exc:  # never let a bad message stop delivery of the others
                log.error("notification delivery failed: %s", self.outbox._redact(str(exc)))
            self._stop_event.wait(self.every_s)

    def stop(self, drain_s: float = 0.0) -> None:
        """Stop; with `drain_s`, first keep sending until the outbox is empty or the time is up."""
        deadline = time.monotonic() + drain_s
        while drain_s and self.outbox.depth() and time.monotonic() < deadline:
            time.sleep(self.every_s)
        self._stop_event.set()
        self.join(timeout=30)
