"""The topology around a root cause, drawn server-side as SVG: what an on-call engineer needs to
see to believe the root (the leaf with its cables and hosts, the plane of a PFC storm with its
origin NIC, the rack and cooling loop of a cooling fault, the node with its PSUs and GPUs), the
sick entities filled, the root outlined.

The picture is rows of boxes (one row per layer: switches above, hosts below), each box an entity
with its id in `data-entity` and its state in `class` ("entity", plus "sick", "root"), edges as
lines between rows. A row longer than `MAX_PER_ROW` keeps, in this order, the root, the entities
on the way from the root to the sick ones, the sick ones, and the entities cabled to what is
already kept (a kept NIC's host); the rest are summarised truthfully in the row's label ("+16 more,
14 of them sick"). So the root is always drawn, and the caption counts what is drawn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape

from rca.graph import TopologyGraph
from vocab.ids import port_label

MAX_PER_ROW = 16
BOX_W, BOX_H, GAP_X, ROW_H, MARGIN = 96, 28, 8, 80, 16


@dataclass
class Picture:
    """What the drawing shows: rows of entities (label, ids), the edges between them, the root,
    and which shown entities are sick (themselves, or a part of them: a leaf's port, a NIC's
    optic, a node's GPU)."""

    rows: list[tuple[str, list[str]]]
    edges: set[tuple[str, str]] = field(default_factory=set)
    root: str = ""
    sick: set[str] = field(default_factory=set)
    hidden: dict[str, int] = field(default_factory=dict)  # row label -> entities left out
    hidden_sick: dict[str, int] = field(default_factory=dict)  # row label -> sick ones among them
    # each affected entity -> the box that stands for it (itself or what holds it), before trimming
    placed: dict[str, str] = field(default_factory=dict)

    def shown(self) -> set[str]:
        return {e for _, ids in self.rows for e in ids}

    def counts(self, affected: Iterable[str]) -> dict[str, int]:
        """What the caption says: of the affected entities, how many are drawn (as themselves or
        in a box that holds them), how many stand in the rows' left-out parts, how many lie
        outside this view; and how many sick boxes are drawn."""
        shown = self.shown()
        drawn = hidden = outside = 0
        for entity in dict.fromkeys(affected):
            box = self.placed.get(entity)
            if box is None:
                outside += 1
            elif box in shown:
                drawn += 1
            else:
                hidden += 1
        return {
            "drawn": drawn,
            "hidden": hidden,
            "outside": outside,
            "sick_boxes": len(self.sick & shown),
            "boxes": len(shown),
        }


def _unique(items: Iterable[str | None]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def _switch_view(g: TopologyGraph, switch: str) -> tuple[list[tuple[str, list[str]]], set[tuple[str, str]]]:
    """A switch, the switches it is cabled to (above for a leaf, below for a spine) and the NICs
    and hosts on its downlinks."""
    ups: list[str] = []
    nics: list[str] = []
    for _, far in g.cables(switch):
        if far is None:
            continue
        if g.kind(far) == "nic":
            nics.append(far)
        elif g.kind(far) == "port" and (other := g.parent(far)) is not None:
            ups.append(other)
    ups, nics = _unique(ups), _unique(nics)
    nodes = _unique(g.node_of(n) for n in nics)
    edges = {(switch, u) for u in ups} | {(switch, n) for n in nics}
    edges |= {(n, node) for n in nics if (node := g.node_of(n)) is not None}
    if g.kind(switch) == "spine":  # a spine: its leaves below it
        return [(g.kind(switch), [switch]), ("leaf", ups), ("nic", nics), ("node", nodes)], edges
    return [("spine", ups), (g.kind(switch), [switch]), ("nic", nics), ("node", nodes)], edges


def _plane_view(g: TopologyGraph, leaf: str) -> tuple[list[tuple[str, list[str]]], set[tuple[str, str]]]:
    """A NIC's leaf as `_switch_view` draws it, with the other leaves its spines reach: the plane
    a PFC storm's pause frames spread through, or the rail a flapping link shares."""
    rows, edges = _switch_view(g, leaf)
    spines = rows[0][1]
    leaves = [leaf]
    for spine in spines:
        for _, far in g.cables(spine):
            if far is not None and g.kind(far) == "port" and (other := g.parent(far)) is not None:
                leaves.append(other)
                edges.add((spine, other))
    rows[1] = ("leaf", _unique(leaves))
    return rows, edges


def _node_view(g: TopologyGraph, node: str) -> tuple[list[tuple[str, list[str]]], set[tuple[str, str]]]:
    """A node with what powers and cools it above, its GPUs, NVSwitches and NICs below."""
    psus = g.psus_of(node)
    rack = g.ancestor(node, "rack")
    cooling = g.cooling_of(node)
    gpus, nvsw, nics = g.children(node, "gpu"), g.children(node, "nvswitch"), g.children(node, "nic")
    leaves = _unique(g.switch_of(n) for n in nics)
    rows = [
        ("cooling / rack", _unique([cooling, rack])),
        ("psu", psus),
        ("node", [node]),
        ("gpu", gpus),
        ("nvswitch", nvsw),
        ("nic", nics),
        ("leaf", leaves),
    ]
    edges = {(p, node) for p in psus} | {(node, x) for x in gpus + nvsw + nics}
    edges |= {(n, s) for n in nics if (s := g.switch_of(n)) is not None}
    if rack is not None:
        edges.add((rack, node))
        if cooling is not None:
            edges.add((cooling, rack))
    return rows, edges


def _cooling_view(g: TopologyGraph, entity: str) -> tuple[list[tuple[str, list[str]]], set[tuple[str, str]]]:
    """A cooling loop (or a rack) with the racks it cools and their nodes."""
    if g.kind(entity) == "rack":
        racks = [entity]
        loops = _unique([g.cooling_of(entity)])
    else:
        loops = [entity]
        racks = list(g.dependents(entity, kinds=["rack"])) or [
            r for r in (g.ancestor(d, "rack") for d in g.dependents(entity, kinds=["node"])) if r
        ]
        racks = _unique(racks)
    nodes = _unique(n for r in racks for n in g.children(r, "node"))
    edges = {(c, r) for c in loops for r in racks} | {(r, n) for r in racks for n in g.children(r, "node")}
    return [("cooling", loops), ("rack", racks), ("node", nodes)], edges


def neighbourhood(g: TopologyGraph, root: str, affected: Iterable[str] = ()) -> Picture:
    """The part of the topology that explains an incident rooted at `root`."""
    if root not in g:
        return Picture([("unknown", [root])], root=root, sick={root})
    kind = g.kind(root)
    if kind in ("leaf", "spine"):
        rows, edges = _switch_view(g, root)
    elif kind == "port":
        rows, edges = _switch_view(g, g.parent(root) or root)
    elif kind in ("nic", "optic", "link"):
        nic = root if kind == "nic" else g.parent(root) if kind == "optic" else None
        switch = g.switch_of(nic or root)
        rows, edges = _plane_view(g, switch) if switch else _node_view(g, g.node_of(root) or root)
    elif kind in ("cooling", "rack"):
        rows, edges = _cooling_view(g, root)
    elif (node := g.node_of(root)) is not None:
        rows, edges = _node_view(g, node)
    else:
        rows, edges = [(kind, [root])], set()
    rows = [(label, ids) for label, ids in rows if ids]
    shown = {e for _, ids in rows for e in ids}
    if root not in shown:  # an optic, a port: drawn in a row of its own beside what holds it
        holder = g.parent(root)
        while holder is not None and holder not in shown:
            holder = g.parent(holder)
        at = next((n for n, (_, ids) in enumerate(rows) if holder in ids), len(rows))
        rows.insert(at, (kind, [root]))
        if holder is not None:
            edges.add((holder, root))
    picture = Picture(rows, edges, root)
    _mark(g, picture, [root, *affected])
    _trim(picture)
    return picture


def _mark(g: TopologyGraph, picture: Picture, affected: Iterable[str]) -> None:
    """Each affected entity marks the shown entity that is it or holds it (a port its switch, an
    optic its NIC, a GPU its node when the GPUs are not shown)."""
    shown = picture.shown()
    for entity in affected:
        e: str | None = entity
        while e is not None and e not in shown:
            e = g.parent(e) if e in g else None
        if e is not None:
            picture.sick.add(e)
            picture.placed.setdefault(entity, e)


def _trim(picture: Picture) -> None:
    """Rows longer than MAX_PER_ROW keep the root, the entities on the way from it to the sick
    ones, the sick, the entities cabled to what a row nearer the root kept, then the rest in
    order; what is left out is counted (and its sick) for the row's label."""
    near: dict[str, set[str]] = {}
    for a, b in picture.edges:
        near.setdefault(a, set()).add(b)
        near.setdefault(b, set()).add(a)
    # breadth-first from the root: each entity's distance and the entity it was reached from
    dist: dict[str, int] = {picture.root: 0}
    came: dict[str, str] = {}
    queue = deque([picture.root])
    while queue:
        e = queue.popleft()
        for f in sorted(near.get(e, ())):
            if f not in dist:
                dist[f], came[f] = dist[e] + 1, e
                queue.append(f)
    on_path: set[str] = set()
    for s in picture.sick:
        step = came.get(s)
        while step is not None and step != picture.root:
            on_path.add(step)
            step = came.get(step)
    far = len(dist) + 1
    kept_all: set[str] = set()
    order = sorted(
        range(len(picture.rows)), key=lambda r: min((dist.get(e, far) for e in picture.rows[r][1]), default=far)
    )
    kept_rows: dict[int, list[str]] = {}
    for r in order:
        label, ids = picture.rows[r]
        if len(ids) <= MAX_PER_ROW:
            kept_rows[r] = ids
            kept_all.update(ids)
            continue
        index = {e: n for n, e in enumerate(ids)}

        def rank(e: str, index: dict[str, int] = index) -> tuple[bool, bool, bool, bool, int, int]:
            return (
                e != picture.root,
                e not in on_path,
                e not in picture.sick,
                not (near.get(e, set()) & kept_all),
                dist.get(e, far),
                index[e],
            )

        kept = sorted(sorted(ids, key=rank)[:MAX_PER_ROW], key=index.__getitem__)
        left = [e for e in ids if e not in set(kept)]
        picture.hidden[label] = len(left)
        picture.hidden_sick[label] = sum(e in picture.sick for e in left)
        kept_rows[r] = kept
        kept_all.update(kept)
    picture.rows = [(label, kept_rows[r]) for r, (label, _) in enumerate(picture.rows)]
    shown = picture.shown()
    picture.edges = {(a, b) for a, b in picture.edges if a in shown and b in shown}


def hidden_text(picture: Picture, label: str) -> str:
    """A row's left-out part in words: "+16 more nic, 14 of them sick"."""
    n = picture.hidden.get(label, 0)
    if not n:
        return ""
    sick = picture.hidden_sick.get(label, 0)
    return f"+{n} more {label}" + (f", {sick} of them sick" if sick else ", none sick")


def _label(entity: str, row: list[str]) -> str:
    """A box's text: the id without what the whole row shares (`n00032-nic5` -> `n00032-nic5`,
    but `leaf-p0-r1:p12` among its ports -> `p12`), cut to fit."""
    text = port_label(entity) or entity
    return text if len(text) <= 16 else "…" + text[-15:]


def to_svg(picture: Picture, title: str = "") -> str:
    """The picture as a standalone SVG element (inline in a page, or a file)."""
    widest = max((len(ids) for _, ids in picture.rows), default=1)
    width = max(2 * MARGIN + widest * (BOX_W + GAP_X), 480) + 120
    height = 2 * MARGIN + len(picture.rows) * ROW_H
    where: dict[str, tuple[float, float]] = {}
    boxes: list[str] = []
    for r, (label, ids) in enumerate(picture.rows):
        y = MARGIN + r * ROW_H
        span = len(ids) * (BOX_W + GAP_X) - GAP_X
        x0 = 120 + (width - 120 - span) / 2
        boxes.append(f'<text class="row-label" x="{MARGIN}" y="{y + BOX_H / 2 + 4:.0f}">{escape(label)}</text>')
        if more := hidden_text(picture, label):
            boxes.append(
                f'<text class="more" data-row="{escape(label)}" data-hidden="{picture.hidden[label]}" '
                f'data-hidden-sick="{picture.hidden_sick.get(label, 0)}" x="{MARGIN}" '
                f'y="{y + BOX_H + 14:.0f}">{escape(more)}</text>'
            )
        for i, entity in enumerate(ids):
            x = x0 + i * (BOX_W + GAP_X)
            where[entity] = (x + BOX_W / 2, y)
            states = (
                ["entity"] + (["sick"] if entity in picture.sick else []) + (["root"] if entity == picture.root else [])
            )
            boxes.append(
                f'<g class="{" ".join(states)}" data-entity="{escape(entity)}">'
                f"<title>{escape(entity)}{' (root cause)' if entity == picture.root else ''}"
                f"{' (sick)' if entity in picture.sick and entity != picture.root else ''}</title>"
                f'<rect x="{x:.0f}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="4"/>'
                f'<text x="{x + BOX_W / 2:.0f}" y="{y + BOX_H / 2 + 4:.0f}">{escape(_label(entity, ids))}</text></g>'
            )
    lines = []
    for a, b in sorted(picture.edges):
        (xa, ya), (xb, yb) = where[a], where[b]
        if ya > yb:
            (xa, ya), (xb, yb) = (xb, yb), (xa, ya)
        sick = a in picture.sick and b in picture.sick
        lines.append(
            f'<line class="edge{" sick" if sick else ""}" x1="{xa:.0f}" y1="{ya + BOX_H}" x2="{xb:.0f}" y2="{yb}"/>'
        )
    style = (
        ".entity rect{fill:#e8f0fe;stroke:#5f6368;stroke-width:1}"
        ".entity.sick rect{fill:#f28b82;stroke:#a50e0e}"
        ".entity.root rect{stroke:#202124;stroke-width:3.5}"
        ".entity text{font:11px sans-serif;text-anchor:middle;fill:#202124}"
        ".row-label{font:12px sans-serif;fill:#5f6368}.more{font:11px sans-serif;fill:#a50e0e}"
        ".edge{stroke:#9aa0a6;stroke-width:1}.edge.sick{stroke:#d93025;stroke-width:1.5}"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="topology" role="img" '
        f'viewBox="0 0 {width:.0f} {height}" width="{width:.0f}" height="{height}" '
        'style="max-width:100%;height:auto">'
        f"<title>{escape(title or 'topology around ' + picture.root)}</title><style>{style}</style>"
        + "".join(lines)
        + "".join(boxes)
        + "</svg>"
    )


__all__ = ["MAX_PER_ROW", "Picture", "hidden_text", "neighbourhood", "to_svg"]
