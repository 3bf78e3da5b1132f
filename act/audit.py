"""The audit log of every plan and action (SQLite beside the outbox): what was planned for which
incident, what was decided (dry run, executed, blocked by the breaker, waiting for approval, ...),
who or what approved it, and how it ended. A plan's id is a digest of (incident, policy, action,
target), so planning the same thing again (a repeated incident state, a restart replaying the
topic) finds the row that is there and does nothing twice.

States: planned -> executing -> done | failed; or planned and held (dry_run, blocked, excluded,
awaiting_approval). `executing` is committed before the executor runs: a SIGKILL between the two
leaves a row the next start settles (act.executors.settle) instead of running it blind again.

The pages read it one way: `plans_by_incident` groups the rows by incident, for the daemon's pages
(aiops/api.py, from the log the daemon writes) and the report's (show/report.py, from a recorded
run's log, opened read-only by `read_plans`)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    plan_id TEXT PRIMARY KEY,
    incident_id TEXT NOT NULL,
    policy TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    reason TEXT NOT NULL,
    decision TEXT NOT NULL,
    state TEXT NOT NULL,
    approved_by TEXT,
    detail TEXT NOT NULL DEFAULT '',
    planned_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    event_time REAL NOT NULL,
    acted_at REAL,
    node TEXT
);
CREATE INDEX IF NOT EXISTS actions_target ON actions (target, event_time);
"""
# one record per drain: its (node, incident, policy), as the drain's plan id is
REMEDIATION_TABLE = """
CREATE TABLE IF NOT EXISTS remediation (
    node TEXT NOT NULL,
    incident_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    root TEXT NOT NULL,
    source TEXT NOT NULL,
    policy TEXT NOT NULL,
    state TEXT NOT NULL,
    rung INTEGER NOT NULL,
    next_at REAL NOT NULL,
    opened_at REAL NOT NULL,
    drained_at REAL,
    closed_at REAL,
    history TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (node, incident_id, policy)
);
"""
REMEDIATION_COLUMNS = (
    "node, incident_id, kind, root, source, policy, state, rung, next_at, opened_at, drained_at, closed_at, history"
)

HELD = ("dry_run", "blocked", "excluded", "awaiting_approval")
COLUMNS = (
    "plan_id, incident_id, policy, action, target, reason, decision, state, approved_by, detail, event_time, acted_at,"
    " node"
)


class AuditReadError(ValueError):
    """An audit log that cannot be read; the message names the file and why."""


def _select(columns: set[str], where: str = "") -> str:
    """The rows, in the order planned; a log written before rows named their node reads NULL
    for it (what opening it for writing would add, as AuditLog does)."""
    named = COLUMNS if "node" in columns else COLUMNS.replace(" node", " NULL AS node")
    return f"SELECT {named} FROM actions{where} ORDER BY planned_at, plan_id"


def plans_by_incident(rows: Iterable[Row]) -> dict[str, list[Row]]:
    """Each incident's plans, in the order planned (the latest last): what its page lists, and
    the incident list's action and its state. The one reading of the log for the daemon's pages
    (aiops/api.py, from the log it writes) and the report's (show/report.py, `read_plans`)."""
    out: dict[str, list[Row]] = {}
    for row in rows:
        out.setdefault(row.incident_id, []).append(row)
    return out


def read_plans(path: Path) -> dict[str, list[Row]] | None:
    """The plans of a recorded run's audit log (`aiops run --actions` writes `actions.sqlite`
    beside its incidents), by incident; None when there is no log (the run did not act). Read
    only: the log is the record of what was planned, and showing it changes nothing in it (no
    table created, no journal mode set, as opening an AuditLog would)."""
    if not path.is_file():
        return None
    # a log closed by its writer has no write-ahead file left: opened immutable, SQLite writes
    # nothing beside it (a read-only open of a WAL database would create its -shm and -wal, and
    # fail on a read-only copy of the run); one whose writer is running or was killed (or never
    # closed it: `aiops run --actions` leaves its plans in the -wal) has one, which holds its
    # latest plans: read through it (SQLite then uses the -shm index beside it, as any reader)
    wal = path.with_name(path.name + "-wal")
    mode = "mode=ro" if wal.is_file() and wal.stat().st_size else "mode=ro&immutable=1"
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True)
        try:
            columns = {c[1] for c in db.execute("PRAGMA table_info(actions)").fetchall()}
            found = db.execute(_select(columns)).fetchall() if columns else []
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise AuditReadError(f"{path}: cannot read the audit log ({exc})") from None
    return plans_by_incident(Row(*r) for r in found)


def plan_id(incident_id: str, policy: str, action: str, target: str) -> str:
    return hashlib.sha256(f"{incident_id}\x1f{policy}\x1f{action}\x1f{target}".encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Row:
    plan_id: str
    incident_id: str
    policy: str
    action: str
    target: str
    reason: str
    decision: str
    state: str
    approved_by: str | None
    detail: str
    event_time: float  # when it was planned (event time)
    acted_at: float | None = None  # when it was started (event time)
    # the node the topology places the target in (the target itself for a drain): what an
    # executor acts on, so that nothing cuts an id apart to find its node; None when the
    # topology places the target in no node (a leaf, a link), and for rows written before it
    node: str | None = None


def planned(
    incident_id: str,
    policy: str,
    action: str,
    target: str,
    reason: str,
    t: float,
    *,
    node: str | None,
    decision: str = "execute",
    detail: str = "",
) -> Row:
    """A new plan's row, before anything is done or approved: its id the digest of (incident,
    policy, action, target), planned at event time `t`, acting in `node`. The one way a plan's row
    is built (the planner's, act.remediation's), so a field added to Row is filled in one place."""
    return Row(
        plan_id(incident_id, policy, action, target),
        incident_id,
        policy,
        action,
        target,
        reason,
        decision,
        "planned",
        None,
        detail,
        t,
        node=node,
    )


@dataclass(frozen=True)
class RemediationRecord:
    """One node's way through act.remediation's state machine for one drain: the drain's
    (node, incident, policy), as its plan id is. A warning keeps its incident id when the failure
    it foresaw opens, so one incident can drain a node twice (under the prediction's policy, then
    the failure's), each drain a round of its own."""

    node: str
    incident_id: str
    kind: str
    root: str
    source: str  # incident | prediction
    policy: str  # the policy that drained it
    state: str
    rung: int  # the ladder's next rung (-1: not started)
    next_at: float  # event time the next step is due (inf: closed)
    opened_at: float
    drained_at: float | None
    closed_at: float | None
    history: tuple[dict[str, Any], ...]


def _record(found: tuple[Any, ...]) -> RemediationRecord:
    node, incident, kind, root, source, policy, state, rung, next_at, opened_at, drained_at, closed_at, history = found
    return RemediationRecord(
        node,
        incident,
        kind,
        root,
        source,
        policy,
        state,
        int(rung),
        float(next_at),
        float(opened_at),
        drained_at,
        closed_at,
        tuple(json.loads(history)),
    )


class AuditLog:
    def __init__(self, path: Path | None = None) -> None:
        # one connection, shared with the API's thread (which reads it and nothing else): every
        # statement runs, and its rows are read, under one lock (_query, _change)
        target = str(path) if path is not None else ":memory:"
        if path is not None:  # the state directory of a fresh machine does not exist yet
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA + REMEDIATION_TABLE)
            # a log written before rows named their node: the column added, the old rows NULL
            columns = {c[1] for c in self._db.execute("PRAGMA table_info(actions)").fetchall()}
            if "node" not in columns:
                self._db.execute("ALTER TABLE actions ADD COLUMN node TEXT")
            self._rekey_remediation()
        # told the plan's row after every change (a Grafana panel, through InfluxDB); its failure
        # must not undo the change, which is already committed
        self.listener: Callable[[Row], None] | None = None

    def _rekey_remediation(self) -> None:
        """A log whose remediation table was keyed by (node, incident) alone: rebuilt with the
        policy in the key, every record kept (SQLite cannot change a primary key in place)."""
        key = {c[1] for c in self._db.execute("PRAGMA table_info(remediation)").fetchall() if c[5]}
        if "policy" in key:
            return
        self._db.executescript(
            "BEGIN; ALTER TABLE remediation RENAME TO remediation_by_incident;"
            + REMEDIATION_TABLE
            + f"INSERT INTO remediation ({REMEDIATION_COLUMNS}, updated_at)"
            f" SELECT {REMEDIATION_COLUMNS}, updated_at FROM remediation_by_incident;"
            " DROP TABLE remediation_by_incident; COMMIT;"
        )

    def _tell(self, pid: str) -> None:
        if self.listener is None:
            return
        row = self.get(pid)
        if row is not None:
            try:
                self.listener(row)
            except Exception:  # the audit log is the record; the panel can lag
                logging.getLogger(__name__).exception("could not tell the change of plan %s", pid)

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _change(self, sql: str, args: tuple[object, ...]) -> int:
        """A write; the rows it changed."""
        with self._lock:
            return self._db.execute(sql, args).rowcount

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, pid: str) -> Row | None:
        found = self._query(f"SELECT {COLUMNS} FROM actions WHERE plan_id = ?", (pid,))
        return Row(*found[0]) if found else None

    def add(self, row: Row) -> bool:
        """Record a new plan; False when it is there already (nothing changes)."""
        now = time.time()
        added = self._change(
            "INSERT OR IGNORE INTO actions (plan_id, incident_id, policy, action, target, reason, decision, state,"
            " approved_by, detail, planned_at, updated_at, event_time, acted_at, node)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.plan_id,
                row.incident_id,
                row.policy,
                row.action,
                row.target,
                row.reason,
                row.decision,
                row.state,
                row.approved_by,
                row.detail,
                now,
                now,
                row.event_time,
                row.acted_at,
                row.node,
            ),
        )
        if added == 1:
            self._tell(row.plan_id)
        return added == 1

    def move(
        self,
        pid: str,
        state: str,
        detail: str = "",
        approved_by: str | None = None,
        decision: str | None = None,
        at: float | None = None,
    ) -> None:
        self._change(
            "UPDATE actions SET state = ?, detail = ?, updated_at = ?, approved_by = COALESCE(?, approved_by),"
            " decision = COALESCE(?, decision), acted_at = COALESCE(?, acted_at) WHERE plan_id = ?",
            (state, detail, time.time(), approved_by, decision, at, pid),
        )
        self._tell(pid)

    # ------------------------------------------------------------------ remediation (act.remediation)

    def remediation_add(self, rec: RemediationRecord) -> bool:
        """A drain's record, unless it has one already (a repeated state, a restart); False then."""
        return self._put(rec, "INSERT OR IGNORE") == 1

    def remediation_put(self, rec: RemediationRecord) -> None:
        """A record's new state, committed before the step it leads to is taken."""
        self._put(rec, "INSERT OR REPLACE")

    def _put(self, rec: RemediationRecord, verb: str) -> int:
        return self._change(
            f"{verb} INTO remediation ({REMEDIATION_COLUMNS}, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rec.node,
                rec.incident_id,
                rec.kind,
                rec.root,
                rec.source,
                rec.policy,
                rec.state,
                rec.rung,
                rec.next_at if math.isfinite(rec.next_at) else 1e300,
                rec.opened_at,
                rec.drained_at,
                rec.closed_at,
                json.dumps(list(rec.history), sort_keys=True),
                time.time(),
            ),
        )

    def remediation_get(self, node: str, incident: str, policy: str) -> RemediationRecord | None:
        """The record of the drain of `node` for `incident` under `policy`."""
        found = self._query(
            f"SELECT {REMEDIATION_COLUMNS} FROM remediation WHERE node = ? AND incident_id = ? AND policy = ?",
            (node, incident, policy),
        )
        return _record(found[0]) if found else None

    def remediation_open(self) -> list[RemediationRecord]:
        return [
            _record(r)
            for r in self._query(
                f"SELECT {REMEDIATION_COLUMNS} FROM remediation WHERE state IN"
                " ('suspect', 'cordoned', 'drained', 'remediating', 'validating') ORDER BY opened_at, node"
            )
        ]

    def remediation_all(self) -> list[RemediationRecord]:
        return [
            _record(r) for r in self._query(f"SELECT {REMEDIATION_COLUMNS} FROM remediation ORDER BY opened_at, node")
        ]

    def remediation_count(self, node: str, since: float) -> int:
        """The node's remediations (drained and worked on) opened since event time `since`."""
        ((n,),) = self._query(
            "SELECT COUNT(*) FROM remediation WHERE node = ? AND opened_at >= ? AND drained_at IS NOT NULL",
            (node, since),
        )
        return int(n)

    def rows(self, state: str | None = None) -> list[Row]:
        where, args = (" WHERE state = ?", (state,)) if state is not None else ("", ())
        return [Row(*r) for r in self._query(_select({"node"}, where), args)]  # the column is added at open

    def attempts(self, target: str, since: float) -> int:
        """Actions done (or under way) on `target` since event time `since`, putting it back in
        service, a check and a cordon (the first half of its drain) aside: what the limit counts."""
        ((n,),) = self._query(
            "SELECT COUNT(*) FROM actions WHERE target = ? AND event_time >= ?"
            " AND action NOT IN ('resume', 'check', 'cordon')"
            " AND state IN ('executing', 'done', 'failed')",
            (target, since),
        )
        return int(n)

    def out_of_service(self, since: float) -> set[str]:
        """Nodes this service drained (or is draining, or will drain at a checkpoint) since `since`
        and has not resumed: a plan waiting for its checkpoint counts, or ten of them planned at
        once would each pass the breaker. A node act.remediation is working on counts however long
        ago it was drained: its steps (a reset, a reboot, a requeue) do not pass the breaker
        themselves, so the node must count until it is back."""
        drained = {
            t
            for (t,) in self._query(
                "SELECT DISTINCT target FROM actions WHERE action IN ('drain', 'reboot', 'cordon') AND event_time >= ?"
                " AND (state IN ('waiting', 'executing', 'done')"
                " OR (state = 'planned' AND decision IN ('execute', 'at_checkpoint')))",
                (since,),
            )
        }
        resumed_after = {
            t
            for (t,) in self._query(
                "SELECT r.target FROM actions r WHERE r.action = 'resume' AND r.state = 'done' AND r.event_time >="
                " (SELECT MAX(d.event_time) FROM actions d WHERE d.target = r.target"
                " AND d.action IN ('drain', 'reboot', 'cordon') AND d.state IN ('executing', 'done'))"
            )
        }
        remediating = {
            n
            for (n,) in self._query(
                "SELECT DISTINCT node FROM remediation WHERE state IN ('drained', 'remediating', 'validating')"
            )
        }
        return (drained - resumed_after) | remediating


__all__ = [
    "HELD",
    "AuditLog",
    "AuditReadError",
    "RemediationRecord",
    "Row",
    "plan_id",
    "planned",
    "plans_by_incident",
    "read_plans",
]
