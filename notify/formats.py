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

WECOM_MAX_BYTES = 4096


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
    headers = {"Content-Type": "application/json; charset=utf-8", "Idempotency-Key": note.key}
    if kind == "dingtalk":
        body = {
            "msgtype": "markdown",
            "markdown": {"title": note.title, "text": f"### {note.title}\n\n" + note.markdown()},
        }
        if secret:
            ts = int(now * 1000)
            url += ("&" if "?" in url else "?") + f"timestamp={ts}&sign={dingtalk_sign(ts, secret)}"
    elif kind == "feishu":
        body = {"msg_type": "interactive", "card": _feishu_card(note)}
        if secret:
            ts = int(now)
            body = {"timestamp": str(ts), "sign": feishu_sign(ts, secret), **body}
    elif kind == "wecom":
        content = f"### {note.title}\n" + note.markdown()
        raw = content.encode()
        if len(raw) > WECOM_MAX_BYTES:  # cut on a character boundary, keep the key
            tail = f"\n…\nkey: {note.key}".encode()
            content = raw[: WECOM_MAX_BYTES - len(tail)].decode(errors="ignore") + tail.decode()
        body = {"msgtype": "markdown", "markdown": {"content": content}}
    elif kind == "slack":
        body = {"text": note.title, "blocks": _slack_blocks(note)}
    elif kind == "teams":
        body = {
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
    return {
        "version": "1",
        "key": note.key,
        "receiver": note.receiver,
        "title": note.title,
        "text": note.markdown(),  # the same words the chat services show
        "repeat": note.repeat,
        "incidents": [
            {
                "incident_id": n.incident_id,
                "status": n.status,
                "severity": n.severity,
                "kind": n.kind,
                "root": n.root,
                "confidence": n.confidence,
                "at": n.at,
                "jobs": list(n.jobs),
                "gpus_hit": n.gpus_hit,
                "affected_count": n.affected_count,
                "evidence": list(n.evidence),
                "action": n.action,
                "links": dict(n.links),
            }
            for n in note.incidents
        ],
    }


_FEISHU_TEMPLATE = {"critical": "red", "major": "orange", "minor": "yellow", "warning": "blue"}


def _feishu_card(note: Notification) -> dict[str, Any]:
    worst = note.worst
    template = "green" if worst.status == "resolved" else _FEISHU_TEMPLATE.get(worst.severity, "grey")
    elements: list[dict[str, Any]] = [{"tag": "div", "text": {"tag": "lark_md", "content": note.markdown()}}]
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
    return {
        "config": {"wide_screen_mode": True},
        "header": {"template": template, "title": {"tag": "plain_text", "content": note.title}},
        "elements": elements,
    }


def _slack_blocks(note: Notification) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": note.title[:150]}}]
    for n in note.incidents:
        text = "\n".join(f"*{label}*: {value}" for label, value in n.facts())
        text += "".join(f"\n• {e}" for e in n.evidence)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}})
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
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"key: {note.key}"}]})
    return blocks


def _adaptive_card(note: Notification) -> dict[str, Any]:
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": note.title,
            "weight": "Bolder",
            "size": "Medium",
            "wrap": True,
            "color": "Good" if note.worst.status == "resolved" else "Attention",
        },
    ]
    actions = []
    for n in note.incidents:
        body.append({"type": "FactSet", "facts": [{"title": label, "value": value} for label, value in n.facts()]})
        body += [{"type": "TextBlock", "text": e, "wrap": True, "isSubtle": True} for e in n.evidence]
        actions += [{"type": "Action.OpenUrl", "title": label, "url": url} for label, url in n.links]
    body.append({"type": "TextBlock", "text": f"key: {note.key}", "isSubtle": True, "size": "Small"})
    return {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": actions,
    }
