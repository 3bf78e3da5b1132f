"""Ranking root causes: which suspect explains the symptoms best.

A suspect's score adds up
- how many symptomatic entities it explains (one each, however many metrics they trip),
- whether it shows its own signature (the leaf went silent, the PSU reports failed, the optic's
  receive power sagged, the NIC is the one *sending* pause frames): the symptom that only the
  root has,
- for the things many entities hang off (a leaf, a PSU, a cooling loop), how much of what
  depends on it is sick: a leaf with all 32 NICs down is the cause, a leaf with one bad NIC is
  not; below half, what a group suspect explains counts for less, so the specific one wins,
- a small prior by kind from published failure statistics, to break ties.
Then a greedy cover: the best suspect takes the symptoms it explains, the next best the rest.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rca.graph import TopologyGraph
from rca.symptoms import PRIOR, SOFT, Suspects, Symptom, gpu_kind, nic_kind
from vocab import registry

# Per kind, the symptom families on its own entity that confirm it, and what that is worth
# (kinds without one: any hard symptom of its own); from the registry.
SIGNATURE: dict[str, tuple[frozenset[str], float]] = {
    k.name: (k.signature, k.signature_weight) for k in registry.KINDS.values() if k.signature
}
GROUP_WEIGHT = 3.0  # full coverage of a group suspect is worth this many extra entities


@dataclass(frozen=True, slots=True)
class Candidate:
    entity: str
    kind: str
    score: float
    explains: frozenset[Symptom] = field(default_factory=frozenset)


@dataclass
class Context:
    """What is going on around the symptoms being ranked."""

    # entity -> the symptom families it showed recently (any collection of family names)
    families: Mapping[str, Collection[str]] = field(default_factory=dict)
    talkers: dict[int, set[str]] = field(default_factory=dict)  # fabric plane -> NICs sending pauses
    congested: dict[int, set[str]] = field(default_factory=dict)  # fabric plane -> spines waiting
    # suspects per symptom, worked out once per tick (a storm asks about thousands, several times)
    suspects: dict[Any, list[tuple[str, str]]] = field(default_factory=dict)


class Ranker:
    def __init__(self, graph: TopologyGraph) -> None:
        self.graph = graph
        self.suspects = Suspects(graph)

    def rank(self, symptoms: Iterable[Symptom], ctx: Context) -> list[Candidate]:
        """Every suspect of these symptoms, best first."""
        explains: dict[str, dict[str, set[Symptom]]] = {}  # entity -> kind -> symptoms
        for s in symptoms:
            for entity, kind in self.suspects.of(s, ctx):
                explains.setdefault(entity, {}).setdefault(kind, set()).add(s)
        ranked = []
        for entity, by_kind in explains.items():
            # one candidate per entity: a GPU that is both hot and slow is one suspect
            found = set().union(*by_kind.values())
            kind = self._kind(entity, by_kind)
            ranked.append(Candidate(entity, kind, self.score(entity, kind, found, ctx), frozenset(found)))
        ranked.sort(key=lambda c: (-c.score, c.entity, c.kind))
        return ranked

    def _kind(self, entity: str, by_kind: dict[str, set[Symptom]]) -> str:
        if len(by_kind) == 1:
            return next(iter(by_kind))
        if entity in self.graph and self.graph.kind(entity) == "gpu":
            own = set().union(*by_kind.values())
            return gpu_kind({s.family for s in own if s.entity == entity}, {s.hint for s in own if s.hint})
        if entity in self.graph and self.graph.kind(entity) == "nic":
            named = nic_kind({s.hint for s in set().union(*by_kind.values())})
            if named in by_kind:
                return named
        return max(by_kind, key=lambda k: (len(by_kind[k]), PRIOR.get(k, 0.0), k))

    def cover(self, symptoms: Iterable[Symptom], ctx: Context) -> list[tuple[Candidate, list[Candidate]]]:
        """Greedy: (root, its ranked alternatives) per group of symptoms, until all are explained."""
        remaining = {s for s in symptoms if s.family not in SOFT}
        out: list[tuple[Candidate, list[Candidate]]] = []
        while remaining:
            ranked = self.rank(remaining, ctx)
            best = ranked[0]
            rivals = [c for c in ranked if c.explains & best.explains]
            out.append((best, rivals))
            remaining -= best.explains
        return out

    def score(self, entity: str, kind: str, found: set[Symptom], ctx: Context) -> float:
        entities = {s.entity for s in found if s.family not in SOFT}
        coverage = self._coverage(entity, kind, entities)
        others = float(len(entities - {entity}))
        if coverage is not None:
            # a group suspect explaining a few of its many dependents is a coincidence, not a
            # cause: below half coverage what it explains counts for less and less
            others = others * min(1.0, 2.0 * coverage)
        score = others + (entity in entities) + PRIOR.get(kind, 0.0)
        own = set(ctx.families.get(entity, ()))
        wanted, weight = SIGNATURE.get(kind, (None, 2.0))
        if (wanted is None and own - SOFT) or (wanted is not None and own & wanted):
            score += weight
        if coverage is not None:
            score += GROUP_WEIGHT * coverage - 1.0
        return round(score, 4)

    def _coverage(self, entity: str, kind: str, sick: set[str]) -> float | None:
        g = self.graph
        if entity not in g:
            return None
        group = registry.KINDS[kind].coverage if kind in registry.KINDS else ""
        if group == "cables":
            # the share of its cables that went bad, seen from either end
            cables = g.cables(entity)
            hit = sum(1 for port, far in cables if port in sick or far in sick)
            return hit / len(cables) if cables else 1.0 if sick else 0.0
        if group == "node_gpus":  # a PSU's node, or the node itself (its fabric manager)
            node = entity if g.kind(entity) == "node" else g.parent(entity)
            gpus = g.children(node, "gpu") if node else []
            return sum(gpu in sick for gpu in gpus) / len(gpus) if gpus else None
        if group == "rack_nodes":
            nodes = g.dependents(entity, ["node"])
            sick_nodes = {n for e in sick if e in g and (n := g.node_of(e)) is not None}
            return len(sick_nodes & set(nodes)) / len(nodes) if nodes else None
        return None


__all__ = ["Candidate", "Context", "Ranker"]
