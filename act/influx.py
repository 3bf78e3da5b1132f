"""The audit log as points for a Grafana panel: measurement `aiops_action`, one point per change of
a plan (planned, held, waiting, executing, done, failed), tagged by plan, action, decision, state,
policy and target, at the event time it was planned (or acted on)."""

from __future__ import annotations

from act.audit import Row
from vocab.wire import string_field, tag_value

MEASUREMENT = "aiops_action"


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
        "incident": string_field(row.incident_id),
        "reason": string_field(row.reason),
        "detail": string_field(row.detail[:500]),
        "approved_by": string_field(row.approved_by or ""),
        # again as fields: InfluxQL's last() selects fields, not tags
        "status": string_field(row.state),
        "decided": string_field(row.decision),
        "done": "1i" if row.state == "done" else "0i",
        "executed": "1i" if row.state in ("executing", "done", "failed") else "0i",
    }
    at = row.acted_at if row.acted_at is not None else row.event_time
    head = MEASUREMENT + "".join(f",{k}={tag_value(v)}" for k, v in sorted(tags.items()))
    return f"{head} {','.join(f'{k}={v}' for k, v in fields.items())} {int(at * 1e9)}"


__all__ = ["MEASUREMENT", "action_line"]
