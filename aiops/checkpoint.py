"""Checkpoints of the root-cause daemon: its whole state with the Kafka offsets it belongs to.

Where: a local state directory (`AIOPS_STATE_DIR`), one file per consumer group, not a compacted
topic. The root-cause engine is one instance that owns every partition (until the scale-out work
splits it), so its state is one object; at 10,000 GPUs it is tens of MB, past a broker's message
limit, and a file written atomically (temporary file, fsync, rename) is the simplest store that a
`kill -9` cannot leave half-written. In docker-compose it is a named volume. A compacted topic
would let another host take over; that comes with the split.

State and offsets travel together: the file holds the state after everything before its offsets
was processed (quix-streams and Kafka Streams tie state to commits the same way). A restarted
daemon loads it and seeks each partition to the checkpoint's offset, whatever Kafka's committed
offset says: it replays what came after the checkpoint. That replay produces, again and
identically, what was published between the checkpoint and the crash; the checkpoint also records
where each output topic ended, and everything published since is read back and skipped once
(`PublishedSince`), so nothing reaches a topic twice.

Format: a JSON header line (offsets, output offsets, what wrote it) and a pickle of the state,
read back by an unpickler that builds only this project's classes, numpy's and a few builtins:
the file is the daemon's own, but a file that could run arbitrary code on load is not one we
want to leave in a volume.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import pickle
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAGIC = b"aiops-checkpoint 1\n"
Offsets = dict[str, dict[int, int]]  # topic -> partition -> offset


@dataclass(frozen=True, slots=True)
class Incarnation:
    """Which Kafka cluster and which incarnation of each topic offsets belong to: a topic deleted
    and created again under the same name (or a broker rebuilt with a new cluster id) starts its
    offsets from 0 again, so an offset only means something together with these ids (Kafka's
    cluster id, and its topic ids, KIP-516)."""

    cluster_id: str
    topic_ids: dict[str, str]  # topic name -> topic id

    def differences(self, other: Incarnation) -> list[str]:
        """What `other` (say, a checkpoint's) says differently, in words; [] if it is this one."""
        out = []
        if other.cluster_id != self.cluster_id:
            out.append(f"cluster {other.cluster_id!r}, not {self.cluster_id!r}")
        for topic, topic_id in sorted(self.topic_ids.items()):
            was = other.topic_ids.get(topic)
            if was is not None and was != topic_id:
                out.append(f"topic {topic} {was}, now {topic_id} (the topic was created again)")
        return out


def read_incarnation(bootstrap: str, topics: Sequence[str]) -> Incarnation:
    """The cluster's id and each topic's id, as the broker says now (KafkaIOError if it is
    away: `until_reachable` waits)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    from ingest.kafka_io import KafkaIOError

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="aiops-admin", request_timeout_ms=30_000)
    except KafkaError as exc:
        raise KafkaIOError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    try:
        cluster = admin.describe_cluster()
        described = admin.describe_topics(list(topics))
    except KafkaError as exc:
        raise KafkaIOError(f"cannot describe the topics at {bootstrap}: {exc}") from exc
    finally:
        admin.close()
    ids = {str(t["name"]): str(t["topic_id"]) for t in described if t.get("topic_id") is not None}
    return Incarnation(str(cluster.get("cluster_id")), ids)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (corrupt, another version, a class it may not build)."""


@dataclass(slots=True)
class Checkpoint:
    state: Any
    offsets: Offsets  # input: where to resume, per partition
    outputs: Offsets = field(default_factory=dict)  # output topics' ends when it was written
    written_at: float = 0.0  # wall clock, for the log
    # the cluster and topic ids the offsets belong to (None: written before they were recorded)
    incarnation: Incarnation | None = None

    def foreign(self, current: Incarnation) -> str | None:
        """Why this checkpoint's offsets do not describe the topics as they are now (another
        cluster, a topic deleted and created again, a state volume restored from elsewhere);
        None if they do."""
        if self.incarnation is None:
            return "it records no cluster or topic ids (written by an earlier version)"
        differences = current.differences(self.incarnation)
        return f"it was taken on {'; '.join(differences)}" if differences else None


_ALLOWED_BUILTINS = frozenset(
    {"set", "frozenset", "dict", "list", "tuple", "int", "float", "complex", "bool", "str", "bytes", "bytearray"}
    | {"slice", "range", "object"}
)
# the reconstructor of old pickle protocols, and clocks held by reference (harmless if called)
_ALLOWED_FUNCTIONS = frozenset(
    {("copyreg", "_reconstructor"), ("time", "time_ns"), ("time", "time"), ("time", "monotonic")}
)
_ALLOWED_MODULES = ("aiops.", "detectors.", "rca.", "ingest.", "notify.", "vocab.", "numpy", "collections", "datetime")


class _StateUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _ALLOWED_BUILTINS:
            return super().find_class(module, name)
        if (module, name) in _ALLOWED_FUNCTIONS:
            return super().find_class(module, name)
        if any(module == m.rstrip(".") or module.startswith(m) for m in _ALLOWED_MODULES) and module != "aiops.cli":
            return super().find_class(module, name)
        raise CheckpointError(f"a checkpoint may not build {module}.{name}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """One consumer group's checkpoint file in the state directory."""

    def __init__(self, directory: Path, name: str) -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        self.path = directory / f"{safe}.ckpt"

    def save(self, checkpoint: Checkpoint) -> int:
        """Write atomically; returns the size in bytes."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        header = {
            "offsets": {t: {str(p): o for p, o in parts.items()} for t, parts in checkpoint.offsets.items()},
            "outputs": {t: {str(p): o for p, o in parts.items()} for t, parts in checkpoint.outputs.items()},
            "written_at": checkpoint.written_at or time.time(),
        }
        if checkpoint.incarnation is not None:
            header["cluster_id"] = checkpoint.incarnation.cluster_id
            header["topic_ids"] = checkpoint.incarnation.topic_ids
        body = pickle.dumps(checkpoint.state, protocol=pickle.HIGHEST_PROTOCOL)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as f:
            f.write(MAGIC + json.dumps(header).encode() + b"\n")
            f.write(hashlib.blake2b(body, digest_size=16).hexdigest().encode() + b"\n")
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        return len(body)

    def load(self) -> Checkpoint | None:
        """The last checkpoint, None if there is none; CheckpointError if it cannot be used."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        if not data.startswith(MAGIC):
            raise CheckpointError(f"{self.path} is not a checkpoint of this version")
        buffer = io.BytesIO(data[len(MAGIC) :])
        try:
            header = json.loads(buffer.readline())
            digest = buffer.readline().strip().decode()
            body = buffer.read()
        except (ValueError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"{self.path}: unreadable header ({exc})") from None
        if hashlib.blake2b(body, digest_size=16).hexdigest() != digest:
            raise CheckpointError(f"{self.path}: the state does not match its checksum (truncated?)")
        try:
            state = _StateUnpickler(io.BytesIO(body)).load()
        except CheckpointError:
            raise
        except Exception as exc:  # a class that changed shape between versions, and the like
            raise CheckpointError(f"{self.path}: cannot restore the state ({exc!r})") from None

        def offsets(raw: dict[str, dict[str, int]]) -> Offsets:
            return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}

        ids = header.get("topic_ids")
        born = Incarnation(str(header["cluster_id"]), dict(ids)) if "cluster_id" in header and ids else None
        return Checkpoint(state, offsets(header["offsets"]), offsets(header["outputs"]), header["written_at"], born)


def _digest(topic: str, key: bytes | None, value: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in (topic.encode(), key or b"", value):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


class PublishedSince:
    """What reached the output topics after a checkpoint: a replay from that checkpoint publishes
    the same records again, and each is skipped once (by topic, key and value)."""

    def __init__(self, digests: Counter[bytes] | None = None) -> None:
        self._left: Counter[bytes] = digests or Counter()
        self.skipped = 0

    @classmethod
    def read(cls, bootstrap: str, since: Offsets, timeout_s: float = 60.0) -> PublishedSince:
        from kafka import KafkaConsumer, TopicPartition

        parts = [TopicPartition(t, p) for t, ps in since.items() for p in ps]
        digests: Counter[bytes] = Counter()
        if not parts:
            return cls(digests)
        reader = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
        try:
            reader.assign(parts)
            ends = reader.end_offsets(parts)
            for tp in parts:
                reader.seek(tp, since[tp.topic][tp.partition])
            deadline = time.monotonic() + timeout_s
            waiting = {tp for tp in parts if reader.position(tp) < ends[tp]}
            while waiting and time.monotonic() < deadline:
                for tp, records in reader.poll(timeout_ms=1000).items():
                    for r in records:
                        if r.offset < ends[tp]:
                            digests[_digest(tp.topic, r.key, r.value)] += 1
                    if reader.position(tp) >= ends[tp]:
                        waiting.discard(tp)
            if waiting:
                log.warning("could not read back all outputs since the checkpoint; some may be published twice")
        finally:
            reader.close()
        return cls(digests)

    def already(self, topic: str, key: bytes | None, value: bytes) -> bool:
        if not self._left:
            return False
        d = _digest(topic, key, value)
        if self._left[d] > 0:
            self._left[d] -= 1
            if not self._left[d]:
                del self._left[d]
            self.skipped += 1
            return True
        return False


def published_since(bootstrap: str, ends: Offsets) -> Callable[[str, bytes | None, bytes], bool]:
    """What was published after a checkpoint's output ends, as a producer's skip test; the
    broker away is KafkaIOError (retried by `until_reachable`), not a crash."""
    from kafka.errors import KafkaError

    from ingest.kafka_io import KafkaIOError

    try:
        return PublishedSince.read(bootstrap, ends).already
    except KafkaError as exc:
        raise KafkaIOError(f"cannot read what was published since the checkpoint: {exc}") from exc


def topic_beginnings(bootstrap: str, topics: list[str]) -> Offsets:
    """Each partition's first offset still held, per topic (KafkaIOError if the broker is away)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    from ingest.kafka_io import KafkaIOError

    try:
        reader = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    except KafkaError as exc:
        raise KafkaIOError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    try:
        parts = [TopicPartition(t, p) for t in topics for p in sorted(reader.partitions_for_topic(t) or ())]
        out: Offsets = {}
        for tp, first in reader.beginning_offsets(parts).items():
            out.setdefault(tp.topic, {})[tp.partition] = int(first)
        return out
    except KafkaError as exc:
        raise KafkaIOError(f"cannot read where {topics} begin: {exc}") from exc
    finally:
        reader.close()


def topic_ends(bootstrap: str, topics: list[str], reader: Any = None) -> Offsets:
    """Each partition's end offset, per topic (where the next record will go)."""
    from kafka import KafkaConsumer, TopicPartition

    own = reader is None
    reader = reader or KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        parts = [TopicPartition(t, p) for t in topics for p in sorted(reader.partitions_for_topic(t) or ())]
        out: Offsets = {}
        for tp, end in reader.end_offsets(parts).items():
            out.setdefault(tp.topic, {})[tp.partition] = int(end)
        return out
    finally:
        if own:
            reader.close()


__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointStore",
    "Incarnation",
    "PublishedSince",
    "published_since",
    "read_incarnation",
    "topic_beginnings",
    "topic_ends",
]
