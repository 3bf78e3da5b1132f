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
are bounded in size and JSON depth, a GPU quantity and index by a node's GPUs (`vocab.bounds`).
An object that fails is passed over by the follower with a warning naming it (one odd object must
not stop it) and refused, with its place (`items[3]`), by the recorded-body readers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from context.scheduler.snapshot import JobSeen, NodeSeen, Snapshot
from vocab.bounds import (
    MAX_GPUS_PER_NODE,
    MAX_KUBERNETES_BYTES,
    MAX_WATCH_LINE_BYTES,
    BoundError,
    read_bytes,
)
from vocab.bounds import loads as bounded_loads
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
