"""A genetic algorithm on DEAP: tournament selection, uniform crossover, per-gene mutation, model immigrants.

A chromosome holds one gene per parameter, active or not; the space's ``repair`` turns it into a
valid configuration (conditions resolved, or the nearest configuration of a table). One generation
is one batch of asks. An offspring that was measured before takes its known fitness and costs no
evaluation; a generation with nothing new to measure gets random immigrants.

Each generation also takes ``model_immigrants`` children that were not bred: the configurations a ridge
regression of every measurement so far ranks best among ``model_candidates`` random unmeasured ones (a
surrogate-assisted GA; Jin 2011). Breeding alone cannot leave a basin whose neighbourhood says nothing of
where the best configurations are (SQL_AllMeasurements, bench/SEARCH.md, "GA's trap, and the model
immigrants that free it"); a linear model reads the small effects the options have on their own, and its
picks, bred from in turn, carry those options into the population.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import combinations
from typing import Annotated, Any

import numpy as np
from deap import base, creator, tools

from pydantic import Field
from pydantic.dataclasses import dataclass

from storetune.search_spaces import Config, Kind
from storetune.tuner.algorithms.base import LIST_LIMIT, Observation, Tuner

if not hasattr(creator, "StoreTuneFitness"):  # DEAP's creator registers classes globally
    creator.create("StoreTuneFitness", base.Fitness, weights=(-1.0,))
    creator.create("StoreTuneIndividual", list, fitness=creator.StoreTuneFitness)

MAX_BARREN_GENERATIONS = 20  # generations without a new configuration before immigrants fill one


@dataclass(frozen=True)
class Params:
    population_size: Annotated[int, Field(ge=2)] = 10  # 20 generations in a 200-evaluation budget (measured best on BDBC, see bench/SEARCH.md)
    crossover_rate: Annotated[float, Field(ge=0, le=1)] = 0.8  # probability that a pair of parents is crossed
    mutation_rate: Annotated[float, Field(ge=0, le=1)] = 0.1  # probability that a gene mutates
    tournament_size: Annotated[int, Field(ge=1)] = 3
    elitism: Annotated[int, Field(ge=0)] = 1  # best individuals carried over unchanged
    # evaluations without a new best before the population is re-seeded at random around its elite
    # (CHC's cataclysm); 0: never
    restart_patience: Annotated[int, Field(ge=0)] = 0
    # children of each generation replaced by a linear model's best-ranked unmeasured configurations, and how
    # many random unmeasured configurations it ranks (chosen on SQL_AllMeasurements and BDBC, bench/SEARCH.md)
    model_immigrants: Annotated[int, Field(ge=0)] = 3
    model_candidates: Annotated[int, Field(ge=1)] = 500
    # ordinals of 3 to this many values are also encoded one-hot for that model, so that it can rank an interior
    # value best (7z's Xval 4 of 0-5); linear only, its picks sat at the ends of every ordinal (bench/SEARCH.md)
    model_onehot: Annotated[int, Field(ge=0)] = 20


class GeneticAlgorithm(Tuner):
    name = "ga"
    Params = Params
    whole_batches = True  # a generation is bred from its members' fitness: none may still be in flight

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        if self.params.population_size < 2:
            raise ValueError("ga:population_size must be at least 2")
        self._random_state = random.Random(self.seed).getstate()
        self._population: list[Any] = []
        self._queue: list[Config] = []  # configurations of the current generation still to ask
        self.diversity: list[float] = []  # per generation: mean share of genes two individuals differ in
        self._seeds: list[Config] = []  # warm-start configurations for the first generation
        self._since_best = 0  # evaluations since the last new best
        self.restarts = 0
        self._members: list[Config] | None = None  # a listed space, for the model immigrants
        self._encoded: np.ndarray | None = None
        self._listed: bool | None = None  # whether the space is small enough to list (counted once)
        self._rows: dict[Config, np.ndarray] = {}  # each told configuration's encoding, for the model's fit
        self._taken: set[Config] = set()  # asked by the current ask() call, not yet known

    def warm_start(self, observations: Any) -> None:
        super().warm_start(observations)
        scored = sorted((o for o in self.observations if o.loss is not None), key=lambda o: o.loss)
        self._seeds = [o.config for o in scored[: self.params.population_size // 2]]

    # --- ask/tell -------------------------------------------------------------------------------------
    def _ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        barren = 0
        while len(out) < n:
            self._queue = [c for c in self._queue if not self.known(c) and c not in out]
            if self._queue:
                out.append(self._queue.pop(0))
                continue
            if barren >= MAX_BARREN_GENERATIONS:
                fresh = self.fresh(n - len(out), out)
                if not fresh:
                    break
                out += fresh
                continue
            self._taken = set(out)  # asked in this call, not yet known: no model immigrant may repeat them
            self._next_generation()
            barren = 0 if any(c not in out for c in self._queue) else barren + 1
        return out

    def _tell(self, observation: Observation) -> None:
        # fitness is read from the told losses when the next generation is bred; here only stagnation
        best = self.best
        self._since_best = 0 if best is not None and best.config == observation.config else self._since_best + 1

    # --- evolution ------------------------------------------------------------------------------------
    def _next_generation(self) -> None:
        size = self.params.population_size
        patience = self.params.restart_patience
        if self._population and patience and self._since_best >= patience:
            self._evaluate(self._population)
            elite = [self._decode(ind) for ind in tools.selBest(self._population, self.params.elitism)]
            self._seeds, self._population, self._since_best = elite, [], 0
            self.restarts += 1
        if not self._population:
            configs = list(self._seeds) + self.fresh(size - len(self._seeds), self._seeds)
            self._population = [self._individual(c) for c in configs]
        else:
            self._evaluate(self._population)
            with self._deap_random():
                elite = tools.selBest(self._population, self.params.elitism)
                parents = tools.selTournament(self._population, size - len(elite), self.params.tournament_size)
                children = [creator.StoreTuneIndividual(p) for p in parents]
                for a, b in zip(children[::2], children[1::2]):
                    if random.random() < self.params.crossover_rate:
                        tools.cxUniform(a, b, indpb=0.5)
                for child in children:
                    self._mutate(child)
            for j, config in enumerate(self._model_immigrants(min(self.params.model_immigrants, len(children)))):
                children[len(children) - 1 - j] = self._individual(config)
            self._population = [creator.StoreTuneIndividual(e) for e in elite] + children
        configs = [self._decode(ind) for ind in self._population]
        self.diversity.append(_diversity(configs))
        self._queue = list(dict.fromkeys(c for c in configs if not self.known(c)))

    def _model_immigrants(self, k: int) -> list[Config]:
        """The k configurations a ridge regression of the warped losses on the encoded options (a weight per
        option, and per value of a small ordinal) ranks best among ``model_candidates`` random unmeasured ones
        (a listed space's, or fresh draws). Ridge, not BO's Gaussian process: it costs a millisecond, and
        what it must read here is the options' effects on their own."""
        told = [o for o in self.observations if o.loss is not None]
        if k == 0 or len(told) < 5:
            return []
        from sklearn.linear_model import Ridge

        onehot = self.params.model_onehot
        new = [o.config for o in told if o.config not in self._rows]
        self._rows.update(zip(new, self.space.encode_many(new, onehot)))  # each configuration encoded once
        X = np.array([self._rows[o.config] for o in told])
        model = Ridge(alpha=1.0).fit(X, np.array([self.warp(o.loss) for o in told]))
        if self._listed is None:
            self._listed = self.space.finite and self.space.cardinality() <= LIST_LIMIT
        if self._listed:
            if self._members is None:
                self._members = list(self.space.enumerate())
                self._encoded = self.space.encode_many(self._members, onehot)
            free = np.array([i for i, c in enumerate(self._members) if not self.known(c) and c not in self._taken],
                            dtype=int)
            if len(free) > self.params.model_candidates:
                free = self.rng.choice(free, size=self.params.model_candidates, replace=False)
            candidates, encoded = [self._members[i] for i in free], self._encoded[free]
        else:
            candidates = self.fresh(self.params.model_candidates, list(self._taken))
            encoded = self.space.encode_many(candidates, onehot)
        if not candidates:
            return []
        return [candidates[i] for i in np.argsort(model.predict(encoded))[:k]]

    def _evaluate(self, population: list[Any]) -> None:
        """Fitness from the told losses; a failed or unmeasured individual gets the worst seen."""
        losses = [o.loss for o in self.observations if o.loss is not None]
        penalty = (max(losses) + self.loss_scale()) if losses else 0.0
        for ind in population:
            loss = self.told_loss(self._decode(ind))
            ind.fitness.values = (penalty if loss is None else loss,)

    def _mutate(self, child: list[Any]) -> None:
        """Per-gene mutation; a mutant the space refuses is drawn again, at most 10 times."""
        original = list(child)
        for _ in range(10):
            for i, p in enumerate(self.space.parameters):
                if random.random() < self.params.mutation_rate:
                    others = [v for v in p.domain() if v != child[i]] if p.kind is not Kind.REAL else None
                    child[i] = others[random.randrange(len(others))] if others else p.sample(self.rng)
            if self.space.repair(dict(zip(self.space.names, child))) is not None:
                return
            child[:] = original

    def _individual(self, config: Config) -> Any:
        return creator.StoreTuneIndividual([config.get(p.name, p.default) for p in self.space.parameters])

    def _decode(self, individual: list[Any]) -> Config:
        config = self.space.repair(dict(zip(self.space.names, individual)))
        return config if config is not None else self.space.default()

    @contextmanager
    def _deap_random(self) -> Iterator[None]:
        """DEAP draws from the global `random`: give it this GA's own stream, and put it back."""
        saved = random.getstate()
        random.setstate(self._random_state)
        try:
            yield
        finally:
            self._random_state = random.getstate()
            random.setstate(saved)


def _diversity(configs: list[Config]) -> float:
    """The mean, over pairs of individuals, of the share of parameters in which they differ."""
    if len(configs) < 2:
        return 0.0
    shares = []
    for a, b in combinations(configs, 2):
        keys = a.keys() | b.keys()
        shares.append(sum(a.get(k) != b.get(k) for k in keys) / len(keys))
    return float(np.mean(shares))
