"""The payload each chat service documents, and its signature where it has one.

- DingTalk custom robot: `markdown` message; with a secret, `timestamp` (ms) and `sign` =
  urlencode(base64(HMAC-SHA256(key=secret, msg=f"{timestamp}\\n{secret}"))) in the query string.
- Feishu/Lark custom bot: `interactive` card; with a secret, `timestamp` (s) and `sign` =
  base64(HMAC-SHA256(key=f"{timestamp}\\n{secret}", msg=b"")) in the body (note: key and message
  the other way round from DingTalk's).
- WeCom group robot: `markdown` message (content up to 4,096 bytes); no signature.
- Slack incoming webhook: `text` (the notification fallback) and `blocks`.
- Microsoft Teams Workflows webhook: a message with one Adaptive Card attachment (version 1.4).
- webhook: our JSON (the incident records, the key); with a secret, an `X-Aiops-Signature:
  sha256=<hex HMAC of timestamp.body>` header and `X-Aiops-Timestamp`, verifiable by the receiver.

Every data field (entity, kind, job, evidence, action, incident id, key) is written as text by
notify.safe_text (one line, no link, image, mention, tag or emphasis it did not have as words);
the only links are the service's own incident and Grafana URLs. Each message is bounded to the
size its service documents, whole lines kept from the top and a note saying it was cut, the key
always last: DingTalk's markdown text 20,000 bytes, WeCom's markdown content 4,096 bytes, a Feishu
card 30 KB, a Teams message 28 KB, Slack's text 40,000 characters, a section 3,000, a header 150
and 50 blocks a message. The webhook's `incidents` stay exact structured data for a program (JSON
escapes them); its `title` and `text` are written as the chat formats write them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from notify.message import Notification
from notify.safe_text import (
    cut_note,
    fit,
    header_value,
    json_len,
    markdown_text,
    slack_text,
    utf8_len,
    valid_unicode,
)

# each service's documented limit (see the module docstring)
DINGTALK_MAX_BYTES = 20_000
WECOM_MAX_BYTES = 4096
FEISHU_MAX_BYTES = 30_000
TEAMS_MAX_BYTES = 28_000
SLACK_MAX_TEXT, SLACK_MAX_SECTION, SLACK_MAX_HEADER, SLACK_MAX_BLOCKS = 40_000, 3000, 150, 50


@dataclass(frozen=True)
class Request:
    url: str
    body: bytes
    headers: dict[str, str]


def dingtalk_sign(timestamp_ms: int, secret: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest))


def feishu_sign(timestamp_s: int, secret: str) -> str:
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def webhook_sign(timestamp_s: int, body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), str(timestamp_s).encode() + b"." + body, hashlib.sha256).hexdigest()


def build(kind: str, url: str, note: Notification, secret: str | None = None, now: float | None = None) -> Request:
    """The HTTP request for `note` to a receiver of `kind` at `url` (signed now: the services
    refuse signatures older than an hour, so a retried message is signed again)."""
    now = time.time() if now is None else now
    body: dict[str, Any]
    headers = {"Content-Type": "application/json; charset=utf-8", "Idempotency-Key": header_value(note.key)}
    if kind == "dingtalk":
        title = note.title_as(markdown_text)
        lines = fit(
            [f"### {title}", "", *note.markdown_lines()],
            ["", note.key_line()],
            DINGTALK_MAX_BYTES,
            utf8_len,
            cut_note("DingTalk", "20,000 bytes"),
        )
        body = {"msgtype": "markdown", "markdown": {"title": title, "text": "\n".join(lines)}}
        if secret:
            ts = int(now * 1000)
            url += ("&" if "?" in url else "?") + f"timestamp={ts}&sign={dingtalk_sign(ts, secret)}"
    elif kind == "feishu":
        body = {"msg_type": "interactive", "card": _feishu_card(note)}
        if secret:
            ts = int(now)
            body = {"timestamp": str(ts), "sign": feishu_sign(ts, secret), **body}
    elif kind == "wecom":
        lines = fit(
            [f"### {note.title_as(markdown_text)}", *note.markdown_lines()],
            ["", note.key_line()],
            WECOM_MAX_BYTES,
            utf8_len,
            cut_note("WeCom", "4,096 bytes"),
        )
        body = {"msgtype": "markdown", "markdown": {"content": "\n".join(lines)}}
    elif kind == "slack":
        # the notification's fallback text is mrkdwn too: written as Slack text
        body = {"text": note.title_as(slack_text)[:SLACK_MAX_TEXT], "blocks": _slack_blocks(note)}
    elif kind == "teams":
        body = {  # the card is bounded to TEAMS_MAX_BYTES less this envelope
            "type": "message",
            "attachments": [
                {
                    "contentType": "application/vnd.microsoft.card.adaptive",
                    "contentUrl": None,
                    "content": _adaptive_card(note),
                }
            ],
        }
    elif kind == "webhook":
        body = webhook_body(note)
        raw = json.dumps(body, sort_keys=True).encode()
        if secret:
            ts = int(now)
            headers["X-Aiops-Timestamp"] = str(ts)
            headers["X-Aiops-Signature"] = webhook_sign(ts, raw, secret)
        return Request(url, raw, headers)
    else:
        raise ValueError(f"no format for receiver kind {kind!r}")
    return Request(url, json.dumps(body, ensure_ascii=False).encode(), headers)


def webhook_body(note: Notification) -> dict[str, Any]:
    """Our JSON: `incidents` exact, for a program to read (JSON escapes every character, and only
    lone surrogates, which no UTF-8 decoder accepts, become U+FFFD); `title` and `text` for a
    person, written as the chat formats write them."""
    u = valid_unicode
    return {
        "version": "1",
        "key": u(note.key),
        "receiver": u(note.receiver),
        "title": note.title_as(markdown_text),
        "text": note.markdown(),  # the same words the chat services show
        "repeat": note.repeat,
        "incidents": [
            {
                "incident_id": u(n.incident_id),
                "status": u(n.status),
                # the record's own state, as the page, the list and the API say it ("no data":
                # open, its entity silent since no_data_since)
                "state": u(n.state),
                "no_data_since": n.no_data_since,
                "episode": n.episode,
                "grown_from": n.grown_from,  # said again: its GPUs hit grew from this (notify/router.py grew)
                "severity": u(n.severity),
                "kind": u(n.kind),
                "root": u(n.root),
                "confidence": n.confidence,
                "at": n.at,
                "jobs": [u(j) for j in n.jobs],
                "gpus_hit": n.gpus_hit,
                "affected_count": n.affected_count,
                "evidence": [u(e) for e in n.evidence],
                "action": u(n.action),
                "plans": [u(p) for p in n.plans],  # its plans in the audit log, as the page lists them
                "links": dict(n.links),
            }
            for n in note.incidents
        ],
    }


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode()) + 1  # and its comma


_FEISHU_TEMPLATE = {"critical": "red", "major": "orange", "minor": "yellow", "warning": "blue"}


def _feishu_card(note: Notification) -> dict[str, Any]:
    worst = note.worst
    template = "green" if worst.status == "resolved" else _FEISHU_TEMPLATE.get(worst.severity, "grey")
    div: dict[str, Any] = {"tag": "div", "text": {"tag": "lark_md", "content": ""}}
    elements: list[dict[str, Any]] = [div]
    links = [(label, url) for n in note.incidents for label, url in n.links]
    if links:
        elements.append(
            {
                "tag": "action",
                "actions": [
                    {"tag": "button", "text": {"tag": "plain_text", "content": label}, "url": url, "type": "default"}
                    for label, url in links[:4]
                ],
            }
        )
    card = {
        "config": {"wide_screen_mode": True},
        # plain_text is not parsed, but it is written as lark_md is, so a header can't differ
        "header": {"template": template, "title": {"tag": "plain_text", "content": note.title_as(markdown_text)}},
        "elements": elements,
    }
    # the card's own bytes, the signature fields (about 80) and the message envelope come off the limit
    room = FEISHU_MAX_BYTES - len(json.dumps({"msg_type": "interactive", "card": card}, ensure_ascii=False).encode())
    lines = fit(note.markdown_lines(), ["", note.key_line()], room - 200, json_len, cut_note("Feishu", "30 KB card"))
    div["text"]["content"] = "\n".join(lines)
    return card


def _mrkdwn(text: str) -> dict[str, Any]:
    # verbatim: Slack does not autolink URLs or parse channel names and mentions in it
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _slack_blocks(note: Notification) -> list[dict[str, Any]]:
    # a plain_text header is not parsed; it is written as markdown text so no form of it can be
    title = note.title_as(markdown_text)
    if len(title) > SLACK_MAX_HEADER:
        title = title[: SLACK_MAX_HEADER - 1] + "…"
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": title}}]
    # two blocks an incident; the header, a note of the cut and the key take three of the 50
    shown = note.incidents[: (SLACK_MAX_BLOCKS - 3) // 2]
    for n in shown:
        lines = [f"*{label}*: {value}" for label, value in n.facts(slack_text)]
        lines += [f"• {slack_text(e)}" for e in n.evidence]
        text = "\n".join(fit(lines, [], SLACK_MAX_SECTION, len, cut_note("Slack", "3,000-character section")))
        blocks.append({"type": "section", "text": _mrkdwn(text)})
        if n.links:
            blocks.append(
                {
                    "type": "actions",
                    "elements": [
                        {"type": "button", "text": {"type": "plain_text", "text": label}, "url": url}
                        for label, url in n.links
                    ],
                }
            )
    if len(note.incidents) > len(shown):
        more = len(note.incidents) - len(shown)
        cut = cut_note("Slack", "50 blocks") + f" (+{more} incidents)"
        blocks.append({"type": "context", "elements": [_mrkdwn(cut)]})
    blocks.append({"type": "context", "elements": [_mrkdwn(note.key_line(slack_text))]})
    return blocks


def _adaptive_card(note: Notification) -> dict[str, Any]:
    """TextBlock text and Fact title and value are Markdown in Teams (HTML is not): every data
    field is written as markdown text. Incidents are added while the message stays within
    TEAMS_MAX_BYTES; the rest is named by a note."""
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": note.title_as(markdown_text),
            "weight": "Bolder",
            "size": "Medium",
            "wrap": True,
            "color": "Good" if note.worst.status == "resolved" else "Attention",
        },
    ]
    actions: list[dict[str, Any]] = []
    key = {"type": "TextBlock", "text": note.key_line(), "isSubtle": True, "size": "Small"}
    note_block = {"type": "TextBlock", "text": cut_note("Teams", "28 KB") + " (+9,999 incidents)", "wrap": True}
    # the envelope (attachment, schema, version) is about 250 bytes; 1 KB is kept for it
    used = _json_bytes(body) + _json_bytes(key) + _json_bytes(note_block) + 1024
    for i, n in enumerate(note.incidents):
        part: list[dict[str, Any]] = [
            {"type": "FactSet", "facts": [{"title": label, "value": value} for label, value in n.facts(markdown_text)]}
        ]
        part += [{"type": "TextBlock", "text": markdown_text(e), "wrap": True, "isSubtle": True} for e in n.evidence]
        buttons = [{"type": "Action.OpenUrl", "title": label, "url": url} for label, url in n.links]
        cost = _json_bytes(part) + _json_bytes(buttons)
        if used + cost > TEAMS_MAX_BYTES:
            more = len(note.incidents) - i
            body.append({**note_block, "text": cut_note("Teams", "28 KB") + f" (+{more} incidents)"})
            break
        used += cost
        body += part
        actions += buttons
    body.append(key)
    return {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": actions,
    }
