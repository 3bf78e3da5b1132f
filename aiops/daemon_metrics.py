"""What the daemon loop reports as it goes: read by the HTTP API (/metrics, the probes) and
written to InfluxDB as `aiops_service` for the dashboards' lag and tick-delay panels."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class DaemonMetrics:
    """What the daemon loop reports as it goes; read by /metrics and the probes."""

    values: int = 0
    ticks: int = 0
    tick_seconds_sum: float = 0.0  # wall time spent analysing ticks
    last_tick: float | None = None  # event time of the newest analysed tick
    lag: int = 0  # telemetry messages on the broker not taken yet
    assigned: bool = False
    standing_by: bool = False
    heartbeat: float = field(default_factory=time.monotonic)
    started: float = field(default_factory=time.time)
    _rate: list[tuple[float, int]] = field(default_factory=list)

    def beat(self) -> None:
        self.heartbeat = time.monotonic()

    def took(self, values: int) -> None:
        self.values += values
        now = time.monotonic()
        self._rate.append((now, self.values))
        while len(self._rate) > 2 and now - self._rate[0][0] > 60.0:
            self._rate.pop(0)

    def samples_per_s(self) -> float:
        """Over the last minute."""
        if len(self._rate) < 2:
            return 0.0
        (t0, v0), (t1, v1) = self._rate[0], self._rate[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0

    def tick_delay_s(self) -> float | None:
        """Wall time now minus the event time of the newest analysed tick: how far behind the
        cluster the analysis runs (a replay of old data reads as far behind, which it is)."""
        return None if self.last_tick is None else time.time() - self.last_tick


__all__ = ["DaemonMetrics"]
