"""The GPU indices a pod holds, from the kubelet's pod-resources API (one file per node).

The documentation each rule follows: context/scheduler/kubernetes/objects.py."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context.scheduler.kubernetes.objects import GPU_RESOURCE, KubernetesFormatError
from vocab.bounds import (
    MAX_GPU_INDEX,
    MAX_POD_RESOURCES_BYTES,
    read_bytes,
)
from vocab.bounds import loads as bounded_loads

log = logging.getLogger(__name__)


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
