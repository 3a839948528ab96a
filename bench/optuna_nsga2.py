"""Optuna's NSGA-II sampler behind StoreTune's ask/tell, the peer of bench/pareto.py.

Installed only for the benchmarks (`pip install -e '.[bench]'`). Fair to it as bench/optuna_tpe.py is
to TPE: a proposal absent from a table is replaced by the nearest valid configuration (and learnt as
a failure under its own parameters), and a proposal already measured is answered from what was
measured and asked again, so that it never spends an evaluation twice. It is told the Pareto
objective's vector of losses (``Observation.vector``).
"""

from __future__ import annotations

from typing import Annotated, Any

import optuna
from pydantic import Field
from pydantic.dataclasses import dataclass

from bench.optuna_tpe import OptunaTPE
from storetune.search_spaces import Config
from storetune.tuner.algorithms.base import Observation


@dataclass(frozen=True)
class Params:
    population_size: Annotated[int, Field(ge=2)] = 50  # Optuna's default


class OptunaNSGA2(OptunaTPE):
    name = "optuna-nsga2"
    Params = Params  # type: ignore[assignment]
    multi_objective = True

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        self._studies: dict[int, Any] = {}
        self._study = None  # created at the first ask, once the number of objectives is known
        self._vectors: dict[Config, tuple[float, ...]] = {}

    def _make_study(self, objectives: int | None = None) -> Any:
        """None until the first ask knows how many objectives there are (the base class calls it bare)."""
        if objectives is None:
            return None
        return optuna.create_study(directions=["minimize"] * objectives,
                                   sampler=optuna.samplers.NSGAIISampler(
                                       population_size=self.params.population_size, seed=self.seed))

    def _ask(self, n: int) -> list[Config]:
        if self._study is None:
            width = len(next(iter(self._vectors.values()), (0.0, 0.0)))
            self._study = self._make_study(width)
        return super()._ask(n)

    def _answer(self, config: Config) -> Any:
        vector = self._vectors.get(config)
        return None if vector is None else list(vector)

    def _value(self, observation: Observation) -> Any:
        return None if observation.vector is None else list(observation.vector)

    def _tell(self, observation: Observation) -> None:
        if observation.vector is not None:
            self._vectors[observation.config] = observation.vector
        super()._tell(observation)

    def _learn_unasked(self, config: Config, value: Any) -> None:
        """Not added to the study: its first ask sees it as measured (``_answer``), as before."""
