"""Random search without replacement: the baseline every other algorithm must beat."""

from __future__ import annotations

from typing import Any


from storetune.search_spaces import Config
from storetune.tuner.algorithms.base import Tuner

# Finite spaces up to this size are shuffled once; larger ones are sampled with rejection.
SHUFFLE_LIMIT = 200_000
MAX_REJECTIONS = 1_000


class RandomSearch(Tuner):
    """Draws configurations uniformly, never one that was already asked or told.

    On a finite space the order is a seeded permutation, so a resumed campaign (told what it had
    measured) continues exactly where an uninterrupted one would have.
    """

    name = "random"

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        size = space.cardinality() if space.finite else None
        self._order: list[Config] | None = None
        if size is not None and size <= SHUFFLE_LIMIT:
            members = list(space.enumerate())
            self._order = [members[i] for i in self.rng.permutation(len(members))]
        self._cursor = 0

    def _ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        if self._order is not None:
            while len(out) < n and self._cursor < len(self._order):
                config = self._order[self._cursor]
                self._cursor += 1
                if not self.known(config) and config not in out:
                    out.append(config)
            return out
        misses = 0
        while len(out) < n and misses < MAX_REJECTIONS:
            config = self.space.sample(self.rng)
            if self.known(config) or config in out:
                misses += 1
            else:
                out.append(config)
        return out
