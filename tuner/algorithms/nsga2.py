"""NSGA-II on DEAP (Deb et al. 2002): the multi-objective search of a Pareto objective.

It reuses the GA's chromosome, crossover, mutation and repair (tuner/genetic.py) and replaces its
selection: parents and offspring together are sorted into non-dominated fronts and the next parents
are chosen by front, then by crowding distance (DEAP's ``selNSGA2``); mating is a binary tournament on
(front, crowding). Fitness is the vector of losses each trial was told (``Observation.vector``, one
per metric of the Pareto objective); told a plain loss (a single-metric objective), it is a GA with
NSGA-II's selection. As in the GA, a generation is one batch of asks, an offspring measured before
costs nothing, and a failed configuration gets the worst vector seen plus a margin.
"""

from __future__ import annotations

import random
from typing import Annotated, Any

from deap import base, creator, tools
from pydantic import Field
from pydantic.dataclasses import dataclass

from storetune.search_spaces import Config
from storetune.tuner.algorithms.genetic import GeneticAlgorithm, _diversity


@dataclass(frozen=True)
class Params:
    # parents kept per generation (and offspring bred); 10 beat 20 on SS-J, SS-O and SS-A at 100 evaluations
    # (10 seeds; bench/pareto.py), so the benchmark there is not independent of this choice
    population_size: Annotated[int, Field(ge=4)] = 10
    crossover_rate: Annotated[float, Field(ge=0, le=1)] = 0.9  # probability that a pair of parents is crossed
    mutation_rate: Annotated[float, Field(ge=0, le=1)] = 0.15  # probability that a gene mutates


def _individual_class(objectives: int) -> Any:
    """DEAP's creator registers classes globally: one fitness class per number of objectives."""
    name = f"StoreTuneMO{objectives}"
    if not hasattr(creator, name):
        creator.create(f"{name}Fitness", base.Fitness, weights=(-1.0,) * objectives)
        creator.create(name, list, fitness=getattr(creator, f"{name}Fitness"))
    return getattr(creator, name)


class NSGA2(GeneticAlgorithm):
    name = "nsga2"
    Params = Params  # type: ignore[assignment]
    whole_batches = True
    multi_objective = True

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        self._parents: list[Any] = []
        self._offspring: list[Any] = []

    def _tell(self, observation: Any) -> None:
        pass

    # --- fitness --------------------------------------------------------------------------------------
    def _vectors(self) -> dict[Config, tuple[float, ...]]:
        return {o.config: o.vector if o.vector is not None else (o.loss,)
                for o in self.observations if o.loss is not None}

    def _evaluate_all(self, population: list[Any]) -> None:
        """Each individual's fitness: its told vector; an unmeasured or failed one, the worst seen plus a margin."""
        vectors = self._vectors()
        if vectors:
            columns = list(zip(*vectors.values()))
            penalty = tuple(max(c) + (max(c) - min(c) or abs(max(c)) or 1.0) for c in columns)
        else:
            penalty = None
        for ind in population:
            v = vectors.get(self._decode(ind))
            if v is None:
                v = penalty if penalty is not None else (0.0,)
            ind.fitness.values = v

    # --- evolution ------------------------------------------------------------------------------------
    def _next_generation(self) -> None:
        size = self.params.population_size
        objectives = len(next(iter(self._vectors().values()), (0.0,)))
        cls = _individual_class(objectives)
        if not self._offspring and not self._parents:
            configs = self.fresh(size)
            self._offspring = [cls(self._individual(c)) for c in configs]
        else:
            pool = [cls(ind) for ind in self._parents + self._offspring]
            unique: dict[Config, Any] = {}
            for ind in pool:
                unique.setdefault(self._decode(ind), ind)
            pool = list(unique.values())
            self._evaluate_all(pool)
            with self._deap_random():
                self._parents = tools.selNSGA2(pool, min(size, len(pool)))
                rank = {}
                for level, front in enumerate(tools.sortNondominated(self._parents, len(self._parents))):
                    for ind in front:
                        rank[id(ind)] = level
                tools.emo.assignCrowdingDist(self._parents)

                def key(ind: Any) -> tuple[int, float]:
                    return (rank[id(ind)], -ind.fitness.crowding_dist)

                children = []
                while len(children) < size:
                    a, b = random.sample(self._parents, 2) if len(self._parents) > 1 else (self._parents[0],) * 2
                    children.append(cls(min(a, b, key=key)))
                for a, b in zip(children[::2], children[1::2]):
                    if random.random() < self.params.crossover_rate:
                        tools.cxUniform(a, b, indpb=0.5)
                for child in children:
                    self._mutate(child)
            self._offspring = children
        configs = [self._decode(ind) for ind in self._offspring]
        self.diversity.append(_diversity(configs))
        self._queue = list(dict.fromkeys(c for c in configs if not self.known(c)))
