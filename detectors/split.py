"""Split detection's step, apart from Kafka: the loops a member holds (one per telemetry
partition) begin their ticks, share what the comparisons across partitions need, and are judged
once every partition's share of the tick is in (detectors.stack.summary.ShareBoard). The daemon
(aiops.detect_daemon) moves shares between members; a test moves them in memory."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from detectors.anomaly import Anomaly
from detectors.detect_loop import DetectLoop
from detectors.stack.summary import CohortSummary, ShareBoard

ShareSink = Callable[[int, int, CohortSummary], None]  # (partition, tick ns, share)


def advance(
    loops: Mapping[int, DetectLoop], board: ShareBoard, send: ShareSink, judged: list[tuple[int, int]] | None = None
) -> dict[int, list[Anomaly]]:
    """Begin and judge all that can be now, partition by partition; returns what each found
    (its predictions stay on its loop, as in one process). A share is sent as its tick begins;
    `judged` gets (partition, tick ns) of each tick judged, in order."""
    found: dict[int, list[Anomaly]] = {}
    progress = True
    while progress:
        progress = False
        for partition in sorted(loops):
            loop = loops[partition]
            if loop.pending is None:
                work = loop.begin_next()
                if work is None:
                    continue
                board.add(partition, loop.pending_ns, work.summary)
                send(partition, loop.pending_ns, work.summary)
            merged = board.merged(loop.pending_ns)
            if merged is not None:
                tick_ns = loop.pending_ns
                found.setdefault(partition, []).extend(loop.complete_pending(merged))
                if judged is not None:
                    judged.append((partition, tick_ns))
                progress = True
    return found


__all__ = ["ShareSink", "advance"]
