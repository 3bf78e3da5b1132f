"""What an on-call engineer expects on an incident page and did not get (issue 66, point 8):
what changed around the root before it broke, the commands to look at it with, how the root
compares with its peers when a peer comparison found it, and what the predictor said before it
opened. Pure functions over the record, the topology, the scheduler's events, earlier incidents
and series the caller has read; `oncall_for` bundles them as `OnCall` for `_oncall.html`.

Each part is None when what it needs was not given, and `OnCall.missing` says why in words, so
the page says "not known here" rather than showing an empty table as if nothing had happened.

Entity ids, job ids, reasons and incident ids come from a site's inventory and scheduler: they
are escaped on the page (Jinja2 autoescape) and every value put into a command goes through
`shlex.quote`. Quoting keeps the shell from reading an id; it cannot keep a tool from reading an
id that starts with "-" as an option, nor Slurm from reading `n[1-4]` or `ALL` as many nodes, so
an id the grammar (vocab/ids.py) refuses that way gets no command at all, and a node the grammar
refuses gets no drain.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from rca.blast import SWITCHES, nodes_under
from rca.graph import TopologyGraph
from show.blast import onset_of
from show.page import grafana_links
from vocab import registry
from vocab.catalog import MEASUREMENT_BY_NAME
from vocab.ids import entity_refusal, gpu_index, node_refusal
from vocab.incident_record import IncidentRecord
from vocab.schedule import Job, Schedule, event_problem, maintenance_window
from vocab.thresholds import MIN_USEFUL_LEAD_S, WINDOW_S, PeerThresholds

Series = Mapping[tuple[str, str], Sequence[tuple[float, float]]]
Record = IncidentRecord | Mapping[str, Any]


def _wire(record: Record) -> Mapping[str, Any]:
    """A record as the engine writes it (vocab/incident_record.py `to_dict`, or that dict)."""
    return record.to_dict() if isinstance(record, IncidentRecord) else record


# ------------------------------------------------------------------ what changed

# A day before onset: the last change made in working hours (a driver or firmware update, a node
# back from repair, a job placed on it) is still in view when the page comes at night, and the
# list stays about this incident rather than the week's churn. An operational choice.
LOOKBACK_S = 24 * 3600.0
# rows a reader scans before the page's next section; the rest are counted, not dropped silently
MAX_EVENTS = 20
MAX_EARLIER = 10
_REASON_CHARS = 120  # a scheduler's free-text reason, cut: it is shown, never parsed

SAME_ROOT, SAME_NODE, SAME_RACK = "same root", "same node", "same rack"
_NETWORK_KINDS = frozenset({"nic", "optic", "link", "port", "leaf", "spine"})


@dataclass(frozen=True)
class Change:
    """One row of "what changed": a scheduler event or an earlier incident near the root."""

    when: float
    what: str  # in words
    entity: str  # the node (an event) or the root (an earlier incident) it touched
    relation: str  # SAME_ROOT, SAME_NODE, "same leaf" / "same spine", SAME_RACK
    during: bool  # at or after the onset (while it was open), else before it
    incident_id: str | None = None  # an earlier incident's, for the page to link


@dataclass(frozen=True)
class WhatChanged:
    onset: float
    since: float  # onset - LOOKBACK_S
    until: float | None  # resolved; None: still open, events up to now count
    events: tuple[Change, ...] | None  # None: no scheduler events were given
    incidents: tuple[Change, ...] | None  # None: no earlier incidents were given
    events_left_out: int = 0
    incidents_left_out: int = 0
    lookback_s: float = LOOKBACK_S


@dataclass(frozen=True)
class _Places:
    """Where an entity sits: its node, the switches its traffic goes through first, its racks."""

    node: str | None
    switches: frozenset[str]
    racks: frozenset[str]


def _places(g: TopologyGraph, entity: str) -> _Places:
    kind = g.kind(entity)
    node = g.node_of(entity)
    if node is None and kind == "link":  # a cable: the host end's node
        node = next((n for p in g.peers(entity) if (n := g.node_of(p)) is not None), None)
    if kind in SWITCHES:
        switches = frozenset({entity})
    elif kind in ("nic", "optic", "link", "port"):
        switches = frozenset(s for s in [g.switch_of(entity)] if s is not None)
    elif node is not None:  # a node's parts: the leaves its NICs are cabled to
        switches = frozenset(s for nic in g.children(node, "nic") if (s := g.switch_of(nic)) is not None)
    else:
        switches = frozenset()
    if kind == "rack":
        racks = frozenset({entity})
    elif kind == "cooling":
        racks = frozenset(g.dependents(entity, kinds=("rack",)))
    else:
        rack = g.ancestor(node or entity, "rack") if (node or entity) in g else None
        racks = frozenset({rack}) if rack else frozenset()
    return _Places(node, switches, racks)


def _switch_relation(g: TopologyGraph, switches: Iterable[str]) -> str:
    kinds = {g.kind(s) for s in switches}
    return "same leaf" if "leaf" in kinds or not kinds else "same spine"


class _Near:
    """Which nodes are near the root, and how: the closest relation first (the same node; then for
    a network root its switch before its rack, for any other its rack before its switch)."""

    def __init__(self, g: TopologyGraph, root: str) -> None:
        self.g, self.root = g, root
        self.places = _places(g, root)
        self.switch_relation = _switch_relation(g, self.places.switches)
        by_switch: set[str] = set()
        for s in self.places.switches:
            by_switch |= nodes_under(g, s)
        by_rack: set[str] = set()
        for r in self.places.racks:
            by_rack |= nodes_under(g, r)
        if g.kind(root) not in (*SWITCHES, "rack", "cooling"):
            by_rack |= nodes_under(g, root)  # a PSU's node, a rack's nodes through its cooling
        order = [(SAME_RACK, by_rack), (self.switch_relation, by_switch)]
        if g.kind(root) in _NETWORK_KINDS:
            order.reverse()
        self.relation: dict[str, str] = {}
        if self.places.node is not None:
            self.relation[self.places.node] = SAME_NODE
        for name, nodes in order:
            for n in nodes:
                self.relation.setdefault(n, name)
        self.order = [name for name, _ in order]
        self._rank = {SAME_ROOT: 0, SAME_NODE: 1, self.order[0]: 2, self.order[1]: 3}

    def closest(self, nodes: Iterable[str]) -> tuple[str, str, int] | None:
        """(node, relation, how many of `nodes` are near) for the closest of them, or None."""
        near = [(self._rank[r], n, r) for n in nodes if (r := self.relation.get(n)) is not None]
        if not near:
            return None
        _, node, relation = min(near)
        return node, relation, len(near)

    def of_entity(self, entity: str) -> str | None:
        """How another incident's root relates to this root, or None."""
        if entity == self.root:
            return SAME_ROOT
        if entity not in self.g:
            return None
        other = _places(self.g, entity)
        if other.node is not None and other.node == self.places.node:
            return SAME_NODE
        shares = {
            SAME_RACK: bool(other.racks & self.places.racks),
            self.switch_relation: bool(other.switches & self.places.switches),
        }
        return next((name for name in self.order if shares[name]), None)


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _until(record: Mapping[str, Any]) -> float | None:
    return _number(record.get("resolved"))


def _cut(text: Any) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= _REASON_CHARS else s[: _REASON_CHARS - 1] + "…"


def _hours(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _event_rows(
    events: Iterable[Mapping[str, Any]],
    near: _Near,
    since: float,
    until: float,
    onset: float,
    schedule: Schedule | None,
) -> list[Change]:
    good = [e for e in events if isinstance(e, Mapping) and event_problem(dict(e)) is None]
    nodes_of: dict[str, tuple[str, ...]] = {}  # a job_end names no nodes: its start said them
    if schedule is not None:
        nodes_of.update({name: job.nodes for name, job in schedule.jobs.items()})
    for e in good:
        if e.get("type") in ("job_start", "job_running"):
            nodes_of.setdefault(str(e["job"]), tuple(map(str, e["nodes"])))
    rows: list[Change] = []
    started: set[str] = set()  # a job_running restating a start seen already is one row
    for e in good:
        kind = e.get("type")
        if kind in ("job_start", "job_running"):
            at = float(e.get("started", e["time"]))
            key = f"{e['job']}@{at!r}"
            if key in started:
                continue
            started.add(key)
            nodes: Sequence[str] = tuple(map(str, e["nodes"]))
            gpus = e.get("gpus")
            what = f"job {e['job']} started ({len(nodes)} nodes" + (f", {gpus} GPUs)" if gpus is not None else ")")
        elif kind == "job_end":
            at, nodes = float(e["time"]), nodes_of.get(str(e["job"]), ())
            what = f"job {e['job']} ended" + (f": {_cut(e['reason'])}" if e.get("reason") else "")
        elif kind == "node_state":
            at, nodes = float(e["time"]), tuple(map(str, e["nodes"]))
            state = {"drain": "drained", "down": "down", "ok": "back in service"}[str(e["state"])]
            what = f"node {state}" + (f": {_cut(e['reason'])}" if e.get("reason") else "")
        elif kind == "maintenance":
            _, start, end = maintenance_window(e)
            if end < since or start > until:
                continue
            at, nodes = start, tuple(map(str, e["nodes"]))
            name = f" {_cut(e['name'])}" if e.get("name") else ""
            what = f"maintenance{name} for {_hours(end - start)}"
        else:
            continue
        if kind != "maintenance" and not since <= at <= until:
            continue
        hit = near.closest(nodes)
        if hit is None:
            continue
        node, relation, count = hit
        if count > 1:
            what += f"; {count - 1} more of its nodes are near the root"
        rows.append(Change(at, what, node, relation, at >= onset))
    return rows


def _latest_records(records: Iterable[Record]) -> list[Mapping[str, Any]]:
    """One record per incident, its latest state (a history holds many lines of each)."""
    latest: dict[str, Mapping[str, Any]] = {}
    for value in records:
        r = _wire(value)
        rid = r.get("incident_id")
        if not isinstance(rid, str) or not isinstance(r.get("root_cause"), Mapping):
            continue
        if rid not in latest or (_number(r.get("updated")) or 0.0) >= (_number(latest[rid].get("updated")) or 0.0):
            latest[rid] = r
    return list(latest.values())


def _incident_rows(record: Mapping[str, Any], earlier: Iterable[Record], near: _Near, onset: float) -> list[Change]:
    rows = []
    for r in _latest_records(earlier):
        opened = _number(r.get("opened"))
        if r["incident_id"] == record.get("incident_id") or opened is None or opened >= float(record["opened"]):
            continue
        if r.get("merged_into"):  # part of another incident, which is listed itself
            continue
        root = str(r["root_cause"].get("entity"))
        relation = near.of_entity(root)
        if relation is None:
            continue
        resolved = _number(r.get("resolved"))
        state = f"resolved after {_hours(resolved - opened)}" if resolved is not None else str(r.get("status"))
        what = f"{r['root_cause'].get('kind')} ({r.get('severity')}, {state})"
        rows.append(Change(opened, what, root, relation, opened >= onset, str(r["incident_id"])))
    return rows


def what_changed(
    value: Record,
    graph: TopologyGraph | None,
    events: Iterable[Mapping[str, Any]] | None,
    earlier: Iterable[Record] | None,
    schedule: Schedule | None = None,
    lookback_s: float = LOOKBACK_S,
    limit: int = MAX_EVENTS,
    earlier_limit: int = MAX_EARLIER,
) -> WhatChanged | None:
    """Scheduler events on the nodes near the root (its node, the nodes under its switch, its
    rack) from `lookback_s` before the onset until it resolved, and the earlier incidents on the
    same root, node, switch or rack; each newest first, at most `limit` / `earlier_limit` rows.
    `schedule`: the jobs' nodes for a `job_end` whose start is not among `events`. None when the
    topology does not know the root (nearness is the topology's)."""
    record = _wire(value)
    root = str(record["root_cause"]["entity"])
    if graph is None or root not in graph:
        return None
    near = _Near(graph, root)
    onset = onset_of(record)
    since, until = onset - lookback_s, _until(record)
    events_out = incidents_out = None
    events_left = incidents_left = 0
    if events is not None:
        rows = sorted(_event_rows(events, near, since, until or math.inf, onset, schedule), key=lambda c: -c.when)
        events_out, events_left = tuple(rows[:limit]), max(0, len(rows) - limit)
    if earlier is not None:
        rows = sorted(_incident_rows(record, earlier, near, onset), key=lambda c: -c.when)
        incidents_out, incidents_left = tuple(rows[:earlier_limit]), max(0, len(rows) - earlier_limit)
    return WhatChanged(onset, since, until, events_out, incidents_out, events_left, incidents_left, lookback_s)


# ------------------------------------------------------------------ commands


@dataclass(frozen=True)
class Command:
    what: str  # what it shows, in words
    line: str  # the command, every filled value shell-quoted
    source: str  # where it comes from: the tool's man page
    acts: bool = False  # changes the cluster (a drain): the operator's choice, never run here
    fill: tuple[tuple[str, str], ...] = ()  # (placeholder, how to find its value)


@dataclass(frozen=True)
class Commands:
    root: str
    node: str | None
    lines: tuple[Command, ...]
    caution: str | None = None  # an id the grammar refuses: quoted, but check it before running anything
    refused: str | None = None  # why there are no commands at all


class _Recipe(NamedTuple):
    """A command as data: `line` a template whose fields ({node}, {i}, ...) are filled with quoted
    values; a word in angle brackets is the operator's to fill (`_FILL` says how)."""

    what: str  # in words; its fields are filled unquoted (the page escapes it)
    line: str
    source: str  # the tool's man page, where each option below is documented
    remote: bool = True  # run on the root's node over ssh
    pipe: str = ""  # a filter run here on what the node sends back


_FILL = {
    "<index>": "the GPU's index: nvidia-smi -L on the node",
    "<ca>": "the HCA's name (mlx5_N) from ibstat on the node",
    "<netdev>": "the NIC's interface name: ip link on the node",
    "<lid>": "the switch's LID: ibnetdiscover -p or ibswitches above",
    "<port>": "the switch port's number on the ibnetdiscover -p line",
}


class _Word(str):
    """A placeholder put into a template as it is: the operator replaces it, the shell never sees it."""


# nvidia-smi(1): -q the full query (ECC, row remapping, clocks and their event reasons, PCIe link),
# -d only the named sections, -i the GPU by index, --query-gpu the fields --help-query-gpu lists,
# -L the GPUs the driver sees, nvlink -s / -e each link's state / error counters. journalctl(1): -k
# the kernel's messages of this boot, --since "@<epoch seconds>" (systemd.time(7)); the driver logs
# "NVRM: Xid (PCI:...): <code>". dcgmi(1) "diag": -r 2 the medium run (minutes, the GPU free of
# work), -i the GPUs (DCGM's ids are NVML's indices on a host without MIG). lspci(8): -d 10de: the
# devices of NVIDIA's vendor id.
_GPU = (
    _Recipe("the GPU's full state", "nvidia-smi -q -i {i}", "nvidia-smi(1)"),
    _Recipe(
        "Xid lines in the kernel log since an hour before onset",
        "journalctl -k --no-pager --since @{since}",
        "journalctl(1)",
        pipe="grep -i xid",
    ),
    _Recipe("DCGM diagnostics, medium run (free the GPU first)", "dcgmi diag -r 2 -i {i}", "dcgmi(1)"),
)
_NVLINK = (
    _Recipe("its NVLinks: state of each link", "nvidia-smi nvlink -s -i {i}", "nvidia-smi(1)"),
    _Recipe("its NVLinks: error counters", "nvidia-smi nvlink -e -i {i}", "nvidia-smi(1)"),
)
_MEMORY = (_Recipe("ECC counts and row remapping", "nvidia-smi -q -d ECC,ROW_REMAPPER -i {i}", "nvidia-smi(1)"),)
_PCIE_FIELDS = "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"
_MATES_FIELDS = "index,utilization.gpu,clocks.sm,clocks.max.sm,power.draw,temperature.gpu"
_MATES = (
    _Recipe(
        "every GPU of the node side by side (its mates are its fairest peers)",
        f"nvidia-smi --query-gpu={_MATES_FIELDS} --format=csv",
        "nvidia-smi(1)",
    ),
)
_GONE = (
    _Recipe("does the driver still list it", "nvidia-smi -L", "nvidia-smi(1)"),
    _Recipe("is it still on the PCI bus", "lspci -d 10de:", "lspci(8)"),
)
# ibstat(8): each HCA's state, physical state, rate and base LID. perfquery(8): -x the extended
# (64-bit) counters, -C the HCA and -P its port, or a remote <lid> <port>; -a all ports together.
# mlxlink (NVIDIA MFT, mlxlink --help): -d the device, -m the module's Rx and Tx power per lane, -c
# the physical layer's counters and bit error rate. ethtool(8): -S the NIC's statistics (the RoCE
# pause counters per priority).
_NIC = (
    _Recipe("the node's HCAs: state, rate, LID (the topology's {nic}, rail {rail})", "ibstat", "ibstat(8)"),
    _Recipe("the HCA port's error and traffic counters", "perfquery -x -C <ca> -P 1", "perfquery(8)"),
)
_OPTIC = (_Recipe("the optic's receive and transmit power", "mlxlink -d <ca> -m", "mlxlink (NVIDIA MFT)"),)
_PHY = (_Recipe("the link's physical counters and bit error rate", "mlxlink -d <ca> -c", "mlxlink (NVIDIA MFT)"),)
# ibnetdiscover(8): -p one line per cabled port: both ends' LIDs, port numbers and names.
# ibportstate(8): <lid> <port> query, the port's state, width and speed.
_PORT = (
    _Recipe("that switch port's counters ({port})", "perfquery -x <lid> <port>", "perfquery(8)", remote=False),
    _Recipe(
        "that switch port's state, width, speed ({port})",
        "ibportstate <lid> <port> query",
        "ibportstate(8)",
        remote=False,
    ),
)
_CABLE = (
    _Recipe(
        "the switch port its cable lands on: LID and port number",
        "ibnetdiscover -p | grep -wF -- {node}",
        "ibnetdiscover(8)",
        remote=False,
    ),
    *_PORT,
)
# ibswitches(8): every switch with its GUID, description and LID. iblinkinfo(8): -l one line per
# link: state, width, speed and the far end.
_SWITCH = (
    _Recipe("the switch's LID", "ibswitches | grep -wF -- {switch}", "ibswitches(8)", remote=False),
    _Recipe(
        "its links: state, width, speed, far end", "iblinkinfo -l | grep -wF -- {switch}", "iblinkinfo(8)", remote=False
    ),
)
_SWITCH_PORTS = (_Recipe("its counters, all ports together", "perfquery -x -a <lid>", "perfquery(8)", remote=False),)
# sinfo(1): -N a line per node, -l its state and reason, -n the nodes. ipmitool(1): sdr type, the
# sensors of a type; sel elist last N, the BMC's event log.
_RACK = (
    _Recipe("the rack's nodes in the scheduler", "sinfo -N -l -n {nodes}", "sinfo(1)", remote=False),
    _Recipe("a node's temperature sensors (the inlet among them)", "ipmitool sdr type Temperature", "ipmitool(1)"),
)
# systemctl(1) status; journalctl(1) -u one unit's log
_BY_KIND: dict[str, tuple[_Recipe, ...]] = {
    "gpu_nvlink": _NVLINK,
    "gpu_nvlink_down": _NVLINK,
    "gpu_hbm_ecc": _MEMORY,
    "gpu_row_remap_pending": _MEMORY,
    "gpu_pcie_downtrained": (
        _Recipe(
            "the PCIe link now against the most it supports",
            f"nvidia-smi --query-gpu={_PCIE_FIELDS} --format=csv -i {{i}}",
            "nvidia-smi(1)",
        ),
    ),
    "gpu_straggler": _MATES,
    "gpu_thermal": _MATES,
    "gpu_lost": _GONE,
    "gpu_fell_off_bus": _GONE,
    "optic_degradation": _OPTIC,
    "ib_link_errors": _PHY,
    "ib_link_degraded": _PHY,
    "nic_link_flap": _PHY,
    "pfc_storm": (
        _Recipe("pause frames sent and received", "ethtool -S <netdev>", "ethtool(8)", pipe="grep -i pause"),
    ),
    "nvswitch_fabric_manager": (
        _Recipe("the fabric manager's state", "systemctl status nvidia-fabricmanager --no-pager", "systemctl(1)"),
        _Recipe(
            "its log since an hour before onset",
            "journalctl -u nvidia-fabricmanager --no-pager --since @{since}",
            "journalctl(1)",
        ),
    ),
    "psu_failure": (
        _Recipe("the PSUs' sensors", 'ipmitool sdr type "Power Supply"', "ipmitool(1)"),
        _Recipe("the BMC's latest events", "ipmitool sel elist last 20", "ipmitool(1)"),
    ),
}


def _q(value: str | int) -> str:
    return value if isinstance(value, _Word) else shlex.quote(str(value))


def _ssh(node: str, remote: str) -> str:
    """`remote` run on `node`. ssh(1) hands the remote shell one string to parse again, so the
    remote command is built from quoted values and literal words, then quoted once more here."""
    return f"ssh {shlex.quote(node)} {shlex.quote(remote)}"


def _made(recipes: Iterable[_Recipe], host: str | None, **values: str | int) -> list[Command]:
    """The recipes with `values` filled in (quoted), the remote ones run on `host` (none without)."""
    quoted = {k: _q(v) for k, v in values.items()}
    out = []
    for r in recipes:
        if r.remote and host is None:
            continue
        text = r.line.format(**quoted)
        line = (_ssh(host, text) if r.remote and host is not None else text) + (f" | {r.pipe}" if r.pipe else "")
        fill = tuple((word, how) for word, how in _FILL.items() if word in line)
        out.append(Command(r.what.format(**values), line, r.source, fill=fill))
    return out


def _node_commands(node: str, record: Mapping[str, Any]) -> list[Command]:
    """The node in Slurm, and its drain for the operator to choose (scontrol(1): show node, its
    state, reason and jobs; update NodeName=... State=DRAIN needs a Reason, its jobs run on and no
    new one starts). Slurm reads a host list or ALL as many nodes, which no quoting prevents: a
    name the grammar refuses gets no drain."""
    out = [
        Command("the node in Slurm: state, reason, jobs", shlex.join(["scontrol", "show", "node", node]), "scontrol(1)")
    ]
    if node_refusal(node) is None:
        reason = f"Reason=aiops {record.get('incident_id', '')}: {record['root_cause'].get('kind', '')}"
        out.append(
            Command(
                "drain the node (its jobs finish, no new one starts there): only if you choose to",
                shlex.join(["scontrol", "update", f"NodeName={node}", "State=DRAIN", reason]),
                "scontrol(1)",
                acts=True,
            )
        )
    return out


def _nic_of(g: TopologyGraph, root: str) -> str | None:
    kind = g.kind(root)
    if kind == "nic":
        return root
    if kind == "optic":
        return g.parent(root)
    return next((g.parent(o) for o in g.peers(root) if g.kind(o) == "optic"), None)  # a cable's host end


def commands_for(value: Record, graph: TopologyGraph | None) -> Commands | None:
    """Copy-paste commands to look at the root: by its entity kind (the topology's) and its fault
    kind (the record's), the node, GPU index, NIC and switch filled in from the topology. Nothing
    here is run; the drain is offered for the operator to choose. None without the topology."""
    record = _wire(value)
    root = str(record["root_cause"]["entity"])
    kind = str(record["root_cause"].get("kind", ""))
    if graph is None or root not in graph:
        return None
    g, entity_kind = graph, graph.kind(root)
    node = _places(g, root).node
    problems = [(v, p) for v in dict.fromkeys(x for x in (root, node) if x) if (p := entity_refusal(v)) is not None]
    option = next((f"{v!r}: {p}" for v, p in problems if p.rule == "ids.first"), None)
    if option is not None:  # an option to every tool it is handed to, quoted or not
        return Commands(root, node, (), refused=f"{option}; no command is built from an id a tool reads as an option")
    cautions = [f"{v!r}: {p}" for v, p in problems]
    if node is not None and node_refusal(node) is not None:
        cautions.append("no drain: Slurm may read this name as other nodes than the one")
    since = int(onset_of(record) - 3600)
    by_kind = _BY_KIND.get(kind, ())
    lines: list[Command] = []
    if entity_kind == "gpu":
        index = gpu_index(root)
        lines += _made((*_GPU, *by_kind), node, i=_Word("<index>") if index is None else index, since=since)
    elif entity_kind in ("nic", "optic", "link"):
        nic = _nic_of(g, root) or root
        rail = g.rail_and_pod(nic)[0] if nic in g else -1
        port = g.port_of_nic(nic) if nic in g and g.kind(nic) == "nic" else None
        extra = _OPTIC if entity_kind == "optic" and by_kind is not _OPTIC else ()
        recipes = (*_NIC, *extra, *by_kind, *(_CABLE if node is not None else _PORT))
        lines += _made(
            recipes,
            node,
            nic=nic,
            rail=rail if rail >= 0 else "?",
            port=port or "not in the topology",
            node=node or "",
        )
    elif entity_kind in (*SWITCHES, "port"):
        switch = g.switch_of(root)
        if switch is not None:
            ports = _PORT if entity_kind == "port" else _SWITCH_PORTS
            lines += _made((*_SWITCH, *ports), None, switch=switch, port=root)
    elif entity_kind in ("rack", "cooling"):
        nodes = sorted(n for r in _places(g, root).racks for n in nodes_under(g, r) if node_refusal(n) is None)
        if nodes:
            lines += _made(_RACK, nodes[0], nodes=",".join(nodes))
    if entity_kind not in ("gpu", "nic", "optic", "link") and node is not None:
        lines += _made(by_kind, node, since=since)  # a node's own, a PSU's
    if node is not None:
        lines += _node_commands(node, record)
    return Commands(root, node, tuple(lines), "; ".join(cautions) or None)


# ------------------------------------------------------------------ against its peers

# Kinds a peer comparison finds (detectors/stack/cohorts.py: a GPU against the other GPUs of its
# job): a straggler's clock and power, a GPU running hotter than its job's. gpu_lost reads
# DCGM_FI_DEV_GPU_TEMP too, but it is found by silence, not by its peers.
PEER_KINDS = ("gpu_straggler", "gpu_thermal")
# Peers read per metric. The spread shown is p10-p90 of the peers' levels: 16 of them put one
# or two in each tail decile (fewer and p10 is one GPU's), and 16 series of an hour at a 30 s
# scrape are under 2,000 samples each, one InfluxDB query for the page. An operational choice.
MAX_PEERS = 16
# The levels compared: each GPU's median from the detector's own window before the opening (the
# level that tripped it: vocab/thresholds.py WINDOW_S) to ten minutes after it: several such
# windows, and short enough that a restarted job has not yet got other peers. A warned incident is
# compared at its opening too, not at its warning: what is compared is the failure, with the GPUs
# running beside it then.
PEER_SPAN_S = 600.0


def peer_span(value: Record) -> tuple[float, float]:
    """The span the root and its peers are compared over (read their series over it, at least)."""
    record = _wire(value)
    opened = float(record["opened"])
    return opened - WINDOW_S, min(opened + PEER_SPAN_S, _until(record) or math.inf)


@dataclass(frozen=True)
class PeerMetric:
    metric: str
    unit: str
    root_median: float | None  # None: no sample of the root in the span
    peers_median: float | None  # the median of the peers' levels (each its own median)
    p10: float | None
    p90: float | None
    off_pct: float | None  # (root - peers) / peers, in %: negative below them
    peers_with_data: int
    root_samples: int


@dataclass(frozen=True)
class Peers:
    root: str
    cohort: str  # in words: whose GPUs they are
    peers: tuple[str, ...]  # the ones read (at most MAX_PEERS)
    cohort_size: int  # the peers there are, before the bound
    start: float
    end: float
    metrics: tuple[PeerMetric, ...]


def peer_metrics(kind: str) -> tuple[str, ...]:
    """The GPU fields a kind's peer comparison judges: the fields it needs that a job-cohort peer
    rule compares (vocab/thresholds.py PeerThresholds), in the rules' order."""
    if kind not in PEER_KINDS or kind not in registry.KINDS:
        return ()
    needs = {n.partition(".")[2] for n in registry.KINDS[kind].needs if n.startswith("gpu.")}
    rules = [r.metric for r in PeerThresholds().rules.get("gpu", ()) if r.cohort == "job"]
    return tuple(dict.fromkeys(m for m in rules if m in needs))


def _cohort(record: Mapping[str, Any], g: TopologyGraph, schedule: Schedule | None) -> tuple[str, list[str]] | None:
    """(whose, the peer GPUs in reading order) of the root GPU: the other GPUs of the job holding
    it when it opened (the span compared), else of its node. Its node's GPUs first (same power and
    cooling), then one GPU of each other node in turn, so a bounded read spans the job."""
    root = str(record["root_cause"]["entity"])
    if root not in g or g.kind(root) != "gpu" or (node := g.node_of(root)) is None:
        return None
    jobs = schedule.jobs_holding([(node, gpu_index(root))], float(record["opened"]), 0.0) if schedule else []
    job: Job | None = next((j for j in jobs if j.gpus_by_node is not None), jobs[0] if jobs else None)
    if job is None:
        return "its node's other GPUs (no job held it when it opened)", [x for x in _gpus_of(g, node) if x != root]
    per_node: list[list[str]] = []
    for n in sorted(job.nodes, key=lambda n: (n != node, n)):
        if n not in g:
            continue
        held = None if job.gpus_by_node is None else set(job.gpus_by_node.get(n, ()))
        per_node.append([x for x in _gpus_of(g, n) if x != root and (held is None or gpu_index(x) in held)])
    mates, others = (per_node[0], per_node[1:]) if per_node and node in job.nodes else ([], per_node)
    spread = [x for row in _round_robin(others) for x in row]
    return f"job {job.job}'s other GPUs", mates + spread


def _gpus_of(g: TopologyGraph, node: str) -> list[str]:
    """The node's GPUs by index (the topology's children; an id of another shape last)."""
    return sorted(g.children(node, "gpu"), key=lambda x: (gpu_index(x) is None, gpu_index(x) or 0, x))


def _round_robin(rows: list[list[str]]) -> list[list[str]]:
    out: list[list[str]] = []
    for i in range(max(map(len, rows), default=0)):
        out.append([r[i] for r in rows if i < len(r)])
    return out


def peer_keys(
    value: Record, graph: TopologyGraph | None, schedule: Schedule | None, limit: int = MAX_PEERS
) -> list[tuple[str, str]]:
    """The (entity, metric) series the page should read for `peer_comparison`: the root's, then
    up to `limit` peers', per metric its kind is judged on. Empty when it is no peer kind."""
    record = _wire(value)
    metrics = peer_metrics(str(record["root_cause"].get("kind", "")))
    found = _cohort(record, graph, schedule) if graph is not None and metrics else None
    if found is None:
        return []
    root = str(record["root_cause"]["entity"])
    return [(e, m) for m in metrics for e in [root, *found[1][:limit]]]


def _level(points: Sequence[tuple[float, float]] | None, start: float, end: float) -> tuple[float | None, int]:
    values = [float(v) for t, v in points or () if start <= float(t) <= end and math.isfinite(float(v))]
    return (float(np.median(values)) if values else None), len(values)


def peer_comparison(
    value: Record,
    graph: TopologyGraph | None,
    schedule: Schedule | None,
    series: Series | None,
    limit: int = MAX_PEERS,
) -> Peers | None:
    """The root GPU's level (its median over `peer_span`) against its peers' levels:
    their median, their p10-p90, and how far off the root is in %. None when the kind is found
    otherwise, the topology cannot say the peers, or no series were given."""
    record = _wire(value)
    metrics = peer_metrics(str(record["root_cause"].get("kind", "")))
    found = _cohort(record, graph, schedule) if graph is not None and metrics else None
    if found is None or series is None:
        return None
    whose, cohort = found
    root = str(record["root_cause"]["entity"])
    peers = cohort[:limit]
    start, end = peer_span(record)
    gpu = MEASUREMENT_BY_NAME["gpu"]
    rows = []
    for m in metrics:
        root_level, samples = _level(series.get((root, m)), start, end)
        levels = [x for p in peers if (x := _level(series.get((p, m)), start, end)[0]) is not None]
        mid = float(np.median(levels)) if levels else None
        p10, p90 = (float(x) for x in np.percentile(levels, [10, 90])) if levels else (None, None)
        off = (root_level - mid) / abs(mid) * 100 if root_level is not None and mid else None
        info = gpu.metric(m)
        rows.append(PeerMetric(m, info.unit if info else "", root_level, mid, p10, p90, off, len(levels), samples))
    return Peers(root, whose, tuple(peers), len(cohort), start, end, tuple(rows))


# ------------------------------------------------------------------ what the predictor said

MAX_PREDICTIONS = 12  # rows shown; the first and latest probabilities count them all


@dataclass(frozen=True)
class PredictionRow:
    at: float
    entity: str
    kind: str
    probability: float
    horizon_s: float
    expected_in_s: float | None
    action: str
    update: bool  # said again because its probability rose


@dataclass(frozen=True)
class EarlySignRow:
    at: float | None
    entity: str
    metric: str
    detector: str
    value: float | None
    family: str  # the early sign (vocab/faults.toml [early_signs])
    kind: str  # the fault it announces


@dataclass(frozen=True)
class PredictorView:
    warned: float
    opened: float
    lead_s: float  # first warning to opening
    useful: bool  # by the one rule every view reads (vocab/thresholds.py MIN_USEFUL_LEAD_S)
    min_useful_lead_s: float
    predictions: tuple[PredictionRow, ...]  # the first ones, then the latest, at most MAX_PREDICTIONS
    predictions_left_out: int
    first_probability: float | None
    latest_probability: float | None
    early_signs: tuple[EarlySignRow, ...]


def early_sign(item: Mapping[str, Any]) -> str | None:
    """The early-sign family of a piece of evidence, or None: the reading of rca/symptoms.py
    `symptom_of` for the families vocab/faults.toml [early_signs] names (an optic's receive power
    moving is `optic_rx`; a GPU warmer than its job's while within the warning band, a `warn:`
    detector, is `warm`). The page may not import the engine's symptoms (they import detection);
    tests/unit/test_oncall.py holds the two readings together."""
    metric, detector = str(item.get("metric", "")), str(item.get("detector", ""))
    family = None
    if metric == "rx_power_dbm":
        family = "optic_rx"
    elif metric == "DCGM_FI_DEV_GPU_TEMP" and detector.startswith("warn:"):
        family = "warm"
    return family if family in registry.EARLY_SIGNS else None


def _contains(g: TopologyGraph | None, root: str, entity: str) -> bool:
    if entity == root:
        return True
    if g is None or entity not in g or root not in g:
        return False
    parent = g.parent(entity)
    while parent is not None:
        if parent == root:
            return True
        parent = g.parent(parent)
    return False


def _prediction(p: Mapping[str, Any]) -> PredictionRow | None:
    at, probability, horizon = _number(p.get("at")), _number(p.get("probability")), _number(p.get("horizon_s"))
    if at is None or probability is None or horizon is None:
        return None
    return PredictionRow(
        at,
        str(p.get("entity")),
        str(p.get("kind")),
        probability,
        horizon,
        _number(p.get("expected_in_s")),
        str(p.get("action", "")),
        bool(p.get("update", False)),
    )


def predictor_evidence(
    value: Record,
    predictions: Iterable[Mapping[str, Any]] | None,
    graph: TopologyGraph | None = None,
    limit: int = MAX_PREDICTIONS,
) -> PredictorView | None:
    """For an incident that was warned of: the predictions on its root (with `graph`, also on
    what the root contains: an optic's for its NIC) from the first warning to the opening, the
    first and latest probability, the lead and whether it was long enough to act on, and the
    record's early-sign evidence. None when it was not warned."""
    record = _wire(value)
    warned, opened = _number(record.get("warned")), float(record["opened"])
    if warned is None:
        return None
    root = str(record["root_cause"]["entity"])
    rows = sorted(
        (
            r
            for p in predictions or ()
            if isinstance(p, Mapping)
            and (r := _prediction(p)) is not None
            and warned <= r.at <= opened
            and _contains(graph, root, r.entity)
        ),
        key=lambda r: r.at,
    )
    shown = rows if len(rows) <= limit else rows[: limit // 2] + rows[len(rows) - (limit - limit // 2) :]
    signs = []
    for e in record.get("evidence", []):
        family = early_sign(e) if isinstance(e, Mapping) else None
        if family is not None:
            signs.append(
                EarlySignRow(
                    _number(e.get("at")),
                    str(e.get("entity")),
                    str(e.get("metric")),
                    str(e.get("detector")),
                    _number(e.get("value")),
                    family,
                    registry.EARLY_SIGNS[family].kind,
                )
            )
    lead = opened - warned
    return PredictorView(
        warned,
        opened,
        lead,
        lead >= MIN_USEFUL_LEAD_S,
        MIN_USEFUL_LEAD_S,
        tuple(shown),
        len(rows) - len(shown),
        rows[0].probability if rows else None,
        rows[-1].probability if rows else None,
        tuple(signs),
    )


# ------------------------------------------------------------------ the bundle


@dataclass(frozen=True)
class OnCall:
    root: str
    kind: str
    changed: WhatChanged | None
    commands: Commands | None
    peers: Peers | None
    predictor: PredictorView | None
    grafana: tuple[tuple[str, str], ...]
    missing: Mapping[str, str] = field(default_factory=dict)  # part -> why it is not known here


def oncall_for(
    record: Record,
    graph: TopologyGraph | None,
    schedule: Schedule | None,
    events: Iterable[Mapping[str, Any]] | None,
    earlier: Iterable[Record] | None,
    series: Series | None,
    predictions: Iterable[Mapping[str, Any]] | None,
    grafana_base: str | None,
) -> OnCall:
    """The on-call extras of one incident; each part None (or, for events, earlier incidents
    and predictions, marked unread) where its input is None, and `missing` says why, a sentence
    the page prints. `series`: what the page read for `peer_keys`."""
    wire = _wire(record)
    root = str(wire["root_cause"]["entity"])
    kind = str(wire["root_cause"].get("kind", ""))
    known = graph is not None and root in graph
    missing: dict[str, str] = {}
    unknown = "Not known here: " + (
        "no topology was read." if graph is None else "the topology does not know the root."
    )
    changed = what_changed(wire, graph, events, earlier, schedule)
    if changed is None:
        missing["changed"] = unknown
    commands = commands_for(wire, graph)
    if commands is None:
        missing["commands"] = unknown
    peers = peer_comparison(wire, graph, schedule, series)
    if peers is None:
        if not peer_metrics(kind):
            missing["peers"] = f"Does not apply: a {kind} is not found by comparing a GPU with its peers."
        elif not known:
            missing["peers"] = unknown
        else:
            missing["peers"] = "Not known here: its peers' series were not read."
    predictor = predictor_evidence(wire, predictions, graph)
    if predictor is None:
        missing["predictor"] = "No warning came before it: the predictor did not see it coming."
    elif predictions is None:
        missing["predictions"] = "Not known here: the predictions were not read, only the warning's time."
    g = graph if known else None
    node = g.node_of(root) if g is not None else None
    switch = g.switch_of(root) if g is not None and g.kind(root) in (*SWITCHES, "port", "nic") else None
    rack = g.ancestor(root, "rack") if g is not None and g.kind(root) != "rack" else None
    incident = str(wire.get("incident_id") or "") or None
    grafana = tuple(grafana_links(grafana_base, node, switch, rack, incident=incident))
    return OnCall(root, kind, changed, commands, peers, predictor, grafana, missing)


__all__ = [
    "LOOKBACK_S",
    "MAX_EARLIER",
    "MAX_EVENTS",
    "MAX_PEERS",
    "MAX_PREDICTIONS",
    "PEER_KINDS",
    "PEER_SPAN_S",
    "Change",
    "Command",
    "Commands",
    "EarlySignRow",
    "OnCall",
    "PeerMetric",
    "Peers",
    "PredictionRow",
    "PredictorView",
    "WhatChanged",
    "commands_for",
    "early_sign",
    "oncall_for",
    "peer_comparison",
    "peer_keys",
    "peer_metrics",
    "peer_span",
    "predictor_evidence",
    "what_changed",
]
