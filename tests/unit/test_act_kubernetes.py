"""Draining and resuming a Kubernetes node through the API as it documents the requests, against
a local server that checks each one (no API server runs here): cordon by strategic merge patch,
taint by a merge patch of the whole list with the node's resourceVersion (a stale one is 409),
evictions as policy/v1 Eviction objects (a disruption budget's 429 is honoured, never forced),
DaemonSet and mirror pods left alone, the bearer token on every request. The node is a real
`kubectl get nodes -o json` item (a GPU node with its own taints)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from act.audit import Row
from act.executors import ActionError, RefusedError
from act.kubernetes import TAINT_KEY, KubernetesNodes, escape_field_value, node_path
from context.scheduler.kubernetes import ApiConfig

REAL = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "real-formats" / "kubernetes"
NODE = json.loads((REAL / "edgexr_kubectl_nodes" / "gpu_node_nori_kubectl_get_nodes.json").read_text())["items"][0]
NAME = NODE["metadata"]["name"]
TOKEN = "t0ken"


def pod(name: str, ns: str = "train", owner: str = "Job", node: str = NAME, **extra: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns, "ownerReferences": [{"kind": owner, "name": "x"}], **extra}
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def parse_field_selector(text: str) -> list[tuple[str, str, str]]:
    """A fieldSelector as apimachinery's fields.ParseSelector reads it: terms split at unescaped
    commas; in each, the first operator ("!=", "==", "=") found from the left ends the field;
    the value unescaped ("\\\\", "\\,", "\\=" only; any other escape, or a bare "," or "=", refused)."""
    terms, term, escaped = [], "", False
    for c in text:
        if escaped:
            term, escaped = term + c, False
        elif c == "\\":
            term, escaped = term + c, True
        elif c == ",":
            terms.append(term)
            term = ""
        else:
            term += c
    terms.append(term)
    out = []
    for term in terms:
        at = next((i for i in range(len(term)) if term[i:].startswith(("!=", "==", "="))), None)
        if at is None:
            raise ValueError(f"invalid selector: {term!r}")
        op = next(o for o in ("!=", "==", "=") if term[at:].startswith(o))
        field, raw, value, slash = term[:at], term[at + len(op) :], "", False
        for c in raw:
            if slash:
                if c not in "\\,=":
                    raise ValueError(f"invalid escape sequence: \\{c}")
                value, slash = value + c, False
            elif c == "\\":
                slash = True
            elif c in ",=":
                raise ValueError(f"unescaped {c!r} in value")
            else:
                value += c
        if slash:
            raise ValueError("invalid escape sequence: \\")
        out.append((field, op, value))
    return out


class Api:
    """Nodes and pods; each request checked against the API's documented shape or refused."""

    def __init__(self, pods: list[dict[str, Any]], budgeted: set[str], name: str = NAME) -> None:
        self.name = name  # the one node it holds: the recorded GPU node, under this name
        self.node = copy.deepcopy(NODE)
        self.node["metadata"]["name"] = name
        self.rv = int(self.node["metadata"]["resourceVersion"])
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.budgeted = budgeted  # pods a PodDisruptionBudget protects: eviction answered 429
        self.seen: list[tuple[str, str, str]] = []  # method, path, content type
        self.stale_once = False
        self.stuck = False  # an API server that answers every PATCH 200 and keeps the node as it was
        self.selectors: list[list[tuple[str, str, str]]] = []  # each fieldSelector, as the API parses it
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                body: dict[str, Any] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                return body

            def _handle(self, method: str) -> None:
                url = urlsplit(self.path)
                outer.seen.append((method, url.path, self.headers.get("Content-Type", "")))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._send(401, {"kind": "Status", "code": 401})
                code, doc = outer.answer(method, unquote(url.path), parse_qs(url.query), self)
                self._send(code, doc)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

            def do_POST(self) -> None:
                self._handle("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, method: str, path: str, query: dict[str, list[str]], req: Any) -> tuple[int, dict[str, Any]]:
        bad = (400, {"kind": "Status", "code": 400, "reason": "BadRequest"})
        if path == f"/api/v1/nodes/{self.name}":
            if method == "GET":
                return 200, self.node
            body = req._body()
            kind = req.headers.get("Content-Type")
            if method == "PATCH" and kind == "application/strategic-merge-patch+json" and set(body) == {"spec"}:
                assert set(body["spec"]) == {"unschedulable"}  # a cordon touches nothing else
                if self.stuck:
                    return 200, self.node
                self.node["spec"]["unschedulable"] = body["spec"]["unschedulable"] or None
                return self._changed()
            if method == "PATCH" and kind == "application/merge-patch+json":
                if self.stale_once or body["metadata"]["resourceVersion"] != self.node["metadata"]["resourceVersion"]:
                    self.stale_once = False
                    self._changed()
                    return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
                if self.stuck:
                    return 200, self.node
                self.node["spec"]["taints"] = body["spec"]["taints"]
                return self._changed()
            return bad
        if path == "/api/v1/pods" and method == "GET":
            try:
                terms = parse_field_selector(query["fieldSelector"][0])
            except ValueError as exc:
                return 400, {"kind": "Status", "code": 400, "reason": "BadRequest", "message": str(exc)}
            self.selectors.append(terms)
            if [(field, op) for field, op, _ in terms] != [("spec.nodeName", "=")]:
                return bad
            on = terms[0][2]
            return 200, {"kind": "PodList", "items": [p for p in self.pods.values() if p["spec"]["nodeName"] == on]}
        parts = path.split("/")
        if (
            method == "POST"
            and len(parts) == 8
            and (parts[3], parts[5], parts[7]) == ("namespaces", "pods", "eviction")
        ):
            ns, name = parts[4], parts[6]
            body = req._body()
            if (body.get("apiVersion"), body.get("kind"), body.get("metadata")) != (
                "policy/v1",
                "Eviction",
                {"name": name, "namespace": ns},
            ):
                return bad
            if name in self.budgeted:
                return 429, {
                    "kind": "Status",
                    "code": 429,
                    "reason": "TooManyRequests",
                    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                }
            self.pods.pop(name)
            return 201, {"kind": "Status", "status": "Success"}
        return 404, {"kind": "Status", "code": 404}

    def _changed(self) -> tuple[int, dict[str, Any]]:
        self.rv += 1
        self.node["metadata"]["resourceVersion"] = str(self.rv)
        return 200, self.node

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    return path


def serve(pods: list[dict[str, Any]], budgeted: frozenset[str] = frozenset(), name: str = NAME) -> Iterator[Api]:
    api = Api(pods, set(budgeted), name)
    yield api
    api.close()


def row(action: str, name: str = NAME) -> Row:
    return Row(
        "p",
        "inc-20260101T011430Z-7fd42d346f",
        "policy",
        action,
        name,
        "aiops inc: hbm",
        "execute",
        "planned",
        None,
        "",
        0.0,
    )


def test_drain_cordons_taints_and_evicts_then_resume_undoes_it(token: Path) -> None:
    for api in serve([pod("trainer-0"), pod("dcgm-exporter-x", "gpu-operator", owner="DaemonSet")]):
        nodes = KubernetesNodes(ApiConfig(api.url, token))
        theirs = list(api.node["spec"].get("taints") or [])
        api.stale_once = True  # someone else changes the node once between our read and write
        acted = nodes.run(row("drain"))
        assert "1 pods evicted" in acted.detail and "read back" in acted.detail
        assert acted.nodes == {NAME}
        assert api.node["spec"]["unschedulable"] is True
        taints = api.node["spec"]["taints"]
        assert taints[:-1] == theirs and taints[-1] == {
            "key": TAINT_KEY,
            "value": "inc-20260101T011430Z-7fd42d346f",
            "effect": "NoSchedule",
        }
        assert set(api.pods) == {"dcgm-exporter-x"}  # the DaemonSet's pod stays with its node
        assert nodes.confirmed(row("drain")) is True
        nodes.run(row("resume"))
        assert not api.node["spec"].get("unschedulable") and (api.node["spec"]["taints"] or []) == theirs
        assert nodes.confirmed(row("resume")) is True
        assert all(kind != "" or method == "GET" for method, _, kind in api.seen)


def test_a_cordon_keeps_new_pods_off_and_evicts_nothing_until_the_drain(token: Path) -> None:
    for api in serve([pod("trainer-0")]):
        nodes = KubernetesNodes(ApiConfig(api.url, token))
        acted = nodes.run(row("cordon"))
        assert acted.nodes == {NAME} and "cordoned" in acted.detail and "evicted" not in acted.detail
        assert api.node["spec"]["unschedulable"] is True and api.node["spec"]["taints"][-1]["key"] == TAINT_KEY
        assert set(api.pods) == {"trainer-0"}  # the job runs on to its checkpoint
        assert nodes.confirmed(row("cordon")) is True
        nodes.run(row("drain"))  # after the checkpoint
        assert not api.pods and nodes.confirmed(row("drain")) is True


def test_a_disruption_budget_is_honoured_not_forced(token: Path) -> None:
    for api in serve([pod("trainer-0"), pod("db-0", "infra")], budgeted=frozenset({"db-0"})):
        with pytest.raises(ActionError, match="1 refused: infra/db-0: Cannot evict") as failed:
            KubernetesNodes(ApiConfig(api.url, token)).run(row("drain"))
        assert "db-0" in api.pods and "trainer-0" not in api.pods
        # cordoned and tainted all the same: out of service, so the breaker is told it changed
        assert failed.value.nodes == frozenset({NAME})


def test_a_change_the_api_does_not_show_is_failed_not_done(token: Path) -> None:
    """An API server (or an admission webhook, or a controller undoing us) that answers 200 and
    keeps the node schedulable: the read-back fails the drain, and the node is reported unchanged.
    Failed before the read-back: the drain was "done"."""
    for api in serve([pod("trainer-0")]):
        api.stuck = True
        with pytest.raises(ActionError, match="read back, the API does not show it drained") as failed:
            KubernetesNodes(ApiConfig(api.url, token)).run(row("drain"))
        assert failed.value.nodes == frozenset()
        assert not api.node["spec"].get("unschedulable")


def test_without_the_token_nothing_changes(tmp_path: Path) -> None:
    wrong = tmp_path / "token"
    wrong.write_text("nope")
    for api in serve([pod("trainer-0")]):
        with pytest.raises(ActionError, match=r"401|Unauthorized") as failed:
            KubernetesNodes(ApiConfig(api.url, wrong)).run(row("drain"))
        assert failed.value.nodes is None  # nothing could be read: nothing is claimed
        assert not api.node["spec"].get("unschedulable") and "trainer-0" in api.pods


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("a/b", "ids.node.charset"),  # PATCH /api/v1/nodes/a/b: another object's path
        ("n0001/../../namespaces/kube-system", "ids.node.charset"),
        ("n1,n2", "ids.node.hostlist"),
        ("GPU-Node-009", "ids.kubernetes.name"),  # a Slurm host name, not a Kubernetes node's
        ("gpu_node_009", "ids.kubernetes.name"),
        ("-rf", "ids.first"),
    ],
)
def test_a_name_outside_kubernetes_grammar_is_refused_before_any_request(token: Path, name: str, rule: str) -> None:
    """Failed before the fix: "a/b" went out as PATCH /api/v1/nodes/a/b (quote() keeps "/")."""
    for api in serve([pod("trainer-0")]):
        with pytest.raises(ActionError, match=rf"\[rule {rule}\]"):
            KubernetesNodes(ApiConfig(api.url, token)).run(row("drain", name))
        assert api.seen == []


def test_a_path_holds_the_whole_name_and_a_selector_its_value() -> None:
    assert node_path("a/b") == "/api/v1/nodes/a%2Fb"
    assert node_path("n0001.rack3") == "/api/v1/nodes/n0001.rack3"
    # apimachinery's fields.EscapeValue: backslash first, then "," and "="; nothing else
    assert escape_field_value("a,b=c\\d!e") == "a\\,b\\=c\\\\d!e"
    for value in ("x,metadata.name!=y", "=x", "a\\,b", "n!=1", "x==y", ",", "\\"):
        assert parse_field_selector(f"spec.nodeName={escape_field_value(value)}") == [("spec.nodeName", "=", value)]


def test_the_field_selector_reaches_the_api_as_its_parser_reads_it(token: Path) -> None:
    """Escaped, then URL-encoded by the client: a value with the selector's own syntax, "&", "+"
    and "%" arrives as one term with that literal value (the stand-in parses it as the API does)."""
    for api in serve([pod("trainer-0")]):
        nodes = KubernetesNodes(ApiConfig(api.url, token))
        hostile = "x,metadata.namespace!=kube-system&limit=1+%2F\\"
        assert nodes._evict(hostile) == (0, [])  # a name no node has: nothing listed, nothing evicted
        assert api.selectors == [[("spec.nodeName", "=", hostile)]]
        assert "trainer-0" in api.pods


def test_a_node_the_api_does_not_hold_is_refused_before_any_change(token: Path) -> None:
    """The topology names a node the API server holds no object for: it is asked first (a GET),
    and nothing is patched or evicted (issue 64: ask the scheduler what a name means first)."""
    for api in serve([pod("trainer-0")]):
        nodes = KubernetesNodes(ApiConfig(api.url, token))
        with pytest.raises(RefusedError, match="holds no such node"):
            nodes.run(row("drain", "gpu-node-ghost"))
        assert [(method, path) for method, path, _ in api.seen] == [("GET", "/api/v1/nodes/gpu-node-ghost")]
