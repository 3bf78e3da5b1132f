"""Entity ids -> dense integer indices, so per-entity state can live in numpy arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from vocab.ids import entity_refusal


def id_problem(entity_id: str) -> str | None:
    """Why a string cannot be an entity id (the grammar of `vocab.ids`, naming its rule), or None."""
    refusal = entity_refusal(entity_id)
    return None if refusal is None else str(refusal)


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


__all__ = ["EntityIndex", "id_problem"]
