"""Incidents, notices, anomalies and predictions into InfluxDB, for Grafana: one point per
incident state change, per notice, per anomaly and per prediction.

Measurement `aiops_incident`, tagged by incident id, severity, status and kind, with the root,
the blast radius and the action as fields, at the time of the change. The dashboard
(dashboards/json/incidents.json) reads the latest state per incident and counts the open ones.
Measurement `aiops_notice`, tagged by notice kind and subject (for coverage: the fault kind),
with the verdict, the message and what is missing; the same dashboard shows the latest per kind.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from detectors.anomaly import Anomaly, Prediction
from detectors.coverage import Notice
from ingest.influx_writer import InfluxUnavailableError, InfluxWriteError, InfluxWriter
from vocab.incident_record import NO_DATA, OPEN, SCHEMA_VERSION, IncidentRecord, as_records
from vocab.settings import InfluxSettings
from vocab.wire import string_field, tag_value

log = logging.getLogger(__name__)

MEASUREMENT = "aiops_incident"
NOTICE_MEASUREMENT = "aiops_notice"
# anomalies and predictions, tagged with where the entity sits (node, rack, pod, plane) so a panel
# can filter and group them as it does the telemetry
ANOMALY_MEASUREMENT = "aiops_anomaly"
PREDICTION_MEASUREMENT = "aiops_prediction"
# the daemon's own health (wall-clock data by nature, like aiops_ingest): what it has taken, how
# far behind the broker and the cluster it runs; the overview's lag and tick-delay panels
SERVICE_MEASUREMENT = "aiops_service"
# which job holds which node, as the scheduler said: telemetry carries no job tag unless the
# exporter maps jobs (a stock dcgm-exporter does not), so a dashboard's job picks its nodes here
JOB_MEASUREMENT = "aiops_job"
# each node's state as the scheduler said it (drain, down, ok), for the fleet dashboard's node
# states: one point per node per node_state event
NODE_MEASUREMENT = "aiops_node"
Locate = Callable[[str], dict[str, str]]


def incident_line(record: IncidentRecord) -> str:
    """One incident state as a line of line protocol: the record's own fields, its `state` as
    the page, the list and chat say it (a silent incident is "no data", not "open")."""
    tags = {
        "incident_id": record.incident_id,
        "severity": record.severity,
        "status": record.status,
        "kind": record.kind,
    }
    fields = {
        "root": string_field(record.entity),
        # the state as fields: InfluxQL selects fields, not tags, with last()
        "state": string_field(record.state),
        "level": string_field(record.severity),
        # unresolved: open, or open without data (a silent GPU is not healthy)
        "open": "1i" if record.state in (OPEN, NO_DATA) else "0i",
        "no_data": "1i" if record.state == NO_DATA else "0i",
        "confidence": repr(record.root.confidence),
        "affected": f"{record.affected_count}i",
        "gpus_hit": f"{record.gpus_hit}i",
        "jobs": string_field(",".join(record.jobs)),
        "jobs_hit": f"{len(record.jobs)}i",
        "action": string_field(record.action),
        "opened": repr(record.opened),
        "episode": f"{record.episode}i",
        "schema": f"{SCHEMA_VERSION}i",
    }
    head = MEASUREMENT + "".join(f",{k}={tag_value(str(v))}" for k, v in sorted(tags.items()))
    body = ",".join(f"{k}={v}" for k, v in fields.items())
    return f"{head} {body} {int(record.updated * 1e9)}"


def notice_line(notice: Notice) -> str:
    """One notice as a line of line protocol."""
    tags = {"kind": notice.kind, "subject": notice.subject}
    fields = {
        "status": string_field(notice.status),
        "blind": "1i" if notice.status == "blind" else "0i",
        "degraded": "1i" if notice.status == "degraded" else "0i",
        "message": string_field(notice.message),
        "missing": string_field(",".join(notice.detail.get("missing", []))),
    }
    head = NOTICE_MEASUREMENT + "".join(f",{k}={tag_value(v)}" for k, v in sorted(tags.items()))
    return f"{head} {','.join(f'{k}={v}' for k, v in fields.items())} {int(notice.at * 1e9)}"


def _number(value: float | None) -> str | None:
    return repr(float(value)) if value is not None and math.isfinite(value) else None


def _head(measurement: str, tags: dict[str, str]) -> str:
    return measurement + "".join(f",{k}={tag_value(v)}" for k, v in sorted(tags.items()) if v)


def anomaly_line(a: Anomaly, where: dict[str, str]) -> str:
    """One anomaly: tagged by entity, its measurement, metric and detector, and where it sits."""
    tags = {"entity": a.entity, "measurement": a.measurement, "metric": a.metric, "detector": a.detector, **where}
    fields = {"score": _number(a.score), "value": _number(a.value), "expected": _number(a.expected)}
    fields["early"] = "1i" if a.detector.startswith("warn:") else "0i"
    body = ",".join(f"{k}={v}" for k, v in fields.items() if v is not None)
    return f"{_head(ANOMALY_MEASUREMENT, tags)} {body} {int(a.at * 1e9)}"


def prediction_line(p: Prediction, where: dict[str, str]) -> str:
    """One prediction: what is expected to fail, how likely, how soon, and what to do."""
    tags = {"entity": p.entity, "kind": p.kind, **where}
    fields = {
        "probability": _number(p.probability),
        "horizon_s": _number(p.horizon_s),
        "expected_in_s": _number(p.expected_in_s),
        "action": string_field(p.action),
    }
    body = ",".join(f"{k}={v}" for k, v in fields.items() if v is not None)
    return f"{_head(PREDICTION_MEASUREMENT, tags)} {body} {int(p.at * 1e9)}"


def service_line(
    instance: str,
    role: str,
    values: int,
    ticks: int,
    lag: int,
    tick_delay_s: float | None,
    analysis_s: float,
    time_ns: int,
) -> str:
    """The daemon's counters (values taken, ticks analysed, seconds spent analysing: cumulative,
    so a panel takes their rate) and gauges (messages not taken yet, seconds behind the newest
    analysed tick's event time) as one line."""
    fields = {
        "values": f"{int(values)}i",
        "ticks": f"{int(ticks)}i",
        "lag": f"{int(lag)}i",
        "tick_delay_s": _number(tick_delay_s),
        "analysis_s": _number(analysis_s),
    }
    body = ",".join(f"{k}={v}" for k, v in fields.items() if v is not None)
    return f"{_head(SERVICE_MEASUREMENT, {'instance': instance, 'role': role})} {body} {time_ns}"


def job_lines(events: list[dict[str, Any]]) -> list[str]:
    """Scheduler events (already validated: vocab.schedule) as points: per job and node it holds
    (`running` 1, the GPUs it holds there), per job (tagged by the job alone: `running` 1 and
    the GPUs it holds in all when it starts, `running` 0 and no GPUs when it ends, so that the
    last point of each job's series says what it holds now), and per node whose state the
    scheduler said (`aiops_node`: the state, its reason, `drained` and `down` as 0 or 1)."""
    lines = []
    for e in events:
        kind, job, at = e.get("type"), e.get("job"), e.get("time")
        if kind == "node_state" and isinstance(at, int | float):
            lines += node_lines(e)
            continue
        if not isinstance(job, str) or not isinstance(at, int | float):
            continue
        stamp = int(float(at) * 1e9)
        if kind in ("job_start", "job_running"):
            held = e.get("gpus_by_node") or {}
            nodes = e.get("nodes") or []
            each = int(e.get("gpus") or 0) // max(len(nodes), 1)
            total = 0
            for node in nodes:
                gpus = len(held[node]) if node in held else each
                total += gpus
                lines.append(f"{_head(JOB_MEASUREMENT, {'job': job, 'node': node})} running=1i,gpus={gpus}i {stamp}")
            lines.append(f"{_head(JOB_MEASUREMENT, {'job': job})} running=1i,gpus={total}i {stamp}")
        elif kind == "job_end":
            reason = string_field(str(e.get("reason", "")))
            lines.append(f"{_head(JOB_MEASUREMENT, {'job': job})} running=0i,gpus=0i,reason={reason} {stamp}")
    return lines


def node_lines(e: dict[str, Any]) -> list[str]:
    """A node_state event (vocab.schedule NODE_STATES) as one `aiops_node` point per node."""
    state = str(e.get("state"))
    fields = (
        f"state={string_field(state)},reason={string_field(str(e.get('reason', '')))},"
        f"drained={int(state == 'drain')}i,down={int(state == 'down')}i"
    )
    stamp = int(float(e["time"]) * 1e9)
    return [f"{_head(NODE_MEASUREMENT, {'node': str(n)})} {fields} {stamp}" for n in e.get("nodes") or []]


class IncidentWriter:
    """Writes incident states as they change; a write that fails for good is logged and counted,
    never raised: Grafana being behind must not stop the analysis."""

    def __init__(self, settings: InfluxSettings) -> None:
        self._writer = InfluxWriter(settings)
        self.written = 0
        self.dropped = 0

    def add_findings(self, anomalies: list[Anomaly], predictions: list[Prediction], where: Locate) -> None:
        """A tick's anomalies and predictions (early warnings among them: the `warn:` detectors),
        each tagged with where its entity sits."""
        lines = [anomaly_line(a, where(a.entity)) for a in anomalies]
        lines += [prediction_line(p, where(p.entity)) for p in predictions]
        self._write(lines, "anomalies and predictions")

    def _write(self, lines: list[str], what: str) -> None:
        if not lines:
            return
        try:
            self._writer.write_points("\n".join(lines).encode())
            self.written += len(lines)
        except (InfluxWriteError, InfluxUnavailableError) as exc:
            self.dropped += len(lines)
            log.error("%s not written to InfluxDB (%d points): %s", what, len(lines), exc)

    def add_lines(self, lines: list[str], what: str) -> None:
        """Lines another stage made (the acting loop's audit points)."""
        self._write(lines, what)

    def add_schedule(self, events: list[dict[str, Any]]) -> None:
        self._write(job_lines(events), "jobs")

    def add_service(self, line: str) -> None:
        self._write([line], "service health")

    def add(self, states: Sequence[IncidentRecord | bytes]) -> None:
        if not states:
            return
        lines = [incident_line(r) for r in as_records(states)]
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


__all__ = [
    "ANOMALY_MEASUREMENT",
    "JOB_MEASUREMENT",
    "MEASUREMENT",
    "NODE_MEASUREMENT",
    "NOTICE_MEASUREMENT",
    "PREDICTION_MEASUREMENT",
    "SERVICE_MEASUREMENT",
    "IncidentWriter",
    "anomaly_line",
    "incident_line",
    "job_lines",
    "node_lines",
    "notice_line",
    "prediction_line",
    "service_line",
]
