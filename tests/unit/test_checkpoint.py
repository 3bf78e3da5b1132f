"""Checkpoints: the daemon's state with its offsets, written so that a kill cannot leave half a
file, refused when damaged or when they would build anything but the project's own state."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import pickle
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aiops.daemon_state import (
    KEY_ENV,
    KEY_FILE,
    MAGIC,
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    Incarnation,
    PublishedSince,
    state_key,
)
from aiops.pipeline import Pipeline
from notify.config import parse
from notify.service import Notifier
from rca.graph import TopologyGraph
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation
from tests.unit.test_detector_conformance import CASES, Case, same, synthetic_blocks
from tests.unit.test_detector_conformance import run as run_detector


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
    with pytest.raises(CheckpointError, match="signature does not match"):
        store.load()


HOSTILE = Path(__file__).resolve().parents[1] / "data" / "hostile" / "checkpoint"
MARKER = "pwned-by-checkpoint"  # what each payload's command makes in the working directory
PAYLOADS = sorted(p for p in HOSTILE.glob("*.pickle") if p.name != "numpy-load-inner.pickle")
# not code under plain pickle either (a module named through a dotted path does not import; the
# old GLOBAL opcode does not walk dotted names), kept as variants a looser loader might let through
LIVE = [
    p
    for p in PAYLOADS
    if p.name not in {"dotted-module-name.pickle", "os-system-via-project-module-global-opcode.pickle"}
]


@pytest.fixture
def hostile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state directory that is also the working directory, where the payloads' commands (and
    numpy.load's second file) act."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(KEY_ENV, raising=False)
    (tmp_path / "numpy-load-inner.pickle").write_bytes((HOSTILE / "numpy-load-inner.pickle").read_bytes())
    return tmp_path


def _v1(body: bytes) -> bytes:
    """A file as format 1 wrote it: a header and a keyless checksum that anyone can compute."""
    return (
        b"aiops-checkpoint 1\n"
        + json.dumps({"offsets": {}, "outputs": {}, "written_at": 0}).encode()
        + b"\n"
        + (hashlib.blake2b(body, digest_size=16).hexdigest().encode() + b"\n" + body)
    )


def _v2(key: bytes, body: bytes, header: bytes = b'{"offsets": {}, "outputs": {}, "written_at": 0}') -> bytes:
    """A file as format 2 writes it, signed with `key` (the daemon's own: a leaked key)."""
    mac = hmac.new(key, MAGIC + header + b"\n" + body, hashlib.sha256).hexdigest().encode()
    return MAGIC + header + b"\n" + mac + b"\n" + body


@pytest.mark.parametrize("payload", LIVE, ids=lambda p: p.stem)
def test_the_payloads_are_live_under_plain_pickle(hostile_dir: Path, payload: Path) -> None:
    """What the tests below refuse would run a command if unpickled plainly (the format-1 loader
    ran three of them: a project module's `os.system` through pickle's dotted-name lookup, the
    same through a numpy module, and numpy.load of a second pickle)."""
    with contextlib.suppress(Exception):
        pickle.loads(payload.read_bytes())
    assert (hostile_dir / MARKER).exists()


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.stem)
def test_a_checkpoint_that_would_run_code_is_refused_even_when_signed(hostile_dir: Path, payload: Path) -> None:
    """The second wall: with the key (leaked, or the daemon tricked into signing), the unpickler
    still builds nothing outside its exact list, and resolves no dotted name."""
    store = CheckpointStore(hostile_dir, "g")
    store.save(Checkpoint({"x": 1}, {}))  # makes the directory's key
    store.path.write_bytes(_v2(state_key(hostile_dir, create=False), payload.read_bytes()))
    with pytest.raises(CheckpointError, match="may not build"):
        store.load()
    assert not (hostile_dir / MARKER).exists()


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.stem)
def test_a_checkpoint_someone_else_wrote_is_refused_before_it_is_read(hostile_dir: Path, payload: Path) -> None:
    """The first wall: without the key, the signature fails and nothing is unpickled; a file in
    the old format (whose checksum anyone can compute) is refused unread."""
    store = CheckpointStore(hostile_dir, "g")
    store.save(Checkpoint({"x": 1}, {}))
    store.path.write_bytes(_v2(b"a key that is not the daemon's own, long enough", payload.read_bytes()))
    with pytest.raises(CheckpointError, match="signature does not match"):
        store.load()
    store.path.write_bytes(_v1(payload.read_bytes()))
    with pytest.raises(CheckpointError, match="format 1"):
        store.load()
    assert not (hostile_dir / MARKER).exists()


def test_one_byte_changed_anywhere_fails_the_signature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    store = CheckpointStore(tmp_path, "g")
    store.save(Checkpoint({"x": np.arange(100)}, {"t": {0: 12}}))
    good = store.path.read_bytes()
    header_end = good.index(b"\n", len(MAGIC))
    # a byte of the state, a byte of the offsets in the header (12 -> 13: a skipped record)
    for at in (len(good) - 20, good.index(b"12", len(MAGIC)) + 1):
        assert at != header_end
        bad = bytearray(good)
        bad[at] ^= 0x01
        store.path.write_bytes(bytes(bad))
        with pytest.raises(CheckpointError, match="signature does not match"):
            store.load()
    store.path.write_bytes(good)
    assert store.load() is not None


def test_an_old_format_checkpoint_is_refused_and_the_daemon_starts_from_the_committed_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What an upgrade meets: the file the previous version wrote. It is refused unread with a
    message naming the format, and the daemon's loader reports no checkpoint, as for a stale one
    (it then starts from nothing at the group's committed offsets)."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    from aiops.daemon import usable_checkpoint

    born = Incarnation("c", {"t": "t-1"})
    store = CheckpointStore(tmp_path, "run-aiops-run")
    store.path.write_bytes(_v1(pickle.dumps({"interval_s": 30.0})))
    with pytest.raises(CheckpointError, match=r"unsigned checkpoint of format 1 .* refused unread"):
        store.load()
    with caplog.at_level(logging.ERROR, logger="aiops.daemon"):
        assert usable_checkpoint(store, born) is None
    said = [r.getMessage() for r in caplog.records]
    assert any("format 1" in m and "starting from nothing at the committed offsets" in m for m in said), said
    # and the next checkpoint replaces it
    store.save(Checkpoint({"interval_s": 30.0}, {"t": {0: 1}}, incarnation=born))
    assert usable_checkpoint(store, born) is not None


class _NotState:
    pass


def test_state_of_a_class_not_listed_fails_at_the_save_not_at_the_restart(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "g")
    with pytest.raises(CheckpointError, match=r"test_checkpoint\._NotState.*add it to STATE_GLOBALS"):
        store.save(Checkpoint({"x": _NotState()}, {}))
    with pytest.raises(CheckpointError, match=r"posix\.system"):
        store.save(Checkpoint({"x": os.system}, {}))
    assert not store.path.exists()


def test_the_key_file_is_made_private_and_refused_when_others_could_read_or_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    store = CheckpointStore(tmp_path, "g")
    with pytest.raises(CheckpointError, match="no AIOPS_STATE_KEY and no key file"):
        state_key(tmp_path, create=False)
    store.save(Checkpoint({"x": 1}, {}))
    key_file = tmp_path / KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.load() is not None
    key_file.chmod(0o644)  # readable by others: anyone could sign with it
    with pytest.raises(CheckpointError, match=r"key file refused: .* open to others"):
        store.load()
    key_file.chmod(0o600)
    # a key file replaced by a link (to a key someone else wrote) is not followed
    (tmp_path / "theirs").write_bytes(key_file.read_bytes())
    key_file.unlink()
    key_file.symlink_to(tmp_path / "theirs")
    with pytest.raises(CheckpointError, match="cannot use the key file"):
        store.load()


def test_an_operator_key_signs_instead_and_another_key_cannot_read_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "k" * 31)
    store = CheckpointStore(tmp_path, "g")
    with pytest.raises(CheckpointError, match="AIOPS_STATE_KEY is 31 characters; at least 32"):
        store.save(Checkpoint({"x": 1}, {}))
    monkeypatch.setenv(KEY_ENV, "a" * 64)
    store.save(Checkpoint({"x": 1}, {}))
    assert not (tmp_path / KEY_FILE).exists()  # no key file when the operator sets the key
    assert store.load() is not None
    monkeypatch.setenv(KEY_ENV, "b" * 64)
    with pytest.raises(CheckpointError, match="written with another key"):
        store.load()


def test_a_link_left_where_the_temporary_file_goes_is_not_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    victim = tmp_path / "victim"
    victim.write_text("kept")
    store = CheckpointStore(tmp_path, "g")
    store.path.with_suffix(".tmp").symlink_to(victim)
    store.save(Checkpoint({"x": 1}, {}))
    assert victim.read_text() == "kept" and store.load() is not None


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_detector_comes_back_from_a_checkpoint_file_scoring_identically(case: Case, tmp_path: Path) -> None:
    """The conformance suite's round trip, through the file and its loader instead of plain pickle."""
    blocks = synthetic_blocks(1)
    original = case.make()
    run_detector(original, blocks[:150])
    store = CheckpointStore(tmp_path, "g")
    store.save(Checkpoint(original.state_dict(), {}))
    loaded = store.load()
    assert loaded is not None
    restored = case.make()
    restored.load_state(loaded.state)
    assert same(run_detector(original, blocks[150:]), run_detector(restored, blocks[150:]))


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
            out += [r.to_json() for r in p.take()[1]]
        return out

    whole = fresh("whole")
    expected = run(whole, chunks)
    expected += [r.to_json() for r in (whole.finish(), whole.take())[1][1]]

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
    got += [r.to_json() for r in (second.finish(), second.take())[1][1]]
    assert expected and got == expected
    assert whole.notifier is not None and second.notifier is not None
    notified = [key for key, _, _ in whole.notifier.outbox.rows()]
    assert notified and [key for key, _, _ in second.notifier.outbox.rows()] == notified


def test_what_was_published_since_is_skipped_once() -> None:
    from aiops.daemon_state import _digest

    published = PublishedSince()
    published._left.update([_digest("t", b"k", b"v")])
    assert published.already("t", b"k", b"v") and not published.already("t", b"k", b"v")
    assert not published.already("t", b"k", b"w") and published.skipped == 1


def test_the_engine_fed_by_detection_comes_back_from_a_checkpoint_file(tmp_path: Path) -> None:
    """`aiops run --from-detection` checkpoints a FindingsLoop where the whole pipeline has a
    DetectLoop: its classes are on the list too."""
    from detectors.progress_topic import FindingsLoop

    gen = Generation(GenConfig(gpus=64, hours=0.2, interval=30, seed=3))
    write_folder(gen, tmp_path)
    findings = FindingsLoop(30.0, 4, "a", "p", "progress")
    pipeline = Pipeline(TopologyGraph.load(tmp_path / "topology.json"), 30.0, gen.events(), findings=findings)
    store = CheckpointStore(tmp_path, "g")
    store.save(Checkpoint(pipeline.state(), {}))
    loaded = store.load()
    assert loaded is not None and type(loaded.state["detect"]) is FindingsLoop
    fresh = FindingsLoop(30.0, 4, "a", "p", "progress")
    again = Pipeline(TopologyGraph.load(tmp_path / "topology.json"), 30.0, gen.events(), findings=fresh)
    again.restore(loaded.state)


BEFORE_THE_MOVE = Path(__file__).resolve().parents[1] / "data/checkpoints/before-issue-48"


def test_a_checkpoint_written_before_the_modules_moved_still_restores_a_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints written with detectors.runner and detectors.progress (scripts that wrote them:
    tests/data/checkpoints/README.md) restore the whole pipeline and the engine fed by detection,
    which then carry on with the telemetry that follows."""
    from detectors.detect_loop import DetectLoop
    from detectors.progress_topic import FindingsLoop

    monkeypatch.setenv("AIOPS_STATE_KEY", "before-issue-48-test-key-0123456789abcdef")
    whole = CheckpointStore(BEFORE_THE_MOVE, "whole").load()
    assert whole is not None and whole.offsets == {"aiops.telemetry": {0: 123}}
    assert type(whole.state["detect"]) is DetectLoop
    gen = Generation(GenConfig(gpus=32, hours=0.25, interval=30, seed=48, faults="psu_failure=1"))
    write_folder(gen, tmp_path)
    lines = (tmp_path / "telemetry.lp").read_bytes().splitlines(keepends=True)
    pipeline = Pipeline(TopologyGraph.load(tmp_path / "topology.json"), 30.0, gen.events())
    pipeline.restore(whole.state)
    ticks_before = pipeline.last_tick
    pipeline.feed(b"".join(lines[len(lines) // 2 :]))
    pipeline.finish()
    assert ticks_before is not None and pipeline.last_tick is not None and pipeline.last_tick > ticks_before

    engine = CheckpointStore(BEFORE_THE_MOVE, "from-detection").load()
    assert engine is not None and type(engine.state["detect"]) is FindingsLoop
    again = Pipeline(TopologyGraph.load(tmp_path / "topology.json"), 30.0, gen.events(),
                     findings=FindingsLoop(30.0, 4, "a", "p", "progress"))  # fmt: skip
    again.restore(engine.state)


def test_an_enum_member_in_the_state_is_written_by_value_on_every_python_patch_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPython 3.11.2 (Debian bookworm's, the image's Python) pickles an Enum member as
    getattr(class, name); the loader may not build builtins.getattr, and the daemon in the image
    died at its first checkpoint (issue 65's compose run). Failed before the fix with
    CheckpointError: the state holds builtins.getattr."""
    from vocab.catalog import MetricKind

    def as_bookworm(self: MetricKind, proto: int) -> tuple[Any, tuple[Any, ...]]:
        return getattr, (self.__class__, self._name_)

    monkeypatch.setattr(MetricKind, "__reduce_ex__", as_bookworm)
    store = CheckpointStore(tmp_path, "members")
    store.save(Checkpoint({"kinds": [MetricKind.COUNTER, MetricKind.GAUGE]}, {"t": {0: 1}}))
    loaded = store.load()
    assert loaded is not None and loaded.state == {"kinds": [MetricKind.COUNTER, MetricKind.GAUGE]}
