"""Anomalies as detectors/stack.py names them, for the rca tests."""

from __future__ import annotations

from detectors.anomaly import Anomaly


def node(n: int) -> str:
    return f"n{n:05d}"


def anomaly(
    at: float,
    entity: str,
    metric: str,
    detector: str,
    measurement: str,
    value: float | None = 1.0,
    expected: float | None = 0.0,
    detail: dict[str, str] | None = None,
) -> Anomaly:
    return Anomaly(at, entity, metric, detector, 1.0, value, expected, measurement, detail or {})
