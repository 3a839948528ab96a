"""The ask/tell interface every search algorithm implements.

The public ``ask``/``tell`` validate and normalise (configurations inside the space, direction,
NaN); the private ``_ask``/``_tell`` do the algorithm, always minimising a loss. This is the
shape of scikit-optimize's ``Optimizer.ask/tell`` and nevergrad's ``ask/_internal_ask``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import TypeAdapter, ValidationError

from storetune.runners import Direction, Status
from storetune.search_spaces import Config, SearchSpace
from storetune.search_spaces.status import check_direction
from storetune.search_spaces.status import loss as to_loss


# Past this many configurations, fresh() stops listing the space when sampling finds nothing new.
FRESH_ENUMERATE_LIMIT = 200_000
# Finite spaces up to this size are listed and encoded once by the algorithms that model them (BO, GA's model
# immigrants); larger ones are sampled.
LIST_LIMIT = 50_000


@dataclass(frozen=True)
class Observation:
    """A told result. ``loss`` is the objective turned so that lower is better; None unless SUCCEEDED."""

    config: Config
    loss: float | None
    status: Status
    vector: tuple[float, ...] | None = None  # a Pareto objective's losses, one per metric (multi-objective tuners)


@dataclass(frozen=True)
class NoParams:
    """An algorithm without hyperparameters."""


class Tuner(ABC):
    """Chooses the next configurations to measure and learns from their results.

    Subclasses set ``name``, may declare their hyperparameters as a frozen dataclass ``Params``,
    and implement ``_ask`` (and ``_tell`` if they learn from results).
    """

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    # asked for a batch only when the last one is told (a GA breeds a generation from all of its
    # fitnesses); otherwise a parallel campaign asks for one configuration as each result arrives
    whole_batches: ClassVar[bool] = False

    def __init__(
        self,
        space: SearchSpace,
        *,
        seed: int = 0,
        direction: Direction = "min",
        params: Mapping[str, Any] | None = None,
    ):
        check_direction(direction)
        self.space = space
        self.seed = seed
        self.direction = direction
        self.params = parse_params(self.name, self.Params, params or {})
        self.rng = np.random.default_rng(seed)  # the algorithm's only source of randomness
        self.diversity: list[float] | None = None  # per generation, for the algorithms that breed (GA, NSGA-II)
        self.observations: list[Observation] = []
        self.warm_started = 0  # the first observations: earlier campaigns' trials, told by warm_start
        self._unmeasured: list[Config] | None = None
        self._reference: float | None = None  # the scale of warp()
        self._scales: dict[bool, tuple[int, float]] = {}  # loss_scale's, by warped: (self._version, scale)
        self._version = 0  # changes whenever an observation is added or replaced
        self._told: dict[Config, Status] = {}
        self._losses: dict[Config, float | None] = {}
        self._asked: set[Config] = set()
        self._started = False  # whether ask() has considered the space's defaults (start: default)
        self._first: list[Config] = []  # measured before the algorithm's own asks (--warm-start similar)

    # --- the public interface --------------------------------------------------------------------

    def resolved_params(self) -> dict[str, Any]:
        """Every hyperparameter with the value it has here (the defaults included), as JSON: what a campaign
        records at creation, so that its resume builds the same algorithm whatever the defaults are by then."""
        return json.loads(json.dumps(TypeAdapter(self.Params).dump_python(self.params, mode="json")))

    def ask(self, n: int = 1) -> list[Config]:
        """Up to ``n`` configurations to measure next; fewer when the space is exhausted."""
        if n < 1:
            raise ValueError(f"ask(n) needs n >= 1, got {n}")
        configs = self._defaults_first()
        while self._first and len(configs) < n:
            config = self._first.pop(0)
            if not self.known(config) and config not in configs:
                configs.append(config)
        if len(configs) < n:
            configs += [self.space.validate(c) for c in self._ask(n - len(configs))]
        self._asked.update(configs)
        return configs

    def _defaults_first(self) -> list[Config]:
        """A space that says ``start: default`` has its defaults measured first (SMAC's initial design),
        unless they are already known (measured by this campaign before a resume, or warm-started)."""
        if self.space.start != "default" or self._started:
            return []
        self._started = True
        default = self.space.default()
        if self.known(default):
            return []
        self._asked.add(default)  # before the algorithm's own asks: it must not propose it again
        return [default]

    def capacity(self) -> tuple[int, str] | None:
        """How many configurations this algorithm can propose at most, and why, when that is fewer than the
        space holds (a grid's sample); None: the whole space. A campaign's budget beyond it is refused."""
        return None

    def reserve(self, configs: Sequence[Config]) -> None:
        """Configurations queued for measurement without being asked (a resumed campaign's re-runs and
        pending trials): never propose them, though their results are still to be told."""
        self._asked.update(self.space.validate(c) for c in configs)

    def tell(self, config: Config | Mapping[str, Any], value: float | None, status: Status = Status.SUCCEEDED,
             vector: Sequence[float] | None = None) -> None:
        """Report a finished evaluation. A SUCCEEDED trial without a finite value counts as FAILED.
        FAILED and INVALID configurations are remembered and never proposed again. ``vector`` holds a
        Pareto objective's losses (one per metric); only multi-objective algorithms read it."""
        observation = self._observation(config, value, status, vector)
        self.observations.append(observation)
        self._version += 1
        self._told[observation.config] = observation.status
        self._losses[observation.config] = observation.loss
        self._tell(observation)

    def _observation(self, config: Config | Mapping[str, Any], value: float | None, status: Status,
                     vector: Sequence[float] | None = None) -> Observation:
        """A finished evaluation as the algorithm sees it: validated, and a SUCCEEDED one without a finite
        value made FAILED, its value turned into a loss."""
        config = self.space.validate(config)
        status = Status(status)
        if not status.terminal:
            raise ValueError(f"tell() takes a finished evaluation, not {status.value}")
        if status is Status.SUCCEEDED and (value is None or not math.isfinite(value)):
            status = Status.FAILED
        if status is not Status.SUCCEEDED:
            return Observation(config, None, status)
        return Observation(config, to_loss(value, self.direction), status,
                           None if vector is None else tuple(float(v) for v in vector))

    def retell(self, config: Config | Mapping[str, Any], value: float | None, status: Status = Status.SUCCEEDED,
               vector: Sequence[float] | None = None) -> None:
        """Report a new result for a configuration told before (its mean after a re-measurement, with
        adaptive repeats): the observation is replaced, not added, and ``_retell`` lets a model update.
        A configuration never told is told."""
        new = self._observation(config, value, status, vector)
        if new.config not in self._told:
            self.tell(new.config, value, status, vector)
            return
        index = max(i for i, o in enumerate(self.observations) if o.config == new.config)
        old, self.observations[index] = self.observations[index], new
        self._version += 1
        self._told[new.config] = new.status
        self._losses[new.config] = new.loss
        self._retell(old, new)

    def _retell(self, old: Observation, new: Observation) -> None:  # noqa: B027 - most algorithms read told_loss
        """Learn that ``old`` is now ``new``. Algorithms that read ``observations`` or ``told_loss`` when
        they ask see the new loss already; one that keeps a model of the results updates it here."""

    def warm_start(self, observations: Sequence[tuple[Mapping[str, Any], float | None, Status]]) -> None:
        """Learn from trials measured before this campaign (same space, workload and device).
        By default they are told like results; algorithms override to seed their state from them."""
        before = len(self.observations)
        for config, value, status in observations:
            if self.space.contains(config):
                self.tell(config, value, status)
        self.warm_started += len(self.observations) - before

    def measure_first(self, configs: Sequence[Mapping[str, Any]]) -> None:
        """Have ``configs`` measured before anything the algorithm proposes (the near-optimal
        configurations of similar workloads): their results are told as usual, so every algorithm
        learns from them as from its own asks."""
        self._first += [self.space.validate(c) for c in configs if self.space.contains(c)]

    # --- what algorithms use ---------------------------------------------------------------------
    def known(self, config: Config) -> bool:
        """Already asked or told: proposing it again would waste an evaluation."""
        return config in self._told or config in self._asked

    def fresh(self, k: int, taken: Sequence[Config] = ()) -> list[Config]:
        """Up to k random configurations neither asked nor told: fewer only when none are left."""
        out: list[Config] = []
        taken_set = set(taken)
        for _ in range(50 * k):
            if len(out) == k:
                return out
            c = self.space.sample(self.rng)
            if not self.known(c) and c not in taken_set and c not in out:
                out.append(c)
        if self.space.finite and self.space.cardinality() <= FRESH_ENUMERATE_LIMIT:
            if self._unmeasured is None:
                self._unmeasured = list(self.space.enumerate())
            self._unmeasured = [c for c in self._unmeasured if not self.known(c)]
            rest = [c for c in self._unmeasured if c not in taken_set and c not in out]
            picks = self.rng.permutation(len(rest))[: k - len(out)]
            out += [rest[i] for i in picks]
        return out

    def told_loss(self, config: Config) -> float | None:
        """The loss already measured for ``config`` (a cache hit), or None if unknown or failed.
        This is what a repeat means in StoreTune: a configuration is measured once per campaign,
        with --repeats measurements, and algorithms that revisit it read this value."""
        return self._losses.get(config)

    def warp(self, loss: float) -> float:
        """A monotone, scale-free transform of a loss: sign(x) log(1 + |x| / r), with r the first
        |loss| told. Storage metrics are skewed (BDBC's span 110x), and models of the warped loss
        fit them better; being monotone, it keeps the optimum where it is."""
        if self._reference is None:
            self._reference = abs(loss) or 1.0
        return float(np.sign(loss) * np.log1p(abs(loss) / self._reference))

    def loss_scale(self, warped: bool = False) -> float:
        """A robust spread of the losses seen so far (or of their warps), to normalise differences.
        Kept until the observations change: DQN and SA ask for it once per move they weigh."""
        cached = self._scales.get(warped)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        scale = self._loss_scale(warped)
        self._scales[warped] = (self._version, scale)
        return scale

    def _loss_scale(self, warped: bool) -> float:
        losses = np.array([self.warp(o.loss) if warped else o.loss for o in self.observations if o.loss is not None])
        if len(losses) < 2:
            return max(abs(float(losses[0])), 1e-12) if len(losses) else 1.0
        q75, q25 = np.percentile(losses, [75, 25])
        return float(q75 - q25) or float(np.std(losses)) or max(abs(float(np.mean(losses))), 1e-12)

    @property
    def best(self) -> Observation | None:
        scored = [o for o in self.observations if o.loss is not None]
        return min(scored, key=lambda o: o.loss) if scored else None

    @property
    def own_best(self) -> Observation | None:
        """The best of this campaign's own measurements, not of the warm start's."""
        scored = [o for o in self.observations[self.warm_started:] if o.loss is not None]
        return min(scored, key=lambda o: o.loss) if scored else None

    @abstractmethod
    def _ask(self, n: int) -> list[Config]: ...

    def _tell(self, observation: Observation) -> None:  # noqa: B027 - learning is optional
        """Learn from one result (the loss is already direction-normalised)."""


class HyperparameterError(ValueError):
    """A hyperparameter that is unknown or outside its domain; ``name`` says which."""

    def __init__(self, message: str, name: str):
        super().__init__(message)
        self.name = name


def parse_params(algorithm: str, params_type: type, given: Mapping[str, Any]) -> Any:
    """The algorithm's hyperparameters from ``given`` (text from the command line, or JSON), checked
    against their types and domains by pydantic; a bad one raises ValueError naming it."""
    fields = [f.name for f in dataclasses.fields(params_type)]
    unknown = [k for k in given if k not in fields]
    if unknown:
        raise HyperparameterError(f"unknown hyperparameter {unknown[0]!r} for {algorithm}; known: "
                                  f"{', '.join(fields) or 'none'}", unknown[0])
    try:
        return TypeAdapter(params_type).validate_python(dict(given))
    except ValidationError as e:
        problem = e.errors()[0]
        key = ".".join(str(p) for p in problem["loc"])
        raise HyperparameterError(f"hyperparameter {algorithm}:{key}={given.get(key)!r}: {problem['msg']}", key) from None


def params_schema(params_type: type) -> dict[str, Any]:
    """The hyperparameters' JSON schema: each one's type, default and domain."""
    return TypeAdapter(params_type).json_schema()
