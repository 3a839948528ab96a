"""Simulated annealing over the space's neighbour moves, with a cooling schedule and restarts.

Written by hand: no maintained Python library anneals a discrete, conditional space behind an
ask/tell interface (scipy's dual_annealing is continuous and drives its own loop).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from storetune.search_spaces import Config
from storetune.tuner.algorithms.base import Observation, Tuner

MAX_FREE_MOVES = 200  # moves onto already-measured configurations (cache hits) per proposal


@dataclass(frozen=True)
class Params:
    initial_temperature: Annotated[float, Field(gt=0)] = 0.5  # in units of the spread of the losses seen so far
    cooling: Annotated[float, Field(gt=0, lt=1)] = 0.9  # the temperature is multiplied by this after every move
    min_temperature: Annotated[float, Field(gt=0)] = 0.01
    patience: Annotated[int, Field(ge=1)] = 30  # restart after this many moves without a new best
    restart_random: Annotated[float, Field(ge=0, le=1)] = 0.5  # share of restarts from a random configuration rather than the best


class SimulatedAnnealing(Tuner):
    """Moves to a random neighbour of the current configuration; accepts a worse one with the
    Metropolis probability exp(-delta / (scale * T)), on warped losses. Restarts when the temperature
    is spent or nothing improved for ``patience`` moves."""

    name = "sa"
    Params = Params

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        self._current: Config | None = None
        self._temperature = self.params.initial_temperature
        self._since_best = 0

    def warm_start(self, observations: Any) -> None:
        super().warm_start(observations)
        if self.best is not None:  # start from the best configuration measured before
            self._current = self.best.config

    def _ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        for _ in range(n * MAX_FREE_MOVES):
            if len(out) == n:
                break
            if self._current is None:
                start = self.fresh(1, out)
                if not start:
                    break
                out += start
                continue
            neighbours = self.space.neighbours(self._current)
            fresh = [c for c in neighbours if not self.known(c) and c not in out]
            if fresh:
                out.append(fresh[int(self.rng.integers(len(fresh)))])
                continue
            # Every neighbour was measured: walk on their known losses, which costs no evaluation.
            scored = [c for c in neighbours if self.told_loss(c) is not None]
            if not scored:
                self._restart()
                continue
            self._consider(scored[int(self.rng.integers(len(scored)))])
        return out + self.fresh(n - len(out), out)  # free moves ran out: jump somewhere new

    def _tell(self, observation: Observation) -> None:
        if observation.loss is None:
            return
        if self._current is None or self.told_loss(self._current) is None:
            self._current = observation.config
        else:
            self._consider(observation.config)
        if self.best is not None and self.best.config == observation.config:
            self._since_best = 0

    def _consider(self, candidate: Config) -> None:
        """The Metropolis step from the current configuration to a measured candidate."""
        delta = self.warp(self.told_loss(candidate)) - self.warp(self.told_loss(self._current))
        threshold = math.exp(-max(delta, 0.0) / (self.loss_scale(warped=True) * self._temperature))
        if delta <= 0 or self.rng.random() < threshold:
            self._current = candidate
        self._temperature = max(self._temperature * self.params.cooling, self.params.min_temperature)
        self._since_best += 1
        if self._since_best >= self.params.patience or self._temperature <= self.params.min_temperature:
            self._restart()

    def _restart(self) -> None:
        """Anneal again, from the best configuration so far or (with probability
        ``restart_random``) from a fresh random one."""
        best = self.best
        from_best = best is not None and self.rng.random() >= self.params.restart_random
        self._current = best.config if from_best else None
        self._temperature = self.params.initial_temperature
        self._since_best = 0
