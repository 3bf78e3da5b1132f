"""Dead letters: input we could not use, kept with the reason, never dropped in silence."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Source:
    """Where a line came from, so an operator can find it again."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    stage: str  # "decode" | "validate" | "lateness"
    reason: str
    line: bytes
    source: Source | None = None

    def to_json(self) -> bytes:
        try:
            text: dict[str, str] = {"line": self.line.decode("utf-8")}
        except UnicodeDecodeError:
            text = {"line_base64": base64.b64encode(self.line).decode("ascii")}
        body: dict[str, object] = {"stage": self.stage, "reason": self.reason, **text}
        if self.source is not None:
            body["source"] = {
                "topic": self.source.topic,
                "partition": self.source.partition,
                "offset": self.source.offset,
            }
        return json.dumps(body, ensure_ascii=False, sort_keys=True).encode()

    @staticmethod
    def from_json(raw: bytes) -> DeadLetter:
        body = json.loads(raw)
        line = body["line"].encode() if "line" in body else base64.b64decode(body["line_base64"])
        src = body.get("source")
        source = Source(src["topic"], int(src["partition"]), int(src["offset"])) if src else None
        return DeadLetter(body["stage"], body["reason"], line, source)

    @property
    def category(self) -> str:
        """A short, stable label for counting (the reason up to its first detail)."""
        head = self.reason.split(" at column")[0]
        for cut in (":", " for ", " '", " ("):
            head = head.split(cut)[0]
        return head
