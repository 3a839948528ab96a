"""SMAC3's hyperparameter-optimisation facade behind StoreTune's ask/tell: the second peer of the benchmarks.

Installed only for the benchmarks (`pip install -e '.[bench]'`; SMAC 2.4's random forest is scikit-learn's, so
nothing is compiled). Set up as a SMAC user would and as fair as bench/optuna_tpe.py is to TPE, with whose
protocol it shares all but two things (said below):
- each parameter is declared as the TPE peer declares it (``optuna_tpe.distribution``): a numeric ordinal of
  more than 2 values an Integer or Float, on a log scale where its values are positive and span two decades,
  the rest (categories, on/off options) categories;
- the Scenario is given the campaign's budget as ``n_trials``, which sizes SMAC's Sobol initial design
  (10 per parameter, at most a quarter of the budget), and ``deterministic=True``: a table's repeat is one
  draw, and the facade would otherwise spend evaluations re-measuring its incumbent;
- a proposal is snapped to the nearest listed value and, on a table, the nearest unmeasured configuration;
  a proposal already measured is answered from what was measured, at no cost, and SMAC is asked again;
- unlike TPE, which is told that a snapped proposal failed and learns the result under the configuration
  measured, SMAC is told the measured value at the point it proposed: its intensifier keeps every asked
  trial running until it is told, and a failure would be a crash cost at a point nothing measured;
- a failure costs SMAC the worst loss seen so far (its own default, an infinite crash cost, turns every
  cost of its log-scaled history into -inf or NaN in SMAC 2.4).
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Annotated, Any

from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from pydantic import Field
from pydantic.dataclasses import dataclass

from bench.optuna_tpe import OptunaTPE
from bench.optuna_tpe import Params as TPEParams
from storetune.search_spaces import Config


@dataclass(frozen=True)
class Params(TPEParams):  # the TPE peer's encoding, and the budget
    n_trials: Annotated[int, Field(ge=1)] = 200  # the Scenario's budget: compare_algorithms passes its own


class SMAC3(OptunaTPE):
    name = "smac3"
    Params = Params  # type: ignore[assignment]

    def _make_study(self) -> Any:
        import logging

        from ConfigSpace import Categorical, ConfigurationSpace, Float, Integer
        from smac import HyperparameterOptimizationFacade, Scenario

        logging.getLogger("smac").setLevel(logging.ERROR)
        self._space = ConfigurationSpace(seed=self.seed)
        for name, d in self._distributions.items():
            if isinstance(d, CategoricalDistribution):  # by index: ConfigSpace's choices need one type
                self._space.add(Categorical(name, [str(i) for i in range(len(d.choices))]))
            elif isinstance(d, IntDistribution):
                self._space.add(Integer(name, (d.low, d.high), log=d.log))
            elif isinstance(d, FloatDistribution):
                self._space.add(Float(name, (d.low, d.high), log=d.log))
        self._output = tempfile.mkdtemp(prefix="storetune-smac-")  # SMAC writes its scenario there, once
        scenario = Scenario(self._space, deterministic=True, n_trials=self.params.n_trials, seed=self.seed,
                            output_directory=self._output)
        try:
            return HyperparameterOptimizationFacade(scenario, lambda config, seed=0: 0.0, overwrite=True,
                                                    logging_level=40)
        finally:  # nothing writes there again (every tell is save=False): removed now, so that a benchmark's
            # worker processes, which end without running finalizers, leave nothing in /tmp
            shutil.rmtree(self._output, ignore_errors=True)

    def _propose(self) -> tuple[Any, dict[str, Any]]:
        info = self._study.ask()
        return info, self._values(dict(info.config))

    def _values(self, chosen: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, value in chosen.items():
            d = self._distributions[name]
            out[name] = d.choices[int(value)] if isinstance(d, CategoricalDistribution) else value
        return out

    def _report(self, info: Any, value: Any) -> None:
        from smac.runhistory.dataclasses import TrialValue
        from smac.runhistory.enumerations import StatusType

        if value is None:
            losses = [o.loss for o in self.observations if o.loss is not None]
            worst = max(losses) if losses else 0.0
            self._study.tell(info, TrialValue(cost=worst, status=StatusType.CRASHED), save=False)
        else:
            self._study.tell(info, TrialValue(cost=float(value)), save=False)

    def _moved(self, info: Any, config: Any) -> Any:
        """SMAC learns the measured configuration's value at the point it proposed."""
        return info

    def _learn_unasked(self, config: Config, value: Any) -> None:
        """A warm start or a space's defaults: a finished trial SMAC did not ask for."""
        from ConfigSpace import Configuration
        from smac.runhistory.dataclasses import TrialInfo

        values = {}
        for name, d in self._distributions.items():  # an inactive parameter at its default: SMAC's space is flat
            v = config.get(name, self.space[name].default)
            values[name] = str(d.choices.index(v)) if isinstance(d, CategoricalDistribution) else v
        info = TrialInfo(config=Configuration(self._space, values=values), seed=self.seed)
        self._report(info, value)
