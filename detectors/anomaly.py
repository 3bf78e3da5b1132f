"""What detectors emit: anomalies (one record per entity, metric and detector that fired) and
failure predictions. Plain records, so the stages downstream read them without the detectors."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field


def wire_number(v: float | None) -> float | None:
    """A number as the anomalies topic carries it: six decimals, None if not finite (JSON has no
    NaN). Whatever quotes an anomaly's numbers says them so, read from the topic or not."""
    if isinstance(v, float):
        return round(v, 6) if math.isfinite(v) else None
    return v


@dataclass(frozen=True, slots=True)
class Anomaly:
    at: float  # event time, seconds
    entity: str
    metric: str
    detector: str  # "rule:xid", "peer:job", "stat:drift", ...
    score: float
    value: float | None
    expected: float | None
    measurement: str = ""
    detail: dict[str, str] = field(default_factory=dict)  # e.g. XID meaning, severity, action

    def to_json(self) -> bytes:
        body = asdict(self)
        for key in ("score", "value", "expected"):
            body[key] = wire_number(body[key])
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @staticmethod
    def from_json(raw: bytes | str) -> Anomaly:
        body = json.loads(raw)
        return Anomaly(**body)


# Who stopped or started reporting, on the anomalies' path but not anomalies (score 0, never a
# symptom): detectors/stack/presence.py says each watched entity's silence and its return once each,
# metric "reporting" 0 or 1; the incident engine keeps an incident whose entity is silent open.
# They travel with the findings so that an engine fed from a topic (split detection) hears them too.
REPORTING = "reporting"
PRESENCE_GONE = "presence:gone"
PRESENCE_BACK = "presence:back"


def is_presence(a: Anomaly) -> bool:
    return a.detector in (PRESENCE_GONE, PRESENCE_BACK)


@dataclass(frozen=True, slots=True)
class Prediction:
    entity: str
    at: float
    kind: str
    probability: float
    horizon_s: float
    expected_in_s: float | None
    action: str
    # a warning already given, said again because its probability has risen (detectors/predict/
    # online.py raise_by): the incident takes the higher probability and acting decides again;
    # quality counts the first word of each episode only
    update: bool = False

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()

    @staticmethod
    def from_json(raw: bytes | str) -> Prediction:
        return Prediction(**json.loads(raw))
