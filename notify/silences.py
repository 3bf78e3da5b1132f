"""Silences made at run time (through the HTTP API), kept in the outbox's database so they
survive a restart. They match like the config's silences; `expire` ends one now."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from notify.config import Match, Silence

_SCHEMA = """
CREATE TABLE IF NOT EXISTS silences (
    id TEXT PRIMARY KEY,
    match TEXT NOT NULL,
    starts REAL NOT NULL,
    ends REAL NOT NULL,
    comment TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created REAL NOT NULL
);
"""


@dataclass(frozen=True)
class MadeSilence:
    id: str
    match: dict[str, list[str]]
    starts: float
    ends: float
    comment: str
    created_by: str
    created: float

    def state(self, now: float) -> str:
        return "pending" if now < self.starts else "active" if now < self.ends else "expired"

    def record(self, now: float) -> dict[str, Any]:
        return {**asdict(self), "status": self.state(now)}


class SilenceStore:
    def __init__(self, db: Any, lock: threading.Lock, clock: Callable[[], float] = time.time) -> None:
        self._db, self._lock, self.clock = db, lock, clock
        with self._lock:
            self._db.executescript(_SCHEMA)
        self._cache: tuple[float, list[Silence]] | None = None

    def create(self, match: Match, starts: float, ends: float, comment: str, created_by: str) -> MadeSilence:
        if ends <= starts:
            raise ValueError("a silence must end after it starts")
        made = MadeSilence(
            id="sil-" + secrets.token_hex(6),
            match=match.model_dump(exclude_none=True),
            starts=starts,
            ends=ends,
            comment=comment,
            created_by=created_by,
            created=self.clock(),
        )
        with self._lock:
            self._db.execute(
                "INSERT INTO silences VALUES (?, ?, ?, ?, ?, ?, ?)",
                (made.id, json.dumps(made.match), starts, ends, comment, created_by, made.created),
            )
        self._cache = None
        return made

    def all(self) -> list[MadeSilence]:
        with self._lock:
            rows = list(self._db.execute("SELECT * FROM silences ORDER BY created"))
        return [MadeSilence(r[0], json.loads(r[1]), *r[2:]) for r in rows]

    def get(self, silence_id: str) -> MadeSilence | None:
        return next((s for s in self.all() if s.id == silence_id), None)

    def expire(self, silence_id: str) -> MadeSilence | None:
        """End a silence now; None if there is no such silence."""
        now = self.clock()
        with self._lock:
            cur = self._db.execute("UPDATE silences SET ends = MIN(ends, ?) WHERE id = ?", (max(now, 0.0), silence_id))
        self._cache = None
        return self.get(silence_id) if cur.rowcount else None

    def as_config(self) -> list[Silence]:
        """Every silence in the config's shape (the router checks each against event time);
        re-read at most once a second."""
        now = time.monotonic()
        if self._cache is None or now - self._cache[0] > 1.0:
            made = [
                Silence(match=Match(**s.match), starts=s.starts, ends=s.ends, comment=s.comment) for s in self.all()
            ]
            self._cache = (now, made)
        return self._cache[1]
