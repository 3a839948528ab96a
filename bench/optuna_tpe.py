"""Optuna's TPE sampler behind StoreTune's ask/tell, as the peer the benchmarks compare against.

Installed only for the benchmarks (`pip install -e '.[bench]'`). Fair to TPE in two ways:
- a proposal absent from a table, or refused by the space, is replaced by the nearest valid
  configuration, and TPE learns the result under the configuration actually measured;
- a proposal already measured is answered from what was measured (no budget spent) and TPE is
  asked again, so that TPE, like StoreTune's algorithms, never spends an evaluation twice.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from storetune.search_spaces import Config, Kind
from storetune.tuner.algorithms.base import Observation, Tuner

MAX_REPROPOSALS = 20


class OptunaTPE(Tuner):
    name = "optuna-tpe"

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=self.seed))
        self._distributions = {}
        for p in space.parameters:
            if p.kind in (Kind.CATEGORICAL, Kind.ORDINAL):
                self._distributions[p.name] = CategoricalDistribution(p.values)
            elif p.kind is Kind.INTEGER:
                self._distributions[p.name] = IntDistribution(int(p.low), int(p.high), log=p.log)
            else:
                self._distributions[p.name] = FloatDistribution(p.low, p.high, log=p.log)
        self._asked_trials: dict[Config, Any] = {}

    def _ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        for _ in range(n * MAX_REPROPOSALS):
            if len(out) == n:
                break
            trial = self._study.ask(self._distributions)
            config = self.space.repair(trial.params)
            if config is not None and config not in out and not self.known(config):
                if config.to_dict() == {k: trial.params[k] for k in config}:
                    self._asked_trials[config] = trial  # told under its own params
                else:
                    self._study.tell(trial, state=TrialState.FAIL)  # learnt under the measured config instead
                out.append(config)
                continue
            value = self._answer(config) if config is not None else None
            if value is not None:
                self._study.tell(trial, value)  # a repeat proposal: answered from what was measured
            else:
                self._study.tell(trial, state=TrialState.FAIL)
        return out + self.fresh(n - len(out), out)

    def _answer(self, config: Config) -> Any:
        """What the study is told for a configuration measured already (None: nothing succeeded)."""
        return self.told_loss(config)

    def _value(self, observation: Observation) -> Any:
        """What the study is told for an observation (None: it failed)."""
        return observation.loss

    def _tell(self, observation: Observation) -> None:
        trial = self._asked_trials.pop(observation.config, None)
        value = self._value(observation)
        if trial is not None:
            if value is None:
                self._study.tell(trial, state=TrialState.FAIL)
            else:
                self._study.tell(trial, value)
        elif value is not None:
            self._learn_unasked(observation.config, value)

    def _learn_unasked(self, config: Config, value: Any) -> None:
        """An observation the study did not ask for (a warm start, a campaign's defaults): a finished trial."""
        params = {k: v for k, v in config.items() if k in self._distributions}
        dists = {k: self._distributions[k] for k in params}
        self._study.add_trial(create_trial(params=params, distributions=dists, value=value))
