"""The whole pipeline, one code path in three modes: offline over a recorded folder, as a daemon
between Kafka topics, and embedded (in-process, for the demo and the benchmarks).

line protocol -> ingest core -> tick assembler -> detectors + predictor -> incident engine.
The detect loop calls the engine once per analysed tick with that tick's anomalies and
predictions, so both modes open the same incidents from the same data.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aiops.daemon_metrics import DaemonMetrics
from aiops.incident_index import IncidentIndex
from context.watch import file_digest
from detectors.anomaly import Anomaly, Prediction
from detectors.coverage import Notice
from detectors.detect_loop import DetectLoop, read_chunks, read_events
from detectors.predict.online import OnlinePredictor
from detectors.progress_topic import FindingsLoop
from ingest.deadletter import DeadLetter, Source
from notify.service import Notifier, topology_locate
from rca.graph import TopologyGraph
from rca.incidents import EngineStats, IncidentEngine
from vocab.incident_record import IncidentRecord
from vocab.schedule import Schedule
from vocab.thresholds import DetectorSettings

if TYPE_CHECKING:
    from act.loop import ActLoop
    from act.policy import ActConfig

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TickOutputs:
    """What a batch of telemetry produced, to publish."""

    notices: list[Notice]
    anomalies: list[Anomaly]
    predictions: list[Prediction]
    incidents: list[IncidentRecord]  # each change of state, as every view reads it


@dataclass(slots=True)
class RunStats:
    ticks: int = 0
    values: int = 0
    anomalies: int = 0
    predictions: int = 0
    incidents: int = 0
    deadletters: int = 0
    bad_events: int = 0  # scheduler events that could not be used (in deadletters.jsonl, stage "events")
    late_rows: int = 0  # stored by ingest, too late for their tick: not analysed
    job_tag_mismatches: int = 0  # GPU rows whose job tag disagreed with the schedule
    seconds: float = 0.0
    interval_s: float | None = None
    predictions_from: float | None = None  # first tick plus the predictor's warm-up
    first_tick: float | None = None  # the event-time range analysed (grid points, s since the epoch)
    last_tick: float | None = None


class Pipeline:
    """Bytes in; anomalies, predictions and incident changes out, tick by tick."""

    def __init__(
        self,
        graph: TopologyGraph,
        interval_s: float,
        events: list[dict[str, Any]] | None = None,
        predictor: OnlinePredictor | None = None,
        lateness_s: float = 0.0,
        detector_settings: DetectorSettings | None = None,
        findings: FindingsLoop | None = None,
    ) -> None:
        """`findings`: detection runs elsewhere (split across members); the engine reads their
        anomalies and predictions through it instead of detecting here."""
        # the graph is a million long-lived objects: keep the cyclic collector from walking
        # them on every full pass (which would land on a burst tick)
        gc.collect()
        gc.freeze()
        self.interval_s = interval_s
        self.detect: DetectLoop | FindingsLoop = findings or DetectLoop(
            interval_s, predictor=predictor, settings=detector_settings, lateness_s=lateness_s
        )
        self.schedule = Schedule.from_events(events or [])
        self.engine = IncidentEngine(graph, self.schedule)
        self._events = events or []
        self.detect.add_events(self._events)
        # the scheduler's latest events as heard (the file's, then the topic's since this start):
        # what an incident page's "what changed" lists (show/oncall.py); bounded, it is a view
        self.recent_events: deque[dict[str, Any]] = deque(self._events[-RECENT_EVENTS:], maxlen=RECENT_EVENTS)
        # where the live scheduler events topic has been read to: partition -> next offset
        self.events_offsets: dict[int, int] = {}
        # each change of state since the caller last took them, as the one record every view reads
        # (vocab/incident_record.py): taken as they happen, since the incident itself moves on in
        # later ticks of the same batch; serialised once, where it leaves the process
        self.incidents: list[IncidentRecord] = []
        self.detect.tick_listener = self._on_tick
        self.first_tick: float | None = None
        self.last_tick: float | None = None
        self.engine_errors = 0
        self.notifier: Notifier | None = None  # chat and webhooks, when configured
        self.acting: list[ActLoop] = []  # drains and the rest, when a policy file is given (a bench: several)
        # the daemon's API: incidents it serves, what it counts, incidents operators resolved
        self.index: IncidentIndex | None = None
        self.metrics: DaemonMetrics | None = None
        self.to_close: deque[str] = deque()
        # notices about the topology (the importer's findings, what a reload changed), said with
        # the next tick's event time: findings with the first tick only (a restart said them)
        self._topology_notices: list[tuple[str, str, str, str, dict[str, list[str]]]] = _findings(graph)
        self.early_pages: list[tuple[str, str]] = []  # acting's pages before the first tick
        self.topology_digest: str | None = None  # of the file the graph came from

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps: everything learned (not the topology, not the model)."""
        return {
            "detect": self.detect,
            "engine": self.engine,
            "ticks": (self.first_tick, self.last_tick),
            "interval_s": self.interval_s,
            "router": self.notifier.state() if self.notifier is not None else None,
            "topology": self.topology_digest,  # which topology file it was taken with
            "schedule": self.schedule,  # what the scheduler said, up to events_offsets
            "events_offsets": dict(self.events_offsets),
        }

    def add_events(self, events: list[dict[str, Any]]) -> None:
        """Scheduler events heard while running (the events topic): into the schedule the engine
        reads and the detectors' cohorts and silences, each at its own event time."""
        for e in events:
            self.schedule.add(e)
        self.recent_events.extend(events)
        self.detect.add_events(events)

    def restore(self, state: dict[str, Any]) -> None:
        """Carry on from a checkpoint, under this start's topology, events and predictor."""
        if state.get("interval_s") != self.interval_s:
            raise ValueError(f"the checkpoint was taken at a scrape interval of {state.get('interval_s')} s")
        detect: DetectLoop | FindingsLoop = state["detect"]
        if type(detect) is not type(self.detect):
            raise ValueError("the checkpoint was taken with detection in the other place (in the daemon or apart)")
        engine: IncidentEngine = state["engine"]
        schedule: Schedule | None = state.get("schedule")
        if schedule is not None:  # what the live events said before the checkpoint, and the file's
            for e in self._events:
                schedule.add(e)
            self.schedule = schedule
        self.events_offsets = dict(state.get("events_offsets") or {})
        engine.attach(self.engine.graph, self.schedule)
        detect.add_events(self._events)
        given = self.detect.predictor
        if given is None or detect.predictor is None:
            detect.predictor = given  # prediction switched off, or on for the first time
        else:
            detect.predictor.model = given.model
        detect.tick_listener = self._on_tick
        self.detect, self.engine = detect, engine
        detect.track_jobs = bool(self.acting)
        self.first_tick, self.last_tick = state["ticks"]
        self._topology_notices = []  # said before the checkpoint
        taken_with = state.get("topology")
        if self.topology_digest is not None and taken_with is not None and taken_with != self.topology_digest:
            gone = [i.incident_id for i in self.engine.open.values() if i.root.entity not in self.engine.graph]
            self.to_close.extend(gone)
            message = f"the topology changed since the checkpoint ({taken_with} -> {self.topology_digest})"
            self._topology_notices = [("topology", "topology", "changed", message, {"resolved": gone})]
            self._topology_notices += _findings(self.engine.graph)
            log.warning("%s; %d incidents on entities that left resolved", message, len(gone))
        if self.notifier is not None and state.get("router") is not None:
            self.notifier.restore(state["router"])

    def reload(self, graph: TopologyGraph, data: dict[str, Any], old: dict[str, Any], digest: str) -> list[str]:
        """A new topology under the running pipeline: detectors keep all they learnt (their state
        is per telemetry series, whatever the topology says), the engine walks the new graph,
        incidents rooted at entities that left are resolved with the next tick, and one notice
        says what changed. Returns the incidents it resolves."""
        from context.diff import diff

        change = diff(old, data)
        self.engine.attach(graph, self.schedule)
        gone = [i.incident_id for i in self.engine.open.values() if i.root.entity not in graph]
        self.to_close.extend(gone)
        message = (
            f"topology reloaded: {len(change.added)} entities added, {len(change.removed)} removed, "
            f"{len(change.moved)} moved" + (f"; {len(gone)} incidents on entities that left resolved" if gone else "")
        )
        detail = {"added": change.added[:50], "removed": change.removed[:50], "moved": change.moved[:50]}
        self._topology_notices.append(("topology", "topology", "changed", message, detail))
        self._topology_notices += _findings(graph)
        self.topology_digest = digest
        log.warning("%s", message)
        return gone

    def _on_tick(self, t: float, anomalies: list[Anomaly], predictions: list[Prediction]) -> None:
        if self._topology_notices:
            self.detect.notices += [Notice(t, *notice) for notice in self._topology_notices]
            self._topology_notices = []
        if self.early_pages:
            self.detect.notices += [Notice(t, "action", subject, "page", m, {}) for subject, m in self.early_pages]
            self.early_pages.clear()  # cleared, not replaced: the daemon shares it between pipelines
        self.first_tick = t if self.first_tick is None else self.first_tick
        self.last_tick = t
        started = time.perf_counter()
        closed = []
        while self.to_close:  # resolved by an operator (the API) since the last tick
            incident = self.engine.close(self.to_close.popleft(), t)
            if incident is not None:
                closed.append(incident)
        try:
            changed = closed + self.engine.process(t, anomalies, predictions)
        except Exception:  # a bug in the analysis must not stop telemetry, anomalies or the daemon
            self.engine_errors += 1
            log.exception("incident engine failed on tick %s (%d anomalies); continuing", t, len(anomalies))
            changed = closed  # what operators closed is closed all the same
        records = [i.record() for i in changed]
        self.incidents += records
        if self.index is not None:
            self.index.add(records)
        if self.acting:  # before notifying: the message says what was planned, as the page does
            self._act(t, records)
        if self.notifier is not None:  # in event time, tick by tick: group waits and repeats are exact
            self.notifier.offer(records, t, self._plans_of(records) if self.acting else None)
        if self.metrics is not None:
            self.metrics.ticks += 1
            self.metrics.last_tick = t
            self.metrics.tick_seconds_sum += time.perf_counter() - started

    def act_on(self, acting: ActLoop, t: float | None = None) -> None:
        """Act on incidents from now on: the loop reads each job's utilisation (its checkpoints)."""
        self.acting.append(acting)
        self.detect.track_jobs = True
        acting.restore(t if t is not None else (self.last_tick or 0.0))

    def _act(self, t: float, states: list[IncidentRecord]) -> None:
        for acting in self.acting:
            try:  # in event time: a drain waits for the checkpoint the telemetry shows
                acting.tick(t, self.detect.job_utilisation)
                acting.offer(states, t)
            except Exception:  # acting must never stop the analysis; what it did is in the audit log
                log.exception("acting failed on tick %s; the analysis goes on", t)

    def _plans_of(self, records: list[IncidentRecord]) -> dict[str, list[dict[str, Any]]]:
        """These incidents' rows in the audit logs, in the order planned (act/audit.py): what the
        chat message lists, as the page and the list read them."""
        from act.audit import plans_by_incident  # acting is optional: imported only when it is on

        wanted = {r.incident_id for r in records}
        out: dict[str, list[dict[str, Any]]] = {}
        for acting in self.acting:
            for incident, rows in plans_by_incident(acting.audit.rows()).items():
                if incident in wanted:
                    out.setdefault(incident, []).extend(asdict(row) for row in rows)
        return out

    def jobs_on(self, node: str, t: float) -> dict[str, int]:
        """The jobs running on `node` at t, as the scheduler said, and the GPUs each holds in all."""
        return {j.job: j.gpus for j in self.schedule.jobs_on([node], t, ended_within_s=0.0)}

    def job_ends(self, node: str, t: float) -> dict[str, float]:
        """When the scheduler ends each job on `node` at the latest (its time limit), where it said."""
        jobs = self.schedule.jobs_on([node], t, ended_within_s=0.0)
        return {j.job: j.expected_end for j in jobs if math.isfinite(getattr(j, "expected_end", math.inf))}

    def page(self, message: str, subject: str) -> None:
        """What the acting loop says a person must hear: a notice at the tick's event time,
        published (and written to InfluxDB) with the tick's other notices, and logged. Said
        before the first tick, it waits for it (kept outside the detectors' state, which a
        checkpoint being loaded replaces)."""
        log.error("action: %s", message)
        if self.last_tick is None:  # said before any tick (settling after a restart): with the first
            self.early_pages.append((subject or "actions", message))
            return
        self.detect.notices.append(Notice(self.last_tick, "action", subject or "actions", "page", message, {}))

    def feed(self, data: bytes) -> tuple[list[Anomaly], list[DeadLetter]]:
        assert isinstance(self.detect, DetectLoop), "telemetry goes to a pipeline that detects"
        return self.detect.feed(data)

    def feed_polled(
        self, messages: Sequence[tuple[Source, int, bytes]], backlogged: AbstractSet[tuple[str, int]] = frozenset()
    ) -> tuple[list[Anomaly], list[DeadLetter]]:
        return self.detect.feed_polled(messages, backlogged)

    def finish(self) -> list[Anomaly]:
        return self.detect.finish()

    def take_notices(self) -> list[Notice]:
        """Monitoring notices (coverage, schedule, topology) since the last call; each is logged
        as it is taken."""
        notices, self.detect.notices = self.detect.notices, []
        for n in notices:
            # what the schedule says of a job's GPUs is routine at a large site: said, not warned
            quiet = n.status == "detectable" or n.kind == "schedule"
            (log.info if quiet else log.warning)("%s: %s", n.kind, n.message)
        return notices

    def coverage(self) -> list[dict[str, Any]]:
        """Every fault kind's coverage verdict from what has arrived so far (run.json)."""
        return [
            {"kind": c.kind, "status": c.status, "missing": list(c.missing), "fix": list(c.fixes)}
            for c in self.detect.coverage.report()
        ]

    def outputs(self, anomalies: list[Anomaly]) -> TickOutputs:
        """Everything a batch (or the end of the input) produced, with the anomalies the detect
        loop returned: the one path a daemon publishes by (notices first: they may explain the
        incidents beside them)."""
        notices = self.take_notices()
        predictions, incidents = self.take()
        return TickOutputs(notices, anomalies, predictions, incidents)

    def take(self) -> tuple[list[Prediction], list[IncidentRecord]]:
        """Predictions and incident changes since the last call (incidents as of now)."""
        predictions, incidents = self.detect.predictions, self.incidents
        self.detect.predictions, self.incidents = [], []
        return predictions, incidents

    @property
    def engine_stats(self) -> EngineStats:
        return self.engine.stats

    def finish_stats(self, stats: RunStats, seconds: float) -> RunStats:
        """What the detect loop counted, and when the predictor could first speak."""
        detect = self.detect.stats
        stats.ticks, stats.values, stats.deadletters = detect.ticks, detect.values, detect.deadletters
        stats.late_rows, stats.job_tag_mismatches = detect.late_rows, detect.job_tag_mismatches
        stats.interval_s = self.interval_s
        if isinstance(self.detect, FindingsLoop):  # found by the detection members, analysed here
            stats.anomalies = self.detect.stats.anomalies
        stats.first_tick, stats.last_tick = self.first_tick, self.last_tick
        if self.detect.predictor is not None and self.first_tick is not None:
            stats.predictions_from = self.first_tick + self.detect.predictor.warmup_s
        stats.seconds = seconds
        return stats


def _findings(graph: TopologyGraph) -> list[tuple[str, str, str, str, dict[str, list[str]]]]:
    """The importer's findings the topology file carries, as notices (kind, subject, status, ...)."""
    return [
        ("fabric", str(f["entity"]), str(f["kind"]), str(f["message"]), {"fix": [str(f["fix"])]})
        for f in graph.attrs.get("findings") or []
        if isinstance(f, dict) and {"entity", "kind", "message", "fix"} <= set(f)
    ]


# scheduler events kept for the pages' "what changed": a day of a 10,000-GPU cluster's job starts,
# ends and node states (about 1,000 jobs a day each starting and ending, drains and maintenance)
# many times over
RECENT_EVENTS = 20_000

IncidentSink = Callable[[list[IncidentRecord]], None]  # incident states as they change (e.g. to InfluxDB)
# a tick's anomalies and predictions, with where each entity sits (e.g. to InfluxDB)
FindingSink = Callable[[list[Anomaly], list[Prediction], Callable[[str], dict[str, str]]], None]
ScheduleSink = Callable[[list[dict[str, Any]]], None]  # scheduler events as they are taken (e.g. to InfluxDB)
HealthSink = Callable[[DaemonMetrics], None]  # the daemon's own metrics, now and then (e.g. to InfluxDB)


def entity_tags(graph: TopologyGraph) -> Callable[[str], dict[str, str]]:
    """Where an entity sits, as tags a dashboard filters by: its node, rack, pod (a dragonfly
    group, or a fat-tree's pod of leaves), rail and plane."""
    locate = topology_locate(graph)

    def where(entity: str) -> dict[str, str]:
        if entity not in graph:
            return {}
        node = graph.node_of(entity)
        tags = {**({"node": node} if node else {}), **locate(entity)}
        rail, pod = graph.rail_and_pod(entity)
        if rail >= 0:
            tags["rail"] = str(rail)
        if pod >= 0 and "pod" not in tags:
            tags["pod"] = f"pod{pod}"
        if "rack" not in tags and graph.kind(entity) == "cooling":  # a loop is filed under the rack it cools
            racks = graph.dependents(entity, kinds=["rack"])
            if racks:
                tags["rack"] = racks[0]
        return tags

    return where


NoticeSink = Callable[[list[Notice]], None]  # monitoring notices as they come (e.g. to InfluxDB)


def input_record(input_dir: Path) -> dict[str, str | None]:
    """What run.json says of the input a run read: its folder, and digests of the files whose
    content names the entities and the jobs (context/watch.py `digest`, as the daemon's
    checkpoint takes the topology's): `aiops eval` and `aiops report` refuse a truth file whose
    own input differs (show/report.py `check_truth`)."""
    return {
        "path": str(input_dir.resolve()),
        "topology": file_digest(input_dir / "topology.json"),
        "events": file_digest(input_dir / "events.jsonl"),
    }


def run_folder(
    input_dir: Path,
    out_dir: Path,
    interval_s: float,
    predictor: OnlinePredictor | None = None,
    on_tick: Callable[[Pipeline], None] | None = None,
    incident_sink: IncidentSink | None = None,
    detector_settings: DetectorSettings | None = None,
    notice_sink: NoticeSink | None = None,
    notifier: Notifier | None = None,
    finding_sink: FindingSink | None = None,
    schedule_sink: ScheduleSink | None = None,
    actions: ActConfig | None = None,
    acting: Sequence[Callable[[Pipeline], ActLoop]] = (),
    action_sink: Callable[[str], None] | None = None,
) -> RunStats:
    """Reads topology.json, telemetry.lp and events.jsonl (never truth.jsonl); writes
    incidents.jsonl, anomalies.jsonl, predictions.jsonl, notices.jsonl, deadletters.jsonl and
    run.json (with every fault kind's coverage); with `actions`, acts on incidents as the policies
    say (dry run unless they say execute), auditing every plan in actions.sqlite."""
    telemetry = input_dir / "telemetry.lp"
    if not telemetry.is_file():
        raise FileNotFoundError(f"no telemetry.lp in {input_dir}")
    graph = TopologyGraph.load(input_dir / "topology.json")
    where = entity_tags(graph)
    events, bad_events = read_events(input_dir / "events.jsonl")
    if schedule_sink is not None:
        schedule_sink(events)
    pipeline = Pipeline(graph, interval_s, events, predictor, detector_settings=detector_settings)
    pipeline.notifier = notifier
    if notifier is not None and notifier.router.locate is None:
        notifier.router.locate = topology_locate(graph)
    out_dir.mkdir(parents=True, exist_ok=True)
    if actions is not None:
        from aiops.acting import act_loop

        audit = out_dir / "actions.sqlite"
        loop = act_loop(
            actions,
            graph,
            audit,
            pipeline.page,
            jobs_on=pipeline.jobs_on,
            action_sink=action_sink,
            job_ends=pipeline.job_ends,
        )
        pipeline.act_on(loop)
    for build in acting:  # loops made by the caller (a bench comparing policies on one replay)
        pipeline.act_on(build(pipeline))
    stats = RunStats()
    started = time.perf_counter()
    with (
        (out_dir / "anomalies.jsonl").open("wb") as anomalies_out,
        (out_dir / "predictions.jsonl").open("wb") as predictions_out,
        (out_dir / "incidents.jsonl").open("wb") as incidents_out,
        (out_dir / "deadletters.jsonl").open("wb") as dead_out,
        (out_dir / "notices.jsonl").open("wb") as notices_out,
    ):

        def flush(anomalies: list[Anomaly]) -> None:
            anomalies_out.writelines(a.to_json() + b"\n" for a in anomalies)
            notices = pipeline.take_notices()
            notices_out.writelines(n.to_json() + b"\n" for n in notices)
            if notice_sink is not None and notices:
                notice_sink(notices)
            predictions, incidents = pipeline.take()
            predictions_out.writelines(p.to_json() + b"\n" for p in predictions)
            incidents_out.writelines(r.to_json() + b"\n" for r in incidents)
            _to_sinks(stats, anomalies, predictions, incidents, incident_sink, finding_sink, where)

        dead_out.writelines(d.to_json() + b"\n" for d in bad_events)
        stats.bad_events = len(bad_events)
        for chunk in read_chunks(telemetry):
            anomalies, letters = pipeline.feed(chunk)
            flush(anomalies)
            dead_out.writelines(d.to_json() + b"\n" for d in letters)
            if on_tick is not None:
                on_tick(pipeline)
        flush(pipeline.finish())
    pipeline.finish_stats(stats, time.perf_counter() - started)
    (out_dir / "run.json").write_text(
        json.dumps(
            {
                **asdict(stats),
                "engine": asdict(pipeline.engine_stats),
                "coverage": pipeline.coverage(),
                "input": input_record(input_dir),
            },
            indent=1,
        )
        + "\n"
    )
    return stats


def _to_sinks(
    stats: RunStats,
    anomalies: list[Anomaly],
    predictions: list[Prediction],
    incidents: list[IncidentRecord],
    incident_sink: IncidentSink | None,
    finding_sink: FindingSink | None,
    where: Callable[[str], dict[str, str]],
) -> None:
    """What a batch published, to the sinks that were given (InfluxDB), and counted."""
    if incident_sink is not None:
        incident_sink(incidents)
    if finding_sink is not None:
        finding_sink(anomalies, predictions, where)
    stats.anomalies += len(anomalies)
    stats.predictions += len(predictions)
    stats.incidents += len(incidents)


__all__ = [
    "FindingSink",
    "HealthSink",
    "IncidentSink",
    "NoticeSink",
    "Pipeline",
    "RunStats",
    "ScheduleSink",
    "TickOutputs",
    "entity_tags",
    "input_record",
    "run_folder",
]
