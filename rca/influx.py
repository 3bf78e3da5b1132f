"""Incidents and notices into InfluxDB, for Grafana: one point per incident state change, one per
notice.

Measurement `aiops_incident`, tagged by incident id, severity, status and kind, with the root,
the blast radius and the action as fields, at the time of the change. The dashboard
(dashboards/json/incidents.json) reads the latest state per incident and counts the open ones.
Measurement `aiops_notice`, tagged by notice kind and subject (for coverage: the fault kind),
with the verdict, the message and what is missing; the same dashboard shows the latest per kind.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from detectors.coverage import Notice
from ingest.influx_writer import InfluxUnavailableError, InfluxWriteError, InfluxWriter
from vocab.settings import InfluxSettings

log = logging.getLogger(__name__)

MEASUREMENT = "aiops_incident"
NOTICE_MEASUREMENT = "aiops_notice"


def _tag(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ") or "-"


def _text(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def incident_line(state: dict[str, Any]) -> str:
    """One incident state (the JSON record `aiops run` writes) as a line of line protocol."""
    root = state["root_cause"]
    tags = {
        "incident_id": state["incident_id"],
        "severity": state["severity"],
        "status": state["status"],
        "kind": root["kind"],
    }
    fields = {
        "root": _text(root["entity"]),
        # the status again as fields: InfluxQL selects fields, not tags, with last()
        "state": _text(state["status"]),
        "level": _text(state["severity"]),
        "open": "1i" if state["status"] == "open" else "0i",
        "confidence": repr(float(root.get("confidence") or 0.0)),
        "affected": f"{int(state.get('affected_count', len(state.get('affected', []))))}i",
        "gpus_hit": f"{int(state.get('gpus_hit', 0))}i",
        "jobs": _text(",".join(state.get("jobs", []))),
        "action": _text(state.get("action", "")),
        "opened": repr(float(state["opened"])),
    }
    head = MEASUREMENT + "".join(f",{k}={_tag(str(v))}" for k, v in sorted(tags.items()))
    body = ",".join(f"{k}={v}" for k, v in fields.items())
    return f"{head} {body} {int(float(state['updated']) * 1e9)}"


def notice_line(notice: Notice) -> str:
    """One notice as a line of line protocol."""
    tags = {"kind": notice.kind, "subject": notice.subject}
    fields = {
        "status": _text(notice.status),
        "blind": "1i" if notice.status == "blind" else "0i",
        "degraded": "1i" if notice.status == "degraded" else "0i",
        "message": _text(notice.message),
        "missing": _text(",".join(notice.detail.get("missing", []))),
    }
    head = NOTICE_MEASUREMENT + "".join(f",{k}={_tag(v)}" for k, v in sorted(tags.items()))
    return f"{head} {','.join(f'{k}={v}' for k, v in fields.items())} {int(notice.at * 1e9)}"


class IncidentWriter:
    """Writes incident states as they change; a write that fails for good is logged and counted,
    never raised: Grafana being behind must not stop the analysis."""

    def __init__(self, settings: InfluxSettings) -> None:
        self._writer = InfluxWriter(settings)
        self.written = 0
        self.dropped = 0

    def add(self, states: list[bytes]) -> None:
        if not states:
            return
        lines = [incident_line(json.loads(s)) for s in states]
        try:
            self._writer.write_points("\n".join(lines).encode())
            self.written += len(lines)
        except (InfluxWriteError, InfluxUnavailableError) as exc:
            self.dropped += len(lines)
            log.error("incidents not written to InfluxDB (%d states): %s", len(lines), exc)

    def add_notices(self, notices: list[Notice]) -> None:
        if not notices:
            return
        try:
            self._writer.write_points("\n".join(notice_line(n) for n in notices).encode())
            self.written += len(notices)
        except (InfluxWriteError, InfluxUnavailableError) as exc:
            self.dropped += len(notices)
            log.error("notices not written to InfluxDB (%d): %s", len(notices), exc)

    def close(self) -> None:
        self._writer.close()


__all__ = ["MEASUREMENT", "NOTICE_MEASUREMENT", "IncidentWriter", "incident_line", "notice_line"]
