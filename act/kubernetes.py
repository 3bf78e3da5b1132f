"""Draining and resuming a Kubernetes node the way the API documents it, as `kubectl drain`
does it, and no more:

- cordon: `PATCH /api/v1/nodes/{name}` with a strategic merge patch (`Content-Type:
  application/strategic-merge-patch+json`) of `{"spec": {"unschedulable": true}}`;
- taint: the node's taints are a list with no merge key, so the whole list is written back with
  ours added (a JSON merge patch carrying the node's `resourceVersion`: a concurrent change gives
  409 and the next attempt reads again). Ours is `aiops.io/unhealthy=<incident>:NoSchedule`: new
  pods stay off; the running ones are moved by eviction, not by a NoExecute taint, so disruption
  budgets are honoured;
- evict: for each pod on the node (`GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`), not a
  DaemonSet's and not a mirror pod, `POST /api/v1/namespaces/{ns}/pods/{pod}/eviction` with a
  `policy/v1` Eviction; a 429 is a PodDisruptionBudget saying not now: the drain is reported
  partial and the action fails, to be retried (or seen by a person), never forced;
- resume: uncordon (`unschedulable: false`) and our taint removed.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from act.audit import Row
from act.executors import ActionError
from context.scheduler.kubernetes import ApiClient, ApiConfig, ApiError

TAINT_KEY = "aiops.io/unhealthy"
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


def _taint_value(incident: str) -> str:
    """A label value: at most 63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", incident)[:63].strip("-_.")
    return value or "incident"


class KubernetesNodes:
    def __init__(self, config: ApiConfig) -> None:
        self.api = ApiClient(config)

    def _node(self, name: str) -> dict[str, Any]:
        return self.api.get_json(f"/api/v1/nodes/{quote(name)}", {})

    def _taints(self, name: str, add: dict[str, str] | None) -> None:
        for _ in range(3):  # a 409: someone else changed the node between the read and the write
            node = self._node(name)
            taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != TAINT_KEY]
            if add is not None:
                taints.append(add)
            version = node.get("metadata", {}).get("resourceVersion")
            body = {"metadata": {"resourceVersion": version}, "spec": {"taints": taints or None}}
            status, _ = self.api.send_json("PATCH", f"/api/v1/nodes/{quote(name)}", body, MERGE)
            if status != 409:
                return
        raise ActionError(f"{name}: the node kept changing under us (409 three times); not tainted")

    def _cordon(self, name: str, unschedulable: bool) -> None:
        self.api.send_json(
            "PATCH", f"/api/v1/nodes/{quote(name)}", {"spec": {"unschedulable": unschedulable}}, STRATEGIC
        )

    def _evict(self, name: str) -> tuple[int, list[str]]:
        pods = self.api.get_json("/api/v1/pods", {"fieldSelector": f"spec.nodeName={name}"}).get("items") or []
        evicted, refused = 0, []
        for pod in pods:
            meta = pod.get("metadata", {})
            owners = meta.get("ownerReferences") or []
            if any(o.get("kind") == "DaemonSet" for o in owners) or "kubernetes.io/config.mirror" in (
                meta.get("annotations") or {}
            ):
                continue  # kubectl drain leaves these too: they belong to the node
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            ns, pod_name = meta.get("namespace", "default"), meta.get("name", "")
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod_name, "namespace": ns},
            }
            status, answer = self.api.send_json(
                "POST", f"/api/v1/namespaces/{quote(ns)}/pods/{quote(pod_name)}/eviction", body
            )
            if status == 429:
                refused.append(f"{ns}/{pod_name}: {answer.get('message', 'a disruption budget refuses')}")
            else:
                evicted += 1
        return evicted, refused

    def run(self, row: Row) -> str:
        try:
            if row.action == "drain":
                self._cordon(row.target, True)
                self._taints(
                    row.target, {"key": TAINT_KEY, "value": _taint_value(row.incident_id), "effect": "NoSchedule"}
                )
                evicted, refused = self._evict(row.target)
                if refused:
                    raise ActionError(
                        f"{row.target} cordoned and tainted, {evicted} pods evicted, {len(refused)} refused: "
                        + "; ".join(refused[:3])
                    )
                return f"{row.target} cordoned, tainted {TAINT_KEY}, {evicted} pods evicted"
            if row.action == "resume":
                self._taints(row.target, None)
                self._cordon(row.target, False)
                return f"{row.target} uncordoned, {TAINT_KEY} removed"
        except ApiError as exc:
            raise ActionError(f"{row.action} {row.target}: {exc}") from None
        raise ActionError(f"Kubernetes does not {row.action} here")

    def confirmed(self, row: Row) -> bool | None:
        try:
            node = self._node(row.target)
        except ApiError:
            return None
        spec = node.get("spec", {})
        ours = any(t.get("key") == TAINT_KEY for t in spec.get("taints") or [])
        if row.action == "drain":
            return bool(spec.get("unschedulable")) and ours
        if row.action == "resume":
            return not spec.get("unschedulable") and not ours
        return None


__all__ = ["TAINT_KEY", "KubernetesNodes"]
