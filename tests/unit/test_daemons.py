"""The daemons' rules, without a broker (tests/fake_broker.py plays assignments, polls and
failures): offsets are committed only after the state they belong to is saved; partitions handed
back in a rebalance keep their state; a partition taken away drops it; a restart resumes from the
checkpoint's offsets and publishes nothing twice. The same daemons against the real broker, with
kills and restarts: tests/faults/."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from aiops.daemon_state import CheckpointStore
from aiops.run_daemon import RunDaemon, RunOptions
from benchmarks.soak import by_incident, incident_differences
from ingest.kafka import KafkaIOError
from ingest.messages import Partition, messages_from_lines
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation
from tests.fake_broker import Assign, Fail, FakeBroker, Messages, Step
from vocab.settings import KafkaSettings

SETTINGS = KafkaSettings()
TOPIC = SETTINGS.telemetry_topic
P0, P1 = (TOPIC, 0), (TOPIC, 1)


CHUNK = 40  # messages a poll brings of a partition (the real consumer: max_poll_records, over partitions)
Cluster = tuple[Path, list[dict[str, Any]], dict[Partition, list[tuple[int, bytes]]]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    """A small generated cluster with faults, its telemetry as messages on two partitions (by
    node, as the real producer keys them)."""
    folder = tmp_path_factory.mktemp("cluster")
    gen = Generation(GenConfig(gpus=32, hours=0.5, interval=30, seed=48, faults="psu_failure=1,gpu_thermal=1"))
    write_folder(gen, folder)
    by_partition: dict[Partition, list[tuple[int, bytes]]] = {P0: [], P1: []}
    for m in messages_from_lines((folder / "telemetry.lp").read_bytes()):
        partition = (TOPIC, zlib.crc32(m.key or b"") % 2)
        by_partition[partition].append((m.timestamp_ms or 0, m.value))
    return folder / "topology.json", gen.events(), by_partition


def _broker(cluster: Cluster, ends_fail: int = 0) -> FakeBroker:
    broker = FakeBroker(ends_fail=ends_fail)
    for (topic, p), values in cluster[2].items():
        for ms, value in values:
            broker.append(topic, p, None, value, ms)
    return broker


def _polls(counts: dict[Partition, int]) -> list[Step]:
    """Polls that bring `counts` messages of each partition, a chunk of each in turn."""
    steps: list[Step] = []
    left = dict(counts)
    while any(left.values()):
        for p in sorted(left):
            if left[p]:
                steps.append(Messages(p, min(CHUNK, left[p])))
                left[p] -= steps[-1].count  # type: ignore[union-attr]
    return steps


def _run(
    broker: FakeBroker, cluster: Cluster, script: list[Step], state_dir: Path | None = None,
    stop_when_played: bool = False,
) -> RunDaemon:  # fmt: skip
    """One RunDaemon over the script, until idle (or, `stop_when_played`, asked to stop once the
    script has been played: what is held stays held, as on a real stop)."""
    topology, events, _ = cluster
    broker.scripts.append(script)
    mine = len(broker.scripts) - 1

    def should_stop() -> bool:
        return stop_when_played and len(broker.consumers) > mine and not broker.consumers[mine].script

    options = RunOptions(30.0, topology, list(events), idle_stop_s=0.0, state_dir=state_dir, checkpoint_every_s=0.0)
    daemon = RunDaemon(SETTINGS, options, should_stop, broker=broker)
    daemon.run()
    return daemon


def _published(broker: FakeBroker, topic: str) -> list[bytes]:
    return [r.value for rs in broker.topics.get(topic, {}).values() for r in rs]


def _incidents(broker: FakeBroker) -> dict[str, list[dict[str, Any]]]:
    """Each incident's successive states (the topic keeps order per incident, not across them)."""
    return by_incident([json.loads(v) for v in _published(broker, SETTINGS.incidents_topic)])


def _sizes(cluster: Cluster, share: float = 1.0) -> dict[Partition, int]:
    return {p: int(len(values) * share) for p, values in cluster[2].items()}


@pytest.fixture(scope="module")
def whole_run(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    """The incidents of one daemon that reads everything with no rebalance and no restart."""
    broker = _broker(cluster)
    _run(broker, cluster, [Assign({P0, P1}), *_polls(_sizes(cluster))])
    incidents = _incidents(broker)
    assert incidents  # the faults open incidents: the comparisons below are not of nothing
    return incidents


def test_offsets_are_committed_only_after_the_state_they_belong_to_is_saved(cluster: Cluster, tmp_path: Path) -> None:
    broker = _broker(cluster, ends_fail=1)  # the first checkpoint cannot say the outputs' ends
    store = CheckpointStore(tmp_path, f"run-{SETTINGS.run_group}")
    seen: list[dict[Partition, int]] = []

    def on_commit(offsets: dict[Partition, int]) -> None:
        if not offsets:  # nothing saved, nothing committed
            return
        saved = store.load()  # what a restart would carry on from, at the moment of the commit
        assert saved is not None
        on_disk = {(t, p): o for t, ps in saved.offsets.items() for p, o in ps.items()}
        assert {p: o for p, o in on_disk.items() if p in offsets} == offsets
        seen.append(offsets)

    broker.on_commit = on_commit
    _run(broker, cluster, [Assign({P0, P1}), *_polls(_sizes(cluster))], state_dir=tmp_path)
    commits = [i for i, e in enumerate(broker.log) if e.startswith("commit [(")]
    assert commits and broker.log.index("ends failed") < commits[0]
    assert seen[-1] == _sizes(cluster)  # idle at the end: everything analysed, everything committed


def test_partitions_handed_back_in_a_rebalance_keep_their_state(
    cluster: Cluster, whole_run: dict[str, list[dict[str, Any]]]
) -> None:
    broker = _broker(cluster)
    # handed back, each partition is fetched again from the committed offset (where the ticks
    # still held begin): polls enough for the rest of it, whatever that offset is
    script = [Assign({P0, P1}), *_polls(_sizes(cluster, 0.5)), Assign({P0, P1}), *_polls(_sizes(cluster))]
    daemon = _run(broker, cluster, script)
    assert incident_differences(_incidents(broker), whole_run) == []
    assert daemon.pipeline.last_tick is not None


def test_partitions_taken_away_take_their_state_with_them(cluster: Cluster) -> None:
    broker = _broker(cluster)
    daemon = _run(broker, cluster, [Assign({P0, P1}), *_polls(_sizes(cluster, 0.5)), Assign(set())])
    # another member holds them now: what this one learnt is the new holder's (from the checkpoint)
    assert daemon.pipeline.last_tick is None and daemon.holding == set()


def test_a_restart_resumes_from_the_checkpoint_offsets_and_publishes_nothing_twice(
    cluster: Cluster, whole_run: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    broker = _broker(cluster)
    half = _sizes(cluster, 0.5)
    _run(broker, cluster, [Assign({P0, P1}), *_polls(half)], state_dir=tmp_path, stop_when_played=True)
    saved = CheckpointStore(tmp_path, f"run-{SETTINGS.run_group}").load()
    assert saved is not None
    at = {(t, p): o for t, ps in saved.offsets.items() for p, o in ps.items()}
    assert all(0 < at[p] <= half[p] for p in (P0, P1))
    # the second daemon reads on from the checkpoint: what the first held uncommitted comes again
    _run(broker, cluster, [Assign({P0, P1}), *_polls({p: n - at[p] for p, n in _sizes(cluster).items()})],
         state_dir=tmp_path)  # fmt: skip
    assert f"assigned {sorted({P0, P1})} resume {sorted(at.items())}" in broker.log
    assert incident_differences(_incidents(broker), whole_run) == []


def test_the_broker_away_while_stopping_ends_the_daemon_without_committing_more(
    cluster: Cluster, tmp_path: Path
) -> None:
    broker = _broker(cluster)
    script: list[Step] = [Assign({P0, P1}), Messages(P0, CHUNK), Fail(KafkaIOError("the broker away while stopping"))]
    _run(broker, cluster, script, state_dir=tmp_path)
    # the batch before was saved and committed; after the failure, no last round
    commits = [e for e in broker.log if e.startswith("commit")]
    assert len(commits) == 1 and broker.consumers[0].closed


def test_a_detection_member_drops_the_loop_of_a_partition_given_to_another_and_keeps_the_rest(
    cluster: Cluster,
) -> None:
    from aiops.detect_daemon import DetectDaemon
    from detectors.detect_loop import DetectLoop

    class Watched(DetectDaemon):
        before: list[DetectLoop | None] = []  # noqa: RUF012 (one test's record)

        def on_assigned(self, partitions: set[Partition]) -> dict[Partition, int]:
            self.before.append(self.parked.get(0, (None, 0))[0])  # partition 0's loop, parked by the revoke
            return super().on_assigned(partitions)

    broker = _broker(cluster)
    half = _sizes(cluster, 0.5)
    broker.scripts.append([Assign({P0, P1}), *_polls(half), Assign({P0}), *_polls({P0: _sizes(cluster)[P0]})])
    # stopped once played (another member would send partition 1's shares; none comes here)
    member = Watched(
        SETTINGS, 30.0, lambda: bool(broker.consumers) and not broker.consumers[0].script, list(cluster[1]), 60.0,
        lambda: DetectLoop(30.0), None, 0.0, broker=broker,
    )  # fmt: skip
    stats = member.run()
    assert set(member.loops) == {0} and member.parked == {}
    assert member.before[-1] is not None and member.loops[0] is member.before[-1]  # handed back: carried on
    assert stats.values > member.loops[0].stats.values  # partition 1's work was counted, then its loop dropped
