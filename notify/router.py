"""From incident states to notifications, Alertmanager's way, in event time: routes pick
receivers by labels, a group (per route, by `group_by` labels; by default one incident) waits
`group_wait` before its first notification, then sends changes at most every `group_interval`,
and reminds every `repeat_interval` while something in it is still open. A notification is sent
when an incident opens (or is predicted, or a prediction comes true) and when it resolves; the
updates in between change what a reminder says, not whether one is sent. Silences and
maintenance windows hold back what they match.

Event time makes an offline replay and the daemon notify alike, and the router's state is part of
the daemon's checkpoint, so a restart carries on where it left off."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from notify.config import NotifyConfig, Silence
from notify.message import IncidentNote, Notification
from vocab.incident_record import IncidentRecord, as_records

log = logging.getLogger(__name__)

Locate = Callable[[str], dict[str, str]]  # entity -> {rack, pod, plane} where known
# receiver, incident state, its labels: Alertmanager receivers get every state, ungrouped
AlertSink = Callable[[str, IncidentNote, dict[str, str]], None]


# A blast radius that has grown this much since the incident was last news is news again: a job of
# 160 GPUs started on a GPU whose HBM incident said "1 GPU hit" (issue 66). Doubled, and by at least
# one node's GPUs (8 on an HGX/DGX H100 or H200 board), as Alertmanager sends again when new
# alerts join a group (group_interval): the impact changed, not just a counter ticked.
GROWTH_MIN_GPUS = 8


def grew(told: int, now: int) -> bool:
    """Has the GPUs-hit count grown enough since it was told to be said again."""
    return now >= 2 * told and now - told >= GROWTH_MIN_GPUS


@dataclass
class _Group:
    route: int
    receiver: str
    created: float
    pending: dict[str, IncidentNote] = field(default_factory=dict)  # changes not yet sent
    live: dict[str, IncidentNote] = field(default_factory=dict)  # open or predicted, latest state
    last_sent: float | None = None
    repeats: int = 0
    told: set[str] = field(default_factory=set)  # incidents whose opening this group announced


def _place(group: _Group, note: IncidentNote, changed: bool) -> None:
    if note.status == "resolved":
        group.live.pop(note.incident_id, None)
        if note.incident_id not in group.told:
            group.pending.pop(note.incident_id, None)  # over before it was announced: nothing to say
            return
    else:
        group.live[note.incident_id] = note
    if changed or note.incident_id in group.pending:
        group.pending[note.incident_id] = note  # a later state of an unsent change replaces it


@dataclass
class RouterStats:
    offered: int = 0
    changes: int = 0
    notifications: int = 0
    silenced: int = 0
    unrouted: int = 0
    alert_states: int = 0  # states handed to Alertmanager receivers
    skipped_offline: int = 0  # states for Alertmanager receivers in an offline run


class Router:
    def __init__(
        self,
        config: NotifyConfig,
        emit: Callable[[Notification], None],
        locate: Locate | None = None,
        alert: AlertSink | None = None,
    ) -> None:
        self.config = config
        self.emit = emit
        self.locate = locate
        self.alert = alert  # None: an offline run, where Alertmanager receivers are skipped
        self.runtime_silences: Callable[[], list[Silence]] | None = None  # made through the API
        self.stats = RouterStats()
        self._status: dict[str, str] = {}  # incident -> last status seen
        self._told_gpus: dict[str, int] = {}  # incident -> GPUs hit when its last change was news
        self._groups: dict[tuple[int, tuple[str, ...]], _Group] = {}
        self._routes = config.all_routes

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("_told_gpus", {})  # a checkpoint from before growth was news
        self.__dict__.update(state)

    def __getstate__(self) -> dict[str, Any]:
        """A checkpoint keeps the groups and what was seen; config, sink and topology are given
        again at start (`attach`)."""
        state = self.__dict__.copy()
        state["config"] = state["emit"] = state["locate"] = state["alert"] = None
        state["runtime_silences"] = None
        state["_routes"] = None
        return state

    def attach(
        self,
        config: NotifyConfig,
        emit: Callable[[Notification], None],
        locate: Locate | None,
        alert: AlertSink | None = None,
    ) -> None:
        self.config, self.emit, self.locate, self.alert = config, emit, locate, alert
        self._routes = config.all_routes
        self.runtime_silences = None

    def offer(
        self,
        records: Sequence[IncidentRecord | Mapping[str, Any]],
        plans: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        """Incident states as the engine publishes them (vocab/incident_record.py), with each
        one's plans in the audit log where acting is on (`plans`: incident id -> its rows)."""
        for record in as_records(records):
            self.stats.offered += 1
            note = IncidentNote.from_record(
                record, self.config.public_url, self.config.grafana_url, (plans or {}).get(record.incident_id, ())
            )
            before = self._status.get(note.incident_id)
            changed = note.status != before
            told = self._told_gpus.get(note.incident_id)
            if not changed and told is not None and grew(told, note.gpus_hit):
                note = replace(note, grown_from=told)  # news of its own: said again, with its own key
                changed = True
            if note.status == "resolved":
                self._status.pop(note.incident_id, None)
                self._told_gpus.pop(note.incident_id, None)
                if before is None:  # resolved before anything was said about it (merged on arrival)
                    continue
            else:
                self._status[note.incident_id] = note.status
                if changed:
                    self._told_gpus[note.incident_id] = note.gpus_hit
            labels = self._labels(note)
            routed = False
            for i, route in enumerate(self._routes):
                if not route.match.matches(labels):
                    continue
                routed = True
                if self.config.receiver(route.receiver).kind == "alertmanager":
                    self._to_alertmanager(route.receiver, note, labels)
                    if not route.continue_:
                        break
                    continue
                key = (i, tuple(labels.get(g, "") for g in route.group_by))
                group = self._groups.get(key)
                if group is None and changed:
                    group = self._groups[key] = _Group(i, route.receiver, note.at)
                if group is not None:  # (else an update of something this route is done with)
                    _place(group, note, changed)
                if not route.continue_:
                    break
            if changed:
                self.stats.changes += 1
            if not routed and changed:
                self.stats.unrouted += 1
                log.warning(
                    "no route matches incident %s (%s, %s, %s): not notified; add a route or a default_receiver",
                    note.incident_id,
                    note.kind,
                    note.severity,
                    note.status,
                )

    def _to_alertmanager(self, receiver: str, note: IncidentNote, labels: dict[str, str]) -> None:
        """Every state goes to Alertmanager, which groups, waits and repeats by itself. Our
        silences apply as they do to chat (a resolve always goes: it ends what was posted)."""
        if note.status != "resolved" and self._silenced(note, note.at):
            self.stats.silenced += 1
            return
        if self.alert is None:
            if not self.stats.skipped_offline:
                log.warning(
                    "alertmanager receiver %s skipped: Alertmanager keeps wall-clock time, so it is for "
                    "the live daemon (aiops run --kafka), not an offline run",
                    receiver,
                )
            self.stats.skipped_offline += 1
            return
        self.stats.alert_states += 1
        self.alert(receiver, note, labels)

    def advance(self, now: float) -> None:
        """Send what is due at event time `now`."""
        for key, group in list(self._groups.items()):
            route = self._routes[group.route]
            if group.pending:
                due = (
                    group.created + route.group_wait
                    if group.last_sent is None
                    else group.last_sent + route.group_interval
                )
                if now >= due:
                    self._send(group, list(group.pending.values()), now, repeat=False)
                    group.pending.clear()
            elif group.live and group.last_sent is not None and now >= group.last_sent + route.repeat_interval:
                self._send(group, list(group.live.values()), now, repeat=True)
            if not group.pending and not group.live:
                del self._groups[key]

    def _send(self, group: _Group, notes: list[IncidentNote], now: float, repeat: bool) -> None:
        audible = [n for n in notes if not self._silenced(n, now)]
        self.stats.silenced += len(notes) - len(audible)
        group.last_sent = now
        if not audible:
            return
        if repeat:
            group.repeats += 1
        group.told.update(n.incident_id for n in audible if n.status != "resolved")
        group.told.difference_update(n.incident_id for n in audible if n.status == "resolved")
        # an episode after the first (the incident resolved and came back) is said again: its own key
        states = ",".join(
            sorted(
                f"{n.incident_id}:{n.status}"
                + (f":e{n.episode}" if n.episode > 1 else "")
                + (f":g{n.gpus_hit}" if n.grown_from is not None else "")
                for n in audible
            )
        )
        if len(audible) > 1:
            states = "group-" + hashlib.blake2b(states.encode(), digest_size=8).hexdigest()
        key = f"{group.receiver}:{states}" + (f":r{group.repeats}" if repeat else "")
        audible.sort(key=lambda n: n.at)
        self.stats.notifications += 1
        self.emit(Notification(key, group.receiver, tuple(audible), group.repeats if repeat else 0))

    def _silenced(self, note: IncidentNote, now: float) -> bool:
        labels = self._labels(note)
        made = self.runtime_silences() if self.runtime_silences is not None else []
        silences = [*self.config.silences, *self.config.maintenance, *made]
        return any(s.active(now) and s.match.matches(labels) for s in silences)

    def _labels(self, note: IncidentNote) -> dict[str, str]:
        labels = {
            "incident_id": note.incident_id,
            "severity": note.severity,
            "kind": note.kind,
            "status": note.status,
            "entity": note.root,
        }
        if self.locate is not None:
            labels.update({k: v for k, v in self.locate(note.root).items() if v})
        return labels
