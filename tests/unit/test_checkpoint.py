"""Checkpoints: the daemon's state with its offsets, written so that a kill cannot leave half a
file, refused when damaged or when they would build anything but the project's own state."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from aiops.checkpoint import Checkpoint, CheckpointError, CheckpointStore, Incarnation, PublishedSince
from aiops.runner import Pipeline
from notify.config import parse
from notify.service import Notifier
from rca.graph import TopologyGraph
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation


def test_a_checkpoint_comes_back_with_its_offsets(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "run-aiops/run")
    assert store.load() is None
    state = {"x": np.arange(5), "seen": {"a", "b"}}
    store.save(Checkpoint(state, {"t": {0: 12, 2: 7}}, {"out": {0: 3}}))
    back = store.load()
    assert back is not None and back.offsets == {"t": {0: 12, 2: 7}} and back.outputs == {"out": {0: 3}}
    assert np.array_equal(back.state["x"], np.arange(5)) and back.state["seen"] == {"a", "b"}
    assert store.path.parent == tmp_path  # the group name cannot climb out of the directory


def test_a_checkpoint_knows_the_cluster_and_topic_incarnation_its_offsets_belong_to(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "g")
    born = Incarnation("cluster-A", {"aiops.telemetry": "t-1", "aiops.incidents": "i-1"})
    store.save(Checkpoint({"x": 1}, {"aiops.telemetry": {0: 5}}, incarnation=born))
    back = store.load()
    assert back is not None and back.incarnation == born
    assert back.foreign(born) is None
    # the telemetry topic deleted and created again: its offsets describe other records
    recreated = back.foreign(Incarnation("cluster-A", {"aiops.telemetry": "t-2", "aiops.incidents": "i-1"}))
    assert recreated is not None and "aiops.telemetry t-1, now t-2" in recreated
    other = back.foreign(Incarnation("cluster-B", born.topic_ids))
    assert other is not None and "cluster 'cluster-A'" in other
    # a checkpoint that never recorded them cannot be checked, so it is not trusted either
    store.save(Checkpoint({"x": 1}, {}))
    unknown = store.load()
    assert unknown is not None and unknown.foreign(born) is not None


def test_a_truncated_checkpoint_is_refused_not_half_loaded(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "g")
    store.save(Checkpoint({"x": list(range(1000))}, {}))
    store.path.write_bytes(store.path.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="checksum"):
        store.load()


class Exploit:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("true",))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "g")
    store.save(Checkpoint({"x": 1}, {}))
    header, digest, _ = store.path.read_bytes().split(b"\n", 3)[1:]
    body = pickle.dumps(Exploit())
    import hashlib

    digest = hashlib.blake2b(body, digest_size=16).hexdigest().encode()
    store.path.write_bytes(b"aiops-checkpoint 1\n" + header + b"\n" + digest + b"\n" + body)
    with pytest.raises(CheckpointError, match="may not build"):
        store.load()


def test_a_restored_pipeline_carries_on_as_if_it_had_never_stopped(tmp_path: Path) -> None:
    gen = Generation(GenConfig(gpus=256, hours=1, interval=30, seed=8, faults="leaf_down=1,psu_failure=1,pfc_storm=1"))
    write_folder(gen, tmp_path)
    graph_path = tmp_path / "topology.json"
    lines = (tmp_path / "telemetry.lp").read_bytes().splitlines(keepends=True)
    step = len(lines) // 20 + 1  # twenty polls' worth, boundaries anywhere in a tick
    chunks = [b"".join(lines[i : i + step]) for i in range(0, len(lines), step)]
    events = gen.events()
    assert len(chunks) > 4

    # with notifications: the router's groups and what it said are part of the checkpoint
    config = parse({"receivers": [{"name": "chat", "kind": "webhook", "url": "http://127.0.0.1:9/"}],
                    "routes": [{"receiver": "chat"}]})  # fmt: skip

    def fresh(outbox: str = "restarted") -> Pipeline:
        pipeline = Pipeline(TopologyGraph.load(graph_path), 30.0, events)
        pipeline.notifier = Notifier(config, tmp_path / f"{outbox}.sqlite", live=True)
        return pipeline

    def run(p: Pipeline, part: list[bytes]) -> list[bytes]:
        out = []
        for chunk in part:
            p.feed(chunk)
            out += [state for _, state in p.take()[1]]
        return out

    whole = fresh("whole")
    expected = run(whole, chunks)
    expected += [s for _, s in (whole.finish(), whole.take())[1][1]]

    first = fresh()
    half = len(chunks) // 2
    got = run(first, chunks[:half])
    store = CheckpointStore(tmp_path, "g")
    store.save(Checkpoint(first.state(), {}))
    loaded = store.load()
    assert loaded is not None
    second = fresh()
    second.restore(loaded.state)
    got += run(second, chunks[half:])
    got += [s for _, s in (second.finish(), second.take())[1][1]]
    assert expected and got == expected
    assert whole.notifier is not None and second.notifier is not None
    notified = [key for key, _, _ in whole.notifier.outbox.rows()]
    assert notified and [key for key, _, _ in second.notifier.outbox.rows()] == notified


def test_what_was_published_since_is_skipped_once() -> None:
    from aiops.checkpoint import _digest

    published = PublishedSince()
    published._left.update([_digest("t", b"k", b"v")])
    assert published.already("t", b"k", b"v") and not published.already("t", b"k", b"v")
    assert not published.already("t", b"k", b"w") and published.skipped == 1
