"""The incidents the daemon has published, as the HTTP API reads them: the latest state of each,
with what operators did about it (acknowledged, resolved by hand). SQLite in the state
directory, so the list survives a restart; written by the pipeline, read by the API's threads.

A restarted daemon replays ticks since its checkpoint and publishes their states again; a state
older than the one stored never replaces it."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vocab.incident_record import IncidentRecord, as_records

_SCHEMA = """
CREATE TABLE IF NOT EXISTS incidents (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    severity TEXT NOT NULL,
    kind TEXT NOT NULL,
    entity TEXT NOT NULL,
    opened REAL NOT NULL,
    updated REAL NOT NULL,
    resolved REAL,
    record TEXT NOT NULL,
    acked_by TEXT,
    acked_at REAL,
    ack_comment TEXT,
    resolve_by TEXT,              -- an operator asked to resolve it
    resolve_at REAL,
    resolve_comment TEXT
);
CREATE TABLE IF NOT EXISTS history (  -- every state published, for the incident page
    id TEXT NOT NULL,
    updated REAL NOT NULL,
    status TEXT NOT NULL,
    severity TEXT NOT NULL,
    root TEXT NOT NULL,
    gpus_hit INTEGER NOT NULL,
    PRIMARY KEY (id, updated, status)
);
CREATE INDEX IF NOT EXISTS incidents_updated ON incidents (updated);
CREATE INDEX IF NOT EXISTS incidents_status ON incidents (status);
"""
MAX_LIMIT = 1000


@dataclass(frozen=True)
class Query:
    status: str | None = None  # open | resolved | warning
    severity: str | None = None
    kind: str | None = None
    entity: str | None = None  # a shell pattern: leaf-p0-*
    since: float | None = None  # updated at or after (event time, epoch seconds)
    until: float | None = None
    limit: int = 100


class IncidentIndex:
    def __init__(self, path: Path | None) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path) if path else ":memory:", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def add(self, states: Iterable[IncidentRecord | bytes]) -> None:
        """Incident states: the records themselves in one process, or as published on
        aiops.incidents. The list's columns and the history are the record's own fields (its
        `state`, its `gpus_hit`), as the page and chat show them."""
        rows = []
        kept: list[tuple[Any, ...]] = []
        for r in as_records(list(states)):
            rows.append(
                (
                    r.incident_id,
                    r.status,
                    r.severity,
                    r.kind,
                    r.entity,
                    r.opened,
                    r.updated,
                    r.resolved,
                    r.to_json().decode(),
                )
            )
            kept.append((r.incident_id, r.updated, r.status, r.severity, r.entity, r.gpus_hit))
        if not rows:
            return
        with self._lock:
            # a restarted daemon publishes some states again: the same state is kept once
            self._db.executemany("INSERT OR IGNORE INTO history VALUES (?, ?, ?, ?, ?, ?)", kept)
            self._db.executemany(
                "INSERT INTO incidents (id, status, severity, kind, entity, opened, updated, resolved, record) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status, "
                "severity = excluded.severity, kind = excluded.kind, entity = excluded.entity, "
                "updated = excluded.updated, resolved = excluded.resolved, record = excluded.record "
                "WHERE excluded.updated >= incidents.updated",
                rows,
            )

    def find(self, q: Query) -> list[dict[str, Any]]:
        where: list[str] = []
        args: list[Any] = []
        for column, value in (("status", q.status), ("severity", q.severity), ("kind", q.kind)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if q.entity is not None:
            where.append("entity GLOB ?")
            args.append(q.entity)
        if q.since is not None:
            where.append("updated >= ?")
            args.append(q.since)
        if q.until is not None:
            where.append("updated < ?")
            args.append(q.until)
        sql = "SELECT * FROM incidents" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY updated DESC, id LIMIT ?"
        args.append(max(1, min(q.limit, MAX_LIMIT)))
        with self._lock:
            cur = self._db.execute(sql, args)
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        return [_shown(row) for row in rows]

    def get(self, incident_id: str) -> dict[str, Any] | None:
        with self._lock:
            cur = self._db.execute("SELECT * FROM incidents WHERE id = ?", (incident_id,))
            names = [d[0] for d in cur.description]
            row = cur.fetchone()
        return _shown(dict(zip(names, row, strict=True))) if row else None

    def history(self, incident_id: str) -> list[dict[str, Any]]:
        """Every state of an incident, oldest first."""
        with self._lock:
            cur = self._db.execute(
                "SELECT updated, status, severity, root, gpus_hit FROM history WHERE id = ? ORDER BY updated, status",
                (incident_id,),
            )
            rows = cur.fetchall()
        return [dict(zip(("updated", "status", "severity", "root", "gpus_hit"), row, strict=True)) for row in rows]

    def acknowledge(self, incident_id: str, by: str, comment: str) -> bool:
        with self._lock:
            cur = self._db.execute(
                "UPDATE incidents SET acked_by = ?, acked_at = ?, ack_comment = ? WHERE id = ?",
                (by, time.time(), comment, incident_id),
            )
        return cur.rowcount == 1

    def request_resolve(self, incident_id: str, by: str, comment: str) -> bool:
        with self._lock:
            cur = self._db.execute(
                "UPDATE incidents SET resolve_by = ?, resolve_at = ?, resolve_comment = ? WHERE id = ?",
                (by, time.time(), comment, incident_id),
            )
        return cur.rowcount == 1

    def operator_resolved(self, within_s: float = 86400.0) -> list[str]:
        """Incidents operators resolved in the last day: after a restart, or a restore that
        replays ticks, the engine is asked again (it closes those it still holds open; the rest
        are no-ops)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id FROM incidents WHERE resolve_by IS NOT NULL AND resolve_at >= ? ORDER BY resolve_at",
                (time.time() - within_s,),
            ).fetchall()
        return [r[0] for r in rows]

    def counts(self) -> dict[tuple[str, str], int]:
        """(status, severity) -> incidents, for the unresolved ones (/metrics)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT status, severity, COUNT(*) FROM incidents WHERE resolved IS NULL GROUP BY status, severity"
            ).fetchall()
        return {(s, sev): int(n) for s, sev, n in rows}

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(row["record"])
    record["acknowledged"] = (
        {"by": row["acked_by"], "at": row["acked_at"], "comment": row["ack_comment"]} if row["acked_by"] else None
    )
    record["resolved_by_operator"] = (
        {"by": row["resolve_by"], "at": row["resolve_at"], "comment": row["resolve_comment"]}
        if row["resolve_by"]
        else None
    )
    return record


__all__ = ["IncidentIndex", "Query"]
