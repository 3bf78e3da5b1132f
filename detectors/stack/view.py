"""One measurement's frame at one tick, as every detector family of the stack sees it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from detectors.anomaly import Anomaly
from detectors.base import FloatArray, IndexArray
from ingest.frames import Frame


@dataclass(slots=True)
class MeasurementTick:
    t: float
    name: str  # the measurement
    frame: Frame
    ids: NDArray[np.object_]  # entity id per row
    series: IndexArray  # the entity's row in per-entity state
    n_entities: int  # entities of this measurement seen so far
    rates: dict[str, FloatArray] = field(default_factory=dict)  # counter -> per-second rate
    increments: dict[str, FloatArray] = field(default_factory=dict)  # counter -> increase this tick

    def emit(
        self,
        out: list[Anomaly],
        rows: NDArray[np.intp],
        metric: str,
        detector: str,
        score: FloatArray,
        value: FloatArray,
        expected: FloatArray | float,
        detail: Callable[[int], dict[str, str]] | None = None,
    ) -> None:
        """One anomaly per row, in row order."""
        exp = np.broadcast_to(np.asarray(expected, dtype=np.float64), (len(self.frame),))
        for r in rows.tolist():
            out.append(
                Anomaly(
                    self.t,
                    str(self.ids[r]),
                    metric,
                    detector,
                    float(score[r]),
                    finite(value[r]),
                    finite(exp[r]),
                    self.name,
                    detail(r) if detail else {},
                )
            )


def finite(x: float | np.floating | None) -> float | None:
    """A JSON-safe value: None for missing or infinite."""
    if x is None:
        return None
    v = float(x)
    return v if np.isfinite(v) else None
