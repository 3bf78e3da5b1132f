"""Kubernetes as a scheduler source: the pods that hold `nvidia.com/gpu` are the jobs, cordons and
out-of-service taints the drains, a node whose Ready condition is not True is down. Read from the
API server's own JSON (a paged list, then a watch from the list's resourceVersion) into
`Snapshot`s; the GPU indices a pod holds from the kubelet's pod-resources API, where a site
exports it per node.

The documentation each rule follows (kubernetes/website unless named):
- list and watch, resourceVersion, bookmarks, `limit`/`continue`, 410 Gone:
  docs/reference/using-api/api-concepts.md ("Efficient detection of changes", "Watch bookmarks",
  "Retrieving large results sets in chunks", "410 Gone responses");
- Pod and Node fields: docs/reference/kubernetes-api/workload-resources/pod-v1.md, cluster-resources
  node-v1.md; times are RFC 3339 (`metav1.Time`), quantities are strings ("8");
- GPUs only in `limits`, a request equal to it if given: docs/tasks/manage-gpus/scheduling-gpus.md;
  the effective request over init, sidecar and app containers:
  docs/concepts/workloads/pods/init-containers.md#resource-sharing-within-containers;
- well-known taints: docs/reference/labels-annotations-taints/_index.md;
- pod-resources `List` (gRPC on /var/lib/kubelet/pod-resources/kubelet.sock):
  docs/concepts/extend-kubernetes/compute-storage-net/device-plugins.md#grpc-endpoint-list and
  kubernetes/kubernetes staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto;
- device ids: NVIDIA/k8s-device-plugin docs/customizing.md (`DEVICE_ID_STRATEGY`, uuid by default)
  and internal/rm/devices.go (`<id>::<replica>` for time-sliced replicas).

Names and bounds: a pod's `<namespace>/<name>` is a job id (`vocab.ids.job_refusal`), a node's name
and a pod's `nodeName` a node name (`node_refusal`); a body, a watch line and a pod-resources file
are bounded in size and JSON depth, a GPU quantity and index by a node's GPUs (`context.bounds`).
An object that fails is passed over by the follower with a warning naming it (one odd object must
not stop it) and refused, with its place (`items[3]`), by the recorded-body readers.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from context.bounds import (
    MAX_GPU_INDEX,
    MAX_GPUS_PER_NODE,
    MAX_KUBERNETES_BYTES,
    MAX_POD_RESOURCES_BYTES,
    MAX_WATCH_LINE_BYTES,
    BoundError,
    read_bytes,
)
from context.bounds import loads as bounded_loads
from context.scheduler.snapshot import JobSeen, NodeSeen, Snapshot
from vocab.ids import job_refusal, node_refusal, shown

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
# Taints that take a node out of service by someone's decision. Kubernetes' own: the node
# lifecycle controller mirrors a cordon as `node.kubernetes.io/unschedulable` (stamped with
# `timeAdded`), an operator marks a node shut down for good `node.kubernetes.io/out-of-service`.
# NVSentinel's fault quarantine (NVIDIA/NVSentinel docs/INTEGRATIONS.md, "Default Taint
# Examples") taints GPU-fault nodes with these keys when a site enables taints (it cordons by
# default, which is read as a cordon). Left out on purpose: `nvidia.com/gpu` (GPU pools are
# commonly tainted `nvidia.com/gpu=present:NoSchedule` to keep CPU pods off: a dedication, not a
# drain), not-ready/unreachable (the node controller's copy of the Ready condition, read from the
# condition) and the kubelet's memory/disk/pid-pressure taints (symptoms, not decisions).
DRAIN_TAINTS = frozenset(
    {
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/out-of-service",
        "nvidia.com/gpu-xid-error",
        "nvidia.com/gpu-nvlink-error",
        "nvidia.com/syslog-xid-error",
        "nvidia.com/gpu-error",
    }
)
# PreferNoSchedule still lets the scheduler place pods there: not out of service
OUT_OF_SERVICE_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
CORDON_TAINT = "node.kubernetes.io/unschedulable"
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
WATCH_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})
# client-go's reflector: backoff from 800 ms doubling to 30 s (tools/cache/reflector.go,
# NewExponentialBackoffManager(800ms, 30s, ...)); watches of at least 5 minutes (minWatchTimeout)
BACKOFF_S = (0.8, 30.0)
WATCH_TIMEOUT_S = 300.0
# the in-cluster service-account files (docs/tasks/run-application/access-api-from-pod.md)
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubernetesFormatError(ValueError):
    """A body, object or stream line that is not the API's JSON in the shape documented; the
    message names the object."""


class ApiError(Exception):
    """The API server answered with an error `Status` (or a bare HTTP error)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ResourceExpiredError(ApiError):
    """410: the resourceVersion (or continue token) is older than the server keeps; list again."""


# --- times and objects -------------------------------------------------------------------------


def rfc3339(value: object) -> float | None:
    """An API time ("2025-03-20T08:01:05Z", MicroTime with a fraction) as epoch seconds."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise KubernetesFormatError(f"time {value!r} is not an RFC 3339 string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise KubernetesFormatError(f"time {value!r} is not RFC 3339") from None
    if parsed.tzinfo is None:
        raise KubernetesFormatError(f"time {value!r} has no offset (RFC 3339 requires one)")
    return parsed.timestamp()


def _dict(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KubernetesFormatError(f"{key} is a {type(value).__name__}, not an object")
    return value


def _list(obj: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise KubernetesFormatError(f"{key} is not a list of objects")
    return value


def pod_key(pod: Mapping[str, Any]) -> str:
    """A pod's job id: "<namespace>/<name>"."""
    meta = _dict(pod, "metadata")
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name or not isinstance(namespace, str) or not namespace:
        raise KubernetesFormatError(f"a pod without metadata.name and namespace: {str(meta)[:120]}")
    key = f"{namespace}/{name}"
    if (problem := job_refusal(key)) is not None:
        raise KubernetesFormatError(f"metadata: pod {shown(key)} refused as a job id: {problem}")
    return key


def _node_name(name: str, where: str) -> str:
    if (problem := node_refusal(name)) is not None:
        raise KubernetesFormatError(f"{where}: node {shown(name)} refused: {problem}")
    return name


def _count(value: object, where: str) -> int:
    """An extended-resource quantity, which Kubernetes allows only as a whole number ("8" or 8)."""
    if isinstance(value, bool):
        raise KubernetesFormatError(f"{where}: quantity {value!r} is not a number")
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 18:  # 18 digits: an int64, no more
        value = int(value)
    if not isinstance(value, int):
        raise KubernetesFormatError(f"{where}: GPU quantity {str(value)[:40]!r} is not a whole number")
    if not 0 <= value <= MAX_GPUS_PER_NODE:
        raise KubernetesFormatError(
            f"{where}: GPU quantity {value:,} is outside 0..{MAX_GPUS_PER_NODE} (a pod holds GPUs of one node) "
            "[bound gpus]"
        )
    return value


def _container_gpus(container: Mapping[str, Any], resource: str, where: str) -> int:
    resources = _dict(container, "resources")
    # GPUs are set in limits; a request, if given, must equal the limit (Schedule GPUs)
    for part in ("limits", "requests"):
        amounts = _dict(resources, part)
        if resource in amounts:
            return _count(amounts[resource], where)
    return 0


def effective_gpus(spec: Mapping[str, Any], resource: str = GPU_RESOURCE, where: str = "pod") -> int:
    """The GPUs the scheduler reserves for the pod, and the node keeps reserved for its whole life:
    Kubernetes' effective request. Init containers run one at a time beside the sidecars
    (`restartPolicy: Always`) started before them; then the app containers run beside every
    sidecar; the larger phase is held. Init containers count because what they reserve is not
    free for another pod while this one lives."""
    sidecars = init_peak = 0
    for container in _list(spec, "initContainers"):
        n = _container_gpus(container, resource, where)
        if container.get("restartPolicy") == "Always":
            sidecars += n
        else:
            init_peak = max(init_peak, sidecars + n)
    app = sum(_container_gpus(c, resource, where) for c in _list(spec, "containers"))
    return max(init_peak, app + sidecars)


def _states(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every container's `state`, init containers first."""
    statuses = _list(status, "initContainerStatuses") + _list(status, "containerStatuses")
    return [_dict(s, "state") for s in statuses]


def _first_start(status: Mapping[str, Any]) -> float | None:
    """When the first container started, for a pod the kubelet gave no startTime."""
    times = [rfc3339(_dict(st, k).get("startedAt")) for st in _states(status) for k in ("running", "terminated")]
    found = [t for t in times if t is not None]
    return min(found) if found else None


def _finished(status: Mapping[str, Any]) -> float | None:
    """When the last container stopped; None while one still runs (or none ever ran)."""
    times = []
    for state in _states(status):
        if "running" in state:
            return None
        t = rfc3339(_dict(state, "terminated").get("finishedAt"))
        if t is not None:
            times.append(t)
    return max(times) if times else None


def _not_ready_since(status: Mapping[str, Any]) -> float | None:
    """When the Ready condition turned False: the end of a pod that left no container times."""
    for c in _list(status, "conditions"):
        if c.get("type") == "Ready" and c.get("status") == "False":
            return rfc3339(c.get("lastTransitionTime"))
    return None


def _failure(status: Mapping[str, Any]) -> str:
    """Why a pod failed: the pod's own reason (Evicted, DeadlineExceeded, UnexpectedAdmissionError)
    or the first container that exited non-zero (OOMKilled, ContainerCannotRun; the runtime's
    generic "Error" is a plain failure)."""
    if status.get("reason"):
        return str(status["reason"])
    for state in _states(status):
        term = _dict(state, "terminated")
        if term and term.get("exitCode") not in (0, None):
            reason = str(term.get("reason") or "")
            return "failed" if reason in ("", "Error") else reason
    return "failed"


def _end(pod: Mapping[str, Any], phase: str, now: float, deleted: bool) -> tuple[float, str] | None:
    """(when, why) the pod stopped holding its GPUs, or None while it holds them."""
    meta, status = _dict(pod, "metadata"), _dict(pod, "status")
    finished = _finished(status)
    # deletionTimestamp is when the server will remove the pod: the request plus the grace period
    removal = rfc3339(meta.get("deletionTimestamp"))
    asked = removal - float(meta.get("deletionGracePeriodSeconds") or 0) if removal is not None else None
    if phase in ENDED_PHASES and (asked is None or finished is None or finished < asked):
        # ended on its own (a finished pod removed later, by a TTL controller say, still completed)
        at = finished if finished is not None else _not_ready_since(status)
        return (at if at is not None else now), ("completed" if phase == "Succeeded" else _failure(status))
    if phase in ENDED_PHASES or deleted:
        # the deletion ended it: the containers' exit if the kubelet saw it, else the removal
        # (never later than we saw it), else when the watch told us
        if finished is not None:
            return finished, "deleted"
        return (min(removal, now) if removal is not None else now), "deleted"
    return None


def pod_job(pod: Mapping[str, Any], now: float, resource: str = GPU_RESOURCE, deleted: bool = False) -> JobSeen | None:
    """The job a pod is, or None: no GPUs, not bound to a node, or Pending without a startTime
    (the kubelet has not taken it yet). `deleted`: the pod left the API (a DELETED event); `now`
    stands in for times the pod does not carry. gpus_by_node is left to the device source."""
    key = pod_key(pod)
    spec, status = _dict(pod, "spec"), _dict(pod, "status")
    gpus = effective_gpus(spec, resource, key)
    node = spec.get("nodeName")
    if gpus <= 0 or not isinstance(node, str) or not node:
        return None
    _node_name(node, f"{key}: spec.nodeName")
    phase = str(status.get("phase") or "Pending")
    # startTime: when the kubelet acknowledged the pod, before it pulled the images
    start = rfc3339(status.get("startTime")) or _first_start(status)
    if start is None:
        if phase == "Pending":
            return None
        start = now  # running, by its phase, with no time at all: since we saw it
    end = _end(pod, phase, now, deleted)
    return JobSeen(key, (node,), gpus, None, start, end[0] if end else None, end[1] if end else "")


def _taint_text(taint: Mapping[str, Any]) -> str:
    """As `kubectl taint` writes it: key=value:Effect."""
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def node_seen(node: Mapping[str, Any], drain_taints: Iterable[str] = DRAIN_TAINTS) -> NodeSeen:
    """A Node's service state: down when its Ready condition is False or Unknown (the node
    controller's "Kubelet stopped posting node status"), drained when cordoned
    (`spec.unschedulable`) or tainted NoSchedule/NoExecute with a key the site lists."""
    meta, spec, status = _dict(node, "metadata"), _dict(node, "spec"), _dict(node, "status")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise KubernetesFormatError(f"a node without metadata.name: {str(meta)[:120]}")
    _node_name(name, "metadata.name")
    keys = set(drain_taints)
    taints = [t for t in _list(spec, "taints") if t.get("effect") in OUT_OF_SERVICE_EFFECTS and t.get("key") in keys]
    cordoned = spec.get("unschedulable") is True
    ready = next((c for c in _list(status, "conditions") if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") != "True":
        words = [str(ready[k]) for k in ("reason", "message") if ready.get(k)]
        reason = ": ".join(words) or f"Ready {ready.get('status')}"
        return NodeSeen(name, cordoned or bool(taints), True, reason, rfc3339(ready.get("lastTransitionTime")))
    if not cordoned and not taints:
        return NodeSeen(name, False, False)
    # the cordon's own taint says nothing more than "cordoned"; another taint says who and why
    words = (["cordoned"] if cordoned else []) + [
        _taint_text(t) for t in taints if not (cordoned and t.get("key") == CORDON_TAINT)
    ]
    stamps = [t for t in (rfc3339(t.get("timeAdded")) for t in taints) if t is not None]
    return NodeSeen(name, True, False, ", ".join(words), min(stamps) if stamps else None)


def list_items(doc: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    """The items of a PodList/NodeList (or `kubectl get -o json`'s kind List)."""
    if doc.get("kind") not in (kind, "List"):
        raise KubernetesFormatError(f"a {doc.get('kind')!r} body where a {kind} was expected")
    return _list(doc, "items")


def read_pods(doc: Mapping[str, Any], now: float, resource: str = GPU_RESOURCE) -> Snapshot:
    """A PodList (`GET /api/v1/pods`, `kubectl get pods -A -o json`) as a reading of jobs; a pod
    that cannot be read is refused with its place (`items[3]`)."""
    snap = Snapshot(now, parts={"jobs"})
    for i, pod in enumerate(list_items(doc, "PodList")):
        try:
            job = pod_job(pod, now, resource)
        except (KubernetesFormatError, TypeError, AttributeError) as exc:
            raise KubernetesFormatError(f"items[{i}]: {exc}") from None
        if job is not None:
            snap.jobs[job.job] = job
    return snap


def read_nodes(doc: Mapping[str, Any], now: float, drain_taints: Iterable[str] = DRAIN_TAINTS) -> Snapshot:
    """A NodeList (`GET /api/v1/nodes`, `kubectl get nodes -o json`) as a reading of nodes."""
    keys = frozenset(drain_taints)
    nodes = []
    for i, item in enumerate(list_items(doc, "NodeList")):
        try:
            nodes.append(node_seen(item, keys))
        except (KubernetesFormatError, TypeError, AttributeError) as exc:
            raise KubernetesFormatError(f"items[{i}]: {exc}") from None
    return Snapshot(now, nodes={n.node: n for n in nodes}, parts={"nodes"})


def read_recorded(paths: Iterable[Path], at: float | None = None) -> list[Snapshot]:
    """Recorded PodList/NodeList bodies (`kubectl get pods -A -o json`) as snapshots in time
    order, each dated `at` or its file's modification time (a list carries no time of its own).
    Each file is bounded in size and depth; KubernetesFormatError names the file and the place."""
    snaps = []
    for path in paths:
        try:
            doc = bounded_loads(read_bytes(path, MAX_KUBERNETES_BYTES, "Kubernetes list"), str(path))
        except (BoundError, ValueError) as exc:  # json.JSONDecodeError and UnicodeDecodeError among them
            raise KubernetesFormatError(f"{path}: {exc}" if str(path) not in str(exc) else str(exc)) from None
        if not isinstance(doc, dict):
            raise KubernetesFormatError(f"{path}: a JSON {type(doc).__name__}, not a Kubernetes list")
        now = at if at is not None else path.stat().st_mtime
        try:
            snaps.append(read_nodes(doc, now) if doc.get("kind") == "NodeList" else read_pods(doc, now))
        except KubernetesFormatError as exc:
            raise KubernetesFormatError(f"{path}: {exc}") from None
    return sorted(snaps, key=lambda s: s.time)


# --- watch events ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str(_dict(self.object, "metadata").get("resourceVersion") or "")

    @property
    def expired(self) -> bool:
        """An ERROR whose Status says the resourceVersion is too old (410; reason "Expired", or
        "Gone" from older servers)."""
        return self.type == "ERROR" and (
            self.object.get("code") == 410 or self.object.get("reason") in ("Expired", "Gone")
        )


def watch_event(line: bytes | str) -> WatchEvent:
    """One line of a watch stream (newline-delimited JSON objects), bounded in size and depth."""
    if len(line) > MAX_WATCH_LINE_BYTES:
        raise KubernetesFormatError(
            f"a watch line of {len(line):,} bytes, over {MAX_WATCH_LINE_BYTES >> 20} MB (one object) [bound watch_line]"
        )
    try:
        doc = bounded_loads(line, "a watch line")
    except BoundError as exc:
        raise KubernetesFormatError(str(exc)) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise KubernetesFormatError(f"a watch line that is not JSON (a stream cut mid-way?): {line[:80]!r}") from None
    if not isinstance(doc, dict) or doc.get("type") not in WATCH_TYPES or not isinstance(doc.get("object"), dict):
        raise KubernetesFormatError(f"not a watch event: {str(doc)[:120]}")
    return WatchEvent(str(doc["type"]), doc["object"])


# --- GPU indices from the kubelet's pod-resources API ------------------------------------------


def _field(obj: Mapping[str, Any], proto_name: str, json_name: str) -> Any:
    """A field under its proto name (`device_ids`, as Go's encoding/json writes the generated
    types) or its protobuf-JSON name (`deviceIds`, what protojson and grpcurl print)."""
    return obj[proto_name] if proto_name in obj else obj.get(json_name)


def _objects(obj: Mapping[str, Any], proto_name: str, json_name: str) -> list[dict[str, Any]]:
    value = _field(obj, proto_name, json_name) or []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise KubernetesFormatError(f"pod-resources {proto_name} is not a list of objects")
    return value


def pod_devices(doc: Mapping[str, Any], resource: str = GPU_RESOURCE) -> dict[str, tuple[str, ...]]:
    """Each pod ("<namespace>/<name>") with the device ids of `resource` its containers hold, from
    a JSON rendering of a ListPodResourcesResponse. The kubelet lists running pods, their app
    containers and sidecars: a pod's ids are those its running containers use."""
    out: dict[str, tuple[str, ...]] = {}
    for pod in _objects(doc, "pod_resources", "podResources"):
        ids = [
            str(i)
            for container in _objects(pod, "containers", "containers")
            for device in _objects(container, "devices", "devices")
            if _field(device, "resource_name", "resourceName") == resource
            for i in _field(device, "device_ids", "deviceIds") or []
        ]
        if ids:
            out[f"{pod.get('namespace')}/{pod.get('name')}"] = tuple(ids)
    return out


def gpu_uuids(text: str) -> dict[str, int]:
    """`nvidia-smi --query-gpu=index,uuid --format=csv,noheader` ("0, GPU-8f3c...") as
    {uuid: index}; a header line ("index, uuid") is passed over."""
    out: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.replace(" ", "").lower() == "index,uuid":
            continue
        index, sep, uuid = (part.strip() for part in line.partition(","))
        if not sep or not index.isdigit() or not uuid:
            raise KubernetesFormatError(f"nvidia-smi index,uuid line {number}: {line[:80]!r}")
        if len(index) > 3 or int(index) > MAX_GPU_INDEX:
            raise KubernetesFormatError(
                f"nvidia-smi index,uuid line {number}: GPU index {index[:10]} over {MAX_GPU_INDEX} [bound gpu_index]"
            )
        out[uuid] = int(index)
    return out


def device_indices(ids: Iterable[str], uuids: Mapping[str, int]) -> tuple[int, ...] | None:
    """Device ids as NVIDIA's device plugin reports them (GPU UUIDs by default, indices with
    DEVICE_ID_STRATEGY=index, `<id>::<replica>` for time-sliced replicas) as GPU indices; None
    when one cannot be named (an unknown UUID, a MIG device)."""
    found: set[int] = set()
    for raw in ids:
        base = raw.split("::", 1)[0]
        if base.isdigit():
            if len(base) > 3 or int(base) > MAX_GPU_INDEX:
                return None  # no node has that GPU: an index that cannot be named
            found.add(int(base))
        elif base in uuids:
            found.add(uuids[base])
        else:
            return None
    return tuple(sorted(found))


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """One node's export: the pods' device ids and the node's GPU uuid -> index map."""

    pods: Mapping[str, tuple[str, ...]]
    uuids: Mapping[str, int]

    def indices(self, job: str) -> tuple[int, ...] | None:
        ids = self.pods.get(job)
        return device_indices(ids, self.uuids) if ids else None


# what the follower asks for a node's devices; None where nothing is exported
DeviceSource = Callable[[str], NodeDevices | None]


class PodResourcesFolder:
    """A folder a site fills per node: `<node>.podresources.json` (the kubelet's List as JSON, e.g.
    grpcurl with the v1 api.proto against the node's pod-resources socket) and, where the device
    plugin reports UUIDs, `<node>.gpus.csv` (nvidia-smi's index,uuid). Read again when changed; a
    file half written is passed over until it parses."""

    def __init__(self, path: Path, resource: str = GPU_RESOURCE) -> None:
        self.path = path
        self.resource = resource
        self._cache: dict[str, tuple[tuple[int, int, int, int], NodeDevices | None]] = {}

    def _stamp(self, file: Path) -> tuple[int, int]:
        try:
            st = file.stat()
        except OSError:
            return (0, 0)
        return (st.st_size, st.st_mtime_ns)

    def __call__(self, node: str) -> NodeDevices | None:
        listing, csv = self.path / f"{node}.podresources.json", self.path / f"{node}.gpus.csv"
        stamp = self._stamp(listing) + self._stamp(csv)
        cached = self._cache.get(node)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            devices = None
            if listing.exists():
                raw = read_bytes(listing, MAX_POD_RESOURCES_BYTES, "pod-resources export")
                pods = pod_devices(bounded_loads(raw, str(listing)), self.resource)
                text = read_bytes(csv, MAX_POD_RESOURCES_BYTES, "GPU index list").decode() if csv.exists() else ""
                devices = NodeDevices(pods, gpu_uuids(text))
        except (OSError, ValueError) as exc:
            log.warning("pod-resources export of %s not usable (%s); keeping the last one", node, exc)
            return cached[1] if cached is not None else None
        self._cache[node] = (stamp, devices)
        return devices


# --- the API server over HTTP ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """Where the API server is and how to prove who we are: a bearer token read from its file at
    every request (projected service-account tokens rotate), a CA file or `insecure` for https."""

    server: str  # "https://10.96.0.1:443"; http for a `kubectl proxy` or a test
    token_file: Path | None = None
    ca_file: Path | None = None
    insecure: bool = False
    request_timeout_s: float = 60.0

    @classmethod
    def in_cluster(cls) -> ApiConfig:
        """The API server as a pod sees it: the kubernetes service's address from the environment
        and the service account's token and CA."""
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt")


def _status_message(code: int, body: bytes) -> ApiError:
    """The error a `Status` body (or a bare one) stands for; 410 is ResourceExpiredError."""
    try:
        doc = json.loads(body)
        message = str(doc.get("message") or doc.get("reason")) if isinstance(doc, dict) else ""
    except ValueError:
        message = ""
    message = message or body.decode("utf-8", "replace").strip()[:200] or http.client.responses.get(code, "")
    return ResourceExpiredError(code, message) if code == 410 else ApiError(code, message)


class ApiClient:
    """GETs against the API server: JSON bodies, and watch streams read line by line (the
    server's chunked newline-delimited JSON). `close` cuts every open connection, which wakes a
    read blocked on a quiet watch."""

    def __init__(self, config: ApiConfig) -> None:
        url = urlsplit(config.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"API server {config.server!r} is not an http(s) URL")
        self.config = config
        self._https = url.scheme == "https"
        self._host, self._port, self._prefix = url.hostname, url.port, url.path.rstrip("/")
        self._tls: ssl.SSLContext | None = None
        if self._https:
            self._tls = ssl.create_default_context(cafile=str(config.ca_file) if config.ca_file else None)
            if config.insecure:
                self._tls.check_hostname = False
                self._tls.verify_mode = ssl.CERT_NONE
        self._guard = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self._closed = False

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "aiops-gpu (context.scheduler.kubernetes)"}
        if self.config.token_file is not None:
            token = self.config.token_file.read_text(encoding="utf-8").strip()
            if not token:  # being rewritten: an empty bearer would be refused (or worse, anonymous)
                raise OSError(f"the token file {self.config.token_file} is empty")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        with self._guard:
            if self._closed:
                raise ConnectionAbortedError("the API client is closed")
            conn: http.client.HTTPConnection
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._tls)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
            self._open.add(conn)
            return conn

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._guard:
            self._open.discard(conn)
        conn.close()

    @contextlib.contextmanager
    def _get(self, path: str, query: Mapping[str, str], timeout: float) -> Iterator[http.client.HTTPResponse]:
        conn = self._connect(timeout)
        try:
            conn.connect()
            with self._guard:  # closed while connecting: close() saw no socket to cut
                if self._closed:
                    raise ConnectionAbortedError("the API client is closed")
            conn.request("GET", f"{self._prefix}{path}?{urlencode(query)}", headers=self._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                raise _status_message(resp.status, resp.read())
            yield resp
        finally:
            self._release(conn)

    def get_json(self, path: str, query: Mapping[str, str]) -> dict[str, Any]:
        with self._get(path, query, self.config.request_timeout_s) as resp:
            body = resp.read(MAX_KUBERNETES_BYTES + 1)  # a byte past the bound is enough to refuse it
        if len(body) > MAX_KUBERNETES_BYTES:
            raise KubernetesFormatError(
                f"GET {path}: a body over {MAX_KUBERNETES_BYTES >> 20} MB (page the list: limit/continue) "
                "[bound file_size]"
            )
        try:
            doc = bounded_loads(body, f"GET {path}")
        except BoundError as exc:
            raise KubernetesFormatError(str(exc)) from None
        except ValueError:
            raise KubernetesFormatError(f"GET {path}: the body is not JSON: {body[:80]!r}") from None
        if not isinstance(doc, dict):
            raise KubernetesFormatError(f"GET {path}: a JSON {type(doc).__name__}, not an object")
        return doc

    def send_json(
        self, method: str, path: str, body: Mapping[str, Any], content_type: str = "application/json"
    ) -> tuple[int, dict[str, Any]]:
        """A write (PATCH, POST): the body as JSON with the content type the API documents for it
        (a merge or strategic-merge patch names its own); the status and the JSON answer. A
        status the caller must act on (409 conflict, 429 an eviction a disruption budget refuses)
        comes back to it; other errors raise ApiError."""
        conn = self._connect(self.config.request_timeout_s)
        try:
            headers = {**self._headers(), "Content-Type": content_type}
            conn.request(method, f"{self._prefix}{path}", body=json.dumps(body).encode(), headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            self._release(conn)
        if resp.status >= 400 and resp.status not in (409, 429):
            raise _status_message(resp.status, raw)
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            raise KubernetesFormatError(f"{method} {path}: the body is not JSON: {raw[:80]!r}") from None
        return resp.status, doc if isinstance(doc, dict) else {}

    @contextlib.contextmanager
    def stream(self, path: str, query: Mapping[str, str], read_timeout: float) -> Iterator[Iterator[bytes]]:
        """The lines of a watch; the iterator ends when the server ends the stream and raises
        (http.client.IncompleteRead, OSError) when the connection is cut."""
        with self._get(path, query, read_timeout) as resp:
            # a line is read up to one byte past the bound: a longer one is refused by watch_event,
            # never held whole
            yield iter(lambda: resp.readline(MAX_WATCH_LINE_BYTES + 1), b"")

    def close(self) -> None:
        with self._guard:
            self._closed = True
            conns = list(self._open)
        for conn in conns:
            if conn.sock is not None:
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)


# --- the follower ------------------------------------------------------------------------------


@dataclass(slots=True)
class Backoff:
    """Waits between failed attempts: from `initial`, doubling, capped; reset by progress."""

    initial: float
    cap: float
    _next: float = field(default=0.0, init=False)

    def next(self) -> float:
        wait = self._next or self.initial
        self._next = min(wait * 2, self.cap)
        return wait

    def reset(self) -> None:
        self._next = 0.0


PATHS = {"pods": "/api/v1/pods", "nodes": "/api/v1/nodes"}
LIST_KINDS = {"pods": "PodList", "nodes": "NodeList"}
PARTS = {"pods": "jobs", "nodes": "nodes"}


class KubernetesFollower:
    """Pods and nodes, each listed then watched, kept as the current jobs and nodes; a Snapshot
    (parts "jobs" and "nodes", each once first listed) goes to `on_snapshot` after every batch of
    changes (what changed while the last one was being handled makes the next), and
    `snapshot(now)` reads it at any time.

    A dropped watch resumes from the last resourceVersion seen, bookmarks included; a 410 (HTTP or
    ERROR event) lists again, and the new list replaces the old state at once (a pod deleted in
    the gap is then absent: the Tracker ends it as gone). An unreachable or failing API server is
    waited for with backoff, never given up on."""

    def __init__(
        self,
        api: ApiClient | ApiConfig,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        *,
        devices: DeviceSource | None = None,
        drain_taints: Iterable[str] = DRAIN_TAINTS,
        gpu_resource: str = GPU_RESOURCE,
        field_selector: str | None = None,  # for pods, e.g. "spec.nodeName!=" (bound pods only)
        page_size: int = 500,  # the API concepts' own example pages pods 500 at a time
        watch_timeout_s: float = WATCH_TIMEOUT_S,
        backoff_s: tuple[float, float] = BACKOFF_S,
        keep_ended_s: float = 3600.0,  # a deleted pod's end stays in snapshots this long
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        self.api = api if isinstance(api, ApiClient) else ApiClient(api)
        self._on_snapshot = on_snapshot
        self._devices = devices
        self._drain_taints = frozenset(drain_taints)
        self._resource = gpu_resource
        self._field_selector = field_selector
        self._page_size = page_size
        self._watch_timeout = watch_timeout_s
        self._backoff = backoff_s
        self._keep_ended = keep_ended_s
        self._clock = clock
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._changed = threading.Condition()
        self._version = 0
        self._pods: dict[str, JobSeen] = {}
        self._ended: dict[str, tuple[JobSeen, float]] = {}  # deleted pods' last word, and when
        self._nodes: dict[str, NodeSeen] = {}
        self._synced: set[str] = set()
        self.resource_versions: dict[str, str | None] = {"pods": None, "nodes": None}
        self._indices: dict[tuple[str, float], tuple[int, ...]] = {}  # (job, start) -> indices found
        self._indices_guard = threading.Lock()
        self._threads: list[threading.Thread] = []

    # -- state --

    def snapshot(self, now: float | None = None) -> Snapshot:
        """The scheduler as followed so far; parts name what has been listed at least once."""
        now = self._clock() if now is None else now
        with self._changed:
            self._ended = {k: v for k, v in self._ended.items() if now - v[1] < self._keep_ended}
            jobs = {k: job for k, (job, _) in self._ended.items()} | self._pods
            nodes, parts = dict(self._nodes), set(self._synced)
        if self._devices is not None:
            jobs = self._with_indices(jobs)
        return Snapshot(now, jobs, nodes, {}, parts)

    def _with_indices(self, jobs: dict[str, JobSeen]) -> dict[str, JobSeen]:
        """Jobs with the GPU indices their node's export names. Found once, kept: the kubelet
        stops listing a pod when it ends, its indices stay what they were."""
        out: dict[str, JobSeen] = {}
        with self._indices_guard:
            memo = {
                (j.job, j.start): self._indices[(j.job, j.start)]
                for j in jobs.values()
                if (j.job, j.start) in self._indices
            }
            for key, job in jobs.items():
                found = memo.get((job.job, job.start))
                if found is None and job.end is None and self._devices is not None:
                    exported = self._devices(job.nodes[0])
                    found = exported.indices(job.job) if exported is not None else None
                    if found:
                        memo[(job.job, job.start)] = found
                out[key] = replace(job, gpus_by_node={job.nodes[0]: found}) if found else job
            self._indices = memo
        return out

    def _replace(self, kind: str, items: list[dict[str, Any]], now: float) -> None:
        """A fresh list: the state is this list, whatever was known before (never half of one)."""
        with self._changed:
            if kind == "nodes":
                self._nodes = {n.node: n for n in (self._node(item) for item in items) if n is not None}
            else:
                self._pods = {j.job: j for j in (self._job(item, now, False) for item in items) if j is not None}
                self._ended = {k: v for k, v in self._ended.items() if k not in self._pods}
            self._synced.add(PARTS[kind])
            self._touch()

    def _apply(self, kind: str, event: WatchEvent, now: float) -> None:
        obj, deleted = event.object, event.type == "DELETED"
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or not isinstance(name, str) or not name:
            log.warning("%s %s event without metadata.name passed over", kind, event.type)
            return  # a watch must move past what it cannot read, or it reads it again for ever
        with self._changed:
            if kind == "nodes":
                node = self._node(obj)
                if deleted:
                    self._nodes.pop(name, None)
                elif node is not None:
                    self._nodes[name] = node
            else:
                key = f"{meta.get('namespace')}/{name}"
                job = self._job(obj, now, deleted)
                self._pods.pop(key, None)
                if deleted and job is not None:
                    self._ended[key] = (job, now)
                elif job is not None:
                    self._pods[key] = job
                    self._ended.pop(key, None)
            self._touch()

    def _job(self, pod: Mapping[str, Any], now: float, deleted: bool) -> JobSeen | None:
        try:
            return pod_job(pod, now, self._resource, deleted)
        except (ValueError, TypeError, AttributeError) as exc:  # KubernetesFormatError among them
            log.warning("pod passed over: %s", exc)  # one odd pod must not stop the follower
            return None

    def _node(self, node: Mapping[str, Any]) -> NodeSeen | None:
        try:
            return node_seen(node, self._drain_taints)
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("node passed over: %s", exc)
            return None

    def _touch(self) -> None:
        self._version += 1
        self._changed.notify_all()

    # -- the API --

    def _query(self, kind: str) -> dict[str, str]:
        return {"fieldSelector": self._field_selector} if kind == "pods" and self._field_selector else {}

    def _list(self, kind: str, limit: int) -> tuple[list[dict[str, Any]], str]:
        """Every item, page by page (`limit`/`continue`), and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            query = self._query(kind) | ({"limit": str(limit)} if limit else {}) | ({"continue": cont} if cont else {})
            try:
                doc = self.api.get_json(PATHS[kind], query)
            except ResourceExpiredError:
                if not cont:
                    raise
                # an expired continue token: "start from the beginning or omit the limit" (API concepts)
                log.info("%s: continue token expired; listing again without paging", kind)
                return self._list(kind, 0)
            items += list_items(doc, LIST_KINDS[kind])
            meta = _dict(doc, "metadata")
            cont = str(meta.get("continue") or "")
            if not cont:
                version = str(meta.get("resourceVersion") or "")
                if not version:
                    raise KubernetesFormatError(f"the {kind} list carries no metadata.resourceVersion to watch from")
                return items, version

    def _watch(self, kind: str) -> int:
        """One watch from the last resourceVersion seen, until the server ends it; the number of
        events (bookmarks included) it delivered."""
        query = self._query(kind) | {
            "watch": "1",
            "resourceVersion": str(self.resource_versions[kind]),
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(int(self._watch_timeout)),
        }
        delivered = 0
        # a watch quiet past its own timeout (plus a margin) is a dead connection
        with self.api.stream(PATHS[kind], query, self._watch_timeout + 30) as lines:
            for line in lines:
                if self._stop.is_set():
                    break
                if not line.strip():
                    continue
                event = watch_event(line)
                if event.type == "ERROR":
                    code = event.object.get("code")
                    error = ResourceExpiredError if event.expired else ApiError
                    raise error(code if isinstance(code, int) else 0, str(event.object.get("message") or ""))
                if event.type != "BOOKMARK":
                    self._apply(kind, event, self._clock())
                if event.resource_version:
                    self.resource_versions[kind] = event.resource_version
                delivered += 1
        return delivered

    def _follow(self, kind: str) -> None:
        backoff = Backoff(*self._backoff)
        while not self._stop.is_set():
            before = self.resource_versions[kind]
            try:
                if self.resource_versions[kind] is None:
                    items, version = self._list(kind, self._page_size)
                    self._replace(kind, items, self._clock())
                    self.resource_versions[kind] = version
                    backoff.reset()
                if self._watch(kind):
                    backoff.reset()
                else:
                    self._sleep(backoff.next())  # a watch that ends at once must not spin
            except ResourceExpiredError as exc:
                log.info("%s: resourceVersion %s too old (%s): listing again", kind, self.resource_versions[kind], exc)
                self.resource_versions[kind] = None
            except (OSError, http.client.HTTPException, ApiError, KubernetesFormatError) as exc:
                self._wait_after(kind, exc, backoff, moved=self.resource_versions[kind] != before)
            except Exception as exc:  # not foreseen: said loudly, and followed on, never a dead thread
                log.exception("%s: unexpected failure", kind)
                self._wait_after(kind, exc, backoff, moved=False)

    def _wait_after(self, kind: str, exc: BaseException, backoff: Backoff, moved: bool) -> None:
        if moved:
            backoff.reset()  # it moved on before it failed: a cut, not a server in trouble
        wait = backoff.next()
        log.warning("%s: %s (%s); again in %.1f s", kind, exc, type(exc).__name__, wait)
        self._sleep(wait)

    def _publish(self) -> None:
        said = 0
        while not self._stop.is_set():
            with self._changed:
                if self._version == said:
                    self._changed.wait(timeout=1.0)
                if self._version == said or self._stop.is_set():
                    continue
                said = self._version
            try:
                snap = self.snapshot()  # the device source is the site's: it may fail too
                if self._on_snapshot is not None and snap.parts:
                    self._on_snapshot(snap)
            except Exception:
                log.exception("a snapshot or its callback failed; following on")

    # -- running --

    def start(self) -> KubernetesFollower:
        targets: dict[str, Callable[[], None]] = {
            "pods": lambda: self._follow("pods"),
            "nodes": lambda: self._follow("nodes"),
            "publish": self._publish,
        }
        for name, target in targets.items():
            thread = threading.Thread(target=target, name=f"kubernetes-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Ends the follower for good (its connections are cut and its client closed)."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        self.api.close()
        for thread in self._threads:
            thread.join(timeout)

    def __enter__(self) -> KubernetesFollower:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "DRAIN_TAINTS",
    "GPU_RESOURCE",
    "ApiClient",
    "ApiConfig",
    "ApiError",
    "DeviceSource",
    "KubernetesFollower",
    "KubernetesFormatError",
    "NodeDevices",
    "PodResourcesFolder",
    "ResourceExpiredError",
    "WatchEvent",
    "device_indices",
    "effective_gpus",
    "gpu_uuids",
    "list_items",
    "node_seen",
    "pod_devices",
    "pod_job",
    "pod_key",
    "read_nodes",
    "read_pods",
    "read_recorded",
    "rfc3339",
    "watch_event",
]
