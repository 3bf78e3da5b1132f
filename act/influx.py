"""The audit log as points for a Grafana panel: measurement `aiops_action`, one point per change of
a plan (planned, held, waiting, executing, done, failed), tagged by plan, action, decision, state,
policy and target, at the event time it was planned (or acted on)."""

from __future__ import annotations

from act.audit import Row

MEASUREMENT = "aiops_action"


def _tag(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ") or "-"


def _text(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def action_line(row: Row) -> str:
    tags = {
        "plan_id": row.plan_id,
        "action": row.action,
        "decision": row.decision,
        "state": row.state,
        "policy": row.policy,
        "target": row.target,
    }
    fields = {
        "incident": _text(row.incident_id),
        "reason": _text(row.reason),
        "detail": _text(row.detail[:500]),
        "approved_by": _text(row.approved_by or ""),
        # again as fields: InfluxQL's last() selects fields, not tags
        "status": _text(row.state),
        "decided": _text(row.decision),
        "done": "1i" if row.state == "done" else "0i",
        "executed": "1i" if row.state in ("executing", "done", "failed") else "0i",
    }
    at = row.acted_at if row.acted_at is not None else row.event_time
    head = MEASUREMENT + "".join(f",{k}={_tag(v)}" for k, v in sorted(tags.items()))
    return f"{head} {','.join(f'{k}={v}' for k, v in fields.items())} {int(at * 1e9)}"


__all__ = ["MEASUREMENT", "action_line"]
