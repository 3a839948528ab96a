"""``auto``: a portfolio of BO, GA and SA on one history; a lead asks, a bandit takes over when it stalls.

Which algorithm is best depends on the table (BO on BDBC and HSMGP, SA on varmail and LLVM, GA on
PostgreSQL), and a user cannot know it before measuring. ``auto`` runs several members side by side on one shared
history: every member is told every result, whoever proposed it, so that BO's Gaussian process learns
from the evolution's children and the annealer walks onto the model's finds. After a shared random
initial design, the lead asks: BO on a finite space (it scores sampled candidates and the best ones'
neighbours, every unmeasured configuration once fewer than its ``max_candidates`` are left), else GA. On 7z
(68,640 configurations) BO's lead took 94 evaluations to near-optimal where GA's took 102, success
at 200 0.95 against 0.86 (100 seeds, bench/SEARCH.md). Once ``patience`` evaluations bring no new best (20),
each ask goes to the member drawn by discounted Thompson sampling (the bandit of Nevergrad's portfolio), where a proposal
earns the share of earlier results it beats; a new best hands the asks back to the lead. A bandit from
the first ask did worse than BO alone (ARCHITECTURE.md: it cannot tell members apart in a few dozen
proposals). Written by hand: neither Nevergrad nor Optuna can drive StoreTune's own members behind
one ask/tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, field_validator
from pydantic.dataclasses import dataclass

from storetune.runners import Status
from storetune.search_spaces import Config
from storetune.search_spaces.status import loss as to_loss
from storetune.tuner.algorithms.base import Observation, Tuner

MEMBERS = ("bo", "ga", "sa")  # dqn does not beat random search at these budgets (bench/SEARCH.md)
# chosen on HSMGP, BDBC and SS-O (10, 20, 30); 10 cost 2-2.5 evaluations on two synthetic tables. Beyond BO's
# listing limit it was 10 until BO revisited on its own stalls; since, 20 is faster there too (7z 71.5 -> 62, bench/SEARCH.md)
PATIENCE = 20


@dataclass(frozen=True)
class Params:
    members: str = ",".join(MEMBERS)  # the algorithms asked, comma-separated
    # random configurations first, shared by every member (BO's start too): 5 chosen on BDBC and three synthetic
    # tables, checked on the whole suite at 100 seeds (bench/SEARCH.md, "A shorter random start")
    initial_points: Annotated[int, Field(ge=1)] = 5
    discount: Annotated[float, Field(gt=0, le=1)] = 0.9  # weight of a reward one proposal older than the last
    prior: Annotated[float, Field(gt=0)] = 1.0  # Beta(prior, prior) before a member has proposed anything
    lead: str = "auto"  # the member asked while the search improves; auto: bo on a finite space, else ga
    patience: Annotated[int, Field(ge=0)] = PATIENCE  # evaluations without a new best before the bandit takes over
    # BO's Gaussian process costs the cube of its observations: past this many it is retired (GA leads)
    model_limit: Annotated[int, Field(ge=1)] = 500
    # the reward: 1 for beating this share of earlier results (1: the share beaten itself)
    top: Annotated[float, Field(gt=0, le=1)] = 1.0
    # BO's acquisition as a member; PI as the lead's was tried and not kept (bench/SEARCH.md, "A greedier lead")
    bo_acq: Literal["EI", "PI", "LCB"] = "EI"
    # BO's ordinal_onehot and ordinal_onehot_after as a member: ordinals of 3 to 8 values also one-hot from the
    # 21st result told on. Chosen on 7z, SS-J, SS-A, HSMGP, PostgreSQL and four synthetic tables with ordinals;
    # checked on the suite's other six tables with such ordinals and ten more synthetic ones (bench/SEARCH.md,
    # "One-hot ordinals after 20 evaluations"). Until 2026-11-28 the defaults were 0 and 0 (none), so
    # auto:bo_ordinal_onehot=8 then meant one-hot from the start: now auto:bo_ordinal_onehot_after=0
    bo_ordinal_onehot: Annotated[int, Field(ge=0)] = 8
    bo_ordinal_onehot_after: Annotated[int, Field(ge=0)] = 20
    # BO's ordinal_onehot_evidence as a member: 1 lets the columns join only once a model with them explains the
    # results better by BIC's penalty. Off (0): it won where ordinals act in order or repeats are noisy (SS-O,
    # PostgreSQL, sampled numeric tables with short ordinals) and lost where one value past a cliff must be found
    # before the data can show it (a cliff table, SS-J) and on three of the four device tables: bench/SEARCH.md,
    # "One-hot columns only where the results ask for them"
    bo_ordinal_onehot_evidence: Annotated[float, Field(ge=0)] = 0.0
    # GA's model immigrants as a member: none, BO is the portfolio's model (bench/SEARCH.md, "GA's trap")
    ga_model_immigrants: Annotated[int, Field(ge=0)] = 0

    @field_validator("members")
    @classmethod
    def _known(cls, value: str) -> str:
        names = [m.strip() for m in value.split(",") if m.strip()]
        if not names:
            raise ValueError("name at least one member, e.g. bo,ga,sa")
        from storetune.tuner.algorithms.registry import SEARCH_ALGORITHMS

        allowed = [a for a in SEARCH_ALGORITHMS if a != "auto"]
        unknown = [m for m in names if m not in allowed]
        if unknown:
            raise ValueError(f"unknown member {unknown[0]!r}; choose among {', '.join(allowed)}")
        if len(set(names)) != len(names):
            raise ValueError(f"a member is named twice: {value}")
        return ",".join(names)


class Portfolio(Tuner):
    name = "auto"
    Params = Params

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        from storetune.tuner.algorithms.registry import make_tuner  # the registry imports this module's siblings lazily

        self.names = self.params.members.split(",")
        # BO's own random start would follow the shared one: it is the shared one (BO models from then on)
        bo = {"acq": self.params.bo_acq, "initial_points": self.params.initial_points,
              "ordinal_onehot": self.params.bo_ordinal_onehot,
              "ordinal_onehot_after": self.params.bo_ordinal_onehot_after,
              "ordinal_onehot_evidence": self.params.bo_ordinal_onehot_evidence}
        own = {"bo": bo, "ga": {"model_immigrants": self.params.ga_model_immigrants}}
        self.members: list[Tuner] = [
            make_tuner(name, space, seed=self.seed * 1_000 + i, direction="min", params=own.get(name))
            for i, name in enumerate(self.names)
        ]
        lead = self.params.lead
        if lead == "auto":
            lead = "bo" if space.finite and "bo" in self.names else ("ga" if "ga" in self.names else self.names[0])
        if lead not in self.names:
            raise ValueError(f"auto:lead={lead!r} is not among the members {self.params.members}")
        self.lead = self.names.index(lead)
        self.patience = self.params.patience
        self._retired: set[int] = set()  # members no longer asked or told (BO past model_limit)
        self._since_best = 0  # evaluations since the last new best
        self._wins = np.zeros(len(self.members))  # discounted rewards
        self._plays = np.zeros(len(self.members))
        self._proposer: dict[Config, int] = {}
        self.picks: list[str] = []  # which member proposed each asked configuration, in order

    # --- ask ---------------------------------------------------------------------------------------
    def _ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while len(out) < n:
            if len(self.observations) + len(self._proposer) < self.params.initial_points:
                picked, configs = None, self.fresh(1, out)
            else:
                stalled = self._since_best >= self.patience
                order = self._draw() if stalled else [self.lead, *(i for i in self._draw() if i != self.lead)]
                picked, configs = None, []
                for i in order:  # a member with nothing left to propose passes to the next
                    configs = [c for c in self.members[i].ask(1) if c not in out and not self.known(c)]
                    if configs:
                        picked = i
                        break
                if not configs:
                    configs = self.fresh(1, out)
            if not configs:
                break
            config = configs[0]
            out.append(config)
            self._proposer[config] = -1 if picked is None else picked
            self.picks.append("initial" if picked is None else self.names[picked])
            for i, member in enumerate(self.members):
                if i != picked:
                    member.reserve([config])  # nobody else proposes it while it is measured
        return out

    def _draw(self) -> list[int]:
        """Members in the order of a Thompson draw from each one's Beta posterior of success."""
        prior = self.params.prior
        samples = self.rng.beta(prior + self._wins, prior + self._plays - self._wins)
        return [int(i) for i in np.argsort(-samples, kind="stable") if i not in self._retired]

    def _retire_models(self) -> None:
        """Past ``model_limit`` observations, BO stops being asked and told; GA (or the next member) leads."""
        if len(self.observations) <= self.params.model_limit or "bo" not in self.names:
            return
        bo = self.names.index("bo")
        if bo in self._retired or len(self.names) == 1:
            return
        self._retired.add(bo)
        if self.lead == bo:
            others = [i for i in range(len(self.names)) if i not in self._retired]
            self.lead = self.names.index("ga") if "ga" in self.names else others[0]

    # --- tell --------------------------------------------------------------------------------------
    def _tell(self, observation: Observation) -> None:
        self._retire_models()
        for i, member in enumerate(self.members):
            if i not in self._retired:
                member.tell(observation.config, observation.loss, observation.status)
        best = self.best
        self._since_best = 0 if best is not None and best.config == observation.config else self._since_best + 1
        proposer = self._proposer.pop(observation.config, -1)
        if proposer < 0:
            return
        self._wins *= self.params.discount
        self._plays *= self.params.discount
        self._plays[proposer] += 1
        self._wins[proposer] += self._reward(observation)

    def _retell(self, old: Observation, new: Observation) -> None:
        for i, member in enumerate(self.members):
            if i not in self._retired:
                member.retell(new.config, new.loss, new.status)

    def _reward(self, observation: Observation) -> float:
        """The share of earlier results this one beats (0 for a failure): scale-free, in [0, 1]."""
        if observation.loss is None:
            return 0.0
        earlier = [o.loss for o in self.observations[:-1] if o.loss is not None]
        if not earlier:
            return 0.5
        beaten = float(np.mean([observation.loss < e for e in earlier]))
        if self.params.top >= 1:
            return beaten
        return float(beaten >= 1 - self.params.top)

    def warm_start(self, observations: Sequence[tuple[Any, float | None, Status]]) -> None:
        """Each member warm-starts its own way (GA seeds its population, SA starts from the best);
        the portfolio only records them."""
        as_losses = [(c, to_loss(v, self.direction) if v is not None else None, st) for c, v, st in observations]
        for member in self.members:  # members minimise: they are told losses, not the metric
            member.warm_start(as_losses)
        before = len(self.observations)
        for config, value, status in observations:
            if self.space.contains(config):
                self._record(config, value, status)
        self.warm_started += len(self.observations) - before

    def _record(self, config: Any, value: float | None, status: Status) -> None:
        """Tell the portfolio itself, not its members (they were warm-started already)."""
        members, self.members = self.members, []
        try:
            self.tell(config, value, status)
        finally:
            self.members = members

    def share(self) -> dict[str, float]:
        """The share of asks each member made ("initial": the random initial design)."""
        total = max(len(self.picks), 1)
        return {name: self.picks.count(name) / total for name in ["initial", *self.names]}
