"""Cumulative counters to per-second rates, per entity, in arrays.

Exporters report counters as running totals; detectors want rates. A counter that goes down was
reset (driver reload, GPU replaced, exporter restart): that tick gives no rate, not a negative
one, and certainly not an anomaly. Nor does a counter seen again after a long silence (a switch
back from a reboot, a node back from maintenance): what it gained while unseen is no one tick's
behaviour, so that sample starts a new baseline.
"""

from __future__ import annotations

import numpy as np

from detectors.base import FloatArray, IndexArray, State, grow


class CounterRates:
    def __init__(self, width: int) -> None:
        self.width = width
        self.last_value = np.full((0, width), np.nan)
        self.last_time = np.full((0, width), np.nan)

    def update(
        self, t: float | FloatArray, series: IndexArray, values: FloatArray, max_gap_s: float = np.inf
    ) -> tuple[FloatArray, FloatArray]:
        """(rates per second, increments) for this tick; `t` is the tick's time or each row's
        sample time (an (n, 1) column). NaN where there is no previous value,
        the counter reset, the previous value is older than `max_gap_s`, or the value is missing.
        Missing values keep the old reference."""
        rows = int(series.max()) + 1 if len(series) else 0
        self.last_value = grow(self.last_value, rows, np.nan)
        self.last_time = grow(self.last_time, rows, np.nan)
        previous = self.last_value[series]
        dt = t - self.last_time[series]
        increment = values - previous
        increment[(increment < 0) | (dt > max_gap_s)] = np.nan  # a reset, or back after a silence
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(dt > 0, increment / dt, np.nan)
        present = ~np.isnan(values)
        self.last_value[series] = np.where(present, values, previous)
        self.last_time[series] = np.where(present, t, self.last_time[series])
        return rate, increment

    def peek(self, t: float, series: IndexArray, values: FloatArray, column: int) -> FloatArray:
        """The rates update() would return for one column of these values now, without taking
        them in (no gap limit); a series never seen (index -1, or beyond the known ones) has none."""
        known = (series >= 0) & (series < len(self.last_value))
        previous = np.full(len(series), np.nan)
        last = np.full(len(series), np.nan)
        previous[known] = self.last_value[series[known], column]
        last[known] = self.last_time[series[known], column]
        dt = t - last
        increment = values - previous
        increment[increment < 0] = np.nan
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(dt > 0, increment / dt, np.nan)

    def state_dict(self) -> State:
        return {"last_value": self.last_value.copy(), "last_time": self.last_time.copy()}

    def load_state(self, state: State) -> None:
        self.last_value = np.asarray(state["last_value"], dtype=np.float64).copy()
        self.last_time = np.asarray(state["last_time"], dtype=np.float64).copy()
