"""What one notification says, independent of where it goes: from an incident record (the JSON
on aiops.incidents) to a title, facts and links. Every chat format is built from this."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from notify.safe_text import markdown_text
from vocab.incident_record import NO_DATA, RESOLVED, IncidentRecord, as_record, plan_line

Escape = Callable[[str], str]  # how a format writes a data field as text (notify.safe_text)


def _same(value: str) -> str:
    return value


# the order chat services show severities in, and their colours (Feishu templates / Teams styles)
SEVERITY_RANK = {"critical": 0, "major": 1, "minor": 2, "warning": 3}
MAX_EVIDENCE_LINES = 3


@dataclass(frozen=True)
class IncidentNote:
    """One incident as a notification shows it."""

    incident_id: str
    status: str  # open | resolved | warning
    severity: str
    kind: str
    root: str
    confidence: float
    at: float  # event time of this state (opened, resolved or updated)
    opened: float
    jobs: tuple[str, ...]
    gpus_hit: int
    affected_count: int
    evidence: tuple[str, ...]
    action: str
    links: tuple[tuple[str, str], ...] = ()  # (label, url)
    # open and silent: the root's last sample (rca/incidents.py: it stays open until it is back)
    no_data_since: float | None = None
    episode: int = 1  # the incident resolved and recurred (flap damping): this is its nth spell
    episode_opened: float | None = None  # when this spell began, if not the first
    state: str = ""  # the record's state (vocab/incident_record.py: open, no data, warning, resolved)
    state_words: str = ""  # the record's state as the page and the list say it
    plans: tuple[str, ...] = ()  # its plans in the audit log (vocab/incident_record.py plan_line)
    grown_from: int | None = None  # said again because its GPUs hit grew from this (notify/router.py)

    @classmethod
    def from_record(
        cls,
        value: IncidentRecord | dict[str, Any] | bytes,
        public_url: str | None = None,
        grafana_url: str | None = None,
        plans: Sequence[Mapping[str, Any]] = (),
    ) -> IncidentNote:
        """The note of one incident state; its state, time, episode and blast radius are the
        record's own (vocab/incident_record.py), as the page, the list and the API show them."""
        record = as_record(value)
        links: list[tuple[str, str]] = []
        # the only links a message carries: built here from the configured URLs, the id
        # percent-encoded so that no character of it can end the link or start another
        quoted = urllib.parse.quote(record.incident_id, safe="")
        if public_url:
            links.append(("Incident", f"{public_url.rstrip('/')}/incidents/{quoted}"))
        if grafana_url:
            # the incidents dashboard narrowed to this incident (its $incident), from an hour before
            # it opened: the dashboard's own six hours miss an incident whose message is read later
            since_ms = int((record.opened - 3600) * 1000)
            board = f"{grafana_url.rstrip('/')}/d/aiops-incidents"
            links.append(("Grafana", f"{board}?var-incident={quoted}&from={since_ms}&to=now"))
        status = RESOLVED if record.state == RESOLVED else record.status
        return cls(
            incident_id=record.incident_id,
            status=status,
            severity=record.severity,
            kind=record.kind,
            root=record.entity,
            confidence=record.root.confidence,
            at=record.at,
            opened=record.opened,
            jobs=record.jobs,
            gpus_hit=record.gpus_hit,
            affected_count=record.affected_count,
            evidence=tuple(_evidence_line(e) for e in record.evidence[:MAX_EVIDENCE_LINES]),
            action=record.action,
            links=tuple(links),
            no_data_since=record.no_data_since if record.state == NO_DATA else None,
            episode=record.episode,
            episode_opened=record.episode_opened if record.episode > 1 else None,
            state=record.state,
            state_words=record.state_words,
            plans=tuple(plan_line(p) for p in plans),
        )

    @property
    def headline(self) -> str:
        """The headline as the data says it (for Alertmanager's labels and the logs)."""
        return self.headline_as(_same)

    def headline_as(self, esc: Escape) -> str:
        """The headline with every data field written by `esc` (a chat format's escaper)."""
        state = {"open": "", "resolved": "RESOLVED ", "warning": "PREDICTED "}.get(self.status, "")
        if self.status == "open" and self.episode > 1:
            state += f"REOPENED (episode {self.episode}) "
        if self.no_data_since is not None:  # not resolved: nothing heard from it
            state += f"NO DATA since {_hhmm(self.no_data_since)} "
        if self.grown_from is not None and self.status != "resolved":
            state += f"GREW to {self.gpus_hit} GPUs hit "
        return f"{state}[{esc(self.severity.upper())}] {esc(self.kind)} at {esc(self.root)}"

    def facts(self, esc: Escape = _same) -> list[tuple[str, str]]:
        """(label, value) pairs, in the order an on-call engineer reads them; the labels are ours,
        every data field in a value is written by `esc`."""
        shown = [esc(j) for j in self.jobs[:5]]
        jobs = ", ".join(shown) + (f" (+{len(self.jobs) - 5})" if len(self.jobs) > 5 else "")
        grown = f" (was {self.grown_from} when last told)" if self.grown_from is not None else ""
        out = [
            ("Root cause", f"{esc(self.root)} ({esc(self.kind)}, confidence {self.confidence:.2f})"),
            ("Blast radius", f"{self.gpus_hit} GPUs, {len(self.jobs)} jobs{': ' + jobs if jobs else ''}{grown}"),
            ("Action", esc(self.action) if self.action else "-"),
            ("Event time", _utc(self.at)),
            ("Incident", esc(self.incident_id)),
        ]
        if self.plans:  # what acting planned, as the page and the list show it
            out.insert(3, ("Plans", "; ".join(esc(p) for p in self.plans)))
        if self.status == "resolved":
            began = self.opened if self.episode_opened is None else self.episode_opened
            out.insert(4, ("Open for", f"{max(0.0, self.at - began) / 60:.0f} min"))
        if self.no_data_since is not None:
            out.insert(1, ("No data since", f"{_utc(self.no_data_since)}: open until it reports again, healthy"))
        if self.episode > 1:
            out.insert(-1, ("Episodes", f"{self.episode}: it resolved and came back; first opened {_utc(self.opened)}"))
        return out


@dataclass(frozen=True)
class Notification:
    """What one receiver is sent at once: one or more incidents of one group. `key` is the
    idempotency key (receiver, incidents and states, repeat number): the outbox sends each key
    at most once after it was acknowledged, and the key is in every payload so a receiver can
    drop a repeat."""

    key: str
    receiver: str
    incidents: tuple[IncidentNote, ...]
    repeat: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def worst(self) -> IncidentNote:
        return min(self.incidents, key=lambda n: (n.status == "resolved", SEVERITY_RANK.get(n.severity, 9)))

    @property
    def title(self) -> str:
        """The title as the data says it (Alertmanager, logs); a chat format uses `title_as`."""
        return self.title_as(_same)

    def title_as(self, esc: Escape) -> str:
        head = self.worst.headline_as(esc)
        more = len(self.incidents) - 1
        return head + (f" (+{more} more)" if more else "") + (" (reminder)" if self.repeat else "")

    def markdown_lines(self, esc: Escape = markdown_text, bold: str = "**") -> list[str]:
        """The body as Markdown lines, without the key line; one line per field, data written by
        `esc`, so that no line here was started by data. Incidents are separated by a blank line."""
        lines: list[str] = []
        for n in self.incidents:
            if lines:
                lines.append("")
            lines.append(f"{bold}{n.headline_as(esc)}{bold}")
            lines += [f"- {bold}{label}{bold}: {value}" for label, value in n.facts(esc)]
            lines += [f"- evidence: {esc(e)}" for e in n.evidence]
            lines += [f"- [{label}]({url})" for label, url in n.links]
        return lines

    def key_line(self, esc: Escape = markdown_text) -> str:
        return f"key: {esc(self.key)}"

    def markdown(self, esc: Escape = markdown_text, bold: str = "**") -> str:
        """The whole body as Markdown (DingTalk, Feishu, WeCom, Apprise and the webhook's text)."""
        return "\n".join([*self.markdown_lines(esc, bold), "", self.key_line(esc)])


def _evidence_line(e: Mapping[str, Any]) -> str:
    value = e.get("value")
    shown = f"{value:g}" if isinstance(value, int | float) else str(value)
    return f"{e.get('entity')} {e.get('metric')} = {shown} ({e.get('detector')})"


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _hhmm(t: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(t))
