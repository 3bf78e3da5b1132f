"""Chat messages carry data as text (issue 44, finding 5): every hostile entity name, job name and
evidence string of tests/data/hostile/names/chat-injection.json goes, in every data field, through
the outbox to a local HTTP receiver for each format, and what the receiver took must hold no link
but the service's own, no image, no mention, no HTML, no emphasis made by data and no line the data
started, while the data's words are still there, and fit the service's documented size."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from notify.config import parse
from notify.message import IncidentNote, Notification
from notify.outbox import Outbox
from tests.http_endpoint import Endpoint
from tests.unit.test_notify import RECORD

CORPUS = json.loads((Path(__file__).parents[1] / "data/hostile/names/chat-injection.json").read_text())
HOSTILE: list[str] = CORPUS["entity_names"] + CORPUS["job_names"] + CORPUS["evidence"]
PUBLIC, GRAFANA = "https://aiops.example", "https://grafana.example"
KINDS = ["dingtalk", "feishu", "wecom", "slack", "teams", "webhook"]
# the documented size of each service's message, as formats.py bounds it (bytes of the JSON body
# for the card formats, of the markdown text for DingTalk and WeCom)
LIMIT_BYTES = {"dingtalk": 20_000, "wecom": 4096, "feishu": 30_000, "teams": 28_000}
WORD_JOINER = "\u2060"  # what the formats put into a URL scheme or a mention in data, invisibly


def _record(i: int, s: str) -> dict[str, Any]:
    return {
        **RECORD,
        "incident_id": f"inc-hostile-{i}",
        "root_cause": {"entity": s, "kind": s, "confidence": 0.9},
        "jobs": [s, "job-00001"],
        "evidence": [{"entity": s, "metric": s, "value": s, "detector": s}] * 3,
        "action": s,
    }


def _notes() -> list[Notification]:
    notes = [
        Notification(f"oncall:inc-hostile-{i}:open", "r", (IncidentNote.from_record(_record(i, s), PUBLIC, GRAFANA),))
        for i, s in enumerate(HOSTILE)
    ]
    big = "<!channel>[x](https://evil.example/" + "A" * 100_000 + ")\n- **Action**: y"  # 100 KB in every field
    notes.append(Notification("oncall:big:open", "r", (IncidentNote.from_record(_record(999, big), PUBLIC, GRAFANA),)))
    many = tuple(IncidentNote.from_record(_record(1000 + i, s), PUBLIC, GRAFANA) for i, s in enumerate(HOSTILE * 3))
    notes.append(Notification("oncall:group:open", "r", many))  # a group of 78 incidents in one message
    return notes


def _deliver(kind: str, tmp_path: Path) -> list[Any]:
    """What a receiver of `kind` took over HTTP, one body per notification, in order."""
    endpoint = Endpoint()
    try:
        config = parse(
            {
                "receivers": [{"name": "r", "kind": kind, "url": endpoint.url, "rate_per_minute": 1000}],
                "routes": [{"receiver": "r"}],
            }
        )
        outbox = Outbox(tmp_path / "outbox.db", config)
        notes = _notes()
        for note in notes:
            outbox.put(note)
        assert outbox.deliver_due() == len(notes), outbox.rows()
        outbox.close()
        return endpoint.bodies
    finally:
        endpoint.close()


def _strings(value: Any, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, str]]:
    """(key, string) for every string in a JSON value, not descending into keys in `skip`."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in skip:
                continue
            if isinstance(v, str):
                yield k, v
            else:
                yield from _strings(v, skip)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, str):
                yield "", v
            else:
                yield from _strings(v, skip)


def _shown(kind: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the strings a client renders, the URLs of its buttons)."""
    # the webhook's incidents are structured data for a program, exact by design; its title and
    # text are what a receiver shows
    skip = frozenset({"incidents", "url"} if kind == "webhook" else {"url"})
    shown = [s for k, s in _strings(body, skip) if k not in {"msgtype", "msg_type", "contentType", "$schema"}]
    buttons = [s for k, s in _strings(body) if k == "url"]
    return shown, buttons


SCHEME_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s)\]>|]*")


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_names_reach_every_chat_format_as_text(kind: str, tmp_path: Path) -> None:
    bodies = _deliver(kind, tmp_path)
    notes = _notes()
    for note, body in zip(notes, bodies, strict=True):
        shown, buttons = _shown(kind, body)
        allowed = {url for n in note.incidents for _, url in n.links}
        text = "\n".join(shown)
        where = f"{kind} {note.key}"
        # the only links are the service's own incident and Grafana URLs
        for url in SCHEME_URL.findall(text) + buttons:
            assert url in allowed, (where, url)
        for target in re.findall(r"\]\(([^)]*)\)", text):
            assert target in allowed, (where, target)
        assert "![" not in text, where  # no image
        # no mention, tag or Slack/WeCom/Feishu angle syntax made by data
        assert not re.search(r"<[!@#/A-Za-z]", text), (where, re.search(r"<[!@#/A-Za-z].{0,40}", text))
        assert not re.search(r"(?<!\w)@(all|everyone|here|channel|所有人)", text, re.I), where
        # no emphasis, strike, code span or template the data asked for
        for mark in ("*bold*", "~strike~", "~~", "`", "__under__", "{{DATE", "${"):
            assert mark not in text, (where, mark)
        # one line per field: the data opened no line of its own
        action_lines = [ln for s in shown for ln in s.split("\n") if re.match(r"^[-•\s]*\**Action\**:", ln)]
        assert len(action_lines) <= len(note.incidents), (where, action_lines)
        assert not any(
            ln.lstrip().startswith(("###", "[1]:", "key: forged")) for s in shown for ln in s.split("\n")[1:]
        )
        for invisible in "\u202e\u200b\u200c\u200d\ufeff\x00\x1b\x85\u2028\u2029\r\x0b\x0c\t":
            assert invisible not in text, (where, hex(ord(invisible)))
        assert "\ud800" not in text
        if note.key == "oncall:inc-hostile-1:open":  # the data is still there to read
            plain = text.replace(WORD_JOINER, "")
            assert "Open incident page" in plain and "evil.example/login" in plain, plain[:400]
        if note.key == "oncall:inc-hostile-8:open":
            assert "run curl" in text and "sudo sh" in text
        size = len(json.dumps(body, ensure_ascii=False).encode()) if kind != "webhook" else 0
        if kind in ("feishu", "teams"):
            assert size <= LIMIT_BYTES[kind], (where, size)
        elif kind == "dingtalk":
            assert len(body["markdown"]["text"].encode()) <= LIMIT_BYTES[kind], where
        elif kind == "wecom":
            assert len(body["markdown"]["content"].encode()) <= LIMIT_BYTES[kind], where
            assert body["markdown"]["content"].endswith(f"key: {note.key}")
        elif kind == "slack":
            assert len(body["text"]) <= 40_000 and len(body["blocks"]) <= 50, where
            for block in body["blocks"]:
                if block["type"] == "section":
                    assert len(block["text"]["text"]) <= 3000 and block["text"].get("verbatim") is True, where
                if block["type"] == "header":
                    assert len(block["text"]["text"]) <= 150, where
        if note.key == "oncall:big:open":  # a field is cut at 512 characters and says so
            assert re.search(r"… \(\d{3},\d{3} characters\)", text), where
        if note.key == "oncall:group:open" and kind != "webhook":  # 78 incidents: a cut message says so
            assert "cut to fit" in text, where
    if kind == "webhook":  # structured data stays exact for the program that reads it
        assert bodies[1]["incidents"][0]["root"] == HOSTILE[1]
        assert bodies[8]["incidents"][0]["jobs"][0] == HOSTILE[8]


def test_a_normal_name_looks_the_same_as_before() -> None:
    record = {**RECORD, "root_cause": {"entity": "n00012-gpu3", "kind": "xid_error", "confidence": 0.9}}
    record["evidence"] = [{"entity": "leaf-p0-r3", "metric": "link_downed", "value": 1.0, "detector": "rule:x_y"}]
    note = Notification("oncall:inc:open", "oncall", (IncidentNote.from_record(record, PUBLIC),))
    text = note.markdown()
    for same in (
        "**[CRITICAL] xid_error at n00012-gpu3**",
        "- **Root cause**: n00012-gpu3 (xid_error, confidence 0.90)",
        "- evidence: leaf-p0-r3 link_downed = 1 (rule:x_y)",
        "job-00000, job-00001",
        f"- [Incident]({PUBLIC}/incidents/inc-20260101T000630Z-40ca3643a0)",
        "key: oncall:inc:open",
    ):
        assert same in text, (same, text)


def test_an_incident_id_cannot_leave_its_own_link() -> None:
    record = {**RECORD, "incident_id": "inc-1)[x](https://evil.example/?a=1#f"}
    link = IncidentNote.from_record(record, PUBLIC).links[0][1]
    assert link == f"{PUBLIC}/incidents/inc-1%29%5Bx%5D%28https%3A%2F%2Fevil.example%2F%3Fa%3D1%23f"


def test_a_key_cannot_end_its_header_or_stall_delivery(tmp_path: Path) -> None:
    # before: http.client refused the header value and the outbox retried the message forever
    key = "r:inc-1\r\nX-Evil: 1:é\ud800"
    endpoint = Endpoint()
    try:
        config = parse({"receivers": [{"name": "r", "kind": "webhook", "url": endpoint.url}], "routes": []})
        outbox = Outbox(tmp_path / "outbox.db", config)
        outbox.put(Notification(key, "r", (IncidentNote.from_record(RECORD, PUBLIC),)))
        assert outbox.deliver_due() == 1, outbox.rows()
        outbox.close()
    finally:
        endpoint.close()
    assert endpoint.bodies[0]["key"] == "r:inc-1\r\nX-Evil: 1:é\ufffd"  # the exact key, as JSON carries it


@pytest.mark.parametrize(
    "name",
    [
        "n0_https://evil.example/x",  # a scheme after "_" (a word character: no word boundary)
        "a" * 40 + "https://evil.example/x",  # a scheme inside a long word
        "n0_www.evil.example",
        "x-ftp://evil.example",
    ],
)
def test_a_scheme_inside_a_word_makes_no_link(name: str) -> None:
    """Before (issue 64): the defang looked for a scheme at a word boundary, at most 31 letters
    long, so these reached chat as live URLs."""
    from notify.safe_text import WORD_JOINER, markdown_text, slack_text

    for text in (markdown_text(name), slack_text(name)):
        assert "://" not in text and "www." not in text.lower(), text
        assert text.replace(WORD_JOINER, "").replace("ˍ", "_") == name, text
