"""Kubernetes as a scheduler source: the API server's bodies (tests/data/kubernetes, written in the
documented shape; see its README) and real `kubectl get nodes` output read into jobs and nodes,
and the follower against a local server that lists and watches as the API server does. Through
the Tracker, a followed history gives the events the same history read from Slurm gives."""

from __future__ import annotations

import base64
import copy
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from context.scheduler.kubernetes import (
    ApiConfig,
    KubernetesFollower,
    KubernetesFormatError,
    PodResourcesFolder,
    device_indices,
    effective_gpus,
    gpu_uuids,
    node_seen,
    pod_devices,
    pod_job,
    read_nodes,
    read_pods,
    watch_event,
)
from context.scheduler.slurm import parse_slurm
from context.scheduler.snapshot import JobSeen, NodeSeen, Snapshot, Tracker

DATA = Path(__file__).resolve().parents[1] / "data" / "kubernetes"
REAL = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "real-formats"
EDGEXR = REAL / "kubernetes" / "edgexr_kubectl_nodes"
SLURM = REAL / "slurm" / "slurmrestd" / "23.11"
TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.c2VydmljZWFjY291bnQ.c2lnbmF0dXJl"
LLAMA, EVAL, OOM, PREP = (
    "train/llama-70b-worker-0",
    "train/eval-sweep-3",
    "train/finetune-oom-1",
    "train/prep-then-train-0",
)
BERT, MOE = "train/bert-1", "train/gpt-moe-0"


def at(hms: str) -> float:
    return datetime.fromisoformat(f"2025-03-20T{hms}+00:00").timestamp()


def body(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / name).read_text())
    return doc


def stream(name: str) -> list[dict[str, Any]]:
    """The complete events of a recorded watch stream (a cut last line left out)."""
    return [json.loads(line) for line in (DATA / name).read_text().splitlines(keepends=True) if line.endswith("\n")]


def cut_tail(name: str) -> bytes:
    """The bytes after a recorded stream's last newline: an event the connection cut."""
    return (DATA / name).read_bytes().rsplit(b"\n", 1)[1]


# --- the API's bodies, read --------------------------------------------------------------------


def test_a_pod_list_gives_the_pods_holding_gpus_as_jobs() -> None:
    snap = read_pods(body("podlist.json"), at("08:00:00"))
    # CoreDNS and the DCGM exporter hold no GPUs; bert-queued-0 is Pending and bound to no node
    assert set(snap.jobs) == {LLAMA, EVAL, OOM, PREP} and snap.parts == {"jobs"}
    assert snap.jobs[LLAMA] == JobSeen(
        LLAMA, ("gpu-node-01",), 8, None, at("07:09:32")
    )  # startTime, not the container's
    assert snap.jobs[EVAL] == JobSeen(EVAL, ("gpu-node-02",), 2, None, at("06:00:04"), at("07:30:12"), "completed")
    assert snap.jobs[OOM] == JobSeen(OOM, ("gpu-node-02",), 4, None, at("06:30:02"), at("07:45:31"), "OOMKilled")
    # its init container held 2 GPUs, its app container holds 1: the node keeps 2 for it
    assert snap.jobs[PREP].gpus == 2 and snap.jobs[PREP].end is None


def _c(gpus: object = None, *, requests: bool = False, sidecar: bool = False) -> dict[str, Any]:
    part = "requests" if requests else "limits"
    container: dict[str, Any] = {"name": "c", "resources": {part: {"nvidia.com/gpu": gpus}} if gpus is not None else {}}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


@pytest.mark.parametrize(
    ("init", "app", "held"),
    [
        ([], [_c("4"), _c("4")], 8),  # app containers add up
        ([_c("8")], [_c("2")], 8),  # an init container's reservation outlasts it
        ([_c("1"), _c("3")], [_c("2")], 3),  # init containers run one at a time: the largest
        ([], [_c("2", requests=True)], 2),  # a request alone (limits default to it in practice)
        ([_c("1", sidecar=True)], [_c("4")], 5),  # a sidecar runs beside the app containers
        ([_c("2", sidecar=True), _c("4")], [_c("1")], 6),  # an init container runs beside the sidecar before it
        ([], [_c(2)], 2),  # a number, not a string
        ([], [_c(), {"name": "no-resources"}], 0),
    ],
)
def test_the_gpus_a_pod_holds_are_kubernetes_effective_request(
    init: list[dict[str, Any]], app: list[dict[str, Any]], held: int
) -> None:
    assert effective_gpus({"initContainers": init, "containers": app}) == held


def test_a_fractional_gpu_quantity_is_refused_with_the_pod() -> None:
    pod = body("podlist.json")["items"][4]
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "500m"
    with pytest.raises(KubernetesFormatError, match=r"train/llama-70b-worker-0.*500m"):
        pod_job(pod, at("08:00:00"))


def job_of(pod: dict[str, Any], now: float, deleted: bool = False) -> JobSeen:
    job = pod_job(pod, now, deleted=deleted)
    assert job is not None, pod["metadata"]["name"]
    return job


def test_a_pod_becomes_a_job_when_the_kubelet_takes_it_and_ends_when_it_stops() -> None:
    pending, scheduled, running, succeeded = (e["object"] for e in stream("watch-pods-1.jsonl")[:4])
    now = at("08:30:00")
    assert pod_job(pending, now) is None  # no nodeName
    assert pod_job(scheduled, now) is None  # bound, Pending without startTime
    assert pod_job(running, now) == JobSeen(BERT, ("gpu-node-02",), 2, None, at("08:01:05"))
    assert pod_job(succeeded, now) == JobSeen(
        BERT, ("gpu-node-02",), 2, None, at("08:01:05"), at("08:20:00"), "completed"
    )


def test_a_deleted_pod_ends_when_its_containers_stop_or_when_it_is_removed() -> None:
    terminating, stopped, deleted = (e["object"] for e in stream("watch-pods-2.jsonl"))
    now = at("08:30:40")
    assert job_of(terminating, now).end is None  # its grace period: still running
    ended = JobSeen(LLAMA, ("gpu-node-01",), 8, None, at("07:09:32"), at("08:30:27"), "deleted")
    assert pod_job(stopped, now) == ended  # Failed by the deletion it was asked, not on its own
    assert pod_job(deleted, now, deleted=True) == ended
    # removed before the kubelet reported the containers' exit: the removal time, never later than seen
    vanished = copy.deepcopy(terminating)
    assert job_of(vanished, at("08:31:00"), deleted=True).end == at("08:30:30")
    assert job_of(vanished, at("08:30:10"), deleted=True).end == at("08:30:10")
    del vanished["metadata"]["deletionTimestamp"]
    assert job_of(vanished, at("08:30:10"), deleted=True).end_reason == "deleted"
    # a pod that finished, cleaned up later (a TTL controller), completed when it finished
    done = copy.deepcopy(stream("watch-pods-1.jsonl")[3]["object"])
    done["metadata"] |= {"deletionTimestamp": "2025-03-20T09:00:30Z", "deletionGracePeriodSeconds": 30}
    assert job_of(done, at("09:00:31"), deleted=True).end_reason == "completed"


def test_real_kubectl_nodes_read_as_in_service() -> None:
    """`kubectl get nodes -o json` from an RKE2 GPU node (nvidia.com/gpu capacity) and three AKS
    CPU nodes (edgexr/edge-cloud-platform), as recorded: all Ready, none cordoned."""
    gpu = read_nodes(json.loads((EDGEXR / "gpu_node_nori_kubectl_get_nodes.json").read_text()), at("08:00:00"))
    assert gpu.nodes == {"nori": NodeSeen("nori", False, False)} and gpu.parts == {"nodes"}
    aks = read_nodes(json.loads((EDGEXR / "aks_nodes_kubectl_get_nodes.json").read_text()), at("08:00:00"))
    assert sorted(aks.nodes) == [f"aks-agentpool-30520393-vmss00000{i}" for i in range(3)]
    assert {n.state for n in aks.nodes.values()} == {"ok"}


def _nori() -> dict[str, Any]:
    node: dict[str, Any] = json.loads((EDGEXR / "gpu_node_nori_kubectl_get_nodes.json").read_text())["items"][0]
    return node


def test_a_cordon_a_listed_taint_and_a_lost_kubelet_on_the_real_gpu_node() -> None:
    cordoned = _nori()
    cordoned["spec"] |= {
        "unschedulable": True,
        "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2025-03-19T23:20:00Z"}
        ],
    }
    assert node_seen(cordoned) == NodeSeen(
        "nori", True, False, "cordoned", datetime.fromisoformat("2025-03-19T23:20:00Z").timestamp()
    )

    quarantined = _nori()
    quarantined["spec"]["taints"] = [{"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}]
    assert node_seen(quarantined) == NodeSeen("nori", True, False, "nvidia.com/gpu-xid-error=true:NoSchedule")

    dedicated = _nori()  # a GPU pool kept for GPU pods, and a taint that only discourages
    dedicated["spec"]["taints"] = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu-error", "value": "true", "effect": "PreferNoSchedule"},
    ]
    assert node_seen(dedicated).state == "ok"
    site = {"example.com/maintenance"}  # a site's own list replaces the defaults
    dedicated["spec"]["taints"].append({"key": "example.com/maintenance", "effect": "NoExecute"})
    assert node_seen(dedicated, site).reason == "example.com/maintenance:NoExecute"

    lost = _nori()
    ready = next(c for c in lost["status"]["conditions"] if c["type"] == "Ready")
    ready |= {
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "container runtime is down",
        "lastTransitionTime": "2025-03-19T23:30:05Z",
    }
    seen = node_seen(lost)
    assert (seen.state, seen.reason, seen.since) == (
        "down",
        "KubeletNotReady: container runtime is down",
        datetime.fromisoformat("2025-03-19T23:30:05Z").timestamp(),
    )


def test_the_recorded_node_list() -> None:
    snap = read_nodes(body("nodelist.json"), at("08:00:00"))
    out = {n: (s.state, s.reason, s.since) for n, s in snap.nodes.items() if s.state != "ok"}
    assert out == {
        "gpu-node-03": ("drain", "cordoned", at("07:55:10")),  # the controller's taint stamps the cordon
        "gpu-node-04": ("down", "NodeStatusUnknown: Kubelet stopped posting node status.", at("07:41:13")),
    }
    assert set(snap.nodes) == {"cpu-node-01", "gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"}


def test_watch_lines_bookmarks_a_cut_line_and_410() -> None:
    lines = (DATA / "watch-pods-1.jsonl").read_bytes().split(b"\n")
    events = [watch_event(line) for line in lines[:5]]
    assert [(e.type, e.resource_version) for e in events] == [
        ("ADDED", "48215"),
        ("MODIFIED", "48216"),
        ("MODIFIED", "48224"),
        ("MODIFIED", "48241"),
        ("BOOKMARK", "48250"),
    ]
    with pytest.raises(KubernetesFormatError, match="cut mid-way"):
        watch_event(lines[5])
    assert watch_event((DATA / "watch-pods-expired.jsonl").read_bytes()).expired
    # an older server's word for it, as the Python client's tests recorded it
    gone = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: 1 (8146471)",
        "reason": "Gone",
        "code": 410,
    }
    assert watch_event(json.dumps({"type": "ERROR", "object": gone})).expired
    other = {
        "kind": "Status",
        "status": "Failure",
        "message": "etcdserver: request timed out",
        "reason": "InternalError",
        "code": 500,
    }
    assert not watch_event(json.dumps({"type": "ERROR", "object": other})).expired
    with pytest.raises(KubernetesFormatError):
        watch_event(json.dumps({"type": "SYNC", "object": {}}))


def test_pod_resources_in_both_json_field_styles_give_gpu_indices() -> None:
    camel = pod_devices(body("podresources/gpu-node-01.podresources.json"))
    assert set(camel) == {LLAMA}  # the DCGM exporter holds no device; the hostdev devices are not GPUs
    assert len(camel[LLAMA]) == 8 and all(i.startswith("GPU-") for i in camel[LLAMA])
    uuids = gpu_uuids((DATA / "podresources" / "gpu-node-01.gpus.csv").read_text())
    assert device_indices(camel[LLAMA], uuids) == (0, 1, 2, 3, 4, 5, 6, 7)
    snake = pod_devices(body("podresources/gpu-node-02.podresources.json"))
    assert snake == {PREP: ("1",), BERT: ("5", "4")}  # DEVICE_ID_STRATEGY=index
    assert device_indices(snake[BERT], {}) == (4, 5)
    first = "GPU-8f3c2a1e-5b7d-4e9f-a1c3-6d2b8e0f4a17"
    assert device_indices([f"{first}::3", f"{first}::0"], uuids) == (0,)  # two time-sliced replicas of one GPU
    assert device_indices([first, "GPU-00000000-0000-0000-0000-000000000000"], uuids) is None
    assert device_indices(["MIG-4a0c7e2b-1f3d-5a6e-9b8c-7d2e1f0a3b4c"], uuids) is None


def test_nvidia_smi_index_uuid_csv() -> None:
    text = "index, uuid\n0, GPU-aaaa\n 1,GPU-bbbb \n\n"
    assert gpu_uuids(text) == {"GPU-aaaa": 0, "GPU-bbbb": 1}
    with pytest.raises(KubernetesFormatError, match="line 2"):
        gpu_uuids("0, GPU-aaaa\nGPU-bbbb\n")


# --- a local API server ------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    path: str
    query: dict[str, str]
    authorization: str

    @property
    def watch(self) -> bool:
        return "watch" in self.query


@dataclass
class _Resource:
    """One resource's store and history: items now, the events since the list, the oldest
    resourceVersion still served, and the cuts ordered of open streams."""

    kind: str
    items: dict[str, dict[str, Any]]
    rv: int
    log: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    oldest: int = 0
    cuts: list[tuple[str, bytes, int]] = field(default_factory=list)  # (how, bytes, events before it)
    old_answered_by_http: bool = False
    expire_continue: bool = False  # the next continue token given back is answered 410
    streams: int = 0  # watches opened (their history position taken)
    pages: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeApiServer:
    """GET /api/v1/pods and /api/v1/nodes as the API server serves them: a list (paged with
    limit/continue, at one resourceVersion) or, with watch=1, the changes after the given
    resourceVersion as a chunked stream of newline-delimited events, ended by the server or
    cut. Every request is recorded; one without the bearer token is refused 401, a watch without
    resourceVersion or allowWatchBookmarks=true 400, one from a resourceVersion older than the
    history kept 410 (an ERROR event, or the HTTP status)."""

    def __init__(
        self,
        pods: dict[str, Any],
        nodes: dict[str, Any],
        token: str,
        port: int = 0,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        self.token = token
        self.resources = {
            kind: _Resource(doc["kind"], {_key(o): o for o in doc["items"]}, int(doc["metadata"]["resourceVersion"]))
            for kind, doc in (("pods", pods), ("nodes", nodes))
        }
        for res in self.resources.values():
            res.oldest = res.rv
        self.cond = threading.Condition()
        self.requests: list[Request] = []
        self.closing = False
        self.httpd = _Httpd(("127.0.0.1", port), _Handler)
        self.httpd.api = self
        self.scheme = "https" if tls else "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _store(self, res: _Resource, event: dict[str, Any]) -> int:
        obj, rv = event["object"], int(event["object"]["metadata"]["resourceVersion"])
        if event["type"] in ("ADDED", "MODIFIED"):
            res.items[_key(obj)] = obj
        elif event["type"] == "DELETED":
            res.items.pop(_key(obj), None)
        res.rv = max(res.rv, rv)
        return rv

    def play(self, kind: str, *events: dict[str, Any]) -> None:
        """Changes as they happen: stored, and sent to every open watch."""
        with self.cond:
            res = self.resources[kind]
            for event in events:
                res.log.append((self._store(res, event), event))
            self.cond.notify_all()

    def drop(self, kind: str, partial: bytes) -> None:
        """Open watches are cut in the middle of an event."""
        with self.cond:
            res = self.resources[kind]
            res.cuts.append(("drop", partial, len(res.log)))
            self.cond.notify_all()

    def expire(self, kind: str, gap: list[dict[str, Any]], *, by_http: bool = False) -> None:
        """Changes the watchers never see, then the history before them compacted away: open
        watches end with an ERROR 410 event (or are cut, and a new watch from an old
        resourceVersion is answered HTTP 410)."""
        with self.cond:
            res = self.resources[kind]
            for event in gap:
                self._store(res, event)
            res.oldest, res.old_answered_by_http = res.rv, by_http
            res.cuts.append(("cut" if by_http else "expire", b"", len(res.log)))
            self.cond.notify_all()

    def news(
        self, res: _Resource, pos: int, cuts: int
    ) -> tuple[list[dict[str, Any]], tuple[str, bytes, int] | None, int]:
        """The events after `pos` (up to a cut ordered after `cuts`), waiting for some."""
        with self.cond:
            while len(res.log) <= pos and len(res.cuts) <= cuts and not self.closing:
                self.cond.wait(1.0)
            cut = res.cuts[cuts] if len(res.cuts) > cuts else None
            upto = cut[2] if cut is not None else len(res.log)
            return [e for _, e in res.log[pos:upto]], cut, max(pos, upto)

    def seen(self, path: str) -> list[Request]:
        with self.cond:
            return [r for r in self.requests if r.path == path]

    def wait_for(self, test: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not test():
                if time.monotonic() > deadline:
                    pytest.fail(f"the server never saw {what}: {self.requests}")
                self.cond.wait(0.05)


class _Httpd(ThreadingHTTPServer):
    daemon_threads = True
    api: FakeApiServer

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that went away mid-stream (a follower stopping) is no error here


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Httpd

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        api = self.server.api
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        with api.cond:
            api.requests.append(Request(url.path, query, self.headers.get("Authorization", "")))
            api.cond.notify_all()
        kind = {"/api/v1/pods": "pods", "/api/v1/nodes": "nodes"}.get(url.path)
        if self.headers.get("Authorization") != f"Bearer {api.token}":
            self._json(401, _status(401, "Unauthorized", "Unauthorized"))
        elif kind is None:
            self._json(404, _status(404, "NotFound", "the server could not find the requested resource"))
        elif "watch" in query:
            self._watch(api, api.resources[kind], query)
        else:
            self._list(api, api.resources[kind], query)

    def _json(self, code: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _list(self, api: FakeApiServer, res: _Resource, query: dict[str, str]) -> None:
        limit = int(query.get("limit") or 0)
        with api.cond:
            if "continue" in query:
                rv, start = json.loads(base64.b64decode(query["continue"]))
                if res.expire_continue or rv < res.oldest:
                    res.expire_continue = False
                    too_old = "The provided continue parameter is too old to display a consistent list result."
                    self._json(410, _status(410, "Expired", too_old))
                    return
                items = res.pages[rv]
            else:
                rv, start = res.rv, 0
                items = res.pages[rv] = [res.items[k] for k in sorted(res.items)]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and start + limit < len(items):
            meta["continue"] = base64.b64encode(json.dumps([rv, start + limit]).encode()).decode()
            meta["remainingItemCount"] = len(items) - start - limit
        page = items[start : start + limit] if limit else items[start:]
        self._json(200, {"kind": res.kind, "apiVersion": "v1", "metadata": meta, "items": page})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, api: FakeApiServer, res: _Resource, query: dict[str, str]) -> None:
        if (
            query.get("watch") not in ("1", "true")
            or query.get("allowWatchBookmarks") != "true"
            or not query.get("resourceVersion")
        ):
            self._json(
                400, _status(400, "BadRequest", "watch=1 from a resourceVersion with allowWatchBookmarks=true, please")
            )
            return
        since = int(query["resourceVersion"])
        with api.cond:
            too_old, cuts = since < res.oldest, len(res.cuts)
            pos = next((i for i, (rv, _) in enumerate(res.log) if rv > since), len(res.log))
            res.streams += not too_old
            api.cond.notify_all()
        expired = (DATA / "watch-pods-expired.jsonl").read_bytes()
        if too_old and res.old_answered_by_http:
            self._json(410, _status(410, "Expired", f"too old resource version: {since} ({res.oldest})"))
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if too_old:  # the server ends a watch after its ERROR event
            self._chunk(expired)
            self._chunk(b"")
            return
        while True:
            events, cut, pos = api.news(res, pos, cuts)
            for event in events:
                self._chunk(json.dumps(event, separators=(",", ":")).encode() + b"\n")
            if cut is not None and cut[0] == "expire":
                self._chunk(expired)
                self._chunk(b"")
                return
            if cut is not None:  # a chunk promised and not delivered whole (or nothing more), then gone
                self.wfile.write(b"%x\r\n%s" % (len(cut[1]) * 2, cut[1]) if cut[1] else b"")
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if api.closing:
                self._chunk(b"")
                return


# --- following it ------------------------------------------------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Followed:
    """A follower against the local server, its snapshots fed to a Tracker as a daemon would."""

    def __init__(
        self, api: FakeApiServer, token_file: Path, clock: Clock, tracker: Tracker | None = None, **options: Any
    ) -> None:
        self.tracker = tracker or Tracker("kubernetes")
        self.events: list[dict[str, Any]] = []
        self.snapshots: list[Snapshot] = []
        self.guard = threading.Lock()
        options = {"devices": PodResourcesFolder(DATA / "podresources"), "backoff_s": (0.01, 0.1), **options}
        self.follower = KubernetesFollower(ApiConfig(api.url, token_file), self._take, clock=clock, **options)

    def _take(self, snap: Snapshot) -> None:
        with self.guard:
            self.snapshots.append(snap)
            self.events += self.tracker.update(snap)

    def wait(self, test: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not test():
            if time.monotonic() > deadline:
                pytest.fail(f"never {what}; events so far: {self.events}")
            time.sleep(0.01)

    def new_events(self, count: int, since: int) -> list[dict[str, Any]]:
        """The events after the first `since`, once there are `count` of them."""
        self.wait(lambda: len(self.events) >= since + count, f"{count} events after {since}")
        with self.guard:
            return sorted(self.events[since:], key=_order)

    def synced(self) -> bool:
        with self.guard:
            return any(s.parts == {"jobs", "nodes"} for s in self.snapshots)


def _order(e: dict[str, Any]) -> tuple[float, str, str]:
    return (float(e["time"]), str(e["type"]), str(e.get("job", e.get("nodes"))))


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(body("podlist.json"), body("nodelist.json"), TOKEN)
    yield server
    server.close()


def start_(job: str, node: str, gpus: int, t: float, indices: list[int] | None = None) -> dict[str, Any]:
    e = {"type": "job_start", "job": job, "nodes": [node], "gpus": gpus, "time": t}
    return e | ({"gpus_by_node": {node: indices}} if indices is not None else {})


def end_(job: str, t: float, reason: str) -> dict[str, Any]:
    return {"type": "job_end", "job": job, "time": t, "reason": reason}


def node_(node: str, state: str, t: float, reason: str) -> dict[str, Any]:
    return {"type": "node_state", "nodes": [node], "state": state, "time": t, "reason": reason}


def _what(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keep = ("type", "job", "nodes", "gpus", "gpus_by_node", "time", "state", "reason")
    return [{k: e[k] for k in keep if k in e} for e in events]


def _follow_the_history(api: FakeApiServer, k8s: Followed, clock: Clock) -> list[list[dict[str, Any]]]:
    """The recorded history played to the follower, step by step; each step's new events."""
    steps: list[list[dict[str, Any]]] = []
    pods = stream("watch-pods-1.jsonl")
    k8s.follower.start()
    steps.append(k8s.new_events(8, 0))  # the two lists
    assert k8s.follower.resource_versions == {"pods": "48210", "nodes": "48210"}

    clock.now = at("08:01:40")
    api.play("pods", *pods[:2])
    k8s.wait(lambda: k8s.follower.resource_versions["pods"] == "48216", "read bert-1 bound")
    assert BERT not in k8s.follower.snapshot().jobs  # Pending, no startTime: not a job yet
    api.play("pods", pods[2])
    steps.append(k8s.new_events(1, 8))
    clock.now = at("08:20:05")
    api.play("pods", pods[3])
    steps.append(k8s.new_events(1, 9))

    api.play("pods", pods[4])  # a bookmark, then the connection is cut mid-event
    k8s.wait(lambda: k8s.follower.resource_versions["pods"] == "48250", "took the bookmark")
    api.drop("pods", cut_tail("watch-pods-1.jsonl"))
    api.wait_for(
        lambda: len([r for r in api.requests if r.path == "/api/v1/pods" and r.watch]) == 2, "the pods watch again"
    )

    nodes = stream("watch-nodes-1.jsonl")
    for now, events in ((at("08:25:00"), nodes[:2]), (at("08:26:00"), nodes[2:3]), (at("08:27:30"), nodes[3:])):
        clock.now = now
        before = len(k8s.events)
        api.play("nodes", *events)
        steps.append(k8s.new_events(1, before))

    clock.now = at("08:30:40")
    terminating, *stopped = stream("watch-pods-2.jsonl")
    api.play("pods", terminating)
    k8s.wait(lambda: k8s.follower.resource_versions["pods"] == "48262", "read the deletion asked")
    assert k8s.follower.snapshot().jobs[LLAMA].end is None  # its grace period: still running
    api.play("pods", *stopped)
    steps.append(k8s.new_events(1, 13))

    clock.now = at("08:45:00")
    api.expire("pods", stream("gap-pods.jsonl"))
    steps.append(k8s.new_events(2, 14))
    api.wait_for(
        lambda: api.seen("/api/v1/pods")[-1].query.get("resourceVersion") == "49100", "the watch from the new list"
    )
    return steps


def test_a_followed_cluster_gives_its_history_through_the_tracker(api: FakeApiServer, token_file: Path) -> None:
    clock = Clock(at("08:00:00"))
    k8s = Followed(api, token_file, clock)
    try:
        steps = _follow_the_history(api, k8s, clock)
    finally:
        k8s.follower.stop()
    gpu01 = list(range(8))
    assert [_what(step) for step in steps] == [
        [
            start_(EVAL, "gpu-node-02", 2, at("06:00:04")),
            start_(OOM, "gpu-node-02", 4, at("06:30:02")),
            start_(LLAMA, "gpu-node-01", 8, at("07:09:32"), gpu01),  # UUIDs mapped through nvidia-smi's csv
            end_(EVAL, at("07:30:12"), "completed"),
            node_("gpu-node-04", "down", at("07:41:13"), "NodeStatusUnknown: Kubelet stopped posting node status."),
            end_(OOM, at("07:45:31"), "OOMKilled"),
            start_(PREP, "gpu-node-02", 2, at("07:50:00"), [1]),  # the kubelet lists the app container's GPU
            node_("gpu-node-03", "drain", at("07:55:10"), "cordoned"),
        ],
        [start_(BERT, "gpu-node-02", 2, at("08:01:05"), [4, 5])],
        [end_(BERT, at("08:20:00"), "completed")],
        [node_("gpu-node-01", "drain", at("08:25:00"), "cordoned")],  # no time on the cordon itself: when seen
        [node_("gpu-node-03", "ok", at("08:26:00"), "")],
        [node_("gpu-node-04", "ok", at("08:27:30"), "")],
        [end_(LLAMA, at("08:30:27"), "deleted")],
        # after the 410 and the new list: the pod started in the gap, the one deleted in it gone
        [start_(MOE, "gpu-node-03", 8, at("08:40:02")), end_(PREP, at("08:45:00"), "gone")],
    ]
    watches = [(r.query.get("resourceVersion"), r.watch) for r in api.seen("/api/v1/pods")]
    # the list; its watch; after the cut, again from the bookmark; the 410; a new list; its watch
    assert watches == [(None, False), ("48210", True), ("48250", True), (None, False), ("49100", True)]
    for r in api.seen("/api/v1/pods") + api.seen("/api/v1/nodes"):
        assert r.authorization == f"Bearer {TOKEN}"
        assert r.query.get("allowWatchBookmarks") == ("true" if r.watch else None)

    slurm = _the_same_history_in_slurm()
    assert _comparable(sorted((e for step in steps for e in step), key=_order), SLURM_IDS) == _comparable(slurm, {})


# --- the same history, as slurmrestd would tell it ---------------------------------------------

SLURM_IDS = {EVAL: "1001", OOM: "1002", LLAMA: "1003", PREP: "1004", BERT: "1005", MOE: "1006"}


def _slurm_time(t: float | None) -> dict[str, Any]:
    return {"set": t is not None, "infinite": False, "number": int(t or 0)}


def _slurm_jobs(rows: list[tuple[str, str, str, float, float | None, int, str | None]]) -> dict[str, Any]:
    """slurmrestd's v0.0.40 jobs body (the recorded one, its job rewritten per row)."""
    doc: dict[str, Any] = json.loads((SLURM / "slurm-job-gpus-running.json").read_text())
    template, doc["jobs"] = doc["jobs"][0], []
    for job_id, node, state, start, end, gpus, idx in rows:
        job = copy.deepcopy(template)
        job |= {
            "job_id": int(job_id),
            "job_state": [state],
            "start_time": _slurm_time(start),
            "end_time": _slurm_time(end),
            "nodes": node,
        }
        job["job_resources"]["nodes"] = node
        job["job_resources"]["allocated_nodes"][0]["nodename"] = node
        job["gres_detail"] = [f"gpu:h100:{gpus}(IDX:{idx})"] if idx else []
        job["tres_alloc_str"] = f"cpu=1,mem=512M,node=1,billing=1,gres/gpu={gpus}"
        doc["jobs"].append(job)
    return doc


def _slurm_nodes(states: Mapping[str, tuple[list[str], str, float | None]]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SLURM / "slurm-node-drain.json").read_text())
    template, doc["nodes"] = doc["nodes"][0], []
    for name in ("cpu-node-01", "gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"):
        state, reason, since = states.get(name, (["IDLE"], "", None))
        node = copy.deepcopy(template)
        node |= {
            "name": name,
            "hostname": name,
            "state": state,
            "reason": reason,
            "reason_changed_at": _slurm_time(since),
        }
        doc["nodes"].append(node)
    return doc


def _the_same_history_in_slurm() -> list[dict[str, Any]]:
    eval_ = ("1001", "gpu-node-02", "COMPLETED", at("06:00:04"), at("07:30:12"), 2, None)
    oom = ("1002", "gpu-node-02", "OUT_OF_MEMORY", at("06:30:02"), at("07:45:31"), 4, None)
    llama = ("1003", "gpu-node-01", "RUNNING", at("07:09:32"), None, 8, "0-7")
    prep = ("1004", "gpu-node-02", "RUNNING", at("07:50:00"), None, 2, "1")
    bert = ("1005", "gpu-node-02", "RUNNING", at("08:01:05"), None, 2, "4-5")
    bert_done = (*bert[:2], "COMPLETED", bert[3], at("08:20:00"), *bert[5:])
    llama_done = (*llama[:2], "CANCELLED", llama[3], at("08:30:27"), *llama[5:])
    moe = ("1006", "gpu-node-03", "RUNNING", at("08:40:02"), None, 8, None)
    drained = {
        "gpu-node-03": (["IDLE", "DRAIN"], "cordoned for rack work", at("07:55:10")),
        "gpu-node-04": (["DOWN"], "Not responding", at("07:41:13")),
    }
    cordon = {"gpu-node-01": (["IDLE", "DRAIN"], "cordoned", at("08:25:00"))}
    readings = [
        (at("08:00:00"), [eval_, oom, llama, prep], drained),
        (at("08:01:40"), [eval_, oom, llama, prep, bert], drained),
        (at("08:20:05"), [eval_, oom, llama, prep, bert_done], drained),
        (at("08:25:00"), [eval_, oom, llama, prep, bert_done], drained | cordon),
        (at("08:26:00"), [eval_, oom, llama, prep, bert_done], {"gpu-node-04": drained["gpu-node-04"]} | cordon),
        (at("08:27:30"), [eval_, oom, llama, prep, bert_done], cordon),
        (at("08:30:40"), [eval_, oom, llama_done, prep, bert_done], cordon),
        (at("08:45:00"), [eval_, oom, llama_done, bert_done, moe], cordon),  # prep purged from squeue
    ]
    tracker, events = Tracker("slurm"), []
    for now, jobs, nodes in readings:
        snap = parse_slurm(_slurm_jobs(jobs), now).merge(parse_slurm(_slurm_nodes(nodes), now))
        events += tracker.update(snap)
    return sorted(events, key=_order)


def _comparable(events: list[dict[str, Any]], ids: dict[str, str]) -> list[tuple[Any, ...]]:
    """What both schedulers must agree on; reasons are each scheduler's own words."""
    return [
        (
            e["type"],
            ids.get(e.get("job", ""), e.get("job")),
            e.get("nodes"),
            e.get("gpus"),
            e.get("gpus_by_node"),
            e["time"],
            e.get("state"),
        )
        for e in events
    ]


# --- restarts, refusals, paging, an absent server ----------------------------------------------


def test_a_restarted_follower_says_nothing_twice(api: FakeApiServer, token_file: Path) -> None:
    clock = Clock(at("08:00:00"))
    first = Followed(api, token_file, clock)
    with first.follower:
        first.new_events(8, 0)
        clock.now = at("08:25:00")
        api.play("pods", *stream("watch-pods-1.jsonl")[:4])
        api.play("nodes", *stream("watch-nodes-1.jsonl")[:2])
        first.new_events(3, 8)  # bert-1 started and ended, gpu-node-01 cordoned
    published = list(first.events)

    clock.now = at("08:29:00")
    tracker = Tracker("kubernetes")
    tracker.replay(published)  # read back from the topic
    second = Followed(api, token_file, clock, tracker)
    with second.follower:
        second.wait(second.synced, "listed pods and nodes")
        assert second.events == []
        api.play("pods", *stream("watch-pods-2.jsonl"))
        assert _what(second.new_events(1, 0)) == [end_(LLAMA, at("08:30:27"), "deleted")]


def test_a_watch_refused_410_by_http_status_lists_again(api: FakeApiServer, token_file: Path) -> None:
    clock = Clock(at("08:00:00"))
    k8s = Followed(api, token_file, clock)
    with k8s.follower:
        k8s.new_events(8, 0)
        api.wait_for(lambda: api.resources["nodes"].streams == 1, "the nodes watched")
        clock.now = at("08:52:00")
        api.expire("nodes", stream("gap-nodes.jsonl"), by_http=True)  # the watch cut; its history compacted
        assert _what(k8s.new_events(1, 8)) == [
            node_("gpu-node-02", "drain", at("08:50:00"), "cordoned, nvidia.com/gpu-xid-error=true:NoSchedule")
        ]
        api.wait_for(lambda: len(api.seen("/api/v1/nodes")) == 5, "the nodes watched again")
    nodes = [(r.query.get("resourceVersion"), r.watch) for r in api.seen("/api/v1/nodes")]
    # list, watch, cut: watch again from the same version, refused 410; list; watch from it
    assert nodes == [(None, False), ("48210", True), ("48210", True), (None, False), ("49230", True)]


def test_lists_are_paged_and_an_expired_continue_token_lists_again(api: FakeApiServer, token_file: Path) -> None:
    clock = Clock(at("08:00:00"))
    k8s = Followed(api, token_file, clock, page_size=3, field_selector="spec.nodeName!=")
    with k8s.follower:
        k8s.wait(k8s.synced, "listed pods and nodes")
    pods = [r.query for r in api.seen("/api/v1/pods") if not r.watch]
    assert [(q.get("limit"), "continue" in q) for q in pods] == [("3", False), ("3", True), ("3", True)]  # 7 pods
    assert all(q["fieldSelector"] == "spec.nodeName!=" for q in (r.query for r in api.seen("/api/v1/pods")))
    assert set(k8s.follower.snapshot().jobs) == {LLAMA, EVAL, OOM, PREP}

    api.resources["pods"].expire_continue = True  # the second page comes too late: its token has expired
    again = Followed(api, token_file, clock, page_size=3)
    with again.follower:
        again.wait(again.synced, "listed pods and nodes")
    pods = [r.query for r in api.seen("/api/v1/pods") if not r.watch][3:]
    assert [(q.get("limit"), "continue" in q) for q in pods] == [("3", False), ("3", True), (None, False)]
    assert set(again.follower.snapshot().jobs) == {LLAMA, EVAL, OOM, PREP}


def test_a_refused_token_is_retried_until_the_rotated_one_is_accepted(api: FakeApiServer, token_file: Path) -> None:
    token_file.write_text("expired-token\n")
    k8s = Followed(api, token_file, Clock(at("08:00:00")))
    with k8s.follower:
        api.wait_for(lambda: len(api.requests) >= 6, "several refused attempts")
        assert not k8s.snapshots
        rotated = token_file.with_suffix(".new")  # the kubelet swaps projected tokens in atomically
        rotated.write_text(TOKEN + "\n")
        rotated.replace(token_file)
        k8s.wait(k8s.synced, "listed pods and nodes")
    assert {r.authorization for r in api.requests} == {"Bearer expired-token", f"Bearer {TOKEN}"}
    assert api.requests[0].authorization == "Bearer expired-token"


def test_an_unreachable_api_server_is_waited_for_with_backoff(token_file: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    waits: list[tuple[str, float]] = []
    servers: list[FakeApiServer] = []
    pause = threading.Event()

    def sleep(seconds: float) -> None:
        name = threading.current_thread().name
        waits.append((name, seconds))
        if name == "kubernetes-pods" and [w[0] for w in waits].count(name) == 5:
            servers.append(FakeApiServer(body("podlist.json"), body("nodelist.json"), TOKEN, port))  # it comes up
        pause.wait(seconds)

    k8s = KubernetesFollower(ApiConfig(f"http://127.0.0.1:{port}", token_file), backoff_s=(0.01, 0.04), sleep=sleep)
    try:
        with k8s:
            deadline = time.monotonic() + 10
            while k8s.snapshot().parts != {"jobs", "nodes"}:
                assert time.monotonic() < deadline, f"never listed; waited {waits}"
                time.sleep(0.01)
    finally:
        for server in servers:
            server.close()
    pods = [s for name, s in waits if name == "kubernetes-pods"]
    assert pods[:5] == [0.01, 0.02, 0.04, 0.04, 0.04]  # doubling, capped; never giving up
    assert set(k8s.snapshot().jobs) == {LLAMA, EVAL, OOM, PREP}


def test_an_unreadable_pod_is_passed_over_and_the_watch_goes_on(api: FakeApiServer, token_file: Path) -> None:
    k8s = Followed(api, token_file, Clock(at("08:00:00")))
    with k8s.follower:
        k8s.new_events(8, 0)
        running, succeeded = stream("watch-pods-1.jsonl")[2:4]
        odd = copy.deepcopy(running)  # a quantity Kubernetes itself would refuse for a GPU
        odd["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "500m"
        api.play("pods", odd, succeeded)
        # the odd one is nothing; the pod's next state is read (a job that started and ended)
        assert _what(k8s.new_events(2, 8)) == [
            start_(BERT, "gpu-node-02", 2, at("08:01:05")),
            end_(BERT, at("08:20:00"), "completed"),
        ]
    assert [r.query.get("resourceVersion") for r in api.seen("/api/v1/pods") if r.watch] == ["48210"]  # never re-read


def test_in_cluster_config_names_the_service_and_the_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config = ApiConfig.in_cluster()
    assert config.server == "https://[fd00:10:96::1]:443"
    assert config.token_file == Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
    assert config.ca_file == Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for a certificate")
def test_https_with_the_cluster_ca_or_insecure_and_never_an_unverified_server(tmp_path: Path, token_file: Path) -> None:
    cert, key = tmp_path / "apiserver.crt", tmp_path / "apiserver.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kube-apiserver",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = FakeApiServer(body("podlist.json"), body("nodelist.json"), TOKEN, tls=(cert, key))
    try:
        tries: list[float] = []
        unverified = KubernetesFollower(ApiConfig(server.url, token_file), backoff_s=(0.01, 0.02), sleep=tries.append)
        with unverified:
            deadline = time.monotonic() + 10
            while len(tries) < 6:  # refused, and tried again: never an exit
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert unverified.snapshot().parts == set() and server.requests == []  # no token went to it
        for config in (
            ApiConfig(server.url, token_file, ca_file=cert),
            ApiConfig(server.url, token_file, insecure=True),
        ):
            follower = KubernetesFollower(config, backoff_s=(0.01, 0.02))
            with follower:
                deadline = time.monotonic() + 10
                while follower.snapshot().parts != {"jobs", "nodes"}:
                    assert time.monotonic() < deadline, config
                    time.sleep(0.01)
            assert set(follower.snapshot().jobs) == {LLAMA, EVAL, OOM, PREP}
    finally:
        server.close()


def test_import_command_reads_recorded_pod_and_node_lists(tmp_path: Path) -> None:
    from aiops.cli import main
    from detectors.detect_loop import read_events

    out = tmp_path / "events.jsonl"
    lists = [str(DATA / "podlist.json"), str(DATA / "nodelist.json")]
    assert main(["scheduler", "import", "--kubernetes-json", *lists, "--out", str(out), "--at", "1767225600"]) == 0
    events, bad = read_events(out)
    assert not bad and events
    pods = read_pods(body("podlist.json"), 1767225600.0)
    assert {e["job"] for e in events if e["type"] == "job_start"} == set(pods.jobs)
    assert {e["source"] for e in events} == {"kubernetes"}
    assert (
        main(["scheduler", "import", "--kubernetes-json", lists[0], "--slurm-json", lists[1], "--out", str(out)]) == 2
    )


# --- hostile bodies (issue 44, finding 6): tests/data/hostile/kubernetes-json -------------------

HOSTILE = Path(__file__).resolve().parents[2] / "tests" / "data" / "hostile" / "kubernetes-json"


@pytest.mark.parametrize(
    ("file", "place", "rule"),
    [
        ("hostile-node-name.json", "items[1]: ml/train-1: spec.nodeName: node 'n[0-15]' refused", "ids.node.hostlist"),
        ("gpu-quantity-huge.json", "items[0]: ml/train-0: GPU quantity", "[bound gpus]"),
        ("node-list-hostile-name.json", "items[0]: metadata.name: node 'gpu01;reboot' refused", "ids.node"),
        ("deep-list.json", "deep-list.json: JSON nested 10,001 deep", "[bound json_depth]"),
    ],
)
def test_hostile_kubernetes_lists_are_refused_naming_the_file_the_place_and_the_rule(
    file: str, place: str, rule: str
) -> None:
    """Before: a nodeName `n[0-15]` became a node id, 50,000,000 GPUs a pod's count, deep JSON a
    RecursionError."""
    from context.scheduler.kubernetes import read_recorded

    with pytest.raises(KubernetesFormatError) as caught:
        read_recorded([HOSTILE / file], at=1.7e9)
    text = str(caught.value)
    assert str(HOSTILE / file) in text and place in text and rule in text and "\n" not in text


def test_a_deep_or_oversized_watch_line_is_a_format_error_not_a_recursion_error() -> None:
    """Before: json.loads raised RecursionError, which the follower logged as an unexpected crash."""
    from vocab.bounds import MAX_WATCH_LINE_BYTES

    line = (HOSTILE / "deep-watch-line.json").read_bytes()
    with pytest.raises(KubernetesFormatError, match=r"nested 10,001 deep.*\[bound json_depth\]"):
        watch_event(line)
    with pytest.raises(KubernetesFormatError, match=r"\[bound watch_line\]"):
        watch_event(b" " * (MAX_WATCH_LINE_BYTES + 1))


def test_device_indices_past_a_nodes_gpus_name_no_gpu() -> None:
    assert device_indices(["3", "1"], {}) == (1, 3)
    assert device_indices(["999999999999"], {}) is None
