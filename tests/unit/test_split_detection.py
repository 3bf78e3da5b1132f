"""Split detection gives what one process gives: each telemetry partition's entities in a loop of
their own, the comparisons across partitions from the merged shares (detectors.split). Shares
move in memory here; through Kafka, between member processes, in tests/faults/test_split_members.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np
import pytest
from kafka.partitioner.default import murmur2

from aiops.pipeline import Pipeline
from detectors.anomaly import Anomaly, is_presence
from detectors.detect_loop import DetectLoop, apply_events
from detectors.predict.features import FEATURES
from detectors.predict.online import OnlinePredictor
from detectors.progress_topic import FindingsLoop, idle_record, judged_record
from detectors.split import advance
from detectors.stack.summary import CohortSummary, ShareBoard
from ingest.deadletter import Source
from ingest.lineprotocol import lines_to_bytes
from ingest.messages import messages_from_lines
from rca.graph import TopologyGraph
from telemetry_gen.generator import GenConfig, Generation


def by_partition(data: bytes, partitions: int) -> dict[int, list[bytes]]:
    """The telemetry as Kafka's default partitioner spreads it (murmur2 of the message key)."""
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for m in messages_from_lines(data):
        assert m.key is not None
        out[(murmur2(m.key) & 0x7FFFFFFF) % partitions].append(m.value + b"\n")
    return out


def run_split(
    shares: Mapping[int, list[bytes]], make: Callable[[], DetectLoop], chunk: int
) -> tuple[list[Anomaly], list[DetectLoop]]:
    """Each partition's messages fed to its own loop `chunk` at a time, shares passed in memory."""
    board = ShareBoard(len(shares))
    loops = {p: make() for p in shares}
    for loop in loops.values():
        loop.split = True
    found: list[Anomaly] = []
    todo = {p: list(messages) for p, messages in shares.items()}
    while any(todo.values()):
        for p in sorted(todo):
            if todo[p]:
                loops[p].feed(b"".join(todo[p][:chunk]))
                del todo[p][:chunk]
        for anomalies in advance(loops, board, lambda *_: None).values():
            found += anomalies
    for loop in loops.values():
        loop.finish()
    while not all(loop.quiescent for loop in loops.values()):
        for anomalies in advance(loops, board, lambda *_: None).values():
            found += anomalies
        for p, loop in loops.items():
            if loop.quiescent:
                board.say_idle(p)
    return found, list(loops.values())


def _keyed(items: list[Anomaly]) -> Counter[bytes]:
    return Counter(x.to_json() for x in items)


@pytest.fixture(scope="module")
def generation() -> Generation:
    # a fleet with its everyday noise and faults that the comparisons across partitions find: a
    # GPU slower than its job's others, a switch congested beside its role, a rack's cooling, a
    # port trained below the fabric's common width
    gen = Generation(
        GenConfig(
            gpus=512,
            hours=1.5,
            interval=30,
            seed=41,
            realism="harsh",
            faults="gpu_straggler=2,gpu_thermal=1,pfc_storm=1,spine_congestion=1,rack_cooling=1,ib_link_degraded=1",
        )
    )
    return gen


@pytest.fixture(scope="module")
def fleet(generation: Generation) -> tuple[bytes, list[dict[str, object]]]:
    gen = generation
    return b"".join(lines_to_bytes(e.lines) for tick in gen.ticks() for e in gen.lines(tick)), gen.events()


@pytest.fixture(scope="module")
def graph(generation: Generation) -> TopologyGraph:
    return TopologyGraph.from_json(generation.topology.to_json())


@pytest.mark.parametrize("partitions", [3, 6])
def test_split_detection_finds_what_one_process_finds(
    fleet: tuple[bytes, list[dict[str, object]]], partitions: int
) -> None:
    data, events = fleet

    def make() -> DetectLoop:
        # the predictor's features (the cooling loops against all of them span partitions); no
        # model is asked before its warm-up, which this history does not reach
        loop = DetectLoop(30.0, predictor=OnlinePredictor(None, warmup_s=1e9))  # type: ignore[arg-type]
        apply_events(loop, events)
        return loop

    whole = make()
    heard: list[Anomaly] = []  # who stopped or started reporting: to the engine, not in the anomalies
    whole.tick_listener = lambda _, found, __: heard.extend(a for a in found if is_presence(a))
    alone = whole.feed(data)[0] + whole.finish()
    detectors = Counter(a.detector.split(":")[0] + ":" + a.metric for a in alone)
    assert detectors["peer:DCGM_FI_DEV_SM_CLOCK"] and detectors["rule:link_width"]  # exercised
    split, loops = run_split(by_partition(data, partitions), make, chunk=50)
    assert _keyed([a for a in split if not is_presence(a)]) == _keyed(alone)
    # the members publish them with their findings (the engine reads them there): the same ones
    assert heard and _keyed([a for a in split if is_presence(a)]) == _keyed(heard)
    for kind in FEATURES:
        ids, X = whole.predictor.features.matrix(kind)  # type: ignore[union-attr]
        parts = [loop.predictor.features.matrix(kind) for loop in loops]  # type: ignore[union-attr]
        split_ids = np.concatenate([i for i, _ in parts])
        split_X = np.concatenate([x for _, x in parts])
        order, split_order = np.argsort(ids), np.argsort(split_ids)
        assert list(split_ids[split_order]) == list(ids[order])
        np.testing.assert_array_equal(split_X[split_order], X[order])


def test_a_tick_waits_for_every_partition_unless_it_skipped_the_tick_or_went_idle() -> None:
    board = ShareBoard(3)
    share = CohortSummary()
    share.add_values("peer/gpu/0/j1", np.array([1.0, 2.0]))
    board.add(0, 100, share)
    board.add(1, 100, CohortSummary())
    assert board.merged(100) is None  # partition 2 has said nothing
    board.add(2, 130, CohortSummary())  # it had nothing at 100
    merged = board.merged(100)
    assert merged is not None and list(merged.values["peer/gpu/0/j1"]) == [1.0, 2.0]
    assert board.merged(130) is None
    board.say_idle(0)
    board.say_idle(1)
    assert board.merged(130) is not None  # the idle ones are past their last share
    board.add(0, 160, CohortSummary())  # speaks again: waited for again
    assert board.merged(190) is None


def test_records_read_again_after_a_rewind_bring_shares_back_but_not_an_old_idle() -> None:
    """A member restoring a partition reads the cohorts topic again from the checkpoint's time:
    the shares of those ticks come back (they were forgotten), but partition 1's old "idle",
    said before it went to work again, must not make its coming ticks look accounted for."""
    board = ShareBoard(2)
    board.add(1, 100, CohortSummary(), offset=0)
    board.say_idle(1, offset=1)
    board.add(1, 130, CohortSummary(), offset=2)  # at work again
    board.add(0, 160, CohortSummary())  # a loop here begins 160
    assert board.merged(160) is None  # partition 1's share of 160 is due
    board.forget_before(160)
    board.add(1, 100, CohortSummary(), offset=0)  # read again
    board.say_idle(1, offset=1)
    board.add(1, 130, CohortSummary(), offset=2)
    assert board.merged(160) is None  # still due: the old "idle" is not its last word
    assert board.merged(100) is not None  # the restored loop's old tick has its share again
    board.say_idle(1, offset=3)  # now it is idle
    assert board.merged(160) is not None


def test_a_share_survives_the_wire_and_a_damaged_one_is_refused() -> None:
    share = CohortSummary()
    share.add_values("peer/gpu/0/job-1", np.array([1.5, np.nan, np.inf, -2.0]))
    share.add_counts("common/nic/link_width", np.array([4.0, 4.0, 1.0, np.nan]))
    back = CohortSummary.from_bytes(share.to_bytes())
    assert list(back.values["peer/gpu/0/job-1"]) == [1.5, np.inf, -2.0]
    assert back.counts == {"common/nic/link_width": {1.0: 1, 4.0: 2}}
    with pytest.raises(ValueError, match="not a cohort summary"):
        CohortSummary.from_bytes(share.to_bytes()[:-3])
    with pytest.raises(ValueError, match="not a cohort summary"):
        CohortSummary.from_bytes(b"\x00\x00\x00\x05{bad}")


def test_the_engine_fed_by_split_detection_opens_one_processs_incidents(
    fleet: tuple[bytes, list[dict[str, object]]], graph: TopologyGraph
) -> None:
    """The root-cause daemon's side (`aiops run --from-detection`): the members' anomalies and
    predictions come through topics in whatever order partitions interleave them, each
    partition's progress after its findings; a tick goes to the engine once every partition has
    been judged through it. The incidents are the ones a single pipeline opens."""
    data, events = fleet
    whole = Pipeline(graph, 30.0, events)
    whole.feed(data)
    whole.finish()
    expected = whole.incidents
    assert len({r.incident_id for r in expected}) >= 3

    partitions = 4
    findings = FindingsLoop(30.0, partitions, "a", "p", "progress")
    engine_side = Pipeline(graph, 30.0, events, findings=findings)
    offsets: Counter[str] = Counter()
    sent: list[tuple[Source, int, bytes]] = []

    def out(topic: str, value: bytes) -> None:
        sent.append((Source(topic, 0, offsets[topic]), 0, value))
        offsets[topic] += 1

    def release() -> None:
        findings.feed_polled(sent[::-1])  # a poll may bring anything first: progress before findings
        sent.clear()
        ready = findings.ready_through()
        if ready is not None:
            findings.release(ready)

    shares = by_partition(data, partitions)
    board = ShareBoard(partitions)
    loops = {p: DetectLoop(30.0) for p in shares}
    for loop in loops.values():
        apply_events(loop, events)
        loop.split = True
    todo = {p: list(messages) for p, messages in shares.items()}

    def step() -> None:
        judged: list[tuple[int, int]] = []
        for anomalies in advance(loops, board, lambda *_: None, judged).values():
            for a in anomalies:
                out("a", a.to_json())
        for p, tick_ns in judged:
            out("progress", judged_record(p, tick_ns))
        release()

    while any(todo.values()):
        for p in sorted(todo):
            loops[p].feed(b"".join(todo[p][:40]))
            del todo[p][:40]
        step()
    for loop in loops.values():
        loop.finish()
    while not all(loop.quiescent for loop in loops.values()):
        step()
        for p, loop in loops.items():
            if loop.quiescent:
                board.say_idle(p)
    for p in loops:
        out("progress", idle_record(p))
    release()
    assert findings.ticks == {} and findings.stats.late_rows == 0  # every tick analysed, whole
    assert engine_side.incidents == expected


def test_a_tick_goes_to_the_engine_once_every_partition_judged_it_or_went_idle() -> None:
    findings = FindingsLoop(30.0, 2, "a", "p", "progress")
    seen: list[tuple[float, int]] = []
    findings.tick_listener = lambda t, anomalies, _: seen.append((t, len(anomalies)))
    anomaly = Anomaly(60.0, "gpu-1", "temp", "rule:x", 1.0, 90.0, 80.0)
    marks = [judged_record(0, 30 * 10**9), judged_record(0, 60 * 10**9), anomaly.to_json(), b"{not json"]
    topics = ["progress", "progress", "a", "a"]
    _, letters = findings.feed_polled(
        [(Source(t, 0, n), 0, v) for n, (t, v) in enumerate(zip(topics, marks, strict=True))]
    )
    assert [letter.stage for letter in letters] == ["findings"]  # the bad record, with its reason
    assert findings.ready_through() is None  # partition 1 has said nothing
    findings.feed_polled([(Source("progress", 1, 0), 0, judged_record(1, 30 * 10**9))])
    assert findings.ready_through() == 30_000
    findings.release(30_000)
    assert seen == [(30.0, 0)]
    findings.feed_polled([(Source("progress", 1, 1), 0, idle_record(1))])
    findings.release(findings.ready_through() or 0)
    assert seen == [(30.0, 0), (60.0, 1)]
    assert findings.held.first_held() == {}  # everything analysed: all of it may be committed
    late = Anomaly(30.0, "gpu-2", "temp", "rule:x", 1.0, 90.0, 80.0)
    findings.feed_polled([(Source("a", 0, 9), 0, late.to_json())])
    assert findings.stats.late_rows == 1 and findings.ticks == {}
