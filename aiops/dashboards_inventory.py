"""`aiops dashboards inventory`: every panel of dashboards/json as one table row (dashboard,
panel, what it reads, the question it answers), the text of docs/dashboards.md.

Generated from the JSON, never written by hand: tests/unit/test_dashboards_inventory.py fails when
the document and the dashboards disagree (a panel added, renamed or dropped without the
inventory being made again). What a panel reads is taken from its InfluxQL (the measurements after
FROM, the fields its functions and SELECT name, less the names it gives with AS); the question is
its description, which every panel carries (test_a_dashboard_survives_grafanas_schema keeps the
key, this module refuses a panel without one).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops.dashboards_push import DASHBOARDS

MEASUREMENT = re.compile(r'FROM\s+"(\w+)"')
FUNCTION_FIELD = re.compile(r'\b\w+\(\s*"([^"]+)"')
SELECTED = re.compile(r'SELECT\s+((?:"[^"]+"\s*(?:AS\s+"[^"]+"\s*)?,?\s*)+)FROM', re.IGNORECASE)
QUOTED = re.compile(r'"([^"]+)"')
ALIAS = re.compile(r'\bAS\s+"([^"]+)"', re.IGNORECASE)
VARIABLE = re.compile(r"\$\{?(\w+)|\[\[(\w+)\]\]")
MACROS = frozenset({"timeFilter", "__timeFilter", "__interval", "interval", "__interval_ms", "tag_severity"})

HEADER = """# Dashboards: every panel and the question it answers

Generated from `dashboards/json/*.json` by `aiops dashboards inventory --out docs/dashboards.md`;
`tests/unit/test_dashboards_inventory.py` fails when a panel is missing here or this text is not
what the dashboards make. *Reads* is the InfluxDB measurement and the fields the panel's queries
name; *variables* are the template variables a panel's queries filter on, with their default.
"""


class InventoryError(ValueError):
    """A dashboard the inventory cannot describe (a panel without a description)."""


@dataclass(frozen=True)
class PanelRow:
    dashboard: str  # its title
    file: str
    panel_id: int
    title: str
    kind: str  # the panel type (stat, timeseries, table, ...)
    reads: str  # measurement: fields; ...
    variables: tuple[str, ...]
    question: str  # the panel's description

    @property
    def key(self) -> str:
        """How a row is told apart in the document: its file and panel id."""
        return f"{self.file}#{self.panel_id}"


def panels(items: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """Every panel of a dashboard's `panels`, those inside collapsed rows too, rows first."""
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def reads(queries: Sequence[str]) -> str:
    """`measurement: field, field; ...` of the queries, in the order they name them."""
    by_measurement: dict[str, list[str]] = {}
    for query in queries:
        # the fields are read by the innermost SELECT (the last in the text: an outer query of a
        # subquery selects the names the inner one gave)
        inner = query[query.upper().rfind("SELECT") :]
        fields = FUNCTION_FIELD.findall(inner)
        for selected in SELECTED.findall(inner):
            fields += QUOTED.findall(ALIAS.sub("", selected))
        measurements = MEASUREMENT.findall(inner) or ["?"]
        held = by_measurement.setdefault(measurements[-1], [])
        held += [f for f in dict.fromkeys(fields) if f not in held]
    return "; ".join(f"{m}: {', '.join(f)}" if f else m for m, f in by_measurement.items())


def _defaults(board: dict[str, Any]) -> dict[str, str]:
    out = {}
    for v in board.get("templating", {}).get("list", []):
        if v.get("type") == "query" and v.get("includeAll") and not v.get("allValue") and v.get("hide") == 2:
            out[v["name"]] = "hidden: the k its query ranks"  # a top-k variable ("All" = every value found)
        elif v.get("type") == "query":
            out[v["name"]] = "All" if v.get("includeAll") else "first value"
        else:
            current = (v.get("current") or {}).get("value") or v.get("query", "")
            out[v["name"]] = str(current)
    return out


def rows(files: Sequence[Path]) -> list[PanelRow]:
    """One row per panel (not the rows that group them) of each dashboard file, in file order."""
    out = []
    for path in files:
        board = json.loads(path.read_text(encoding="utf-8"))
        defaults = _defaults(board)
        for panel in panels(board["panels"]):
            if panel.get("type") == "row":
                continue
            description = str(panel.get("description") or "").strip()
            if not description:
                raise InventoryError(f"{path.name}: panel {panel.get('id')} {panel.get('title')!r} has no description")
            queries = [str(t.get("query", "")) for t in panel.get("targets", [])]
            used = {a or b for q in queries for a, b in VARIABLE.findall(q)} - MACROS
            out.append(
                PanelRow(
                    dashboard=str(board["title"]),
                    file=path.name,
                    panel_id=int(panel["id"]),
                    title=str(panel["title"]),
                    kind=str(panel["type"]),
                    reads=reads(queries),
                    variables=tuple(f"${n} ({defaults[n]})" for n in sorted(used) if n in defaults),
                    question=description,
                )
            )
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown(files: Sequence[Path] | None = None) -> str:
    """The inventory as Markdown: a section per dashboard, a table row per panel."""
    chosen = sorted(DASHBOARDS.glob("*.json")) if files is None else list(files)
    out = [HEADER]
    by_file: dict[str, list[PanelRow]] = {}
    for row in rows(chosen):
        by_file.setdefault(row.file, []).append(row)
    total = sum(map(len, by_file.values()))
    out.append(f"{len(by_file)} dashboards, {total} panels.\n")
    for file, panels in by_file.items():
        out.append(f"## {panels[0].dashboard} (`{file}`)\n")
        out.append("| id | panel | type | reads | variables | the question it answers |")
        out.append("|---:|---|---|---|---|---|")
        for r in panels:
            out.append(
                f"| {r.panel_id} | {_cell(r.title)} | {r.kind} | {_cell(r.reads)} | "
                f"{_cell(', '.join(r.variables)) or '-'} | {_cell(r.question)} |"
            )
        out.append("")
    return "\n".join(out)


def missing(document: str, files: Sequence[Path] | None = None) -> list[str]:
    """The panels (file#id title) that have no row in `document` under their dashboard's section."""
    chosen = sorted(DASHBOARDS.glob("*.json")) if files is None else list(files)
    sections = {
        m.group(1): m.group(2) for m in re.finditer(r"^## .*?\(`([^`]+)`\)\n(.*?)(?=^## |\Z)", document, re.S | re.M)
    }
    return [
        f"{r.key} {r.title}"
        for r in rows(chosen)
        if f"\n| {r.panel_id} | {_cell(r.title)} |" not in "\n" + sections.get(r.file, "")
    ]


__all__ = ["InventoryError", "PanelRow", "markdown", "missing", "reads", "rows"]
