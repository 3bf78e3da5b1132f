"""Incidents: one per root cause, opened on the first tick of evidence, updated while evidence
arrives, resolved after a quiet period of the entity's own samples.

Per tick: anomalies become symptoms; symptoms that an open incident already explains are
attached to it (inhibited: no new incident for the 32 NICs of a leaf that is already down);
the rest are ranked and covered by new incidents, one per root (dedup by root entity). Drained
nodes under announced maintenance are silenced. A prediction opens a *warning* incident for its
entity; if that entity then fails, the warning becomes the failure's incident (`warned` keeps
when it was first seen coming).

Silence is a state, not health: an incident whose entity stopped reporting (a GPU fallen off the
bus sends no evidence at all) stays open as "no data since" and resolves only once the entity is
back and has been quiet for QUIET_S, or by a person's word (`close`). The engine learns who
reports from the findings, as an engine fed from a topic hears them too: the detectors' presence
records (detectors/anomaly.py PRESENCE_GONE / PRESENCE_BACK: each watched entity's silence and
its return, once each) and their `silent` anomaly.

Flap damping: an incident that resolved on its own and recurs on the same root and kind within
FLAP_WINDOW_S reopens (same id, one more entry in `episodes`) instead of paging as a new incident.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from detectors.anomaly import PRESENCE_GONE, Anomaly, Prediction, is_presence, wire_number
from rca.blast import AT_ONSET, STARTED_WHILE_OPEN, onset, radius
from rca.graph import TopologyGraph
from rca.rank import Candidate, Context, Ranker
from rca.symptoms import SOFT, Symptom, gpu_kind, nic_kind, symptom_of
from vocab import registry
from vocab.incident_record import Episode, IncidentRecord, RootCause
from vocab.schedule import Schedule

log = logging.getLogger(__name__)

QUIET_S = 900.0  # no evidence for this long, the entity reporting: resolved
# A recurrence this soon after an incident resolved on its own, on the same root and kind, reopens
# it: the same page is not sent as a new incident. Four hours is Prometheus Alertmanager's default
# repeat_interval ("how long to wait before sending a notification again if it has already been
# sent successfully", https://prometheus.io/docs/alerting/latest/configuration/#route), i.e. how
# long Alertmanager itself treats one alert as one conversation; VMware Smart Assurance keeps a
# cleared notification for the same 4 h (InactiveAutoArchiveInterval, 14,400 s), a recurrence
# within it reactivating the same notification, as ServiceNow's evt_mgmt.active_interval reopens
# a closed alert. It covers the flaps of issue 66 (every 15-40 min for four hours) many times over;
# a real fault on the same part and kind within it is one more episode of the incident (reopened
# and notified as such; `aiops eval` credits an episode with the fault it opened for).
FLAP_WINDOW_S = 4 * 3600.0
# a NIC's link faults: which one is the NIC's evidence's call (its own, or its cable's far end)
_NIC_LINK_KINDS = frozenset({"nic_link_flap", "ib_link_degraded", "ib_link_errors"})
FAMILY_MEMORY_S = 600.0  # how long a symptom counts as "what the entity shows" for signatures
SOFT_MEMORY_S = 12 * 3600.0  # early warnings (a sagging optic, a prediction) count for hours
TALKER_MEMORY_S = 180.0
MAX_EVIDENCE = 12
UPDATE_EVERY_S = 300.0
ABSORB_S = 90.0  # an incident this young can still turn out to be the first sign of a bigger one
SWEEP_EVERY_S = 60.0  # forgetting old symptom families is housekeeping, not per tick
MAX_AFFECTED = 500

# Actions, severities and early signs per kind are the registry's (vocab/faults.toml).
EARLY_SIGNS = {family: (sign.kind, sign.action) for family, sign in registry.EARLY_SIGNS.items()}
WARNING_S = 6 * 3600.0


def incident_id(root: str, opened: float) -> str:
    """An id made of what the incident is (its first root and when it opened, in event time), not
    of a counter: the same data gives the same ids offline, in a daemon, and in a daemon restarted
    from a checkpoint or replaying after a crash, and two instances or two restarts can never hand
    one id to two incidents. URL-safe (it names the incident's page)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(opened))
    digest = hashlib.blake2b(f"{root}\x00{opened!r}".encode(), digest_size=5).hexdigest()
    return f"inc-{stamp}-{digest}"


@dataclass
class Incident:
    incident_id: str
    opened: float
    updated: float
    root: Candidate
    candidates: list[Candidate]
    status: str = "open"  # open | resolved | warning
    resolved: float | None = None
    severity: str = "major"
    warned: float | None = None
    probability: float | None = None  # for warnings: the prediction's
    symptoms: set[Symptom] = field(default_factory=set)
    affected: dict[str, None] = field(default_factory=dict)  # insertion-ordered set
    jobs: list[str] = field(default_factory=list)
    job_gpus: dict[str, int] = field(default_factory=dict)  # every job hit so far -> its GPUs
    gpus_hit: int = 0
    evidence: list[dict[str, Any]] = field(default_factory=list)
    evidence_count: int = 0
    last_evidence: float = 0.0
    action: str = ""
    merged_into: str | None = None  # folded into that incident (it turned out to be part of it)
    # entities whose telemetry stopped -> event time of their last sample: open until they are back
    no_data: dict[str, float] = field(default_factory=dict)
    returned: float = 0.0  # when the last of them came back: the quiet period counts from then
    reopened: float | None = None  # when this episode began, if not the first (flap damping)
    past_episodes: list[tuple[float, float]] = field(default_factory=list)  # (opened, resolved)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """An incident checkpointed before issue 66 has no silence or episodes: none yet."""
        state.setdefault("no_data", {})
        state.setdefault("past_episodes", [])
        self.__dict__.update(state)

    @property
    def episodes(self) -> list[tuple[float, float | None]]:
        """Each spell of the incident, (opened, resolved), the current one last."""
        return [*self.past_episodes, (self.opened if self.reopened is None else self.reopened, self.resolved)]

    def record(self) -> IncidentRecord:
        """This state as the one typed record every view reads (vocab/incident_record.py)."""
        confidence = self.probability if self.status == "warning" else _confidence(self.candidates)
        return IncidentRecord(
            incident_id=self.incident_id,
            opened=self.opened,
            updated=self.updated,
            resolved=self.resolved,
            status=self.status,
            severity=self.severity,
            root=RootCause(self.root.entity, self.root.kind, float(confidence or 0.0)),
            candidates=tuple({"entity": c.entity, "kind": c.kind, "score": c.score} for c in self.candidates[:5]),
            affected=tuple(list(self.affected)[:MAX_AFFECTED]),
            affected_count=len(self.affected),
            jobs=tuple(self.jobs),
            job_gpus={j: self.job_gpus[j] for j in self.jobs if j in self.job_gpus},  # the GPUs each holds
            gpus_hit=self.gpus_hit,
            evidence=tuple(dict(e) for e in self.evidence),
            evidence_count=self.evidence_count,
            action=self.action,
            warned=self.warned,
            merged_into=self.merged_into,
            # open while it lasts: the entity stopped reporting then (its last sample)
            no_data_since=min(self.no_data.values()) if self.no_data else None,
            no_data_entities=tuple(sorted(self.no_data)[:MAX_AFFECTED]),
            episodes=tuple(Episode(a, b) for a, b in self.episodes),
        )

    def to_json(self) -> bytes:
        return self.record().to_json()


def _confidence(ranked: list[Candidate]) -> float:
    """The top score's share of the top three: 1.0 when nothing else explains the evidence."""
    scores = [max(c.score, 0.0) for c in ranked[:3]]
    return round(scores[0] / sum(scores), 3) if scores and sum(scores) > 0 else 1.0


@dataclass(slots=True)
class EngineStats:
    anomalies: int = 0
    symptoms: int = 0
    attached: int = 0
    silenced: int = 0
    opened: int = 0
    reopened: int = 0  # a recurrence within FLAP_WINDOW_S: an episode of the incident, not a new one
    resolved: int = 0
    warnings: int = 0
    # anomalies and predictions about entities the topology does not know: stored upstream and
    # counted here, never an incident (a typo'd or hostile id must not page anyone)
    outside_topology: int = 0


class IncidentEngine:
    def __init__(self, graph: TopologyGraph, schedule: Schedule | None = None) -> None:
        self.graph = graph
        self.schedule = schedule or Schedule()
        self.ranker = Ranker(graph)
        self.open: dict[str, Incident] = {}  # root entity -> open incident (and warnings)
        self.stats = EngineStats()
        self._families: dict[str, dict[str, float]] = {}  # entity -> family -> last seen
        self._talkers: dict[str, float] = {}  # NIC sending pauses -> last seen
        self._congested: dict[str, float] = {}  # spine waiting on its ports -> last seen
        self._swept = -float("inf")
        # root entity -> its incident that resolved on its own within FLAP_WINDOW_S (may reopen)
        self._recent: dict[str, Incident] = {}
        self._silent: dict[str, float] = {}  # entity that stopped reporting -> its last sample

    def __getstate__(self) -> dict[str, Any]:
        """A checkpoint keeps what the engine learned, not the topology (reloaded, `attach`)."""
        state = self.__dict__.copy()
        del state["graph"], state["ranker"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("_recent", {})  # a checkpoint from before issue 66
        state.setdefault("_silent", {})
        stats = state.get("stats")
        if stats is not None and not hasattr(stats, "reopened"):
            stats.reopened = 0
        self.__dict__.update(state)

    def attach(self, graph: TopologyGraph, schedule: Schedule) -> None:
        """The topology and the schedule of the restarted daemon, under a restored engine."""
        self.graph, self.schedule, self.ranker = graph, schedule, Ranker(graph)

    # ------------------------------------------------------------------ the tick

    def _outside(self, entity: str) -> None:
        self.stats.outside_topology += 1
        if self.stats.outside_topology in (1, 10, 100, 1000) or self.stats.outside_topology % 10000 == 0:
            log.warning(
                "%d anomalies or predictions about entities outside the topology (latest %.80r): "
                "counted, never an incident; is the topology file current? If these ids name pods, "
                "not hosts (an older gpu-operator's dcgm-exporter sets Hostname to its own pod's "
                "name), give each series its node: Prometheus relabels __meta_kubernetes_pod_node_name "
                'to the `node` label (docs/collectors.md, "A Hostname that names a pod")',
                self.stats.outside_topology,
                entity,
            )

    def process(self, t: float, anomalies: Iterable[Anomaly], predictions: Iterable[Prediction] = ()) -> list[Incident]:
        """Everything detected at event time t; returns the incidents that changed."""
        changed: dict[str, Incident] = {}
        for p in sorted(predictions, key=lambda p: (p.entity, p.kind, p.horizon_s)):  # as anomalies below
            if p.entity not in self.graph:
                self._outside(p.entity)
                continue
            self._families.setdefault(p.entity, {})["predicted"] = p.at
            self._warn(p.entity, p.kind, p.at, p.horizon_s, p.probability, p.action, changed)
        fresh: dict[Symptom, Anomaly] = {}
        signs: dict[Symptom, Anomaly] = {}  # early signs: warnings, unless an incident explains them
        back: set[str] = set()  # reporting again this tick
        # rows of a tick arrive in whatever order the partitions gave them: sort, so a stream and
        # a file give the same incidents
        for a in sorted(anomalies, key=lambda a: (a.entity, a.metric, a.detector)):
            if is_presence(a):  # who stopped or started reporting: no anomaly, never a symptom
                self._heard(a, back)
                continue
            self.stats.anomalies += 1
            if a.entity not in self.graph:
                self._outside(a.entity)
                continue
            s = symptom_of(a)
            if self._silenced(s.entity, t):
                self.stats.silenced += 1
                continue
            self._families.setdefault(s.entity, {})[s.family] = t
            if s.family == "pause_tx":
                self._talkers[s.entity] = t
            elif s.family == "wait" and s.entity in self.graph and self.graph.kind(s.entity) == "spine":
                self._congested[s.entity] = t
            if s.family not in SOFT:
                fresh.setdefault(s, a)
            elif s.family in EARLY_SIGNS:
                signs.setdefault(s, a)
        self.stats.symptoms += len(fresh)
        ctx = self._context(t)
        pending: dict[Symptom, Anomaly] = {}
        explained: dict[int, Incident | None] = {}  # per suspect list (ctx keeps each alive all tick)
        for s, a in fresh.items():
            incident = self._explaining(s, ctx, explained)
            if incident is None:
                pending[s] = a
            else:
                self.stats.attached += 1
                self._attach(incident, s, a, t, changed)
        for best, rivals in self.ranker.cover(pending, ctx):
            if self._silenced(best.entity, t):
                self.stats.silenced += len(best.explains)
                continue
            incident = self._absorbing(best, rivals, t, ctx, changed) or self._open(best, rivals, t, changed)
            for s in sorted(best.explains):  # entity, family, hint: the same order in every process
                self._attach(incident, s, pending[s], t, changed)
        for s, a in signs.items():
            # a GPU warm because its rack's cooling failed (even this very tick) is that
            # incident's evidence, not a warning of its own
            incident = self._explaining(s, ctx)
            if incident is not None:
                self._attach(incident, s, a, t, changed)
            else:
                kind, action = EARLY_SIGNS[s.family]
                self._warn(s.entity, kind, t, WARNING_S, None, action, changed)
        for incident in list(changed.values()):
            if incident.status == "open":
                self._refresh(incident, ctx, t, changed)
        if self._silent or back:
            self._reporting(t, back, changed)
        self._expire(t, changed)
        return sorted(changed.values(), key=lambda i: i.incident_id)

    # ------------------------------------------------------------------ steps

    def _context(self, t: float) -> Context:
        by_plane: list[dict[int, set[str]]] = []
        for sources, kind in ((self._talkers, "pfc_storm"), (self._congested, "spine_congestion")):
            for entity, last in list(sources.items()):
                if t - last > TALKER_MEMORY_S:
                    del sources[entity]
            # a storm or a congestion with an open incident still explains its plane's symptoms
            # between the detectors' repeats
            ongoing = {e for e, i in self.open.items() if i.status == "open" and i.root.kind == kind}
            planes: dict[int, set[str]] = {}
            for entity in sources.keys() | ongoing:
                planes.setdefault(self.graph.plane(entity) if entity in self.graph else -1, set()).add(entity)
            by_plane.append(planes)
        return Context(self._families, by_plane[0], by_plane[1])  # live: read within this tick only

    def _explaining(self, s: Symptom, ctx: Context, memo: dict[int, Incident | None] | None = None) -> Incident | None:
        """The open incident of the first suspect that has one. `memo`, while no incident opens
        or closes: answers per suspect list, which the symptoms of one plane's pause frames share
        (a storm over a plane of 100,000 GPUs is tens of thousands of them a tick, one answer)."""
        suspects = self.ranker.suspects.of(s, ctx)
        if memo is not None and id(suspects) in memo:
            return memo[id(suspects)]
        found = None
        for entity, _ in suspects:
            incident = self.open.get(entity)
            if incident is not None and incident.status == "open":
                found = incident
                break
        if memo is not None:
            memo[id(suspects)] = found
        return found

    def _absorbing(
        self, best: Candidate, rivals: list[Candidate], t: float, ctx: Context, changed: dict[str, Incident]
    ) -> Incident | None:
        """Incidents opened moments ago whose every symptom `best` also explains become `best`'s
        incident: two NICs of a leaf that report a tick before the other thirty (their exporters
        scrape at different moments) were the first signs of the leaf, not faults of their own.
        The earliest is kept (its id, its opening time); the others are folded into it and closed
        with `merged_into`."""
        if best.entity in self.open:
            return None  # it has its incident (or warning) already: _open deals with it
        young = []
        for incident in sorted(self.open.values(), key=lambda i: (i.opened, i.incident_id)):
            if incident.status != "open" or t - incident.opened > ABSORB_S or incident in young:
                continue
            hard = [s for s in incident.symptoms if s.family not in SOFT]
            if hard and all(any(e == best.entity for e, _ in self.ranker.suspects.of(s, ctx)) for s in hard):
                young.append(incident)
        if not young:
            return None
        host, *others = young
        for incident in young:
            if self.open.get(incident.root.entity) is incident:
                del self.open[incident.root.entity]
        for other in others:
            host.symptoms |= other.symptoms
            host.affected.update(other.affected)
            host.no_data.update(other.no_data)
            host.evidence = (host.evidence + other.evidence)[:MAX_EVIDENCE]
            host.evidence_count += other.evidence_count
            other.status, other.resolved, other.updated, other.merged_into = "resolved", t, t, host.incident_id
            changed[other.incident_id] = other
        host.root, host.candidates = best, rivals
        self.open[best.entity] = host
        host.affected.setdefault(best.entity, None)
        host.last_evidence = t
        changed[host.incident_id] = host
        return host

    def _open(self, best: Candidate, rivals: list[Candidate], t: float, changed: dict[str, Incident]) -> Incident:
        warning = self.open.get(best.entity)
        if warning is not None and warning.status == "open":  # dedup: one incident per root
            warning.last_evidence = t
            return warning
        if warning is not None and warning.status == "warning":  # it was seen coming
            incident = warning
            incident.status, incident.warned, incident.opened, incident.probability = "open", warning.opened, t, None
            incident.root, incident.candidates = best, rivals
        elif (recent := self._recurring(best, t)) is not None:  # flapping: the same incident again
            return self._reopen(recent, best, rivals, t, changed)
        else:
            incident = Incident(incident_id(best.entity, t), t, t, best, rivals)
            self.open[best.entity] = incident
        incident.affected.setdefault(best.entity, None)
        incident.last_evidence = t
        self.stats.opened += 1
        return incident

    def _recurring(self, best: Candidate, t: float) -> Incident | None:
        """The incident of `best`'s root that resolved on its own within FLAP_WINDOW_S, if it was
        of the kind `best` would be named (as `_refresh` names it)."""
        recent = self._recent.get(best.entity)
        if recent is None or recent.resolved is None or t - recent.resolved > FLAP_WINDOW_S:
            return None
        kind = self._named(best.entity, best.kind, best.explains)
        return recent if recent.root.entity == best.entity and recent.root.kind == kind else None

    def _reopen(
        self, incident: Incident, best: Candidate, rivals: list[Candidate], t: float, changed: dict[str, Incident]
    ) -> Incident:
        """A new episode of a resolved incident: open again under its id, its opening kept."""
        assert incident.resolved is not None
        del self._recent[best.entity]
        start = incident.opened if incident.reopened is None else incident.reopened
        incident.past_episodes.append((start, incident.resolved))
        incident.status, incident.resolved, incident.reopened, incident.updated = "open", None, t, t
        incident.root, incident.candidates = best, rivals
        incident.no_data.clear()
        incident.affected.setdefault(best.entity, None)
        incident.last_evidence = t
        self.open[best.entity] = incident
        self.stats.reopened += 1
        changed[incident.incident_id] = incident
        return incident

    def _attach(self, incident: Incident, s: Symptom, a: Anomaly, t: float, changed: dict[str, Incident]) -> None:
        new_entity = s.entity not in incident.affected
        incident.symptoms.add(s)
        incident.affected.setdefault(s.entity, None)
        incident.evidence_count += 1
        if len(incident.evidence) < MAX_EVIDENCE:
            incident.evidence.append(
                # the value as the anomalies topic says it: read from there, the same incident
                {
                    "at": a.at,
                    "entity": a.entity,
                    "metric": a.metric,
                    "detector": a.detector,
                    "value": wire_number(a.value),
                    # which measurement's field: a switch port's symbol_error is not a NIC port's
                    **({"measurement": a.measurement} if a.measurement else {}),
                }
            )
        incident.last_evidence = t
        news = False
        if s.family == "silent":  # gone: open until it is back, whatever the quiet period says
            news = s.entity not in incident.no_data
            incident.no_data.setdefault(s.entity, _last_sample(a))
        # a new entity is news; more of the same is reported now and then, so the last state
        # written stays close to the truth without a line per anomaly
        if news or new_entity or incident.opened == t or t - incident.updated >= UPDATE_EVERY_S:
            changed[incident.incident_id] = incident

    def _refresh(self, incident: Incident, ctx: Context, t: float, changed: dict[str, Incident]) -> None:
        """Re-rank with all the evidence so far; name the kind; blast radius; severity."""
        # just opened from this very evidence: the cover's ranking stands
        fresh = incident.opened == t and incident.candidates and incident.candidates[0] is incident.root
        ranked = incident.candidates if fresh else self.ranker.rank(incident.symptoms, ctx)
        if ranked and ranked[0].entity != incident.root.entity and ranked[0].score > incident.root.score:
            self._reroot(incident, ranked[0], t, changed)
        current = next((c for c in ranked if c.entity == incident.root.entity), incident.root)
        kind = self._named(current.entity, current.kind, incident.symptoms)
        incident.root = Candidate(current.entity, kind, current.score, current.explains)
        incident.candidates = [incident.root, *[c for c in ranked if c.entity != current.entity][:4]]
        self._blast(incident, t)
        incident.action = registry.action(kind)
        incident.updated = t

    def _named(self, entity: str, kind: str, symptoms: Iterable[Symptom]) -> str:
        """The kind an incident rooted at `entity` is named, from its evidence: a GPU's from all it
        shows; a NIC's link fault from what its evidence names."""
        if entity in self.graph and self.graph.kind(entity) == "gpu":
            own = [s for s in symptoms if s.entity == entity]
            return gpu_kind({s.family for s in own}, {s.hint for s in own if s.hint})
        if entity in self.graph and self.graph.kind(entity) == "nic" and kind in _NIC_LINK_KINDS:
            return nic_kind({s.hint for s in symptoms if s.hint in _NIC_LINK_KINDS}) or kind
        return kind

    def _reroot(self, incident: Incident, root: Candidate, t: float, changed: dict[str, Incident]) -> None:
        """Later evidence names another root. If that root already has an incident of its own,
        stay put (the two are reported apart rather than silently merged); a warning on it is
        taken over, as when it turns into a failure."""
        holder = self.open.get(root.entity)
        if holder is not None and holder.status == "open":
            return
        if holder is not None:  # a warning: this incident is what it warned of
            incident.warned = holder.opened if incident.warned is None else min(incident.warned, holder.opened)
            holder.resolved = holder.updated = t
            changed[holder.incident_id] = holder
        if self.open.get(incident.root.entity) is incident:
            del self.open[incident.root.entity]
        incident.root = root
        self.open[root.entity] = incident

    def _blast(self, incident: Incident, t: float) -> None:
        g = self.graph
        # the jobs holding the affected GPUs at onset and those that started on them while the
        # incident was open (rca/blast.py `radius`, as the incident page counts them, apart): a
        # job put on a broken node is hit too (it hangs or fails there); a job that ended before
        # the onset was not; a GPU names its own job, a node's other part every job on the node,
        # a switch the jobs whose traffic crosses it (a leaf's hosts' jobs, a spine's that span
        # pods): the severity below counts those
        start = onset(incident.opened, (float(e["at"]) for e in incident.evidence if "at" in e), incident.warned)
        blast = radius(g, self.schedule, incident.root.entity, incident.affected, start, t)
        hit = blast.counted(AT_ONSET) + blast.counted(STARTED_WHILE_OPEN)
        incident.job_gpus = {j.job: j.gpus_total for j in hit}
        incident.jobs = sorted(incident.job_gpus)
        gpus = sum(1 for e in incident.affected if e in g and g.kind(e) == "gpu")
        incident.gpus_hit = sum(incident.job_gpus.values()) or gpus
        severity = registry.severity(incident.root.kind)
        if incident.gpus_hit >= 512:
            severity = "critical"
        elif incident.gpus_hit >= 64 and severity == "minor":
            severity = "major"
        incident.severity = severity

    def _warn(
        self,
        entity: str,
        kind: str,
        t: float,
        horizon_s: float,
        probability: float | None,
        action: str,
        changed: dict[str, Incident],
    ) -> None:
        held = self.open.get(entity)
        if held is not None and held.status == "warning":  # still coming: the warning lasts
            held.last_evidence = max(held.last_evidence, t + horizon_s)
            if probability is not None and probability > (held.probability or 0.0):
                # surer now (the predictor says a warning again when its probability has risen):
                # the warning carries it, and whoever acts on warnings decides again
                held.probability = probability
                held.root = Candidate(held.root.entity, held.root.kind, probability)
                held.candidates = [held.root, *held.candidates[1:]]
                held.updated = t
                changed[held.incident_id] = held
        if held is not None or self._silenced(entity, t):
            return
        root = Candidate(entity, kind, probability if probability is not None else 1.0)
        incident = Incident(incident_id(entity, t), t, t, root, [root], status="warning", severity="warning")
        incident.probability = probability
        incident.action = action
        incident.affected[entity] = None
        incident.last_evidence = t + horizon_s  # a warning lasts its horizon
        self.open[entity] = incident
        self.stats.warnings += 1
        changed[incident.incident_id] = incident

    def _heard(self, a: Anomaly, back: set[str]) -> None:
        """A presence record: the entity stopped reporting (since its last sample), or is back."""
        if a.entity not in self.graph:
            return  # stored upstream; no incident of ours names it
        if a.detector == PRESENCE_GONE:
            self._silent[a.entity] = _last_sample(a)
            back.discard(a.entity)
        else:
            self._silent.pop(a.entity, None)
            back.add(a.entity)

    def _reporting(self, t: float, back: set[str], changed: dict[str, Incident]) -> None:
        """The open incidents as the presence records leave them: one whose root stopped reporting
        is "no data since" its last sample (a GPU that fell off the bus while idle has no `silent`
        anomaly: nothing expected it to report); once every silent entity of it is back, its
        quiet period starts."""
        for incident in self.open.values():
            if incident.status != "open":
                continue
            before = bool(incident.no_data)
            for entity in [e for e in incident.no_data if e in back]:
                del incident.no_data[entity]
            root = incident.root.entity
            if root in self._silent and root not in incident.no_data:
                incident.no_data[root] = self._silent[root]
                incident.updated = t
                changed[incident.incident_id] = incident
            if before and not incident.no_data:
                incident.returned, incident.updated = t, t
                changed[incident.incident_id] = incident

    def _expire(self, t: float, changed: dict[str, Incident]) -> None:
        for entity, incident in list(self.open.items()):
            if incident.status == "open" and incident.no_data:
                continue  # silent: no evidence is no news of health
            if incident.status == "open" and t - max(incident.last_evidence, incident.returned) >= QUIET_S:
                incident.status, incident.resolved, incident.updated = "resolved", t, t
                self._recent[entity] = incident
            elif incident.status == "warning" and t >= incident.last_evidence:
                incident.resolved, incident.updated = t, t  # the horizon passed without a failure
            else:
                continue
            self.stats.resolved += 1
            del self.open[entity]
            changed[incident.incident_id] = incident
        if t - self._swept < SWEEP_EVERY_S:
            return
        self._swept = t
        for entity, incident in list(self._recent.items()):
            if incident.resolved is None or t - incident.resolved > FLAP_WINDOW_S:
                del self._recent[entity]
        for entity, families in list(self._families.items()):
            for family, last in list(families.items()):
                if t - last > (SOFT_MEMORY_S if family in SOFT else FAMILY_MEMORY_S):
                    del families[family]
            if not families:
                del self._families[entity]

    def close(self, incident_id: str, t: float) -> Incident | None:
        """Resolve an open incident (or dismiss a warning) now, because an operator says it is
        over; None if it is not open. Symptoms that go on afterwards open a new incident."""
        for entity, incident in list(self.open.items()):
            if incident.incident_id == incident_id:
                if incident.status == "open":
                    incident.status = "resolved"
                incident.resolved, incident.updated = t, t
                self.stats.resolved += 1
                del self.open[entity]
                return incident
        return None

    def _silenced(self, entity: str, t: float) -> bool:
        g = self.graph
        if not self.schedule.maintenance or entity not in g:
            return False
        node = g.node_of(entity)
        return node is not None and self.schedule.in_maintenance(node, t)


def _last_sample(a: Anomaly) -> float:
    """When a `silent` anomaly's or a presence record's entity last reported (presence.py says it
    in `last_seen`)."""
    try:
        return float(a.detail.get("last_seen", a.at))
    except ValueError:
        return a.at


__all__ = ["FLAP_WINDOW_S", "QUIET_S", "EngineStats", "Incident", "IncidentEngine"]
