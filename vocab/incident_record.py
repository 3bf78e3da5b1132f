"""One incident as every view reads it: a typed value with its schema version, made once by the
engine (rca/incidents.py `Incident.record`) and carried, as this value, to the page, the report,
the list, chat, Alertmanager, the API, InfluxDB and the acting loop.

Issue 66 found the views disagreeing because each derived its own facts from the JSON: chat said
"resolved" from `resolved` being set, the list from `status`, a silent incident was "open" in one
view and "no data" in another, and one process serialised and parsed the same state three times.
Here each fact a view shows has one rule: `state` (open, no data, warning, resolved), `at` (the
event time of this state), `episode` (which spell of a flapping incident), `gpus_hit` (the
engine's blast radius, rca/blast.py `radius`). A view shows these and does not recompute them.

The wire form (aiops.incidents, incidents.jsonl, the API's JSON, the index) is `to_dict`: the
engine's fields, plus `schema` (SCHEMA_VERSION) and `state`. A record from before the version was
written (no `schema`) is version 1 and reads the same, its missing fields empty; a record of a
newer version than this code knows is refused by name rather than half-read.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# 2: `schema` and `state` written; silence (`no_data_since`, `no_data_entities`) and `episodes`.
# 1: everything before (no `schema` in the record).
SCHEMA_VERSION = 2

OPEN, NO_DATA, WARNING, RESOLVED = "open", "no data", "warning", "resolved"
STATES = (OPEN, NO_DATA, WARNING, RESOLVED)
ENGINE_STATUSES = ("open", "warning", "resolved")  # what the engine's `status` may say


class RecordError(ValueError):
    """A state that is not an incident record this code can read (missing or mistyped fields, or
    a schema version from the future)."""


@dataclass(frozen=True, slots=True)
class RootCause:
    entity: str
    kind: str
    confidence: float


@dataclass(frozen=True, slots=True)
class Episode:
    opened: float
    resolved: float | None


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RecordError(f"{name} is not a finite number: {value!r:.60}")
    return float(value)


def _maybe(value: object, name: str) -> float | None:
    return None if value is None else _number(value, name)


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise RecordError(f"{name} is not text: {value!r:.60}")
    return value


def _texts(value: object, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise RecordError(f"{name} is not a list of text")
    return tuple(value)


def _utc_hhmm(t: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(t))


@dataclass(frozen=True)
class IncidentRecord:
    incident_id: str
    opened: float
    updated: float
    status: str  # the engine's: open | warning | resolved (`state` says what a view shows)
    severity: str
    root: RootCause
    resolved: float | None = None
    candidates: tuple[Mapping[str, Any], ...] = ()
    affected: tuple[str, ...] = ()
    affected_count: int = 0
    jobs: tuple[str, ...] = ()
    job_gpus: Mapping[str, int] = field(default_factory=dict)
    gpus_hit: int = 0
    evidence: tuple[Mapping[str, Any], ...] = ()
    evidence_count: int = 0
    action: str = ""
    warned: float | None = None
    merged_into: str | None = None
    no_data_since: float | None = None
    no_data_entities: tuple[str, ...] = ()
    episodes: tuple[Episode, ...] = ()
    schema: int = SCHEMA_VERSION  # the version it was read from (written: always SCHEMA_VERSION)

    # ------------------------------------------------------------------ the facts views show

    @property
    def state(self) -> str:
        """What every view says the incident is: resolved once it has a resolution time (a
        warning whose horizon passed is over too), "no data" while open and its entity silent
        (silence is not health), else the engine's status."""
        if self.resolved is not None or self.status == RESOLVED:
            return RESOLVED
        if self.status == OPEN and self.no_data_since is not None:
            return NO_DATA
        return self.status

    @property
    def unresolved(self) -> bool:
        return self.state != RESOLVED

    @property
    def state_words(self) -> str:
        """The state as a person reads it (the page's badge, the list's cell, chat's headline)."""
        if self.state == NO_DATA and self.no_data_since is not None:
            return f"no data since {_utc_hhmm(self.no_data_since)}"
        return self.state

    @property
    def at(self) -> float:
        """The event time of this state: when it resolved, else when it was last updated."""
        return self.resolved if self.resolved is not None else self.updated

    @property
    def episode(self) -> int:
        """Which spell this is (flap damping reopens the same incident): 1 for the first."""
        return max(1, len(self.episodes))

    @property
    def episode_opened(self) -> float:
        """When the current spell began."""
        return self.episodes[-1].opened if self.episodes else self.opened

    @property
    def kind(self) -> str:
        return self.root.kind

    @property
    def entity(self) -> str:
        return self.root.entity

    # ------------------------------------------------------------------ the wire form

    def to_dict(self) -> dict[str, Any]:
        """The wire form, of this version (a record read from version 1 is written as it reads now)."""
        return {
            "schema": SCHEMA_VERSION,
            "incident_id": self.incident_id,
            "opened": self.opened,
            "updated": self.updated,
            "resolved": self.resolved,
            "status": self.status,
            "state": self.state,
            "severity": self.severity,
            "root_cause": {"entity": self.root.entity, "kind": self.root.kind, "confidence": self.root.confidence},
            "candidates": [dict(c) for c in self.candidates],
            "affected": list(self.affected),
            "affected_count": self.affected_count,
            "jobs": list(self.jobs),
            "job_gpus": dict(self.job_gpus),
            "gpus_hit": self.gpus_hit,
            "evidence": [dict(e) for e in self.evidence],
            "evidence_count": self.evidence_count,
            "action": self.action,
            "warned": self.warned,
            "merged_into": self.merged_into,
            "no_data_since": self.no_data_since,
            "no_data_entities": list(self.no_data_entities),
            "episodes": [{"opened": e.opened, "resolved": e.resolved} for e in self.episodes],
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> IncidentRecord:
        """Read a record as published (any version up to SCHEMA_VERSION); RecordError says why not.
        A view's own additions (the index's `acknowledged`) are not part of the record and are
        ignored here."""
        if not isinstance(d, Mapping):
            raise RecordError(f"an incident record is an object, not {type(d).__name__}")
        schema = d.get("schema", 1)
        if isinstance(schema, bool) or not isinstance(schema, int) or schema < 1:
            raise RecordError(f"schema is not a version number: {schema!r:.30}")
        if schema > SCHEMA_VERSION:
            raise RecordError(f"an incident record of schema {schema}; this service reads up to {SCHEMA_VERSION}")
        root = d.get("root_cause")
        if not isinstance(root, Mapping):
            raise RecordError("root_cause is missing")
        status = _text(d.get("status"), "status")
        if status not in ENGINE_STATUSES:
            raise RecordError(f"status is not one of {', '.join(ENGINE_STATUSES)}: {status!r:.30}")
        episodes = d.get("episodes") or ()
        if not isinstance(episodes, list | tuple) or not all(isinstance(e, Mapping) for e in episodes):
            raise RecordError("episodes is not a list of objects")
        job_gpus = d.get("job_gpus") or {}
        if not isinstance(job_gpus, Mapping):
            raise RecordError("job_gpus is not an object")
        evidence = d.get("evidence") or ()
        candidates = d.get("candidates") or ()
        for name, items in (("evidence", evidence), ("candidates", candidates)):
            if not isinstance(items, list | tuple) or not all(isinstance(i, Mapping) for i in items):
                raise RecordError(f"{name} is not a list of objects")
        merged = d.get("merged_into")
        return cls(
            schema=schema,
            incident_id=_text(d.get("incident_id"), "incident_id"),
            opened=_number(d.get("opened"), "opened"),
            updated=_number(d.get("updated"), "updated"),
            resolved=_maybe(d.get("resolved"), "resolved"),
            status=status,
            severity=_text(d.get("severity", "major"), "severity"),
            root=RootCause(
                _text(root.get("entity"), "root_cause.entity"),
                _text(root.get("kind"), "root_cause.kind"),
                _maybe(root.get("confidence"), "root_cause.confidence") or 0.0,
            ),
            candidates=tuple(candidates),
            affected=_texts(d.get("affected"), "affected"),
            affected_count=int(_number(d.get("affected_count", len(d.get("affected") or ())), "affected_count")),
            jobs=_texts(d.get("jobs"), "jobs"),
            job_gpus={str(k): int(_number(v, "job_gpus")) for k, v in job_gpus.items()},
            gpus_hit=int(_number(d.get("gpus_hit", 0), "gpus_hit")),
            evidence=tuple(evidence),
            evidence_count=int(_number(d.get("evidence_count", len(evidence)), "evidence_count")),
            action=_text(d.get("action") or "", "action"),
            warned=_maybe(d.get("warned"), "warned"),
            merged_into=None if merged is None else _text(merged, "merged_into"),
            no_data_since=_maybe(d.get("no_data_since"), "no_data_since"),
            no_data_entities=_texts(d.get("no_data_entities"), "no_data_entities"),
            episodes=tuple(
                Episode(_number(e.get("opened"), "episodes.opened"), _maybe(e.get("resolved"), "episodes.resolved"))
                for e in episodes
            ),
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> IncidentRecord:
        try:
            d = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise RecordError(f"not JSON: {exc}") from None
        return cls.from_dict(d)


def plan_line(plan: Mapping[str, Any]) -> str:
    """One plan of the audit log (act/audit.py Row, as a mapping) as the page, the list and chat
    say it: the action and its target, the decision and its state, who approved it."""
    approved = f" (approved by {plan['approved_by']})" if plan.get("approved_by") else ""
    return f"{plan.get('action')} {plan.get('target')}: {plan.get('decision')}, {plan.get('state')}{approved}"


def as_record(value: IncidentRecord | Mapping[str, Any] | bytes | str) -> IncidentRecord:
    """A record however it arrived: the value itself (in one process), or its wire form."""
    if isinstance(value, IncidentRecord):
        return value
    if isinstance(value, bytes | str):
        return IncidentRecord.from_json(value)
    return IncidentRecord.from_dict(value)


def as_records(values: Sequence[IncidentRecord | Mapping[str, Any] | bytes | str]) -> list[IncidentRecord]:
    return [as_record(v) for v in values]


__all__ = [
    "ENGINE_STATUSES",
    "NO_DATA",
    "OPEN",
    "RESOLVED",
    "SCHEMA_VERSION",
    "STATES",
    "WARNING",
    "Episode",
    "IncidentRecord",
    "RecordError",
    "RootCause",
    "as_record",
    "as_records",
    "plan_line",
]
