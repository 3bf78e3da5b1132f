"""The blast radius of an incident: the jobs holding the affected GPUs when it began, and apart
from them the jobs that started on those GPUs while it was open, each counted as its GPUs on the
affected parts and its GPUs in all. A job that had ended before the onset was not hit and is not
counted (it is named, so a reader who remembers it sees why it is missing).

One reading, `radius`, for the engine (rca/incidents.py `_blast`: the record's `jobs`,
`job_gpus` and `gpus_hit`, and the severity they raise) and for the pages (show/blast.py, from the
record and the scheduler's events): the page and the engine count the same jobs.

The onset is the earliest the engine saw the incident: its first piece of evidence, the warning
it took over, or its opening time.

Which jobs a root hits:

- **A switch: by path.** A fabric fault hits the jobs whose traffic crosses the faulty part, read
  from the topology, not from the symptoms the incident took in (in a rail-optimised fabric every
  NIC of a congested spine's rail waits, in every pod, whether or not its job sends through it).
  - A *leaf* (and a dragonfly's router, which the topology calls a leaf): the jobs with GPUs under
    it, on the hosts cabled to it; each counts every GPU it holds on those hosts.
  - A *spine* (and a core above the spines: the topology importer, context/fabric.py, writes a
    core as a spine above spines): the jobs whose traffic can take it (`Paths.crosses`), counting
    the GPUs they hold on the hosts below it.
- **Anything else** (a GPU, a NIC and its optic, a PSU, a rack's cooling): the GPUs among the
  affected entities (that GPU only); a node's other parts among them (its NIC, its PSU) and the
  nodes that depend on the root (a PSU's node, a rack's nodes): every GPU of the node.

When a job's traffic crosses a spine. A rail-optimised fat-tree, as NVIDIA's DGX SuperPOD reference
architecture builds it (and telemetry_gen/topology.py after it): a scalable unit (our pod) of 32
nodes with one leaf per rail, NIC i of every node on rail i's leaf; the leaves of one rail in all
pods joined by that rail's spine group; in the largest fabrics a core tier above the spine groups.
NCCL keeps a collective's inter-node traffic on rails: its rings and trees pair GPU i of one node
with GPU i of the next, and PXN first moves data over NVLink to the GPU whose NIC sits on the
destination's rail. So, per rail:
  - two nodes under one leaf talk through that leaf alone (it turns their traffic round);
  - two nodes under two leaves of the rail talk through the switches joining those leaves above
    them (the rail's spines, or a pod's spines where a pod has several leaves per rail), spread
    over all of them by ECMP or adaptive routing, so each of them carries part of it;
  - nodes under two spines' subtrees talk through the tier above (the core).
A switch carries a job's traffic when, on some rail, two of the job's NICs sit below it with no
branch in common (a branch: a switch below it, or for a NIC cabled to it its port; no switch
beneath it reaches both, so their traffic cannot turn round under it), or when the switch has
uplinks and the job has NICs below it and nodes outside it (its traffic leaves the subtree, by
this switch or a sibling; counted, though in an irregular fabric a shorter way may avoid it). A
job that stays inside one pod never reaches a spine; one that spans pods crosses every spine of
every rail it uses between them. Cross-rail traffic is left out: PXN keeps it on NVLink, and a
spine plane serves one rail. The topology does not say which NIC a GPU sends through (NCCL
chooses by PCIe distance, and PXN may route a GPU's data through another NIC of its node), so a
job uses every NIC of its nodes. A NIC the topology gives no rail is on one rail with every other
such NIC (a fabric with no rails: any two hosts talk).

Where the path cannot be said, today's rule stays: a 3D torus has no switches, and a link
carries the traffic that dimension-order routing sends over it between whichever jobs are placed
around it, which the topology does not say (its NIC's or link's node: that node's jobs); a
dragonfly router's transit traffic (other groups' flows, minimal or, with adaptive routing,
through any intermediate group) cannot be told from the topology either, so a router counts the
jobs with GPUs under it, as a leaf does.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rca.graph import TopologyGraph
from vocab.ids import gpu_index
from vocab.schedule import Job, Schedule

# a job that ended this long before the onset is named as "ended before" (and not counted); an
# older one is not mentioned at all (an operational choice: the schedule's own look-back,
# vocab/schedule.py `jobs_holding` ended_within_s)
ENDED_BEFORE_S = 600.0
AT_ONSET, STARTED_WHILE_OPEN, ENDED_BEFORE = "at onset", "started while open", "ended before onset"
WHEN_ORDER = (AT_ONSET, STARTED_WHILE_OPEN, ENDED_BEFORE)
SWITCHES = ("leaf", "spine")
_TIER = {"leaf": 0, "spine": 1}


@dataclass(frozen=True)
class JobHit:
    job: str
    when: str  # AT_ONSET | STARTED_WHILE_OPEN | ENDED_BEFORE
    gpus_affected: int  # its GPUs on the affected parts
    gpus_total: int
    start: float
    end: float | None


@dataclass(frozen=True)
class Blast:
    onset: float
    until: float
    jobs: list[JobHit]

    def counted(self, when: str) -> list[JobHit]:
        return [j for j in self.jobs if j.when == when]

    def total(self, when: str, field: str) -> int:
        return sum(int(getattr(j, field)) for j in self.counted(when))


@dataclass(frozen=True)
class Paths:
    """What is below a switch, as traffic sees it: each host's NICs under it, each as its rail and
    its branches, the switches below this one that it hangs from (a NIC cabled to this switch
    itself: its own port; a NIC under a leaf that two spines below this core both reach: both
    spines); and whether the switch has uplinks (a tier above it)."""

    switch: str
    below: Mapping[str, tuple[tuple[int, frozenset[str]], ...]]  # node -> (rail, branches) per NIC below
    uplinks: bool

    def crosses(self, job: Job) -> bool:
        """Does the job's traffic take this switch: on some rail two of its NICs below it with no
        branch in common (their traffic cannot turn round below it), or, with a tier above, NICs
        below it and nodes outside it (the module's docstring)."""
        seen: dict[int, set[frozenset[str]]] = {}
        outside = False
        for node in job.nodes:
            mine = self.below.get(node)
            if mine is None:
                outside = True
                continue
            for rail, branches in mine:
                known = seen.setdefault(rail, set())
                if branches in known:
                    continue
                if any(branches.isdisjoint(other) for other in known):
                    return True
                known.add(branches)
        return self.uplinks and outside and bool(seen)


# the paths below each switch, per graph: computed once (a core's reach is the whole fabric), and
# gone with the graph when the topology is reloaded
_PATHS: weakref.WeakKeyDictionary[TopologyGraph, dict[str, Paths]] = weakref.WeakKeyDictionary()


def paths(g: TopologyGraph, switch: str) -> Paths:
    """The hosts below a leaf or spine, by rail and branch (cached per graph)."""
    known = _PATHS.get(g)
    if known is None:
        known = _PATHS.setdefault(g, {})
    found = known.get(switch)
    if found is None:
        found = known[switch] = _paths(g, switch)
    return found


def _above(g: TopologyGraph, a: str, b: str) -> int:
    """+1 when switch b sits a tier above switch a, -1 below, 0 beside it (a dragonfly's routers).
    A leaf is below a spine; between two spines (a spine and the core above it) the cable's
    direction says which is the lower: the topology's switch-to-switch edge runs upward (leaf to
    spine, spine to core: context/fabric.py, telemetry_gen/topology.py)."""
    ka, kb = _TIER[g.kind(a)], _TIER[g.kind(b)]
    if ka != kb:
        return 1 if kb > ka else -1
    if ka == 0:
        return 0
    if b in g.depends_on(a, max_depth=1):
        return 1
    return -1 if a in g.depends_on(b, max_depth=1) else 0


def _switch_ends(g: TopologyGraph, switch: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(port, NIC) for the hosts cabled to `switch`, and the switches its other cables reach."""
    nics: list[tuple[str, str]] = []
    switches: list[str] = []
    for port, far in g.cables(switch):
        if far is None:
            continue
        kind = g.kind(far)
        if kind == "nic":
            nics.append((port, far))
        elif kind == "port" and (other := g.parent(far)) is not None and other != switch and g.kind(other) in SWITCHES:
            switches.append(other)
    return nics, list(dict.fromkeys(switches))


def _nics_below(g: TopologyGraph, top: str) -> list[str]:
    """Every NIC cabled to `top` or to a switch below it, down to the leaves."""
    out: list[str] = []
    seen = {top}
    stack = [top]
    while stack:
        switch = stack.pop()
        nics, others = _switch_ends(g, switch)
        out += [nic for _, nic in nics]
        for other in others:
            if other not in seen and _above(g, switch, other) < 0:
                seen.add(other)
                stack.append(other)
    return out


def _paths(g: TopologyGraph, switch: str) -> Paths:
    branches: dict[str, set[str]] = {}  # NIC -> the branches it hangs from
    nics, others = _switch_ends(g, switch)
    for port, nic in nics:
        branches.setdefault(nic, set()).add(port)
    uplinks = False
    for other in others:
        tier = _above(g, switch, other)
        uplinks = uplinks or tier > 0
        if tier < 0:
            for nic in _nics_below(g, other):
                branches.setdefault(nic, set()).add(other)
    below: dict[str, list[tuple[int, frozenset[str]]]] = {}
    interned: dict[frozenset[str], frozenset[str]] = {}  # thousands of NICs share a few sets
    for nic, found in branches.items():
        node = g.node_of(nic)
        if node is not None:
            key = frozenset(found)
            below.setdefault(node, []).append((g.rail_and_pod(nic)[0], interned.setdefault(key, key)))
    return Paths(switch, {n: tuple(v) for n, v in below.items()}, uplinks)


def onset(opened: float, evidence_times: Iterable[float], warned: float | None) -> float:
    """The earliest the engine saw it: opened, its first evidence, or the warning it took over
    (a precursor's warning is the same fault seen early)."""
    times = [float(opened), *map(float, evidence_times)]
    if warned is not None:
        times.append(float(warned))
    return min(times)


def nodes_under(g: TopologyGraph, entity: str) -> frozenset[str]:
    """The nodes whose work passes through `entity`: a switch's hosts below it (a spine's through
    its leaves, a core's through its spines), anything else's dependents' nodes."""
    if entity not in g:
        return frozenset()
    if g.kind(entity) in SWITCHES:
        return frozenset(paths(g, entity).below)
    return frozenset(n for d in g.dependents(entity) if (n := g.node_of(d)) is not None)


def affected_gpus(g: TopologyGraph, root: str, affected: Iterable[str]) -> dict[str, set[int] | None]:
    """node -> the affected GPU indices on it (None: every GPU of the node), for a root that is
    no switch: the nodes that depend on it, and the affected entities' nodes."""
    held: dict[str, set[int] | None] = dict.fromkeys(nodes_under(g, root))
    for e in [root, *affected]:
        if e not in g or (node := g.node_of(e)) is None:
            continue
        index = gpu_index(e) if g.kind(e) == "gpu" else None
        if index is None:
            held[node] = None
        elif node not in held or held[node] is not None:
            indices = held.get(node) or set()
            indices.add(index)
            held[node] = indices
    return held


def gpus_on(job: Job, node: str, indices: set[int] | None) -> int:
    """The job's GPUs on this node among `indices` (None: all of the node's)."""
    if node not in job.nodes:
        return 0
    mine = job.gpus_by_node.get(node) if job.gpus_by_node is not None else None
    if mine is None:  # the scheduler named only nodes: its GPUs spread evenly over them
        per_node = job.gpus // max(len(job.nodes), 1)
        return per_node if indices is None else min(len(indices), per_node)
    return len(mine) if indices is None else len(set(mine) & indices)


def jobs_hit(
    schedule: Schedule,
    held: dict[str, set[int] | None],
    start: float,
    until: float,
    crosses: Callable[[Job], bool] | None = None,
) -> Blast:
    """The jobs on the `held` GPUs (`affected_gpus`) at `start` (the onset), those that started
    on them up to `until`, and those that ended up to ENDED_BEFORE_S before the onset; with
    `crosses`, only the jobs it says the fault's path carries (`Paths.crosses`)."""
    hits: list[JobHit] = []
    seen: set[str] = set()
    for node in sorted(held):
        for name in schedule.by_node.get(node, ()):
            if name in seen:
                continue
            seen.add(name)  # what follows is the job's, whichever of its nodes it is met on
            job = schedule.jobs[name]
            on = sum(gpus_on(job, n, held[n]) for n in job.nodes if n in held)
            if not on:
                continue
            if job.start <= start < job.end:
                when = AT_ONSET
            elif start < job.start <= until:
                when = STARTED_WHILE_OPEN
            elif start - ENDED_BEFORE_S <= job.end <= start:
                when = ENDED_BEFORE
            else:
                continue
            if crosses is not None and not crosses(job):
                continue
            end = None if math.isinf(job.end) else job.end
            hits.append(JobHit(name, when, on, job.gpus, job.start, end))
    hits.sort(key=lambda j: (WHEN_ORDER.index(j.when), -j.gpus_total, j.job))
    return Blast(start, until, hits)


def radius(
    g: TopologyGraph, schedule: Schedule, root: str, affected: Iterable[str], start: float, until: float
) -> Blast:
    """The jobs an incident rooted at `root` hits from `start` (its onset) to `until`: for a switch
    by path (the jobs with GPUs under a leaf, those whose traffic crosses a spine), else those on
    the affected GPUs and on the nodes that depend on the root (the module's docstring)."""
    if root in g and g.kind(root) in SWITCHES:
        below = paths(g, root)
        crosses = below.crosses if g.kind(root) == "spine" else None
        return jobs_hit(schedule, dict.fromkeys(below.below), start, until, crosses)
    return jobs_hit(schedule, affected_gpus(g, root, affected), start, until)


__all__ = [
    "AT_ONSET",
    "ENDED_BEFORE",
    "ENDED_BEFORE_S",
    "STARTED_WHILE_OPEN",
    "Blast",
    "JobHit",
    "Paths",
    "affected_gpus",
    "gpus_on",
    "jobs_hit",
    "nodes_under",
    "onset",
    "paths",
    "radius",
]
