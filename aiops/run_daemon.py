"""`aiops run --kafka`: the whole pipeline as a daemon between Kafka topics, on the skeleton of
ingest/daemon.py and aiops/daemon.py.

Telemetry in (or, `from_detection`, the findings of the `aiops detect --kafka` members); anomalies,
predictions, incidents, notices and dead letters out. One member of its group holds every
partition (the engine sees the whole fleet); the others stand by and take over with the
checkpoint. Commits after a poll's outputs are flushed, and only up to the first message whose
tick is still held (waiting for the slowest partition or for late rows): at-least-once. A tick's
outputs leave through one path: `Pipeline.outputs()` after the batch, then `publish`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiops.daemon import CheckpointedDaemon, resume_offsets, usable_checkpoint
from aiops.daemon_metrics import DaemonMetrics
from aiops.daemon_state import Checkpoint, CheckpointError, CheckpointStore
from aiops.events_feed import EventsFeed
from aiops.incident_index import IncidentIndex
from aiops.pipeline import (
    FindingSink,
    HealthSink,
    IncidentSink,
    NoticeSink,
    Pipeline,
    RunStats,
    ScheduleSink,
    TickOutputs,
    entity_tags,
)
from context.watch import TopologyFile
from detectors.predict.online import OnlinePredictor
from detectors.progress_topic import FindingsLoop
from ingest.daemon import Broker, KafkaBroker
from ingest.kafka import KafkaDeadLetterSink, KafkaIOError
from ingest.messages import Partition, Polled
from notify.service import Notifier, topology_locate
from rca.graph import GraphError, TopologyGraph
from vocab.settings import KafkaSettings
from vocab.thresholds import DetectorSettings

if TYPE_CHECKING:
    from act.loop import ActLoop
    from act.policy import ActConfig
    from aiops.api import ActionsApi, ApiOptions, ApiServer, PageContext

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunOptions:
    """What `aiops run --kafka` is asked to do (the command line's and the environment's choices)."""

    interval_s: float
    topology: Path
    events: list[dict[str, Any]] | None = None
    idle_stop_s: float | None = None  # stop once the input has been quiet this long (tests, replays)
    lateness_s: float = 60.0
    predictor: OnlinePredictor | None = None
    detector_settings: DetectorSettings | None = None
    state_dir: Path | None = None  # checkpoints, the incident index, the actions' audit
    checkpoint_every_s: float = 30.0
    notifier: Notifier | None = None
    api: ApiOptions | None = None  # serve the HTTP API (aiops.api) while it runs
    actions: ActConfig | None = None
    # the detection runs in the members of `aiops detect --kafka`: read their findings and
    # progress instead of telemetry, and hand the engine each tick once all of it was judged
    from_detection: bool = False


@dataclass(slots=True)
class RunSinks:
    """Where outputs go besides the topics (InfluxDB, in the daemon the command line starts)."""

    incidents: IncidentSink | None = None
    notices: NoticeSink | None = None
    findings: FindingSink | None = None
    health: HealthSink | None = None  # the daemon's own metrics, every `health_every_s` and on stopping
    health_every_s: float = 10.0
    schedule: ScheduleSink | None = None
    actions: Callable[[str], None] | None = None


class RunDaemon(CheckpointedDaemon):
    """The pipeline between Kafka topics; see the module's doc."""

    def __init__(
        self,
        settings: KafkaSettings,
        options: RunOptions,
        should_stop: Callable[[], bool],
        sinks: RunSinks | None = None,
        broker: Broker | None = None,
    ) -> None:
        if options.from_detection and options.actions is not None:
            # a drain waits for the job's checkpoint in its GPUs' utilisation, which only the
            # detection members see
            raise ValueError("acting needs the telemetry: run it in the daemon that detects (without --from-detection)")
        self.settings, self.options, self.sinks = settings, options, sinks or RunSinks()
        findings_topics = [settings.anomalies_topic, settings.predictions_topic, settings.progress_topic]
        self.inputs = findings_topics if options.from_detection else [settings.telemetry_topic]
        outputs = [settings.incidents_topic, settings.notices_topic, settings.deadletter_topic]
        if not options.from_detection:
            outputs[:0] = [settings.anomalies_topic, settings.predictions_topic]
        topics = [settings.telemetry_topic, *(self.inputs if options.from_detection else []), *outputs]
        self.metrics = DaemonMetrics()
        self.last_health = time.monotonic()
        self.to_close: deque[str] = deque()  # incidents an operator resolved, closed by the engine
        self.index: IncidentIndex | None = None
        self.server: ApiServer | None = None
        self.pages: PageContext | None = None
        self.approvals: ActionsApi | None = None
        self.acting: ActLoop | None = None
        self.holding: set[Partition] = set()  # the partitions whose state the pipeline holds
        self.fence: list[tuple[int, dict[Partition, int]]] = []  # (tick ms, findings' ends when it was complete)
        self.early_pages: list[tuple[str, str]] = []
        self.telemetry_partitions = 0
        self.stats = RunStats()
        self._serve_api()  # from the start: /healthz while it waits for the broker
        try:
            super().__init__(
                should_stop, broker or KafkaBroker(settings), topics, outputs, "aiops-run",
                options.idle_stop_s, options.lateness_s,
            )  # fmt: skip
            self._start(settings, options)
        except BaseException:  # a setup step failed, or the daemon was stopped meanwhile: the API goes too
            self._stop_api()
            raise

    # ---------------------------------------------------------------- setting up

    def _serve_api(self) -> None:
        api, state_dir, group = self.options.api, self.options.state_dir, self.settings.run_group
        if api is None:
            return
        from aiops.api import ActionsApi, ApiServer, PageContext, build_app
        from show.series import InfluxSeries

        self.index = IncidentIndex(state_dir / f"incidents-{group}.sqlite" if state_dir else None)
        self.to_close.extend(self.index.operator_resolved())  # asked for before a restart: closed if still open
        token = api.token.get_secret_value() if api.token else None
        influx, notifier = api.influx, self.options.notifier
        self.pages = PageContext(
            series=InfluxSeries(influx.url, influx.database, influx.token.get_secret_value()) if influx else None,
            grafana_url=notifier.router.config.grafana_url if notifier is not None else None,
        )
        if self.options.actions is not None:  # approvals wait for the loop (made once the topology is read)
            # approval links are signed with the API token (rotating it voids them); without a
            # token, with a secret of this run's own (links die with a restart)
            secret = hashlib.sha256(token.encode()).digest() if token else secrets.token_bytes(32)
            audit_file = state_dir / f"actions-{group}.sqlite" if state_dir is not None else None
            self.approvals = ActionsApi(audit_file, self._approve, secret)
        app = build_app(self.index, self.metrics, notifier, token, self.to_close.append, self.pages, self.approvals)
        self.server = ApiServer(app, api.host, api.port)
        self.server.start()

    def _approve(self, plan_id: str, who: str) -> None:  # the loop is made later: looked up when asked
        if self.acting is None:
            raise RuntimeError("the acting loop is not running yet")
        self.acting.approve(plan_id, who)

    def _start(self, settings: KafkaSettings, options: RunOptions) -> None:
        self.graph = TopologyGraph.load(options.topology)
        self.where = entity_tags(self.graph)
        if self.pages is not None:
            self.pages.graph = self.graph
        self.watched = TopologyFile(options.topology)  # a re-imported topology is taken without a restart
        self.topology_json: dict[str, Any] = json.loads(options.topology.read_text())
        notifier = options.notifier
        if notifier is not None and notifier.router.locate is None:
            notifier.router.locate = topology_locate(self.graph)
        if options.actions is not None:  # one loop and one audit log, whichever pipeline holds the partitions
            from aiops.acting import act_loop

            audit = options.state_dir / f"actions-{settings.run_group}.sqlite" if options.state_dir else None
            self.acting = act_loop(
                options.actions,
                self.graph,
                audit,
                self._page,
                jobs_on=self._jobs_on,
                action_sink=self.sinks.actions,
                job_ends=self._job_ends,
            )
            if self.approvals is not None and audit is None:
                self.approvals.audit = self.acting.audit  # in memory: the API reads the loop's own log
        if options.from_detection:  # how many partitions the detection members judge: each tick waits for all
            self.telemetry_partitions = self.waiting(lambda: self._partitions(settings.telemetry_topic))
        self.pipeline = self._fresh()
        self.store = CheckpointStore(options.state_dir, f"run-{settings.run_group}") if options.state_dir else None
        self.connect(self.inputs, settings.run_group, one_active=True)
        self.dead = KafkaDeadLetterSink(self.producer, settings.deadletter_topic)
        self.started = self.last_checkpoint = time.monotonic()
        self.unsaved = False  # batches taken since the last checkpoint
        if self.sinks.schedule is not None and options.events:  # written again on a restart: the same points
            self.sinks.schedule(list(options.events))
        self.feed = EventsFeed(self._broker(), settings.events_topic)

    def _partitions(self, topic: str) -> int:
        return len(self._broker().ends([topic]).get(topic, {}))

    def _page(self, message: str, subject: str) -> None:  # through whichever pipeline holds the partitions now
        self.pipeline.page(message, subject)

    def _jobs_on(self, node: str, t: float) -> dict[str, int]:
        return self.pipeline.jobs_on(node, t)

    def _job_ends(self, node: str, t: float) -> dict[str, float]:
        return self.pipeline.job_ends(node, t)

    def _fresh(self) -> Pipeline:
        options = self.options
        findings = None
        if options.from_detection:
            findings = FindingsLoop(options.interval_s, self.telemetry_partitions, *self.inputs)
        self.fence.clear()
        pipeline = Pipeline(
            self.graph, options.interval_s, options.events, options.predictor, options.lateness_s,
            options.detector_settings, findings,
        )  # fmt: skip
        pipeline.topology_digest = self.watched.digest
        pipeline.notifier = options.notifier
        pipeline.index, pipeline.metrics, pipeline.to_close = self.index, self.metrics, self.to_close
        self.pipeline = pipeline  # before acting restores: what it settles may page
        if self.pages is not None:  # the pages' blast radius: the jobs the engine's schedule says
            self.pages.schedule = pipeline.schedule
            self.pages.events = pipeline.recent_events
        pipeline.early_pages = self.early_pages  # pages said before a tick outlive a pipeline replaced
        if self.acting is not None:
            pipeline.act_on(self.acting)
        return pipeline

    # ---------------------------------------------------------------- liveness

    def stopping(self) -> bool:
        """Asked whenever the daemon waits or loops: the API's liveness and lag come from here,
        and the health written to InfluxDB (idle or not)."""
        self.metrics.beat()
        if self.connected:
            self.metrics.assigned, self.metrics.standing_by = self.consumer.assigned, self.consumer.standing_by
            self.metrics.lag = self.consumer.lag()
        self._report_health()
        return self.should_stop()

    def _report_health(self, force: bool = False) -> None:
        health = self.sinks.health
        if health is not None and (force or time.monotonic() - self.last_health >= self.sinks.health_every_s):
            self.last_health = time.monotonic()
            health(self.metrics)

    # ---------------------------------------------------------------- rebalances

    def on_assigned(self, partitions: set[Partition]) -> dict[Partition, int]:
        """One member of the group holds every partition; the group hands them back to the same
        member after each rebalance, and then its state is still its own. Partitions it did not
        hold come with the checkpoint (a start, or a standby taking over): state moves with them.
        Runs inside a poll: no Kafka calls here."""
        if not partitions:
            if self.holding:  # it held them until now: what it learnt is the new holder's
                self._fresh()
            self.holding = set()
            if self.consumer.standing_by:
                log.warning("standing by: another member of group %s holds the partitions", self.settings.run_group)
            return {}
        if partitions <= self.holding:
            self.holding = partitions
            return {}
        self.holding = partitions
        checkpoint = self._restore(self._fresh())
        if checkpoint is None:
            self._fresh()  # a failed restore may have left part of the state
            return {}
        if self.pages is not None:  # the restored schedule replaced the fresh one
            self.pages.schedule = self.pipeline.schedule
            self.pages.events = self.pipeline.recent_events
        self.once.replaying_from(checkpoint.outputs)
        if self.index is not None:  # the restored engine may hold incidents an operator resolved since
            self.to_close.extend(self.index.operator_resolved())
        resume = resume_offsets(checkpoint)
        log.warning(
            "resuming from the checkpoint of %s (%s; last tick %s)",
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(checkpoint.written_at)),
            ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(resume.items())),
            self.pipeline.last_tick,
        )
        return resume

    def _restore(self, pipeline: Pipeline) -> Checkpoint | None:
        """The last checkpoint, loaded into the pipeline; None if there is none or it cannot be
        used (logged: the daemon then starts from nothing, at the group's committed offsets)."""
        checkpoint = usable_checkpoint(self.store, self.born)
        if checkpoint is None:
            return None
        try:
            pipeline.restore(checkpoint.state)
        except (CheckpointError, ValueError) as exc:
            log.error("checkpoint not used (%s): starting from nothing at the committed offsets", exc)
            return None
        return checkpoint

    def on_revoked(self, partitions: set[Partition]) -> None:  # the pipeline of the moment (on_assigned renews it)
        self.pipeline.detect.forget_partitions(partitions)

    # ---------------------------------------------------------------- the work

    def on_batch(self, messages: Polled) -> None:
        self._reload_topology()
        self._hear_scheduler()
        pipeline = self.pipeline
        values_before = pipeline.detect.stats.values
        anomalies, letters = pipeline.feed_polled(messages, self.consumer.backlogged())
        self.consumer.hold_back(pipeline.detect.ahead_partitions())
        self.metrics.took(pipeline.detect.stats.values - values_before)
        self.dead.add(letters)
        self.publish(pipeline.outputs(anomalies))
        self._release_findings()
        self.dead.flush(self.stopping)
        self.unsaved = True
        # with a state directory, offsets are committed only with the state they belong to:
        # committed ahead of the checkpoint, a restart would carry on from there with
        # state that never saw what came between (or, before the first checkpoint, with none)
        if self.store is None or time.monotonic() - self.last_checkpoint >= self.options.checkpoint_every_s:
            self.checkpoint()

    def publish(self, out: TickOutputs) -> None:
        """A batch's outputs to their topics, flushed, then to the sinks."""
        self.once.arm(self.stopping)  # resumed from a checkpoint: what was published since is skipped
        settings, producer = self.settings, self.producer
        for n in out.notices:
            producer.send_raw(settings.notices_topic, n.to_json(), key=n.subject.encode())
        if self.sinks.notices is not None and out.notices:
            self.sinks.notices(out.notices)
        for a in out.anomalies:
            producer.send_raw(settings.anomalies_topic, a.to_json(), key=a.entity.encode())
        for p in out.predictions:
            producer.send_raw(settings.predictions_topic, p.to_json(), key=p.entity.encode())
        for record in out.incidents:  # keyed by incident: its history stays in order
            producer.send_raw(settings.incidents_topic, record.to_json(), key=record.incident_id.encode())
        producer.flush(should_stop=self.stopping)
        self._to_sinks(out)

    def _to_sinks(self, out: TickOutputs) -> None:
        """What a batch published, to the sinks that were given (InfluxDB), and counted."""
        sinks, stats = self.sinks, self.stats
        if sinks.incidents is not None:
            sinks.incidents(out.incidents)
        if sinks.findings is not None:
            sinks.findings(out.anomalies, out.predictions, self.where)
        stats.anomalies += len(out.anomalies)
        stats.predictions += len(out.predictions)
        stats.incidents += len(out.incidents)

    def checkpoint(self) -> None:
        """State and the offsets it belongs to, then the same offsets to Kafka (the broker away:
        the next round checkpoints and commits)."""
        held = self.pipeline.detect.held.first_held()
        saves = None
        if self.store is not None:
            saves = [(self.store, self.pipeline.state(), set(self.holding))] if self.holding else []
        self.save_then_commit(saves, held)
        self.last_checkpoint = time.monotonic()
        self.unsaved = False

    def let_go(self) -> None:
        """The input went quiet for a tick's lateness: the ticks held for late rows get nothing
        more (a collector that stopped, the end of a replay); analyse them now, as the offline run
        does at the end, and commit. Rows that come later are late. (Fed by the detection members,
        quiet says nothing: their progress says when a tick is whole.)"""
        if not self.options.from_detection:
            self.publish(self.pipeline.outputs(self.pipeline.finish()))
        self.checkpoint()

    def on_quiet(self) -> None:
        if self.options.from_detection:
            self._release_findings()
        # the input went quiet with batches not yet in a checkpoint: saved when due, not only when
        # more input comes (killed in a quiet spell, a daemon would read and publish them again)
        due = time.monotonic() - self.last_checkpoint >= self.options.checkpoint_every_s
        if self.store is not None and self.unsaved and due:
            self.checkpoint()

    def _release_findings(self) -> None:
        """Fed by the detection members: a tick every telemetry partition has been judged through
        goes to the engine once this member has read the findings topics as far as they went when
        it heard so (each member's progress record follows its findings on the broker, but a poll
        may bring it before them)."""
        findings = self.pipeline.detect
        if not isinstance(findings, FindingsLoop):
            return
        if self.fence and self.consumer.reached(self.fence[0][1]):
            findings.release(self.fence.pop()[0])
            self.publish(self.pipeline.outputs([]))
        ready = findings.ready_through()
        if not self.fence and ready is not None:
            try:
                topics = {self.settings.anomalies_topic, self.settings.predictions_topic}
                self.fence.append((ready, self.consumer.ends_of(topics)))
            except KafkaIOError as exc:  # the broker away: asked again after the next poll
                log.warning("%s", exc)

    def _reload_topology(self) -> None:
        """The topology file changed: validated, then taken; a bad one is refused and the old stays."""
        change = self.watched.changed()
        if change is None:
            return
        digest, data = change
        try:
            graph = TopologyGraph.from_json(data)
        except GraphError as exc:
            log.error("topology %s not reloaded (%s): the one loaded before stays in use", self.options.topology, exc)
            return
        self.pipeline.reload(graph, data, self.topology_json, digest)
        self.graph, self.topology_json = graph, data
        self.where = entity_tags(graph)
        if self.pages is not None:
            self.pages.graph = graph
        if self.options.notifier is not None:
            self.options.notifier.router.locate = topology_locate(graph)

    def _hear_scheduler(self) -> None:
        """What the scheduler said since the last batch, before the telemetry that follows it."""
        events, refused, self.pipeline.events_offsets = self.feed.take(self.pipeline.events_offsets)
        if events:
            self.pipeline.add_events(events)
            if self.sinks.schedule is not None:
                self.sinks.schedule(events)
        self.dead.add(refused)

    def at_end(self, idle: bool) -> None:
        if idle:  # the input went idle (a replay, a test): what is held is all there is
            self.publish(self.pipeline.outputs(self.pipeline.finish()))
        self.checkpoint()
        self._report_health(force=True)

    # ---------------------------------------------------------------- running

    def _stop_api(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.index is not None:
            self.index.close()

    def close(self) -> None:
        super().close()
        self.feed.close()
        self._stop_api()

    def run(self) -> RunStats:
        try:
            self.serve()
        except KafkaIOError as exc:  # asked to stop while the broker was away: nothing more committed
            log.warning("%s", exc)
        finally:
            self.close()
        return self.pipeline.finish_stats(self.stats, time.monotonic() - self.started)


def run_kafka(
    settings: KafkaSettings,
    options: RunOptions,
    should_stop: Callable[[], bool],
    sinks: RunSinks | None = None,
) -> RunStats:
    """The daemon until asked to stop (or, with `options.idle_stop_s`, until its input has been
    quiet that long and what was held is analysed); see RunDaemon."""
    return RunDaemon(settings, options, should_stop, sinks).run()


__all__ = ["RunDaemon", "RunOptions", "RunSinks", "run_kafka"]
