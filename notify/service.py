"""The notification stage as the pipeline uses it: incident states in (event time), routed,
written to the outbox, delivered in the background."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from notify.alertmanager import alert_of
from notify.config import NotifyConfig
from notify.message import IncidentNote
from notify.outbox import DeliveryWorker, Outbox
from notify.router import Locate, Router
from vocab.incident_record import IncidentRecord, as_records

log = logging.getLogger(__name__)


class Notifier:
    """`live`: the daemon, where event time is about now; Alertmanager receivers (wall-clock
    time) are served only then."""

    def __init__(
        self, config: NotifyConfig, outbox_path: Path, locate: Locate | None = None, live: bool = False
    ) -> None:
        self.config = config
        self.outbox = Outbox(outbox_path, config)
        self.live = live
        self.router = Router(config, self.outbox.put, locate, self._alert if live else None)
        self.router.runtime_silences = self.outbox.silences.as_config
        self._worker: DeliveryWorker | None = None

    def _alert(self, receiver: str, note: IncidentNote, labels: dict[str, str]) -> None:
        self.outbox.alerts.upsert(receiver, note, alert_of(note, labels, self.config.cluster))

    def offer(
        self,
        states: Sequence[IncidentRecord | bytes],
        now: float,
        plans: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        """Incident states (the records themselves in one process, or as published on
        aiops.incidents), with their plans where acting is on, then whatever is due at event
        time `now`."""
        if states:
            self.router.offer(as_records(states), plans)
        self.router.advance(now)

    def state(self) -> Router:
        return self.router

    def restore(self, router: Router) -> None:
        router.attach(self.config, self.outbox.put, self.router.locate, self._alert if self.live else None)
        router.runtime_silences = self.outbox.silences.as_config
        self.router = router

    def start(self) -> None:
        if self._worker is None:
            self._worker = DeliveryWorker(self.outbox)
            self._worker.start()

    def stop(self, drain_s: float = 0.0) -> None:
        if self._worker is not None:
            self._worker.stop(drain_s)
            self._worker = None
        else:
            self.outbox.deliver_due()
        s = self.outbox.stats
        log.info(
            "notifications: %d queued, %d sent, %d retries, %d refused, %d pending",
            s.queued,
            s.sent,
            s.retries,
            s.failed,
            self.outbox.depth(),
        )
        self.outbox.close()

    def summary(self) -> dict[str, Any]:
        r, s = self.router.stats, self.outbox.stats
        return {
            "changes": r.changes,
            "notifications": r.notifications,
            "silenced": r.silenced,
            "unrouted": r.unrouted,
            "queued": s.queued,
            "duplicates": s.duplicates,
            "sent": s.sent,
            "retries": s.retries,
            "refused": s.failed,
            "alert_states": r.alert_states,
            "alert_posts": self.outbox.alerts.stats.posts,
            "alerts_skipped_offline": r.skipped_offline,
        }


def topology_locate(graph: Any) -> Locate:
    """rack, pod (a dragonfly group) and plane of an entity, from the topology graph."""

    def locate(entity: str) -> dict[str, str]:
        if entity not in graph:
            return {}
        out: dict[str, str] = {}
        rack = entity if graph.kind(entity) == "rack" else graph.ancestor(entity, "rack")
        if rack:
            out["rack"] = rack
        group = entity if graph.kind(entity) == "group" else graph.ancestor(entity, "group")
        if group:
            out["pod"] = group
        plane = graph.plane(entity)
        if plane >= 0:
            out["plane"] = str(plane)
        return out

    return locate
