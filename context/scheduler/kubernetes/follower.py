"""The follower: lists, then watches pods and nodes, and says what changed.

The documentation each rule follows: context/scheduler/kubernetes/objects.py."""

from __future__ import annotations

import http.client
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from context.scheduler.kubernetes.api import ApiClient, ApiConfig
from context.scheduler.kubernetes.objects import (
    BACKOFF_S,
    DRAIN_TAINTS,
    GPU_RESOURCE,
    WATCH_TIMEOUT_S,
    ApiError,
    KubernetesFormatError,
    ResourceExpiredError,
    WatchEvent,
    _dict,
    list_items,
    node_seen,
    pod_job,
    watch_event,
)
from context.scheduler.kubernetes.pod_resources import (
    DeviceSource,
)
from context.scheduler.snapshot import JobSeen, NodeSeen, Snapshot

log = logging.getLogger(__name__)


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
