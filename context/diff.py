"""What a new topology would change against the one in use: entities and edges added and
removed, and entities that moved (in both, with other edges: a NIC cabled to another leaf port,
a node placed in another rack)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Edge = tuple[str, str, str]  # (source, relation, target)


@dataclass(slots=True)
class TopologyDiff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    edges_added: list[Edge] = field(default_factory=list)
    edges_removed: list[Edge] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.moved or self.edges_added or self.edges_removed)

    def lines(self, limit: int = 50) -> list[str]:
        out = [f"{len(self.added)} entities added, {len(self.removed)} removed, {len(self.moved)} moved; "
               f"{len(self.edges_added)} edges added, {len(self.edges_removed)} removed"]  # fmt: skip
        for sign, items in (("+", self.added), ("-", self.removed), ("~", self.moved)):
            out += [f"  {sign} {e}" for e in items[:limit]]
        for sign, edges in (("+", self.edges_added), ("-", self.edges_removed)):
            out += [f"  {sign} {s} -{r}-> {t}" for s, r, t in edges[:limit]]
        return out


def _edges(topology: dict[str, Any]) -> set[Edge]:
    return {(str(link["source"]), str(link["relation"]), str(link["target"])) for link in topology["links"]}


def diff(old: dict[str, Any], new: dict[str, Any]) -> TopologyDiff:
    """Both as node-link dicts (what topology.json holds)."""
    old_ids = {n["id"]: n.get("kind") for n in old["nodes"]}
    new_ids = {n["id"]: n.get("kind") for n in new["nodes"]}
    old_edges, new_edges = _edges(old), _edges(new)
    added_edges, removed_edges = new_edges - old_edges, old_edges - new_edges
    kept = set(old_ids) & set(new_ids)

    def attachments(edges: set[Edge]) -> dict[str, set[tuple[str, bool]]]:
        out: dict[str, set[tuple[str, bool]]] = {}
        for s, r, t in edges:
            out.setdefault(s, set()).add((r, True))
            out.setdefault(t, set()).add((r, False))
        return out

    # an entity moved if it lost an edge and gained one of the same relation and direction (a
    # cable now on another port, a node in another rack), not merely because something was added
    # beside it (a leaf with one more port)
    lost, gained = attachments(removed_edges), attachments(added_edges)
    moved = sorted(e for e in kept if old_ids[e] != new_ids[e] or lost.get(e, set()) & gained.get(e, set()))
    return TopologyDiff(
        sorted(set(new_ids) - set(old_ids)),
        sorted(set(old_ids) - set(new_ids)),
        moved,
        sorted(added_edges),
        sorted(removed_edges),
    )


__all__ = ["TopologyDiff", "diff"]
