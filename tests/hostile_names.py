"""The `names` door of the hostile corpus: hostile entity names, job names, evidence, node names
and API fields, shown on the incident page, in the incident list and in every chat format. Shown
means inert: the HTML carries no tag, attribute or link the same page of a plain name lacks, and
no chat message carries a link but the service's own, an image, a mention or a line the data
opened. API fields must be refused by the API's own models and id checks (the raw HTTP path,
body limits included, is tested over a real server in tests/unit/test_api_limits.py)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

PUBLIC = "https://aiops.example"
CHAT_KINDS = ("dingtalk", "feishu", "wecom", "slack", "teams", "webhook")
SCHEME_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s)\]>|]*")
PLAIN = "n00012-gpu3"


class _Shape(HTMLParser):
    """The tags, attribute names and link targets of a page: what a browser would act on."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[tuple[str, str]] = set()
        self.links: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add((tag, ""))
        for name, value in attrs:
            self.tags.add((tag, name))
            if name in ("href", "src", "action", "formaction", "xlink:href") and value:
                self.links.add(value)


def _shape(html: str) -> _Shape:
    parser = _Shape()
    parser.feed(html)
    parser.close()
    return parser


def _record(value: str) -> dict[str, Any]:
    """An incident record as the engine writes it, with `value` in every field data fills."""
    return {
        "incident_id": "inc-20260101T000630Z-40ca3643a0",
        "opened": 1767225990.0,
        "updated": 1767225990.0,
        "resolved": None,
        "status": "open",
        "severity": "critical",
        "root_cause": {"entity": value, "kind": value, "confidence": 0.852},
        "candidates": [{"entity": value, "kind": value, "score": 0.852}],
        "affected": [value, "n00001-gpu0"],
        "jobs": [value, "job-00001"],
        "gpus_hit": 16,
        "affected_count": 2,
        "evidence": [{"at": 1767225990.0, "detector": value, "entity": value, "metric": value, "value": 1.0}],
        "action": value,
    }


def _page_problem(value: str) -> str | None:
    from aiops.api import PageContext, incident_html
    from show.page import render_list

    def pages(v: str) -> list[str]:
        record = _record(v)
        return [
            incident_html(record, [], PageContext()),
            render_list([record], href=lambda i: f"/incidents/{i}"),
        ]

    for plain, hostile in zip(pages(PLAIN), pages(value), strict=True):
        want, got = _shape(plain), _shape(hostile)
        if extra := got.tags - want.tags:
            return f"the page grew {sorted(extra)[:3]}"
        if extra_links := got.links - want.links:
            return f"the page links to {sorted(extra_links)[:3]}"
    return None


def _chat_problem(value: str) -> str | None:
    from notify.formats import build
    from notify.message import IncidentNote, Notification

    note = Notification("r:inc:open", "r", (IncidentNote.from_record(_record(value), PUBLIC),))
    allowed = {url for n in note.incidents for _, url in n.links}
    for kind in CHAT_KINDS:
        body = json.loads(build(kind, "http://127.0.0.1:9/hook", note).body)
        if kind == "webhook":  # structured data for a program, exact by design; its text is shown
            body = {k: v for k, v in body.items() if k != "incidents"}
        shown = _strings(body, frozenset({"url", "$schema"}))  # a card's schema names its format
        buttons = [u for k in ("url",) for u in _strings(_pick(body, k))]
        text = "\n".join(shown)
        if bad := [u for u in SCHEME_URL.findall(text) + buttons if u not in allowed]:
            return f"{kind}: a link from data: {bad[0][:60]}"
        if "![" in text or re.search(r"<[!@#/A-Za-z]", text):
            return f"{kind}: an image, a mention or a tag from data"
        if re.search(r"(?<!\w)@(all|everyone|here|channel)\b", text, re.I):
            return f"{kind}: an at-mention from data"
        if any(c in text for c in "\u202e\u200b\x00\x1b\r\u2028"):
            return f"{kind}: an invisible character from data"
        opened = [ln for s in shown for ln in s.split("\n") if re.match(r"^[-•\s]*\**Action\**:", ln)]
        if len(opened) > 1:
            return f"{kind}: a line the data opened: {opened[1][:60]}"
    return None


def _strings(value: Any, skip: frozenset[str] = frozenset()) -> list[str]:
    """Every string in a JSON value, leaving out the values of keys in `skip`."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in skip for s in _strings(v, skip)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v, skip)]
    return []


def _pick(value: Any, key: str) -> list[Any]:
    """The values of every `key` anywhere in a JSON value."""
    if isinstance(value, dict):
        return [v for k, v in value.items() if k == key] + [x for v in value.values() for x in _pick(v, key)]
    if isinstance(value, list):
        return [x for v in value for x in _pick(v, key)]
    return []


def _api_refusals(doc: dict[str, Any]) -> str | None:
    """Every hostile API field refused by the API's models and id checks, or why not."""
    from pydantic import ValidationError

    from aiops.api import Acknowledge, NewSilence, route_id_refusal

    for name in doc.get("names", []):
        try:
            Acknowledge(by=name)
            return f"the name {name!r} was taken"
        except ValidationError:
            pass
    for note in doc.get("notes", []):
        try:
            Acknowledge(by="alice", comment=note)
            return f"the note {note!r} was taken"
        except ValidationError:
            pass
    for ident in doc.get("incident_ids", []):
        if route_id_refusal(ident) is None:
            return f"the id {ident!r} was taken"
    for entity in doc.get("matcher_entities", []):
        try:
            NewSilence.model_validate({"match": {"entity": [entity]}, "comment": "x", "created_by": "alice"})
            return f"the matcher {entity!r} was taken"
        except ValidationError:
            pass
    return None


def _values(path: Path) -> list[str]:
    if path.suffix == ".txt":
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line]
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [s for k, v in doc.items() if k != "about" for s in _strings(v)]


def through_pages_and_chat(path: Path) -> tuple[str, str]:
    """("inert" or "refused", what was checked) or ("let-through", what got through)."""
    values = _values(path)
    if path.name == "api-bodies.json" and (problem := _api_refusals(json.loads(path.read_text(encoding="utf-8")))):
        return "let-through", problem
    if path.name == "node-names.txt":
        from vocab.ids import node_refusal

        if taken := [v for v in values if node_refusal(v) is None]:
            return "let-through", f"node names the grammar takes: {taken[:3]}"
    for value in values:
        if problem := _page_problem(value) or _chat_problem(value):
            return "let-through", f"{value[:60]!r}: {problem}"
    return "inert", f"{len(values)} hostile strings shown as text on the pages and in {len(CHAT_KINDS)} chat formats"
