"""A fixed grid of configurations, for sweeps that build a dataset rather than search.

The grid is a seeded sample stratified over some parameters (by default the file system and the
I/O scheduler): ``per_stratum`` configurations for every combination of their values that the space
allows, drawn uniformly among the valid configurations of that combination. The strata take turns,
so that a sweep stopped early has still covered every combination.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from storetune.search_spaces import Config
from storetune.tuner.algorithms.base import Tuner

MAX_DRAWS = 100_000


@dataclass(frozen=True)
class Params:
    per_stratum: Annotated[int, Field(ge=1)] = 3
    strata: str = "fs,io_scheduler"  # comma-separated parameters; those absent from the space are ignored


class GridSearch(Tuner):
    name = "grid"
    Params = Params

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        self.strata = [s for s in self.params.strata.split(",") if s in space]
        self.grid = stratified_sample(self, self.params.per_stratum, self.strata)

    def capacity(self) -> tuple[int, str]:
        """How many configurations the grid holds, and why that many (the grid, not the space, runs out)."""
        over = (f"each combination of {', '.join(self.strata)} the space allows" if self.strata else
                f"the whole space: none of the strata {self.params.strata} is one of its parameters")
        return len(self.grid), f"per_stratum {self.params.per_stratum} for {over}"

    def _ask(self, n: int) -> list[Config]:
        return [c for c in self.grid if not self.known(c)][:n]


def stratified_sample(tuner: Tuner, per_stratum: int, strata: list[str]) -> list[Config]:
    space = tuner.space
    cells = list(itertools.product(*(space[s].domain() for s in strata))) if strata else [()]
    chosen: dict[tuple, list[Config]] = {cell: [] for cell in cells}
    for _ in range(MAX_DRAWS):
        if all(len(v) >= per_stratum for v in chosen.values()):
            break
        config = space.sample(tuner.rng)
        cell = tuple(config.get(s) for s in strata)
        if cell in chosen and len(chosen[cell]) < per_stratum and config not in chosen[cell]:
            chosen[cell].append(config)
    rounds = itertools.zip_longest(*chosen.values())
    return [c for round_ in rounds for c in round_ if c is not None]
