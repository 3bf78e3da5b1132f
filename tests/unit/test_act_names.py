"""Actions name exactly one node the topology knows, and the scheduler is asked what changed.

The executors run real programs: a stand-in `scontrol` (a script written to tmp_path that keeps
its nodes in a JSON file, answers `show node -o` in Slurm 22.05's one-line format, records every
argv, and expands host lists as real scontrol does: `n[0000-0015]` is 16 nodes, `n1 n2,n3` three)
and a site command that records its argv. The topology is a real TopologyGraph, wired as the
daemon wires it (aiops.acting.act_loop): it alone says which node a GPU sits in."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from act.audit import AuditLog, Row
from act.executors import Actor, Executor, SiteCommand, SlurmCli, Webhook
from act.kubernetes import KubernetesNodes
from act.loop import ActLoop
from act.planner import Planner
from act.policy import PolicyError, parse
from aiops.acting import act_loop
from context.scheduler.kubernetes import ApiConfig
from rca.graph import TopologyGraph
from tests.http_endpoint import Endpoint
from tests.unit.test_act_kubernetes import TOKEN, pod, serve
from vocab.ids import kubernetes_name_refusal, node_refusal

HOSTILE = Path(__file__).resolve().parents[1] / "data" / "hostile" / "names" / "node-names.txt"

# host names as RFC 1123 writes them, with "_": one to four labels
LABEL = st.from_regex(r"\A[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,20}[A-Za-z0-9_])?\Z", fullmatch=True)
NODE_NAMES = st.lists(LABEL, min_size=1, max_size=4).map(".".join).filter(lambda n: node_refusal(n) is None)

# What the stand-in scontrol does, as Slurm 22.05.8's does it for these commands (checked on the
# suite's slurmctld). Host lists are expanded (brackets with ranges and commas, names separated by
# commas or spaces): a name the grammar lets through must not be one. `update NodeName=` also reads
# ALL (any case) as every node and a node set as its members, where `show node` answers "not
# found"; a set named like one of the nodes (a scheduler whose show and update disagree) shows
# that node's record alone.
FAKE_SCONTROL = r"""
import json, re, sys
from pathlib import Path

here = Path(__file__).parent
state = json.loads((here / "state.json").read_text())
with open(here / "argv.jsonl", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")

def expand(text):
    out = []
    for part in re.findall(r"[^\s,\[]+(?:\[[^\]]*\][^\s,\[]*)*|\[[^\]]*\]", text):
        m = re.match(r"^(.*?)\[([^\]]*)\](.*)$", part)
        if not m:
            out.append(part)
            continue
        head, body, tail = m.groups()
        for item in body.split(","):
            lo, _, hi = item.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{head}{i:0{len(lo)}d}{tail}")
    return out

def expand_update(text):
    # as 22.05.8's `update NodeName=` reads a name: ALL in any case is every node, a slurm.conf
    # node set its members; `show node` knows neither (it answers "not found")
    names = []
    for name in expand(text):
        if name.lower() == "all":
            names += list(state["nodes"])
        else:
            names += state.get("sets", {}).get(name, [name])
    return names

def record(name):
    node = state["nodes"][name]
    line = f"NodeName={name} Arch=x86_64 CoresPerSocket=32 State={node['state']} Partitions=gpu"
    if node.get("reason"):
        line += f" Reason={node['reason']} [root@2026-12-02T02:14:23]"
    return line

args = sys.argv[1:]
if args[:3] == ["show", "node", "-o"]:
    names = expand(" ".join(args[3:])) if args[3:] else list(state["nodes"])
    if state.get("show_sets"):  # a scheduler (another version, a wrapper) whose show reads sets too
        names = [m for n in names for m in state.get("sets", {}).get(n, [n])]
    found = [n for n in names if n in state["nodes"]]
    if not found:
        sys.exit(f"Node {' '.join(args[3:])} not found")
    print("\n".join(record(n) for n in found))
elif args[:1] == ["update"] and args[1].startswith("NodeName="):
    names = expand_update(args[1].split("=", 1)[1])
    if not names or any(n not in state["nodes"] for n in names):
        sys.exit("slurm_update error: Invalid node name specified")
    fields = dict(a.split("=", 1) for a in args[2:])
    for n in names:
        if state.get("stuck"):  # a controller that answers yes and changes nothing
            continue
        if fields["State"] == "DRAIN":
            state["nodes"][n] = {"state": "IDLE+DRAIN", "reason": fields["Reason"]}
        elif fields["State"] == "RESUME":
            state["nodes"][n] = {"state": "IDLE", "reason": ""}
    (here / "state.json").write_text(json.dumps(state))
else:
    sys.exit(f"invalid command: {args}")
"""

RECORDER = r"""
import json, sys
from pathlib import Path
with open(Path(__file__).parent / "site-argv.jsonl", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
"""


@dataclass
class Programs:
    """The stand-in scontrol and the recording site command, in one folder."""

    folder: Path

    @staticmethod
    def make(folder: Path) -> Programs:
        folder.mkdir(parents=True, exist_ok=True)
        for name, source in (("scontrol", FAKE_SCONTROL), ("site-command", RECORDER)):
            path = folder / name
            # -I -S: isolated, no site packages: a stand-in that starts in milliseconds
            path.write_text(f"#!{sys.executable} -IS\n{source}")
            path.chmod(0o755)
        programs = Programs(folder)
        programs.set_nodes([])
        return programs

    def set_nodes(self, nodes: list[str], sets: dict[str, list[str]] | None = None, stuck: bool = False) -> None:
        state = {"nodes": {n: {"state": "IDLE", "reason": ""} for n in nodes}, "sets": sets or {}, "stuck": stuck}
        (self.folder / "state.json").write_text(json.dumps(state))
        for log in ("argv.jsonl", "site-argv.jsonl"):
            (self.folder / log).unlink(missing_ok=True)

    def state(self, node: str) -> str:
        return str(json.loads((self.folder / "state.json").read_text())["nodes"][node]["state"])

    def drained(self) -> set[str]:
        nodes = json.loads((self.folder / "state.json").read_text())["nodes"]
        return {n for n, s in nodes.items() if "DRAIN" in s["state"]}

    def argvs(self, log: str = "argv.jsonl") -> list[list[str]]:
        path = self.folder / log
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    @property
    def scontrol(self) -> str:
        return str(self.folder / "scontrol")

    @property
    def site_command(self) -> str:
        return str(self.folder / "site-command")


@pytest.fixture
def programs(tmp_path: Path) -> Programs:
    return Programs.make(tmp_path / "bin")


def topology(nodes: list[str], gpus: int = 1) -> TopologyGraph:
    """A rack of `nodes`, each with its GPUs `<node>-gpu<i>` (the ids the interface promises)."""
    entities: list[dict[str, Any]] = [{"id": "rack0", "kind": "rack"}]
    links: list[dict[str, Any]] = []
    for node in nodes:
        entities.append({"id": node, "kind": "node"})
        links.append({"source": "rack0", "target": node, "relation": "contains"})
        for i in range(gpus):
            entities.append({"id": f"{node}-gpu{i}", "kind": "gpu"})
            links.append({"source": node, "target": f"{node}-gpu{i}", "relation": "contains"})
    return TopologyGraph(entities, links)


def policy(action: str, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or f"{action}-hbm",
        "match": {"kinds": ["gpu_hbm_ecc"]},
        "action": {"type": action},
        "execute": True,
    }


def incident(n: int, root: str) -> dict[str, Any]:
    return {
        "incident_id": f"INC-{n}",
        "status": "open",
        "severity": "critical",
        "root_cause": {"entity": root, "kind": "gpu_hbm_ecc", "confidence": 0.9},
        "job_gpus": {},
    }


def loop_over(
    graph: TopologyGraph, executors: dict[str, Executor], policies: list[dict[str, Any]], max_nodes: int = 100
) -> tuple[ActLoop, list[str]]:
    config = parse({"dry_run": False, "breaker": {"max_nodes": max_nodes, "max_fraction": 1.0}, "policies": policies})
    pages: list[str] = []
    return act_loop(config, graph, None, lambda message, subject: pages.append(message), executors), pages


# ---------------------------------------------------------------- finding 2: a host list as a name


def test_a_node_named_as_a_host_list_is_refused_not_drained(programs: Programs) -> None:
    """An HCA node description "n[0000-0015]" imported as a node's name: Slurm would drain 16
    nodes; the breaker (max_nodes 8) counted one. Failed before the fix: all 16 were drained."""
    nodes = [f"n{i:04d}" for i in range(16)]
    programs.set_nodes(nodes)
    hostile = "n[0000-0015]"
    slurm = SlurmCli(scontrol=programs.scontrol)
    audit, pages = AuditLog(), list[str]()
    # the topology as the import built it: the HCA's GPU sits in the node it named
    planner = Planner(
        parse({"dry_run": False, "breaker": {"max_nodes": 8, "max_fraction": 1.0}, "policies": [policy("drain")]}),
        audit,
        node_of={"hca-0x7cfe900300a1b2c3": hostile}.get,
        scope_size=lambda scope: 16,
    )
    Actor(audit, {"drain": slurm}, pages.append).take(planner.consider(incident(1, "hca-0x7cfe900300a1b2c3"), 0.0))
    assert programs.drained() == set()
    assert programs.argvs() == []  # scontrol never heard the name
    (row,) = audit.rows()
    assert (row.decision, row.state) == ("blocked", "held")
    assert "ids.node.hostlist" in row.detail
    assert len(pages) == 1 and "ids.node.hostlist" in pages[0]


def test_the_breaker_counts_the_nodes_the_scheduler_reports_changed(programs: Programs) -> None:
    """A name the grammar accepts that the scheduler still reads as two nodes (here a node set,
    however it came to be): the drain is read back, both count against the breaker and a person
    is paged. Failed before the fix: the breaker counted one node and drained a third."""
    nodes = ["a08-p1-dgx-04-c17", "a08-p1-dgx-04-c18", "a08-p1-dgx-05-c01"]
    programs.set_nodes(nodes, sets={"a08-p1-dgx-04-c17": ["a08-p1-dgx-04-c17", "a08-p1-dgx-04-c18"]})
    slurm = SlurmCli(scontrol=programs.scontrol)
    loop, pages = loop_over(topology(nodes), {"drain": slurm, "resume": slurm}, [policy("drain")], max_nodes=2)
    loop.offer([incident(1, "a08-p1-dgx-04-c17-gpu0")], 0.0)
    assert programs.drained() == {"a08-p1-dgx-04-c17", "a08-p1-dgx-04-c18"}
    assert any("changed 2 nodes, not one" in p and "a08-p1-dgx-04-c18" in p for p in pages), pages
    assert loop.audit.out_of_service(0.0) == {"a08-p1-dgx-04-c17", "a08-p1-dgx-04-c18"}

    loop.offer([incident(2, "a08-p1-dgx-05-c01-gpu0")], 10.0)
    assert "a08-p1-dgx-05-c01" not in programs.drained()  # the breaker holds at two
    assert loop.audit.rows()[-1].decision == "blocked" and "breaker" in pages[-1]

    # resolved: both come back, the unplanned one too (it was drained with the incident's reason)
    loop.offer([{**incident(1, "a08-p1-dgx-04-c17-gpu0"), "status": "resolved"}], 20.0)
    assert programs.drained() == set()


def test_a_drain_the_scheduler_does_not_show_is_failed_and_paged(programs: Programs) -> None:
    """scontrol answered 0 but the node is not drained: read back, not assumed."""
    programs.set_nodes(["gpu-node-009"], stuck=True)
    slurm = SlurmCli(scontrol=programs.scontrol)
    loop, pages = loop_over(topology(["gpu-node-009"]), {"drain": slurm}, [policy("drain")])
    loop.offer([incident(1, "gpu-node-009-gpu0")], 0.0)
    (row,) = loop.audit.rows()
    assert row.state == "failed" and "read back" in row.detail
    assert pages and "read back" in pages[0]


def test_a_drain_is_read_back_from_exactly_one_record(programs: Programs) -> None:
    programs.set_nodes(["gpu-node-009"])
    slurm = SlurmCli(scontrol=programs.scontrol)
    loop, pages = loop_over(topology(["gpu-node-009"]), {"drain": slurm}, [policy("drain")])
    loop.offer([incident(1, "gpu-node-009-gpu0")], 0.0)
    (row,) = loop.audit.rows()
    assert (row.state, row.detail, pages) == ("done", "gpu-node-009 drained (read back)", [])
    assert ["show", "node", "-o", "gpu-node-009"] in programs.argvs()


@pytest.mark.parametrize("hostile", ["ALL", "all", "All", "DEFAULT"])
def test_a_node_named_as_slurms_every_node_is_refused_not_drained(programs: Programs, hostile: str) -> None:
    """An HCA node description "ALL mlx5_0" imported as a node's name: `scontrol update
    NodeName=ALL` drains every node (any case; the suite's slurmctld did). Failed before the fix
    (issue 64): the grammar took it, and 16 of 16 nodes were drained under max_nodes 8."""
    nodes = [f"n{i:04d}" for i in range(16)]
    programs.set_nodes(nodes)
    loop, pages = loop_over(
        topology([*nodes, hostile]), {"drain": SlurmCli(scontrol=programs.scontrol)}, [policy("drain")], 8
    )
    loop.offer([incident(1, f"{hostile}-gpu0")], 0.0)
    assert programs.drained() == set() and programs.argvs() == []  # scontrol never heard it
    (row,) = loop.audit.rows()
    assert (row.decision, row.state) == ("blocked", "held") and "ids.node.reserved" in row.detail
    assert len(pages) == 1 and "ids.node.reserved" in pages[0]


def test_a_name_slurm_expands_is_asked_about_and_never_updated(programs: Programs) -> None:
    """A slurm.conf NodeSet named like a host: the grammar cannot tell, so the scheduler is asked
    first (`show node -o NAME` answers "not found", as 22.05.8 does for a set) and the plan is
    held and paged with nothing updated. Failed before the fix: both nodes of the set were
    drained, counted and paged only afterwards."""
    nodes = ["gpu-node-001", "gpu-node-002", "gpu-node-003"]
    programs.set_nodes(nodes, sets={"gpu-rack-a": ["gpu-node-001", "gpu-node-002"]})
    loop, pages = loop_over(
        topology(["gpu-rack-a"]), {"drain": SlurmCli(scontrol=programs.scontrol)}, [policy("drain")], 8
    )
    loop.offer([incident(1, "gpu-rack-a-gpu0")], 0.0)
    assert programs.drained() == set()
    assert programs.argvs() == [["show", "node", "-o", "gpu-rack-a"]]
    (row,) = loop.audit.rows()
    assert (row.decision, row.state) == ("blocked", "held") and "reads it as no node" in row.detail
    assert len(pages) == 1 and "nothing was updated" in pages[0]
    assert loop.audit.out_of_service(0.0) == set()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NODE_NAMES, members=st.integers(min_value=2, max_value=5), is_a_node=st.booleans())
def test_a_name_the_scheduler_reads_as_several_nodes_never_reaches_an_update(
    programs: Programs, name: str, members: int, is_a_node: bool
) -> None:
    """For any name the grammar accepts that the scheduler expands to several nodes (a set, and
    possibly a node of that name too, shown alone or with the set): asked first, never updated."""
    others = [f"member-{i}" for i in range(members)]
    nodes = [*others, *([name] if is_a_node else [])]
    programs.set_nodes(nodes, sets={name: [*others, *([name] if is_a_node else [])]})
    # a scheduler whose `show` reads the set too (is_a_node False: "not found" as 22.05.8 does)
    state = json.loads((programs.folder / "state.json").read_text())
    state["show_sets"] = True
    (programs.folder / "state.json").write_text(json.dumps(state))
    loop, pages = loop_over(topology([name]), {"drain": SlurmCli(scontrol=programs.scontrol)}, [policy("drain")])
    loop.offer([incident(1, f"{name}-gpu0")], 0.0)
    assert programs.drained() == set()
    assert all(argv[:1] != ["update"] for argv in programs.argvs()), programs.argvs()
    assert programs.argvs()[0] == ["show", "node", "-o", name]
    (row,) = loop.audit.rows()
    assert (row.decision, row.state) == ("blocked", "held") and len(pages) == 1


# ---------------------------------------------------------------- finding 3: {node} from the topology


@pytest.mark.parametrize("node", ["gpu-node-009", "a08-p1-dgx-04-c17", "n0001.rack3.example.org"])
def test_a_site_command_gets_the_node_the_topology_names(programs: Programs, node: str) -> None:
    """`{node}` was the target cut at its first hyphen: `ipmi-power-cycle gpu` for gpu-node-009.
    Failed before the fix: the command was told "gpu" (and "a08")."""
    programs.set_nodes([])
    executors: dict[str, Executor] = {
        "reboot": SiteCommand([programs.site_command, "power-cycle", "{node}"]),
        "reset_gpu": SiteCommand([programs.site_command, "reset", "{node}", "{target}"]),
    }
    loop, pages = loop_over(topology([node], gpus=4), executors, [policy("reboot"), policy("reset_gpu")])
    loop.offer([incident(1, f"{node}-gpu3")], 0.0)
    assert programs.argvs("site-argv.jsonl") == [["power-cycle", node], ["reset", node, f"{node}-gpu3"]]
    assert [r.state for r in loop.audit.rows()] == ["done", "done"] and pages == []


def test_a_part_the_topology_does_not_place_is_not_acted_on(programs: Programs) -> None:
    """A GPU id that looks like it names a node, which the topology does not know: no guess."""
    programs.set_nodes([])
    executors: dict[str, Executor] = {"reset_gpu": SiteCommand([programs.site_command, "{node}"])}
    loop, _ = loop_over(topology(["gpu-node-009"]), executors, [policy("reset_gpu")])
    loop.offer([incident(1, "gpu-node-010-gpu3")], 0.0)
    assert programs.argvs("site-argv.jsonl") == []
    (row,) = loop.audit.rows()
    assert (row.decision, row.state) == ("blocked", "held") and "in no node" in row.detail


def test_a_row_without_its_node_is_refused_by_a_command_that_names_one(programs: Programs) -> None:
    """A row that reaches the executor some other way (an old log, a caller of its own) with no
    node: the command is not run on a guess."""
    command = SiteCommand([programs.site_command, "{node}"])
    row = Row("p", "INC-1", "p", "reset_gpu", "gpu-node-009-gpu3", "r", "execute", "planned", None, "", 0.0)
    audit, pages = AuditLog(), list[str]()
    audit.add(row)
    Actor(audit, {"reset_gpu": command}, pages.append).run(row)
    assert programs.argvs("site-argv.jsonl") == []
    stored = audit.get("p")
    assert stored is not None and (stored.decision, stored.state) == ("blocked", "held") and pages


@pytest.mark.parametrize("part", ["{node[0]}", "{node:.3}", "{target!r}", "{target.split}", "{host}", "{node"])
def test_a_site_command_fills_its_fields_in_whole_or_is_refused_on_load(part: str) -> None:
    """A template that would cut an id apart ("{node[0]}", "{node:.3}") or call into it is a
    policy file error, not a command run on a piece of a name."""
    with pytest.raises(ValueError, match="site command part"):
        SiteCommand(["ipmi-power-cycle", part])
    with pytest.raises(PolicyError, match=r"executors\.commands"):
        parse({"executors": {"commands": {"reboot": ["ipmi-power-cycle", part]}}})


# ---------------------------------------------------------------- the grammar, for any name


# each example runs nine processes (a drain and a resume read back, a site command): a dozen
# examples of varied shape (dots, "_", "-", digits first) keep the unit run within seconds
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NODE_NAMES)
def test_every_executor_names_that_one_node_and_nothing_else(programs: Programs, name: str) -> None:
    programs.set_nodes([name, "bystander"])
    slurm = SlurmCli(scontrol=programs.scontrol)
    executors: dict[str, Executor] = {
        "drain": slurm,
        "resume": slurm,
        "reboot": SiteCommand([programs.site_command, "{node}"]),
    }
    loop, pages = loop_over(topology([name, "bystander"]), executors, [policy("drain"), policy("reboot")])
    loop.offer([incident(1, f"{name}-gpu0")], 0.0)
    loop.offer([{**incident(1, f"{name}-gpu0"), "status": "resolved"}], 10.0)
    assert pages == [] and [r.state for r in loop.audit.rows()] == ["done", "done", "done", "done"]
    assert programs.state("bystander") == "IDLE"
    reason = loop.audit.rows()[0].reason
    allowed = (
        ["show", "node", "-o"],  # the census: every node, none named
        ["show", "node", "-o", name],
        ["update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}"],
        ["update", f"NodeName={name}", "State=RESUME"],
    )
    assert all(argv in allowed for argv in programs.argvs()), programs.argvs()
    # the scheduler was asked what the name means before each update
    argvs = programs.argvs()
    updates = [i for i, argv in enumerate(argvs) if argv[:1] == ["update"]]
    assert len(updates) >= 2 and all(argvs[i - 2] == ["show", "node", "-o", name] for i in updates), argvs
    assert programs.argvs("site-argv.jsonl") == [[name]]


# a Kubernetes node's name: an RFC 1123 subdomain (lower case, digits, "-" inside a label, "."
# between labels), which the id grammar also accepts
K8S_LABEL = st.from_regex(r"\A[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?\Z", fullmatch=True)
K8S_NAMES = (
    st.lists(K8S_LABEL, min_size=1, max_size=4)
    .map(".".join)
    .filter(lambda n: node_refusal(n) is None and kubernetes_name_refusal(n) is None)
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=K8S_NAMES)
def test_kubernetes_drains_and_resumes_that_one_node_and_nothing_else(tmp_path: Path, name: str) -> None:
    """The API stand-in of test_act_kubernetes (each request checked as the API documents it)
    holds the node under `name`, and a pod on it and one on a bystander. Every request names that node
    (its path whole, its field selector as the API parses it) or one of its own pods."""
    token = tmp_path / "token"
    token.write_text(TOKEN)
    for api in serve([pod("trainer-0", node=name), pod("other-0", node="bystander")], name=name):
        nodes = KubernetesNodes(ApiConfig(api.url, token))
        executors: dict[str, Executor] = {"drain": nodes, "resume": nodes}
        loop, pages = loop_over(topology([name, "bystander"]), executors, [policy("drain")])
        loop.offer([incident(1, f"{name}-gpu0")], 0.0)
        assert set(api.pods) == {"other-0"}  # its pod evicted, the bystander's left
        loop.offer([{**incident(1, f"{name}-gpu0"), "status": "resolved"}], 10.0)
        assert pages == [] and [r.state for r in loop.audit.rows()] == ["done", "done"]
        allowed = {
            ("GET", f"/api/v1/nodes/{name}"),
            ("PATCH", f"/api/v1/nodes/{name}"),
            ("GET", "/api/v1/pods"),
            ("POST", "/api/v1/namespaces/train/pods/trainer-0/eviction"),
        }
        assert {(method, path) for method, path, _ in api.seen} <= allowed, api.seen
        assert api.selectors and all(terms == [("spec.nodeName", "=", name)] for terms in api.selectors)


@settings(max_examples=25, deadline=None)
@given(name=NODE_NAMES)
def test_a_webhook_is_told_that_one_node_and_its_part(name: str) -> None:
    """A webhook per action (a ticketing system, a fabric manager's hook) gets the plan as JSON:
    its target is the incident's part, placed in that node by the topology, nothing else."""
    hook = Endpoint()
    try:
        executors: dict[str, Executor] = {"ticket": Webhook(hook.url)}
        loop, pages = loop_over(topology([name, "bystander"]), executors, [policy("ticket")])
        loop.offer([incident(1, f"{name}-gpu0")], 0.0)
        assert pages == [] and [r.state for r in loop.audit.rows()] == ["done"]
        (body,) = hook.bodies
        assert body["target"] == f"{name}-gpu0" and body["incident_id"] == "INC-1"
    finally:
        hook.close()


def refused_names() -> Iterator[str]:
    yield from HOSTILE.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def hostile() -> list[str]:
    names = list(refused_names())
    assert len(names) >= 10
    return names


def test_the_corpus_of_hostile_node_names_is_refused_by_the_grammar(hostile: list[str]) -> None:
    assert [n for n in hostile if node_refusal(n) is None] == []


def planned_and_run_on(node: str, runs: list[tuple[str, str]]) -> tuple[list[Row], list[str]]:
    """A drain, a reboot and a ticket planned for a part the topology (a lookup table standing in
    for one: the hostile name need not be a valid entity id) places in `node`, run by executors
    that record any call."""

    class Recorder:
        def run(self, row: Row) -> str:
            runs.append((row.action, row.target))
            return "ran"

        def confirmed(self, row: Row) -> bool | None:
            return None

    recorder = Recorder()
    audit, pages = AuditLog(), list[str]()
    config = parse(
        {
            "dry_run": False,
            "breaker": {"max_nodes": 100, "max_fraction": 1.0},
            "policies": [policy("drain"), policy("reboot"), policy("reset_gpu")],
        }
    )
    lookup: Callable[[str], str | None] = {"gpu-0x7cfe900300a1b2c3": node}.get
    planner = Planner(config, audit, node_of=lookup, scope_size=lambda scope: 64)
    actor = Actor(audit, {"drain": recorder, "reboot": recorder, "reset_gpu": recorder}, pages.append)
    actor.take(planner.consider(incident(1, "gpu-0x7cfe900300a1b2c3"), 0.0))
    return audit.rows(), pages


def test_no_hostile_name_reaches_an_executor(hostile: list[str]) -> None:
    for name in hostile:
        runs: list[tuple[str, str]] = []
        rows, pages = planned_and_run_on(name, runs)
        assert runs == [], name
        assert [(r.decision, r.state) for r in rows] == [("blocked", "held")] * 3, name
        assert all("[rule ids." in r.detail for r in rows) and len(pages) == 3, name


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=300).filter(lambda n: node_refusal(n) is not None))
def test_no_name_the_grammar_refuses_reaches_an_executor(name: str) -> None:
    runs: list[tuple[str, str]] = []
    rows, _ = planned_and_run_on(name, runs)
    assert runs == [] and all(r.decision == "blocked" for r in rows)


def test_a_row_with_a_refused_node_is_not_run_whatever_wrote_it() -> None:
    """The Actor checks too: a row from an old log, an approval, a restart, not only the planner's."""
    runs: list[tuple[str, str]] = []

    class Recorder:
        def run(self, row: Row) -> str:
            runs.append((row.action, row.target))
            return "ran"

        def confirmed(self, row: Row) -> bool | None:
            return None

    audit, pages = AuditLog(), list[str]()
    row = Row("p", "INC-1", "p", "drain", "n1 n2,n3", "r", "execute", "planned", None, "", 0.0)
    audit.add(row)
    Actor(audit, {"drain": Recorder()}, pages.append).settle()
    stored = audit.get("p")
    assert runs == [] and stored is not None and (stored.decision, stored.state) == ("blocked", "held")
    assert "ids.node.hostlist" in stored.detail and pages


def test_an_audit_log_from_before_rows_named_their_node_opens(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "audit.sqlite"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE actions (plan_id TEXT PRIMARY KEY, incident_id TEXT NOT NULL, policy TEXT NOT NULL,"
        " action TEXT NOT NULL, target TEXT NOT NULL, reason TEXT NOT NULL, decision TEXT NOT NULL,"
        " state TEXT NOT NULL, approved_by TEXT, detail TEXT NOT NULL DEFAULT '', planned_at REAL NOT NULL,"
        " updated_at REAL NOT NULL, event_time REAL NOT NULL, acted_at REAL);"
        " INSERT INTO actions VALUES ('p', 'INC-1', 'p', 'drain', 'n0001', 'r', 'execute', 'done', NULL, '',"
        " 0, 0, 0, 0);"
    )
    old.commit()
    old.close()
    (row,) = AuditLog(path).rows()
    assert (row.target, row.node) == ("n0001", None)
