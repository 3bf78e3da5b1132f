"""Entity ids -> dense integer indices, so per-entity state can live in numpy arrays."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from numpy.typing import NDArray

# An entity id is a host name (at most 255 octets, RFC 1123) with a short suffix ("-gpu3",
# "-nic7-optic"); twice that leaves room for any site's naming and stays far below InfluxDB's
# 64 KB series key. Longer, or with a control character (a NUL ends a C string in every tool
# downstream), it is not an id: the line is dead-lettered.
MAX_ID_LENGTH = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def id_problem(entity_id: str) -> str | None:
    """Why a string cannot be an entity id, or None."""
    if len(entity_id) > MAX_ID_LENGTH:
        return f"entity id of {len(entity_id):,} characters (the limit is {MAX_ID_LENGTH})"
    bad = _CONTROL.search(entity_id)
    if bad:
        return f"entity id with a control character (U+{ord(bad.group()):04X})"
    return None


class EntityIndex:
    """Assigns each distinct id a stable index, in order of first appearance.

    Lookups are vectorised (pandas' hash table); new ids are appended, so indices never move and
    arrays indexed by them only ever grow.
    """

    def __init__(self) -> None:
        self._index = pd.Index([], dtype=object)

    def __len__(self) -> int:
        return len(self._index)

    def __getstate__(self) -> dict[str, object]:
        """Checkpoints hold the ids as a plain array (no pandas objects in a checkpoint)."""
        return {"ids": self.ids}

    def __setstate__(self, state: dict[str, NDArray[np.object_]]) -> None:
        self._index = pd.Index(np.asarray(state["ids"], dtype=object), dtype=object)

    @property
    def ids(self) -> NDArray[np.object_]:
        return np.asarray(self._index, dtype=object)

    def lookup(self, ids: NDArray[np.object_]) -> NDArray[np.int64]:
        """Indices of known ids, -1 for unknown ones."""
        return np.asarray(self._index.get_indexer(pd.Index(ids, dtype=object)), dtype=np.int64)

    def add(self, ids: NDArray[np.object_]) -> NDArray[np.int64]:
        """Indices of ids, registering the ones not seen before."""
        found = self.lookup(ids)
        missing = found < 0
        if missing.any():
            new = pd.unique(np.asarray(ids, dtype=object)[missing])
            self._index = self._index.append(pd.Index(new, dtype=object))
            found[missing] = self._index.get_indexer(pd.Index(np.asarray(ids, dtype=object)[missing], dtype=object))
        return found
