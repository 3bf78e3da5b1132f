"""Running the detector stack: offline over a recorded folder, or as a daemon between Kafka topics.

Both paths are the same loop: line protocol -> ingest core (decode, validate) -> tick assembler
-> detector stack -> anomalies. Scheduler events (maintenance announcements) come from the events
log; a real deployment gets them from its scheduler.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from detectors.anomaly import Anomaly, Prediction
from detectors.coverage import CoverageWatch, Notice
from detectors.predict.online import OnlinePredictor
from detectors.stack import DetectorStack, DriftFactory, default_drift
from detectors.stack.summary import CohortSummary
from detectors.stack.view import MeasurementTick
from detectors.ticks import AssembledTick, HeldMessages, PartitionClock, TickAssembler
from ingest.deadletter import DeadLetter, Source
from ingest.frames import Frame
from ingest.pipeline import Batch, IngestCore
from vocab.schedule import IDLE, NodeJobs, event_problem, maintenance_window
from vocab.thresholds import BUSY_UTIL_PCT, GPU_UTIL_FIELD, DetectorSettings

log = logging.getLogger(__name__)

CHUNK_BYTES = 32 << 20


@dataclass(slots=True)
class DetectStats:
    ticks: int = 0
    values: int = 0
    anomalies: int = 0
    suppressed: int = 0
    late_rows: int = 0
    deadletters: int = 0
    job_tag_mismatches: int = 0  # GPU rows whose job tag disagreed with the schedule
    application_xids: int = 0  # application-class XIDs raised under a job: the job's, not alarmed
    seconds: float = 0.0
    # a daemon's busy span in Unix time: its first message taken, its last tick judged (the
    # throughput of members that drained a backlog together: aiops bench scale)
    first_message_at: float | None = None
    last_judged_at: float | None = None
    idle_wait_s: float = 0.0  # of that span, waiting for the input to be called quiet (its tail held)


def read_chunks(path: Path, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """A line-protocol file in pieces that end on line boundaries.

    A piece with no newline at all (a line longer than a piece: nothing a real exporter writes)
    is handed on as it is, and decoding refuses it as over the bound a record may take: waiting
    for its end would hold the whole run in memory and copy it once per piece."""
    with path.open("rb") as f:
        rest = b""
        while chunk := f.read(size):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                yield data[:cut]
                rest = data[cut:]
            elif len(data) >= size:
                yield data
                rest = b""
            else:
                rest = data
        if rest:
            yield rest


def read_events(path: Path) -> tuple[list[dict[str, object]], list[DeadLetter]]:
    """The scheduler's events file: the usable events, and a dead letter with the reason for
    every line that is not one (not JSON, not UTF-8, truncated, a field of the wrong type)."""
    if not path.is_file():
        return [], []
    events: list[dict[str, object]] = []
    letters: list[DeadLetter] = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
            problem = event_problem(event)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            problem = f"not a JSON event: {exc}"[:300]
        if problem is None:
            events.append(event)
        else:
            letters.append(DeadLetter("events", f"{path.name}:{number}: {problem}", raw))
    if letters:
        log.warning("%s: %d lines are not usable events (dead-lettered): %s", path, len(letters), letters[0].reason)
    return events, letters


def load_events(path: Path) -> list[dict[str, object]]:
    """The usable events of the file (the rest is logged; `read_events` also gives them back)."""
    return read_events(path)[0]


def apply_events(loop: DetectLoop, events: Iterable[dict[str, object]]) -> None:
    """What the scheduler says, into the loop (see `DetectLoop.add_events`)."""
    loop.add_events(events)


def ticks_from_folder(folder: Path, interval_s: float) -> Iterator[tuple[float, dict[str, Frame]]]:
    """A recorded run's telemetry as (time, frames) ticks, through the ingest core."""
    core = IngestCore()
    assembler = TickAssembler(interval_s)
    for chunk in read_chunks(folder / "telemetry.lp"):
        assembler.add(core.process(chunk).frames)
        for tick in assembler.ready():
            yield tick.t, tick.frames
    for tick in assembler.flush():
        yield tick.t, tick.frames


# a job's GPUs may sit idle while it loads data and builds its model: the notice waits this long
# (the GPUs are left out from the start all the same)
IDLE_NOTICE_AFTER_S = 900.0
FAILING_FOR_S = 2 * 3600.0  # an entity with anomalies this recent is failing, not about to
# how far past the slowest partition another may deliver before it is paused, in ticks beyond the
# lateness: what waits in memory while catching up is then a few ticks of the cluster, as in
# steady state, not the hours one partition can run ahead of another; a handful of ticks keeps
# the pausing rare (a paused partition's fetched records are fetched again when it resumes)
AHEAD_TICKS = 8
# a partition's progress in a poll: this percentile of its messages' event times, the next one up
# (close to the newest tick of its hosts; once a poll holds more than ten of a partition's
# messages, one host whose clock runs ahead no longer sets it)
PROGRESS_QUANTILE = 90


class DetectLoop:
    """Bytes in, anomalies (and predictions) out; the part both runners share."""

    def __init__(
        self,
        interval: float,
        drift_factory: DriftFactory | None = default_drift,
        predictor: OnlinePredictor | None = None,
        settings: DetectorSettings | None = None,
        lateness_s: float = 0.0,
    ) -> None:
        self.core = IngestCore()
        self.stack = DetectorStack(interval, drift_factory, settings)
        self.predictor = predictor
        self.jobs = NodeJobs()  # from the scheduler's events (add_events); empty: the job tags alone
        # GPUs of jobs known by their nodes alone: the job under which each was last seen busy
        # (a GPU idle since its node's job started is not taken for one of the job's)
        self.busy_under: dict[str, str] = {}
        self.idle_told: set[str] = set()  # jobs whose idle GPUs a notice has named
        self.predictions: list[Prediction] = []
        self.coverage = CoverageWatch()  # which fault kinds the arriving telemetry can show
        self.notices: list[Notice] = []
        self._recent: dict[str, float] = {}
        self.assembler = TickAssembler(interval, lateness_s)
        self.partitions = PartitionClock()  # from Kafka: the slowest partition holds the ticks back
        self.held = HeldMessages()  # from Kafka: messages whose tick is not analysed yet (not committed)
        self.stats = DetectStats()
        # called once per analysed tick with its anomalies and predictions (the RCA engine)
        self.tick_listener: Callable[[float, list[Anomaly], list[Prediction]], None] | None = None
        # with track_jobs, each tick's mean GPU utilisation per job (%), the GPUs each job holds as
        # the schedule says: what acting reads a job's checkpoints from (act.checkpoints)
        self.track_jobs = False
        self.job_utilisation: dict[str, float] = {}
        # split detection (aiops.detect_daemon): this loop holds one partition's entities; released
        # ticks wait their turn, the one begun waits for the merged cohort summary of its tick
        self.split = False
        self.waiting: deque[AssembledTick] = deque()
        self.pending: TickWork | None = None
        self.pending_ns = 0
        self.done_through_ns: int | None = None  # every tick at or before it judged

    def forget_partitions(self, partitions: AbstractSet[tuple[str, int]]) -> None:
        """A rebalance took partitions away: their held messages and clocks are the new owner's."""
        self.held.forget(set(partitions))
        self.partitions.forget(partitions)
        self.core.validator.forget(partitions)

    def __getstate__(self) -> dict[str, object]:
        """A checkpoint keeps what the loop learned; the listener is the caller's to reattach."""
        state = self.__dict__.copy()
        state["tick_listener"] = None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def feed(self, data: bytes) -> tuple[list[Anomaly], list[DeadLetter]]:
        letters = self._take(self.core.process(data))
        return self._analyse_ready(), letters

    def _take(self, batch: Batch) -> list[DeadLetter]:
        """A decoded batch into the tick assembler; its dead letters back. A row whose tick was
        already analysed is not a bad line: ingest stores it; detection counts it (late_rows)
        and leaves it out."""
        self.assembler.add(batch.frames)
        self.stats.late_rows = self.assembler.late_rows
        self.stats.deadletters += len(batch.deadletters)
        return list(batch.deadletters)

    def _analyse_ready(self) -> list[Anomaly]:
        if self.split:  # each waits its turn: begun, then judged once the merged summary is there
            self.waiting.extend(self.assembler.ready())
            return []
        anomalies: list[Anomaly] = []
        for tick in self.assembler.ready():
            anomalies += self.analyse(tick.t, tick.frames)
        return anomalies

    def feed_polled(
        self, messages: Sequence[tuple[Source, int, bytes]], backlogged: AbstractSet[tuple[str, int]] = frozenset()
    ) -> tuple[list[Anomaly], list[DeadLetter]]:
        """One Kafka poll: (source, record timestamp in ms, value) per message; `backlogged`: the
        partitions the broker still holds records for (or cannot yet say), never taken for quiet
        ones. Each partition's rows are checked against that partition's own event time."""
        from ingest.messages import event_time_ms, per_partition, process_messages

        event_ms = [event_time_ms(value, ms) for _, ms, value in messages]
        times_of: dict[tuple[str, int], list[int]] = {}
        for (src, _, _), t in zip(messages, event_ms, strict=True):
            times_of.setdefault((src.topic, src.partition), []).append(t)
        letters: list[DeadLetter] = []
        progress: list[tuple[object, int]] = []
        for partition, part in per_partition(messages):
            letters += self._take(process_messages(self.core, part, partition))
            progress += self._progress(partition, np.asarray(times_of[partition], dtype=np.int64))
        self.assembler.cap_ns = self.partitions.observe(progress, backlogged)
        anomalies = self._analyse_ready()
        self._hold(messages, event_ms)
        return anomalies, letters

    def _progress(self, partition: tuple[str, int], times_ms: NDArray[np.int64]) -> list[tuple[object, int]]:
        """How far a partition has got, from one poll of its messages: a high quantile of their
        event times, among those its ingest accepted. Not the newest: one host whose clock runs
        ahead (or a line from the year 2226, dead-lettered) must not make the partition look
        further along than the rest of its hosts are, or their rows would wait for nothing and
        the ticks would close without them."""
        watermark = self.core.validator.clock_of(partition).watermark_ns
        accepted = times_ms if watermark is None else times_ms[times_ms * 1_000_000 <= watermark]
        if not len(accepted):
            return []
        return [(partition, int(np.percentile(accepted, PROGRESS_QUANTILE, method="higher")))]

    def ahead_partitions(self) -> set[tuple[str, int]]:
        """Partitions that ran far ahead of the slowest one: the daemon pauses them until it
        catches up, so memory stays bounded however unevenly the broker hands partitions out."""
        bound_s = self.assembler.lateness_s + AHEAD_TICKS * self.stack.interval
        return self.partitions.ahead(bound_s)  # type: ignore[return-value]

    def _hold(self, messages: Sequence[tuple[Source, int, bytes]], event_ms: Sequence[int]) -> None:
        """Remember the messages whose tick is still open; forget those whose tick was analysed."""
        from ingest.messages import per_partition

        released = self.done_through_ns if self.split else self.assembler.released_through_ns
        # further ahead of its partition's event time than the bound, the ingest core
        # dead-lettered the line: nothing waits for it
        ahead_ns: dict[tuple[str, int], int | None] = {}
        for partition, _ in per_partition(messages):
            clock = self.core.validator.clock_of(partition)
            ahead_ns[partition] = None if clock.watermark_ns is None else clock.watermark_ns + clock.bound_ns
        ticks = self.assembler.grid(np.asarray(event_ms, dtype=np.int64) * 1_000_000).tolist()
        for (src, _, _), tick in zip(messages, ticks, strict=True):
            source = (src.topic, src.partition)
            ahead = ahead_ns[source]
            if (released is None or tick > released) and (ahead is None or tick <= ahead):
                self.held.hold(source, src.offset, tick)
        self.held.release(released)

    def finish(self) -> list[Anomaly]:
        """End of input: every tick still held is analysed, complete or not."""
        if self.split:
            self.waiting.extend(self.assembler.flush())
            return []
        out: list[Anomaly] = []
        for tick in self.assembler.flush():
            out += self.analyse(tick.t, tick.frames)
        self.held.release(self.assembler.released_through_ns)
        return out

    # ------------------------------------------------------------------ split detection

    def begin_next(self) -> TickWork | None:
        """Split detection: the tick under way (begun, its share summarised), beginning the next
        released one if none is; None when nothing waits. One at a time, in order: a tick's
        judgement changes the state the next one begins from, as in one process."""
        if self.pending is None and self.waiting:
            tick = self.waiting.popleft()
            self.pending = self.begin(tick.t, tick.frames)
            self.pending_ns = tick.ns
        return self.pending

    def complete_pending(self, cohorts: CohortSummary) -> list[Anomaly]:
        """The tick under way, judged against the merged summary of every share; its messages done."""
        work = self.pending
        if work is None:
            return []
        self.pending = None
        found = self.complete(work, cohorts)
        self.done_through_ns = self.pending_ns
        self.held.release(self.done_through_ns)
        return found

    @property
    def quiescent(self) -> bool:
        """No tick released and not yet judged: what a checkpoint may be taken at (a tick begun
        has changed the state; its messages are not done, and a restart would read them again)."""
        return self.pending is None and not self.waiting

    def add_events(self, events: Iterable[dict[str, object]]) -> None:
        """Scheduler events (checked by `event_problem`), in any order and at any time, live or
        from a file: jobs take effect at their event times (a tick is analysed with the schedule
        as it was then), maintenance windows from their announcement, a drain until the node is
        resumed. Saying an event twice changes nothing."""
        for e in events:
            kind = e.get("type")
            if kind in ("job_start", "job_running", "job_end"):
                self.jobs.add(e)
                self.coverage.schedule_known = True
            elif kind == "maintenance":
                key, start, end = maintenance_window(e)
                self.stack.announce_maintenance([str(n) for n in e["nodes"]], start, end, key)  # type: ignore[attr-defined]
            elif kind == "node_state":
                self._node_state(e)

    def _node_state(self, e: dict[str, object]) -> None:
        """A drain holds a node's anomalies back until it is resumed (or lost: a node going down
        while drained is news again)."""
        at = float(e["time"])  # type: ignore[arg-type]
        windows = self.stack.maintenance
        for node in map(str, e["nodes"]):  # type: ignore[call-overload]
            key = f"drain:{node}"
            held = windows.window(key)
            if e["state"] == "drain" and (held is None or held[2] <= at):
                if held is not None:  # an earlier drain, closed: kept under its start
                    windows.announce(held[0], held[1], held[2], f"{key}:{held[1]}")
                windows.announce([node], at, math.inf, key)
            elif e["state"] != "drain" and held is not None and held[2] > at:
                windows.announce(held[0], held[1], at, key)

    def _with_jobs(self, t: float, frames: dict[str, Frame]) -> dict[str, Frame]:
        """GPU rows carry the job that holds them, as the schedule says: the cohort a GPU is
        compared with. A `job` tag, when a collector sends one, is checked against it
        (disagreements are counted); with no schedule, the tag is all there is."""
        gpu = frames.get("gpu")
        if gpu is None or not self.jobs:
            return frames
        jobs = self.jobs.at(t, gpu.tag("node"), gpu.tag("gpu"))
        jobs = self._without_idle(t, gpu, jobs)
        self._tell_shared(t)
        tagged = gpu.tags.get("job")
        if tagged is not None:
            self.stats.job_tag_mismatches += int(np.count_nonzero((tagged != "") & (tagged != jobs)))
        return {**frames, "gpu": Frame(gpu.measurement, gpu.time_ns, {**gpu.tags, "job": jobs}, gpu.fields)}

    def _without_idle(self, t: float, gpu: Frame, jobs: NDArray[np.object_]) -> NDArray[np.object_]:
        """Where the scheduler named only a job's nodes, the GPUs of those nodes that have been
        idle since the job started are no members of it (a 4-GPU job on an 8-GPU node leaves
        four GPUs idle; next to the job's, they would look slow, cold and underpowered)."""
        util = gpu.fields.get(GPU_UTIL_FIELD)
        if util is None:
            return jobs
        codes, uniques = pd.factorize(jobs)
        whole = np.array([self.jobs.nodes_only(str(j)) for j in uniques], dtype=np.bool_)
        if not whole.any():
            return jobs
        rows = np.flatnonzero(whole[codes] & (jobs != IDLE))
        ids = gpu.tag("gpu")[rows]
        member = pd.Series(ids, dtype=object).map(self.busy_under).to_numpy(dtype=object) == jobs[rows]
        busy = util.as_float()[rows] >= BUSY_UTIL_PCT
        for r in np.flatnonzero(busy & ~member).tolist():  # busy for the first time under this job
            self.busy_under[str(ids[r])] = str(jobs[rows[r]])
        member |= busy
        out = jobs.copy()
        out[rows[~member]] = IDLE
        self._tell_idle(t, jobs[rows[~member]], ids[~member])
        if len(self.busy_under) > 4 * max(len(jobs), 1024):  # GPUs of jobs long gone
            live = set(pd.unique(jobs).tolist())
            self.busy_under = {g: j for g, j in self.busy_under.items() if j in live}
        return out

    def _tell_shared(self, t: float) -> None:
        """One notice per node that several jobs hold by node alone: its GPUs are in no cohort."""
        if len(self.idle_told) > 100_000:  # jobs long gone; one may be told again
            self.idle_told.clear()
        for node, jobs in self.jobs.shared().items():
            key = f"{node}:{','.join(jobs)}"
            if key in self.idle_told:
                continue
            self.idle_told.add(key)
            message = (
                f"{node}: held by jobs {', '.join(jobs)}, and the scheduler names only nodes, not which GPUs "
                "each holds; its GPUs are left out of their cohorts"
            )
            self.notices.append(Notice(t, "schedule", node, "shared_node", message, {"jobs": list(jobs)}))

    def _tell_idle(self, t: float, jobs: NDArray[np.object_], gpus: NDArray[np.object_]) -> None:
        """One notice per job whose GPUs stay idle past the start-up grace: they are left out."""
        for name in pd.unique(jobs).tolist():
            job = self.jobs.job(str(name))
            if job is None or name in self.idle_told or t - job.start < IDLE_NOTICE_AFTER_S:
                continue
            self.idle_told.add(str(name))
            left = sorted(str(g) for g in gpus[jobs == name])
            message = (
                f"job {name}: {len(left)} GPUs on its nodes have been idle since it started; the scheduler "
                "names only the job's nodes, so they are left out of its cohort"
            )
            self.notices.append(Notice(t, "schedule", str(name), "idle_gpus", message, {"gpus": left[:64]}))

    def analyse(self, t: float, frames: dict[str, Frame]) -> list[Anomaly]:
        """One assembled tick: detectors, then the predictor (for entities not already failing).
        Holding every entity, its own summary is the whole tick's."""
        work = self.begin(t, frames)
        return self.complete(work, work.summary)

    def begin(self, t: float, frames: dict[str, Frame]) -> TickWork:
        """The tick up to the comparisons across entities: what those need, as a summary."""
        self.stats.ticks += 1
        self.stats.values += sum(f.value_count for f in frames.values())
        self.coverage.observe(frames)
        self.notices += self.coverage.notices(t)
        frames = self._with_jobs(t, frames)
        if self.track_jobs:
            self.job_utilisation = job_utilisation(frames.get("gpu"))
        views = self.stack.prepare(t, frames)
        summary = CohortSummary()
        self.stack.summarise(views, summary)
        if self.predictor is not None:
            self.predictor.features.summarise(t, frames, summary)
        return TickWork(t, frames, views, summary)

    def complete(self, work: TickWork, cohorts: CohortSummary) -> list[Anomaly]:
        """The rest of the tick, cohorts as the merged summary of every share shows them."""
        t, frames = work.t, work.frames
        found = self.stack.judge(t, work.views, cohorts)
        # who stopped or started reporting: for the engine (an incident whose entity is silent
        # stays open), not anomalies; a member of split detection publishes them with its findings
        moves = self.stack.presence.take_moves()
        for gap in self.stack.presence.gaps:  # an exporter restarting: one notice, not N anomalies
            message = (
                f"{gap.node}: all {gap.gpus} GPUs silent while the node's other telemetry arrives (GPU exporter gap)"
            )
            self.notices.append(Notice(gap.at, "telemetry_gap", gap.node, "gap", message, {"gpus": [str(gap.gpus)]}))
        self.stack.presence.gaps.clear()
        for at, job, codes, gpus in self.stack.rules.storms:
            listed = ", ".join(map(str, codes))
            message = (
                f"job {job}: application XID {listed} on {gpus} GPUs at once "
                "(the job crashed; its GPUs are not suspects)"
            )
            self.notices.append(Notice(at, "xid_storm", job, "job_crashed", message, {"xids": [listed]}))
        self.stack.rules.storms.clear()
        self.stats.application_xids = self.stack.rules.application_xids
        self.stats.anomalies += len(found)
        self.stats.suppressed = self.stack.suppressed
        predicted = len(self.predictions)
        if self.predictor is not None:
            for a in found:
                if not a.detector.startswith("warn:"):  # an early warning is what predictions are for
                    self._recent[a.entity] = t
            if len(self._recent) > 10_000:  # forget old ones now and then
                self._recent = {e: at for e, at in self._recent.items() if t - at < FAILING_FOR_S}
            failing = {e for e, at in self._recent.items() if t - at < FAILING_FOR_S}
            self.predictions += self.predictor.update(t, frames, failing, cohorts)
        if self.tick_listener is not None:
            self.tick_listener(t, found + moves, self.predictions[predicted:])
        return found + moves if self.split else found


@dataclass(slots=True)
class TickWork:
    """A tick begun and waiting for its merged cohort summary (split detection)."""

    t: float
    frames: dict[str, Frame]
    views: list[MeasurementTick]
    summary: CohortSummary  # this share's


def job_utilisation(gpu: Frame | None) -> dict[str, float]:
    """Mean GPU utilisation per job over the GPUs it holds this tick (idle and shared GPUs left out)."""
    if gpu is None or "job" not in gpu.tags or GPU_UTIL_FIELD not in gpu.fields:
        return {}
    jobs = gpu.tags["job"]
    util = gpu.fields[GPU_UTIL_FIELD].as_float()
    keep = (jobs != IDLE) & (jobs != "") & ~np.isnan(util)
    if not keep.any():
        return {}
    means = pd.Series(util[keep]).groupby(jobs[keep]).mean()
    return {str(j): float(v) for j, v in means.items()}


class IntervalUnknownError(ValueError):
    """No scrape interval was given and the recording does not say: never guessed from the data,
    where clock offsets and jitter would make any guess wrong."""


def scrape_interval(folder: Path | None, given: float | None) -> float:
    """The scrape interval: as given (--interval, or the daemon's setting), else the recording's
    meta.json (`aiops gen --out` writes it), else a clear refusal."""
    if given is not None:
        if not given > 0:
            raise IntervalUnknownError(f"the scrape interval must be positive, got {given}")
        return float(given)
    meta = folder / "meta.json" if folder is not None else None
    if meta is not None and meta.is_file():
        try:
            value = json.loads(meta.read_text())["interval_s"]
        except (ValueError, KeyError, TypeError):
            raise IntervalUnknownError(f"{meta} has no interval_s; give --interval SECONDS") from None
        return scrape_interval(None, float(value))
    where = f"{folder} has no meta.json" if folder is not None else "none was configured"
    raise IntervalUnknownError(
        f"the scrape interval is unknown ({where}): give --interval SECONDS "
        "(or AIOPS_SCRAPE_INTERVAL_S for the daemons); it is never guessed from timestamps"
    )


def detect_folder(
    input_dir: Path,
    out_dir: Path,
    interval_s: float,
    drift_factory: DriftFactory | None = default_drift,
    on_tick: Callable[[], None] | None = None,
    predictor: OnlinePredictor | None = None,
    detector_settings: DetectorSettings | None = None,
) -> DetectStats:
    """Reads telemetry.lp and events.jsonl (never truth.jsonl); writes anomalies.jsonl,
    predictions.jsonl (empty without a predictor) and deadletters.jsonl."""
    telemetry = input_dir / "telemetry.lp"
    if not telemetry.is_file():
        raise FileNotFoundError(f"no telemetry.lp in {input_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    loop = DetectLoop(interval_s, drift_factory, predictor=predictor, settings=detector_settings)
    events, bad_events = read_events(input_dir / "events.jsonl")
    apply_events(loop, events)
    started = time.perf_counter()
    with (
        (out_dir / "anomalies.jsonl").open("wb") as out,
        (out_dir / "deadletters.jsonl").open("wb") as dead,
        (out_dir / "predictions.jsonl").open("wb") as predicted,
    ):
        dead.writelines(d.to_json() + b"\n" for d in bad_events)
        for chunk in read_chunks(telemetry):
            anomalies, letters = loop.feed(chunk)
            out.writelines(a.to_json() + b"\n" for a in anomalies)
            dead.writelines(d.to_json() + b"\n" for d in letters)
            predicted.writelines(p.to_json() + b"\n" for p in loop.predictions)
            loop.predictions.clear()
            if on_tick is not None:
                on_tick()
        out.writelines(a.to_json() + b"\n" for a in loop.finish())
        predicted.writelines(p.to_json() + b"\n" for p in loop.predictions)
    loop.stats.seconds = time.perf_counter() - started
    return loop.stats


def read_anomalies(path: Path) -> list[Anomaly]:
    return [Anomaly.from_json(line) for line in path.read_bytes().splitlines() if line.strip()]
