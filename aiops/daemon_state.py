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

Format 2 (docs/ingest.md, "Checkpoint files"): a magic line, a JSON header line (offsets,
output offsets, what wrote it), an HMAC-SHA256 line and a pickle of the state. The state is a
graph of the detectors', the engine's and the router's own objects with numpy arrays inside
(33 MB at 10,000 GPUs); pickle stays because a schema for all of it is a rewrite of every class
that holds state, and it writes a 32 MB detection state in about 0.6 s and reads it in 0.3 s. So a
file carries no code in two ways:
- its HMAC, keyed by a secret (`AIOPS_STATE_KEY`, else a random key file in the state directory,
  kept only if it is the daemon's own and unreadable by others), is checked over the magic,
  header and body before anything is parsed: a file someone else wrote is never unpickled;
- the unpickler builds only the exact (module, name) pairs in `STATE_GLOBALS`, the classes the
  state is made of, numpy's array rebuilders and two harmless functions, looked up by name and
  never by a dotted path (`aiops.daemon_state` + `os.system` names nothing here). Saving checks the
  same list, so a class added to the state and not to the list fails at the first checkpoint of
  a test, not at a restart.
A file of format 1 (an unsigned pickle under a keyless checksum) is refused unread; the daemon
starts from the committed offsets, as with any checkpoint it cannot use.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import importlib
import io
import json
import logging
import os
import pickle
import secrets
import stat
import time
import types
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.kafka import Record

log = logging.getLogger(__name__)

MAGIC = b"aiops-checkpoint 2\n"
OLD_MAGIC = b"aiops-checkpoint 1\n"  # unsigned, loaded by prefix: refused
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


# What a checkpoint may build, exactly: (module, qualified name) as pickle writes them. Each is a
# class of the state (built empty and filled by its __setstate__ or slots), or a function named
# beside it. Adding state of a new class means adding it here; saving refuses anything else.
STATE_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        # numpy arrays and scalars (numpy 2's names): the rebuilders take a dtype, a shape and bytes
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy._core.numeric", "_frombuffer"),
        # plain containers the state keeps
        ("collections", "Counter"),
        ("collections", "defaultdict"),
        ("collections", "deque"),
        # builtin types that may appear as values (called, they only convert their argument)
        *(("builtins", t) for t in ("bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset")),
        *(("builtins", t) for t in ("int", "list", "range", "set", "slice", "str", "tuple")),
        ("time", "time_ns"),  # a clock held by reference (detectors.ticks); takes no argument
        ("detectors.stack.history", "default_drift"),  # a defaultdict's factory: a fresh detector
        # the id grammars a validator holds per tag (ingest.validate.id_grammar): a string in, a
        # refusal or None out
        ("vocab.ids", "node_refusal"),
        ("vocab.ids", "job_refusal"),
        ("vocab.ids", "entity_refusal"),
        ("detectors.coverage", "CoverageWatch"),
        ("detectors.coverage", "KindCoverage"),
        ("detectors.coverage", "Notice"),
        ("detectors.peers", "Persistence"),
        ("detectors.predict.features", "Ewma"),
        ("detectors.predict.features", "PrecursorFeatures"),
        ("detectors.predict.features", "_Kind"),
        ("detectors.predict.online", "OnlinePredictor"),
        ("detectors.progress_topic", "FindingsLoop"),
        ("detectors.progress_topic", "TickProgress"),
        ("detectors.progress_topic", "_Tick"),  # a split member's ticks in flight
        # findings and facts held between ticks (plain data; classes doing I/O are never listed:
        # sinks, writers, stores, the topology and the model are reattached after a restore)
        ("detectors.anomaly", "Anomaly"),
        ("detectors.anomaly", "Prediction"),
        ("detectors.base", "Block"),
        ("detectors.predict.online", "PredictionReport"),
        ("detectors.detect_loop", "TickWork"),
        ("detectors.stack.presence", "TelemetryGap"),
        ("detectors.stack.view", "MeasurementTick"),
        ("ingest.deadletter", "DeadLetter"),
        ("ingest.deadletter", "Source"),
        ("ingest.validate", "RowReject"),
        ("notify.message", "Notification"),
        ("notify.silences", "MadeSilence"),
        ("rca.rank", "Context"),
        ("vocab.catalog", "Measurement"),
        ("vocab.catalog", "Metric"),
        ("vocab.catalog", "MetricKind"),
        ("vocab.ids", "Refusal"),
        ("vocab.registry", "EarlySign"),
        ("vocab.registry", "FaultKind"),
        ("vocab.registry", "Xid"),
        ("vocab.xid_catalog", "CatalogRow"),
        ("detectors.stack.summary", "CohortStats"),  # split detection's cohort board
        ("detectors.stack.summary", "CohortSummary"),
        ("detectors.stack.summary", "ShareBoard"),
        ("detectors.rates", "CounterRates"),
        ("detectors.detect_loop", "DetectLoop"),
        ("detectors.detect_loop", "DetectStats"),
        ("detectors.stack.cohorts", "PeerRules"),
        ("detectors.stack.cohorts", "_Window"),
        ("detectors.stack.place", "PlaceHistory"),
        ("detectors.stack.history", "DriftWatch"),
        ("detectors.stack.history", "SagWatch"),
        ("detectors.stack.history", "_SagState"),
        ("detectors.stack.maintenance", "Maintenance"),
        ("detectors.stack.presence", "Presence"),
        ("detectors.stack.presence", "_Presence"),
        ("detectors.stack.rules", "HardRules"),
        ("detectors.stack.rules", "_RuleState"),
        ("detectors.stack.stack", "DetectorStack"),
        ("detectors.stack.stack", "_Entities"),
        ("detectors.ticks", "AssembledTick"),
        ("detectors.ticks", "HeldMessages"),
        ("detectors.ticks", "PartitionClock"),
        ("detectors.ticks", "TickAssembler"),
        ("detectors.ticks", "_Pending"),
        ("detectors.univariate", "Univariate"),
        ("detectors.univariate", "UnivariateConfig"),
        ("ingest.frames", "Column"),
        ("ingest.frames", "Frame"),
        ("ingest.pipeline", "IngestCore"),
        ("ingest.pipeline", "IngestStats"),
        ("ingest.validate", "Validator"),
        ("ingest.validate", "_StreamClock"),
        ("notify.message", "IncidentNote"),
        ("notify.router", "Router"),
        ("notify.router", "RouterStats"),
        ("notify.router", "_Group"),
        ("rca.incidents", "EngineStats"),
        ("rca.incidents", "Incident"),
        ("rca.incidents", "IncidentEngine"),
        ("rca.rank", "Candidate"),
        ("rca.symptoms", "Symptom"),
        ("vocab.catalog", "FieldType"),
        ("vocab.entities", "EntityIndex"),
        ("vocab.schedule", "Job"),
        ("vocab.schedule", "NodeJobs"),
        ("vocab.schedule", "Schedule"),
        ("vocab.thresholds", "DetectorSettings"),
        ("vocab.thresholds", "DriftThresholds"),
        ("vocab.thresholds", "PeerRule"),
        ("vocab.thresholds", "PeerThresholds"),
        ("vocab.thresholds", "PresenceThresholds"),
        ("vocab.thresholds", "RuleThresholds"),
        ("vocab.thresholds", "SagThresholds"),
    }
)
assert not any("." in name for _, name in STATE_GLOBALS), "nested names would need a walk: list them one by one"


# Modules that moved (issue 48's renames): a checkpoint written before names the old path, and
# stays usable; only the module part is mapped, the class must still be on STATE_GLOBALS.
MOVED_MODULES = {"detectors.runner": "detectors.detect_loop", "detectors.progress": "detectors.progress_topic"}


def _state_global(module: str, name: str) -> Any:
    """The object (module, name) names, if the pair is in STATE_GLOBALS; CheckpointError otherwise.
    The name is looked up as one attribute of the module (no dotted walk, unlike pickle's own
    find_class), and must be that object's own home: a name another module merely imported
    (`os` inside a project module) is not what the pair means."""
    if (module, name) not in STATE_GLOBALS:
        raise CheckpointError(f"a checkpoint may not build {module}.{name}")
    found = getattr(importlib.import_module(module), name, None)
    if found is None or (getattr(found, "__module__", None), getattr(found, "__qualname__", None)) != (module, name):
        raise CheckpointError(f"a checkpoint may not build {module}.{name} (it is not defined there)")
    return found


class _StateUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _state_global(MOVED_MODULES.get(module, module), name)

    def persistent_load(self, pid: Any) -> Any:
        raise CheckpointError("a checkpoint holds no persistent references")


class _StatePickler(pickle.Pickler):
    """Pickles as usual, but each class or function written by reference must be one the loader
    will build: state of a new class fails here, at the first checkpoint of a test."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, enum.Enum):
            # by value, as CPython 3.11.7 writes a member: 3.11.2 (Debian bookworm's python3, the
            # image's) writes getattr(class, name), which the loader may not build (issue 65's
            # compose run: the daemon died at its first checkpoint). One form on every patch release
            # also lets a checkpoint move between them. The class goes through this check too.
            return type(obj), (obj.value,)
        if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
            pair = (getattr(obj, "__module__", None) or "?", obj.__qualname__)
            if pair not in STATE_GLOBALS:
                raise CheckpointError(
                    f"the state holds {pair[0]}.{pair[1]}, which a checkpoint may not build:"
                    " if it is state, add it to STATE_GLOBALS in aiops/daemon_state.py"
                )
        return NotImplemented


KEY_ENV = "AIOPS_STATE_KEY"
KEY_FILE = "state.key"  # in the state directory, when AIOPS_STATE_KEY is not set
# RFC 2104: a key shorter than the hash's output (32 bytes for SHA-256) weakens the MAC; the
# generated key is 32 random bytes, written as 64 hex digits
MIN_KEY_CHARS = 32


def _key_file_refusal(path: Path, st: os.stat_result) -> str | None:
    """Why a key file cannot be trusted: someone else could have written it, or read it."""
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a plain file"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to this daemon ({os.geteuid()})"
    if st.st_mode & 0o077:
        return f"{path} is open to others (mode {stat.S_IMODE(st.st_mode):o}, want 600)"
    return None


def state_key(directory: Path, create: bool) -> bytes:
    """The key checkpoints in `directory` are signed with: AIOPS_STATE_KEY if set, else the
    directory's key file, made (random, mode 600) when `create` and there is none. A key file
    only counts if it is this daemon's own and unreadable by others; else CheckpointError (set
    AIOPS_STATE_KEY, as a state directory shared with other users must)."""
    given = os.environ.get(KEY_ENV, "")
    if given:
        if len(given) < MIN_KEY_CHARS:
            raise CheckpointError(
                f"{KEY_ENV} is {len(given)} characters; at least {MIN_KEY_CHARS} (openssl rand -hex 32)"
            )
        return given.encode()
    path = directory / KEY_FILE
    for _ in range(2):  # none there: one is made (by this daemon or a member starting with it), then read
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            if not create:
                raise CheckpointError(
                    f"no {KEY_ENV} and no key file {path}: a checkpoint here cannot be checked"
                ) from None
            _make_key_file(path)  # or another member made it first: either way, read it now
            continue
        except OSError as exc:  # a symbolic link (ELOOP) or unreadable
            raise CheckpointError(f"cannot use the key file {path}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            refusal = _key_file_refusal(path, os.fstat(f.fileno()))
            if refusal is not None:
                raise CheckpointError(f"key file refused: {refusal}; set {KEY_ENV} or fix it")
            key = f.read().strip()
        if len(key) < MIN_KEY_CHARS:
            raise CheckpointError(f"key file {path} holds {len(key)} characters; at least {MIN_KEY_CHARS}")
        return key
    raise CheckpointError(f"cannot make the key file {path}")


def _make_key_file(path: Path) -> None:
    """A new random key, whole or not at all: written to a temporary file and linked into place
    (a link fails if the name exists, so two members starting together keep one key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_hex(32).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return  # another member's, made first: that one is the key
        log.warning("made the checkpoint key %s (set %s where several hosts share the state directory)", path, KEY_ENV)
    finally:
        tmp.unlink(missing_ok=True)


def _signature(key: bytes, header: bytes, body: bytes | memoryview) -> bytes:
    mac = hmac.new(key, MAGIC, hashlib.sha256)
    mac.update(header)
    mac.update(b"\n")
    mac.update(body)
    return mac.hexdigest().encode()


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
        """Write atomically, signed; returns the size in bytes."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        key = state_key(self.path.parent, create=True)
        header: dict[str, Any] = {
            "offsets": {t: {str(p): o for p, o in parts.items()} for t, parts in checkpoint.offsets.items()},
            "outputs": {t: {str(p): o for p, o in parts.items()} for t, parts in checkpoint.outputs.items()},
            "written_at": checkpoint.written_at or time.time(),
        }
        if checkpoint.incarnation is not None:
            header["cluster_id"] = checkpoint.incarnation.cluster_id
            header["topic_ids"] = checkpoint.incarnation.topic_ids
        out = io.BytesIO()
        _StatePickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(checkpoint.state)
        body = out.getbuffer()
        line = json.dumps(header).encode()
        tmp = self.path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)  # made fresh, never opened through a link someone left there
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + line + b"\n" + _signature(key, line, body) + b"\n")
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        return len(body)

    def load(self) -> Checkpoint | None:
        """The last checkpoint, None if there is none; CheckpointError if it cannot be used. The
        signature is checked before anything in the file is parsed."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        if data.startswith(OLD_MAGIC):
            raise CheckpointError(
                f"{self.path} is an unsigned checkpoint of format 1 (a pickle that could run code when loaded):"
                " refused unread; the next checkpoint replaces it"
            )
        if not data.startswith(MAGIC):
            raise CheckpointError(f"{self.path} is not a checkpoint of this version")
        line, _, rest = data[len(MAGIC) :].partition(b"\n")
        signature, _, body = rest.partition(b"\n")
        key = state_key(self.path.parent, create=False)
        if not hmac.compare_digest(signature, _signature(key, line, body)):
            raise CheckpointError(
                f"{self.path}: its signature does not match (truncated, edited, or written with another key)"
            )
        try:
            header = json.loads(line)
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
    def of(cls, records: Iterable[Record]) -> PublishedSince:
        """From the records the output topics hold past a checkpoint's ends."""
        return cls(Counter(_digest(r.topic, r.key, r.value) for r in records))

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


__all__ = [
    "STATE_GLOBALS",
    "Checkpoint",
    "CheckpointError",
    "CheckpointStore",
    "Incarnation",
    "PublishedSince",
    "state_key",
]
