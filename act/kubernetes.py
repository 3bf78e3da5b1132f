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
- the cordon alone (a node whose drain waits for its job's checkpoint): cordoned and tainted as
  above, nothing evicted; the drain after the checkpoint does the rest;
- resume: uncordon (`unschedulable: false`) and our taint removed;
- read back: the node is read again after the change (`GET /api/v1/nodes/{name}`) and the action
  is done only where it shows cordoned and tainted (drain) or neither (resume); the node is reported
  as the one changed, for the breaker (a name is one object in Kubernetes: unlike a Slurm host
  list it cannot stand for several); a drain that fails part way reports the node where the API
  shows it cordoned or tainted, since it is out of service all the same.

The node is read first (`GET /api/v1/nodes/{name}`): nothing is changed unless the API holds that
node under that name. A node's name is checked against Kubernetes' own grammar (an RFC 1123
subdomain) before any request, and percent-encoded whole in a path (a "/" in it would name another object); in a field
selector it is escaped as apimachinery's `fields.EscapeValue` does, then URL-encoded.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from act.audit import Row
from act.executors import Acted, ActionError, RefusedError, acted_on
from context.scheduler.kubernetes import ApiClient, ApiConfig, ApiError
from vocab.ids import kubernetes_name_refusal, shown

TAINT_KEY = "aiops.io/unhealthy"
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


def _taint_value(incident: str) -> str:
    """A label value: at most 63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", incident)[:63].strip("-_.")
    return value or "incident"


def escape_field_value(value: str) -> str:
    """A literal as a fieldSelector value, as apimachinery's fields.EscapeValue writes it: "\\"
    first, then "," and "=" (the selector's separators) prefixed with a backslash. Nothing else
    is escaped: its parser refuses any other escape ("\\!" is an invalid escape sequence), and a
    "!" in a value cannot start an operator, which is found before the value."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def node_path(name: str) -> str:
    """The node's path: its name percent-encoded whole (safe="": a "/" is %2F, not a segment)."""
    return f"/api/v1/nodes/{quote(name, safe='')}"


def checked(row: Row) -> str:
    """The node `row` acts on, if it is one Kubernetes could name; RefusedError otherwise."""
    name = acted_on(row)
    if problem := kubernetes_name_refusal(name):
        raise RefusedError(f"Kubernetes node {shown(name)}: {problem}")
    return name


class KubernetesNodes:
    def __init__(self, config: ApiConfig) -> None:
        self.api = ApiClient(config)

    def _node(self, name: str) -> dict[str, Any]:
        return self.api.get_json(node_path(name), {})

    def _taints(self, name: str, add: dict[str, str] | None) -> None:
        for _ in range(3):  # a 409: someone else changed the node between the read and the write
            node = self._node(name)
            taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != TAINT_KEY]
            if add is not None:
                taints.append(add)
            version = node.get("metadata", {}).get("resourceVersion")
            body = {"metadata": {"resourceVersion": version}, "spec": {"taints": taints or None}}
            status, _ = self.api.send_json("PATCH", node_path(name), body, MERGE)
            if status != 409:
                return
        raise ActionError(f"{name}: the node kept changing under us (409 three times); not tainted")

    def _cordon(self, name: str, unschedulable: bool) -> None:
        self.api.send_json("PATCH", node_path(name), {"spec": {"unschedulable": unschedulable}}, STRATEGIC)

    def _evict(self, name: str) -> tuple[int, list[str]]:
        # the query is URL-encoded by the client (urlencode); the value escaped for the selector
        selector = f"spec.nodeName={escape_field_value(name)}"
        pods = self.api.get_json("/api/v1/pods", {"fieldSelector": selector}).get("items") or []
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
                "POST", f"/api/v1/namespaces/{quote(ns, safe='')}/pods/{quote(pod_name, safe='')}/eviction", body
            )
            if status == 429:
                refused.append(f"{ns}/{pod_name}: {answer.get('message', 'a disruption budget refuses')}")
            else:
                evicted += 1
        return evicted, refused

    def _one_node(self, row: Row, name: str) -> None:
        """Asked before any change: the API holds exactly the node `name` (a name is one object in
        Kubernetes, but a node the topology names may not exist, or exist under another name);
        RefusedError otherwise, with nothing changed."""
        try:
            found = self._node(name).get("metadata", {}).get("name")
        except ApiError as exc:
            if exc.code == 404:
                raise RefusedError(f"{row.action} {name}: the API holds no such node; nothing was changed") from None
            raise ActionError(f"{row.action} {name}: {exc}") from None
        if found != name:
            raise RefusedError(f"{row.action} {name}: the API answered node {shown(str(found))}; nothing was changed")

    def run(self, row: Row) -> Acted:
        name = checked(row)
        if row.action not in ("drain", "resume", "cordon"):
            raise ActionError(f"Kubernetes does not {row.action} here")
        self._one_node(row, name)
        try:
            if row.action == "cordon":  # no new pod lands; the running ones stay until the drain
                self._cordon(name, True)
                self._taints(name, {"key": TAINT_KEY, "value": _taint_value(row.incident_id), "effect": "NoSchedule"})
                detail = f"{name} cordoned, tainted {TAINT_KEY}"
            elif row.action == "drain":
                self._cordon(name, True)
                self._taints(name, {"key": TAINT_KEY, "value": _taint_value(row.incident_id), "effect": "NoSchedule"})
                evicted, refused = self._evict(name)
                if refused:
                    raise ActionError(
                        f"{name} cordoned and tainted, {evicted} pods evicted, {len(refused)} refused: "
                        + "; ".join(refused[:3])
                    )
                detail = f"{name} cordoned, tainted {TAINT_KEY}, {evicted} pods evicted"
            else:
                self._taints(name, None)
                self._cordon(name, False)
                detail = f"{name} uncordoned, {TAINT_KEY} removed"
            took = self._took(row, self._node(name))
        except (ApiError, ActionError) as exc:
            message = f"{row.action} {name}: {exc}" if isinstance(exc, ApiError) else str(exc)
            raise ActionError(message, self._out_of_service(row, name)) from None
        if not took:
            raise ActionError(
                f"{row.action} {name}: read back, the API does not show it {row.action}ed",
                self._out_of_service(row, name),
            )
        return Acted(f"{detail} (read back)", frozenset({name}))

    def _out_of_service(self, row: Row, name: str) -> frozenset[str] | None:
        """After a drain that went wrong part way: the node, where the API shows it cordoned or
        carrying our taint (it is out of service all the same, and the breaker counts it); none
        where it shows neither; unknown (None) where it cannot be read, or for a resume."""
        if row.action not in ("drain", "cordon"):
            return None
        try:
            spec = self._node(name).get("spec", {})
        except ApiError:
            return None
        ours = any(t.get("key") == TAINT_KEY for t in spec.get("taints") or [])
        return frozenset({name}) if spec.get("unschedulable") or ours else frozenset()

    @staticmethod
    def _took(row: Row, node: dict[str, Any]) -> bool | None:
        spec = node.get("spec", {})
        ours = any(t.get("key") == TAINT_KEY for t in spec.get("taints") or [])
        if row.action in ("drain", "cordon"):
            return bool(spec.get("unschedulable")) and ours
        if row.action == "resume":
            return not spec.get("unschedulable") and not ours
        return None

    def confirmed(self, row: Row) -> bool | None:
        try:
            node = self._node(checked(row))
        except (ApiError, RefusedError):
            return None
        return self._took(row, node)


__all__ = ["TAINT_KEY", "KubernetesNodes", "checked", "escape_field_value", "node_path"]
