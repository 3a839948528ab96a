"""Optuna's TPE sampler behind StoreTune's ask/tell, as the peer the benchmarks compare against.

Installed only for the benchmarks (`pip install -e '.[bench]'`). Set up as an Optuna user would, with numeric
knobs as numbers and categories as categories: a numeric ordinal of more than ``NUMBERS_ABOVE`` (2) values (a
buffer size, a block size, a thread count) is a number to TPE, as ``suggest_int`` / ``suggest_float`` would give
it, on a log scale where its values are positive and span two decades or more; categories and on/off options stay
categorical. That is TPE's stronger encoding on most of the suite: declaring the short ordinals (3 to 10 values)
as categories instead cost it evaluations on 9 of 13 tables (bench/SEARCH.md, "The peers' encoding").
``numbers_above`` sets the count per variant (10: the short ordinals categorical). Fair to TPE in two ways:
- a number TPE proposes for an ordinal goes to the ordinal's nearest value (on its scale); a proposal
  absent from a table, or refused by the space, is replaced by the nearest valid configuration, and on a
  table by the nearest one not measured yet; TPE learns the result under the configuration measured;
- elsewhere, a proposal already measured is answered from what was measured (no budget spent) and TPE
  is asked again, so that TPE, like StoreTune's algorithms, never spends an evaluation twice.
"""

from __future__ import annotations

from typing import Annotated, Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

import numpy as np
from pydantic import Field
from pydantic.dataclasses import dataclass

from storetune.search_spaces import Config, Kind
from storetune.search_spaces.table import TableSpace
from storetune.tuner.algorithms.base import Observation, Tuner

MAX_REPROPOSALS = 20
NUMBERS_ABOVE = 2  # ordinals of more numeric values are numbers to TPE (on/off options stay categories)


def numeric(values: tuple[Any, ...]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def distribution(p: Any, numbers_above: int = NUMBERS_ABOVE) -> Any:
    """The distribution an Optuna user would declare for ``p``."""
    if p.kind is Kind.CATEGORICAL or (p.kind is Kind.ORDINAL and (len(p.values) <= numbers_above
                                                                    or not numeric(p.values))):
        return CategoricalDistribution(p.values)
    if p.kind is Kind.ORDINAL:
        low, high = min(p.values), max(p.values)
        log = low > 0 and high / low >= 100
        if all(isinstance(v, int) for v in p.values):
            return IntDistribution(int(low), int(high), log=log)
        return FloatDistribution(float(low), float(high), log=log)
    if p.kind is Kind.INTEGER:
        return IntDistribution(int(p.low), int(p.high), log=p.log)
    return FloatDistribution(p.low, p.high, log=p.log)


@dataclass(frozen=True)
class Params:
    numbers_above: Annotated[int, Field(ge=0)] = NUMBERS_ABOVE  # 0: every numeric ordinal is a number, 0/1 too


class OptunaTPE(Tuner):
    name = "optuna-tpe"
    Params = Params  # type: ignore[assignment]

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._distributions = {p.name: distribution(p, self.params.numbers_above) for p in space.parameters}
        self._asked_trials: dict[Config, Any] = {}
        self._study = self._make_study()

    # --- the peer library: Optuna here; bench/smac_peer.py replaces these five -------------------------
    def _make_study(self) -> Any:
        return optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=self.seed))

    def _propose(self) -> tuple[Any, dict[str, Any]]:
        """The library's next proposal: a handle to report on, and its parameters."""
        trial = self._study.ask(self._distributions)
        return trial, trial.params

    def _report(self, trial: Any, value: Any) -> None:
        """The result of a proposal (None: it failed)."""
        if value is None:
            self._study.tell(trial, state=TrialState.FAIL)
        else:
            self._study.tell(trial, value)

    def _moved(self, trial: Any, config: Config) -> Any:
        """A proposal that is measured as another configuration, ``config`` (snapped, repaired): TPE is told it
        failed and learns the result under the configuration measured (``_learn_unasked``). Returns the handle to
        report the measured value on instead, if any."""
        self._report(trial, None)
        return None

    def _ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        for _ in range(n * MAX_REPROPOSALS):
            if len(out) == n:
                break
            trial, params = self._propose()
            config = self.space.repair({k: self._snap(k, v) for k, v in params.items()})
            if config is not None and self.known(config) and isinstance(self.space, TableSpace):
                config = self.space.nearest(config, exclude=set(self._told) | set(self._asked) | set(out))
            if config is not None and config not in out and not self.known(config):
                if config.to_dict() == {k: params[k] for k in config}:
                    self._asked_trials[config] = trial  # told under its own params
                elif (kept := self._moved(trial, config)) is not None:
                    self._asked_trials[config] = kept
                out.append(config)
                continue
            # a repeat proposal: answered from what was measured (None: nothing succeeded there)
            self._report(trial, self._answer(config) if config is not None else None)
        return out + self.fresh(n - len(out), out)

    def _snap(self, name: str, value: Any) -> Any:
        """An ordinal's listed value nearest to the number TPE proposed for it (on a log scale where TPE's is)."""
        p, d = self.space[name], self._distributions[name]
        if p.kind is not Kind.ORDINAL or isinstance(d, CategoricalDistribution):
            return value
        listed = np.array(p.values, dtype=float)
        where = (np.log(listed), np.log(value)) if d.log else (listed, float(value))
        return p.values[int(np.argmin(np.abs(where[0] - where[1])))]

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
            self._report(trial, value)
        elif value is not None:
            self._learn_unasked(observation.config, value)

    def _learn_unasked(self, config: Config, value: Any) -> None:
        """An observation the study did not ask for (a warm start, a campaign's defaults): a finished trial."""
        params = {k: v for k, v in config.items() if k in self._distributions}
        dists = {k: self._distributions[k] for k in params}
        self._study.add_trial(create_trial(params=params, distributions=dists, value=value))
