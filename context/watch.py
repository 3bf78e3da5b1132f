"""The topology file while a daemon runs: a site re-imports it when a node is added or a switch
replaced, and the daemon takes the new one without a restart."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def file_digest(path: Path) -> str | None:
    """A file's digest as `digest` takes it (None when there is no file): what a run records of
    its input, so that a truth file of another input can be told apart (show/report.py)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return digest(data)


@dataclass(slots=True)
class TopologyFile:
    """Notices a changed file (its size or modification time, then its content) and hands over
    its JSON once; a file that is not JSON yet (being written) is tried again later."""

    path: Path
    digest: str = ""
    _stamp: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        data = self.path.read_bytes()
        self.digest, self._stamp = digest(data), self._stat()

    def _stat(self) -> tuple[int, int]:
        st = os.stat(self.path)
        return st.st_size, st.st_mtime_ns

    def changed(self) -> tuple[str, dict[str, Any]] | None:
        """(digest, node-link JSON) of a new version, None while it is the same."""
        try:
            stamp = self._stat()
        except OSError:
            return None  # replaced by a rename in progress
        if stamp == self._stamp:
            return None
        try:
            data = self.path.read_bytes()
            parsed = json.loads(data)
        except (OSError, ValueError):
            return None  # half written: next time
        self._stamp = stamp
        new = digest(data)
        if new == self.digest:
            return None
        self.digest = new
        return new, parsed


__all__ = ["TopologyFile", "digest"]
