"""Bayesian optimisation on scikit-optimize's ``Optimizer``, over the encoded configurations.

skopt's ``Optimizer`` keeps the observations and fits the surrogate on every tell: a Gaussian
process (scikit-learn's, whose predictive variance is cheap) with a Matern 5/2 kernel over the
space's [0, 1] encoding, plus a noise term, fitted to the warped loss (see ``Tuner.warp``), its
length scales bounded below by ``min_length_scale`` (at 0.01 they collapsed and BO got stuck) and
refitted from the previous fit plus ``restarts`` random starts (from the previous fit alone, a refit
could keep an influential option inert: a local optimum of the likelihood, and BO stuck again); or
skopt's extra trees / random forest (``surrogate``), slower but indifferent to the encoding.
Two choices keep an ask+tell within tens of milliseconds at 200 observations (measured by
bench/compare_algorithms.py):
- the kernel hyperparameters are re-fitted only when the data have grown by ``refit_growth``
  since the last fit; in between the GP is refitted with the hyperparameters fixed;
- the acquisition is maximised over candidates, not by skopt's random sampling: the unmeasured
  neighbours of the best five plus a random draw, ``max_candidates`` in all, or every unmeasured
  configuration once fewer are left. A finite space up to ``LIST_LIMIT`` is listed and its encodings
  computed once; beyond, the draw samples the space.
On a finite space beyond ``LIST_LIMIT`` (7z; also ``storage_v2``, 400,320 configurations), and wherever
it is set, once the search stalls (``revisit_after`` evaluations without a new best), every
``revisit_every``-th ask is not the model's: it is the incumbent's unmeasured one-option neighbour whose
new value has been measured least often. An ARD kernel writes an option off after two measurements and
then predicts, confidently, that it does not matter (7z's compression method: BO stuck in 15 of 100
seeds without revisits, in none with them); a value measured that rarely is measured again, where the
incumbent shows it at its best. On a listed space (BDBC) the same revisits cost seeds, so there it is
off unless set.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Annotated, Any, Iterator, Literal

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
from skopt import Optimizer
from skopt.acquisition import gaussian_ei, gaussian_lcb, gaussian_pi
from skopt.space import Real

from pydantic import Field
from pydantic.dataclasses import dataclass

from storetune.search_spaces import Config, Kind
from storetune.tuner.algorithms.base import LIST_LIMIT, Observation, Tuner

LARGE_SPACE_REVISIT_AFTER = 10  # revisit_after, unset, on a finite space beyond LIST_LIMIT
LOCAL_PARENTS = 5  # the best configurations whose neighbours are always candidates


@dataclass(frozen=True)
class Params:
    acq: Literal["EI", "PI", "LCB"] = "EI"  # EI, PI or LCB
    initial_points: Annotated[int, Field(ge=1)] = 10  # random configurations before the surrogate takes over
    max_candidates: Annotated[int, Field(ge=1)] = 1000
    xi: Annotated[float, Field(ge=0)] = 0.0  # extra exploration of EI and PI (plain EI: measured best on BDBC, see bench/SEARCH.md)
    kappa: Annotated[float, Field(ge=0)] = 1.96  # exploration of LCB
    refit_growth: Annotated[float, Field(ge=1)] = 1.25
    random_fraction: Annotated[float, Field(ge=0, le=1)] = 0.0  # share of asks answered by a random candidate (SMAC's interleaving)
    surrogate: Literal["gp", "et", "rf"] = "gp"  # Gaussian process, or extra trees / random forest (SMAC)
    trees: Annotated[int, Field(ge=2)] = 50  # of the tree surrogates
    # the kernel's shortest length scale on the [0, 1] encoding: below it, options collapse to a lookup
    # table and EI picks what is farthest from the data (ARCHITECTURE.md, "lessons")
    min_length_scale: Annotated[float, Field(gt=0, le=1)] = 0.3
    # extra random starts of each kernel refit, beside the previous fit: from that one alone a refit kept an
    # influential option inert and BO stuck in 5 of 100 BDBC seeds; 1 start left 1 stuck, 2 none (bench/SEARCH.md)
    restarts: Annotated[int, Field(ge=0)] = 2
    # after this many evaluations without a new best, EI is the mean of the fitted model's and that of the
    # same model with its length scales capped at ``doubt_length_scale``, which cannot call an option inert
    # (a two-sample integrated acquisition, Snoek et al. 2012). It freed BO's 4 stalls of 40 on an unseen
    # synthetic table at no cost on BDBC, but not 7z's (7 -> 10 of 40): an option, off (0) by default (bench/SEARCH.md)
    doubt_after: Annotated[int, Field(ge=0)] = 0
    doubt_length_scale: Annotated[float, Field(gt=0)] = 2.0
    # At 10 it freed all 15 of 100 stuck 7z seeds but left 3 of 100 BDBC seeds stuck where none were, so
    # unset it is a rule of the space (bench/SEARCH.md, "BO's stalls on 7z")
    revisit_after: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="evaluations without a new best before every revisit_every-th ask revisits "
        f"a rarely measured value next to the best (0: never; unset: {LARGE_SPACE_REVISIT_AFTER} on a finite "
        f"space of more than {LIST_LIMIT:,} configurations, else 0)")
    revisit_every: Annotated[int, Field(ge=1)] = 2
    # an ordinal of 3 to this many values is also encoded one-hot, beside its position: the kernel keeps its
    # smoothness and gains a length scale per value, so that one value can differ from its neighbours (7z's
    # Xval 4, the last before a cliff, 10% better than 2). 0: positions only (bench/SEARCH.md, "Ordinals one-hot too")
    ordinal_onehot: Annotated[int, Field(ge=0)] = 0
    # observations told before the one-hot columns join the model (0: from the start; warm-start trials count,
    # failures before the first result do not; nothing to join while ordinal_onehot is 0). Told later, they leave
    # an easy search to the positions, whose few length scales the first measurements can fit, and give a
    # long one a length scale per value (bench/SEARCH.md, "One-hot ordinals after 20 evaluations")
    ordinal_onehot_after: Annotated[int, Field(ge=0)] = 0
    # the one-hot columns join only where the data ask for them: at a kernel refit from ordinal_onehot_after on, a
    # Gaussian process over the wider encoding must beat the positions' log marginal likelihood by this many times
    # BIC's penalty, half the log of the observations per added length scale (0, or a tree surrogate, which has no
    # likelihood: they join unasked). It won where
    # ordinals act in order or repeats are noisy and lost on cliffs (bench/SEARCH.md, "One-hot columns only where
    # the results ask for them")
    ordinal_onehot_evidence: Annotated[float, Field(ge=0)] = 0.0


class BayesianOptimization(Tuner):
    name = "bo"
    Params = Params

    def __init__(self, space: Any, **kwargs: Any):
        super().__init__(space, **kwargs)
        if self.params.acq not in ("EI", "PI", "LCB"):
            raise ValueError(f"bo:acq={self.params.acq!r}: choose EI, PI or LCB")
        if self.params.doubt_after and (self.params.acq != "EI" or self.params.surrogate != "gp"):
            raise ValueError("bo:doubt_after averages the expected improvement of two Gaussian processes: "
                             "it needs acq=EI and surrogate=gp")
        self._onehot = 0 if self.params.ordinal_onehot_after else self.params.ordinal_onehot
        self._xi_configs: list[Config] = []  # the configurations of the optimizer's Xi, in order
        self._build(np.ones(space.encoded_width(self._onehot)))
        self._fitted_at = 0
        self._members: list[Config] | None = None
        self._index: dict[Config, int] = {}
        self._unmeasured: np.ndarray | None = None  # a mask over the members
        if space.finite and space.cardinality() <= LIST_LIMIT:
            self._members = list(space.enumerate())
            self._index = {c: i for i, c in enumerate(self._members)}
            self._encoded = self._encode_many(self._members)
            self._unmeasured = np.ones(len(self._members), dtype=bool)
        self._neighbours: dict[Config, list[Config]] = {}
        self._stalled_asks = 0
        self.onehot_gains: list[tuple[int, float]] = []  # (observations, nats) of each check for the one-hot columns
        self.revisit_after = self.params.revisit_after
        if self.revisit_after is None:  # chosen on 7z, checked on a synthetic table of 131,072 (bench/SEARCH.md)
            self.revisit_after = LARGE_SPACE_REVISIT_AFTER if space.finite and self._members is None else 0

    def _build(self, length_scale: np.ndarray) -> None:
        """A fresh skopt ``Optimizer`` over the current encoding's width, its kernel starting at ``length_scale``."""
        self._kernel = self._fresh_kernel(length_scale)
        self._optimizer = Optimizer(
            [Real(0.0, 1.0) for _ in range(len(length_scale))],
            base_estimator=self._estimator(fit_hyperparameters=True),
            n_initial_points=self.params.initial_points,
            acq_optimizer="sampling",
            acq_optimizer_kwargs={"n_points": 1},  # skopt's own candidate search is replaced by ours
            random_state=self.seed,
        )

    def _fresh_kernel(self, length_scale: np.ndarray) -> Any:
        """The surrogate's kernel before any fit: an amplitude times Matern 5/2 with a length scale per column,
        plus a noise term."""
        return ConstantKernel(1.0, (1e-3, 1e3)) * Matern(
            length_scale=length_scale, length_scale_bounds=(self.params.min_length_scale, 1e2), nu=2.5
        ) + WhiteKernel(1e-2, (1e-6, 1e0))

    def _widen(self) -> None:
        """Add the one-hot columns: the same observations, told again to a model over the wider encoding,
        its position length scales carried over and the kernel refitted at the next tell."""
        width = self.space.encoded_width(self.params.ordinal_onehot)
        self._onehot = self.params.ordinal_onehot
        if width == self.space.encoded_width(0):  # no ordinal of 3 to that many values: the model is unchanged
            return
        scales = np.ones(width)
        if self.params.surrogate == "gp":
            old = np.atleast_1d(self._kernel.k1.k2.length_scale)
            scales[: len(old)] = old
        Xi, yi = self._xi_configs, list(self._optimizer.yi)
        self._build(scales)
        self._fitted_at = 0
        if self._members is not None:
            self._encoded = self._encode_many(self._members)
        if Xi:
            self._optimizer.base_estimator_ = self._estimator(fit_hyperparameters=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                self._optimizer.tell([list(x) for x in self._encode_many(Xi)], yi)

    def _estimator(self, fit_hyperparameters: bool) -> Any:
        if self.params.surrogate != "gp":
            from skopt.learning import ExtraTreesRegressor, RandomForestRegressor

            forest = ExtraTreesRegressor if self.params.surrogate == "et" else RandomForestRegressor
            return forest(n_estimators=self.params.trees, min_samples_leaf=3, random_state=self.seed)
        return GaussianProcessRegressor(
            kernel=self._kernel,
            normalize_y=True,
            optimizer="fmin_l_bfgs_b" if fit_hyperparameters else None,
            n_restarts_optimizer=self.params.restarts if fit_hyperparameters else 0,
            random_state=self.seed,
        )

    def _encode_many(self, configs: list[Config]) -> np.ndarray:
        """The model's inputs: the space's [0, 1] encoding, then the one-hot columns of ``ordinal_onehot``."""
        return self.space.encode_many(configs, self._onehot)

    # --- tell -------------------------------------------------------------------------------------
    def _tell(self, observation: Observation) -> None:
        if observation.config in self._index:
            self._unmeasured[self._index[observation.config]] = False
        if observation.loss is None:  # a failure is told at a crash cost: worse than anything seen (SMAC)
            losses = [self.warp(o.loss) for o in self.observations if o.loss is not None]
            if not losses:
                return
            y = max(losses) + self.loss_scale(warped=True)
        else:
            y = self.warp(observation.loss)
        n = len(self._optimizer.yi) + 1
        unasked = not self.params.ordinal_onehot_evidence or self.params.surrogate != "gp"
        if self._onehot != self.params.ordinal_onehot and n > self.params.ordinal_onehot_after and unasked:
            self._widen()  # and the kernel is refitted at once, over the wider encoding
        refit = n >= self.params.initial_points and n >= self._fitted_at * self.params.refit_growth
        if self.params.surrogate == "gp":
            self._optimizer.base_estimator_ = self._estimator(fit_hyperparameters=refit)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                self._optimizer.tell(list(self._encode_many([observation.config])[0]), y)
        finally:  # skopt keeps the point even when its fit fails: so does the list that re-tells it
            if len(self._optimizer.Xi) > len(self._xi_configs):
                self._xi_configs.append(observation.config)
        if refit and self._optimizer.models and self.params.surrogate == "gp":
            self._kernel = self._optimizer.models[-1].kernel_
            self._fitted_at = n
            if (self._onehot != self.params.ordinal_onehot and n > self.params.ordinal_onehot_after
                    and not unasked and self._wider_is_supported()):
                self._widen()

    def _wider_is_supported(self) -> bool:
        """Whether a Gaussian process over the encoding with the one-hot columns explains the results better
        than the positions' just fitted, by more than ``ordinal_onehot_evidence`` times BIC's penalty."""
        narrow = self._optimizer.models[-1]
        width = self.space.encoded_width(self.params.ordinal_onehot)
        added = width - self.space.encoded_width(0)
        if added <= 0:
            return True  # nothing to add: widening changes nothing
        scales = np.ones(width)
        old = np.atleast_1d(narrow.kernel_.k1.k2.length_scale)
        scales[: len(old)] = old
        wide = self._estimator(fit_hyperparameters=True).set_params(kernel=self._fresh_kernel(scales))
        X = self.space.encode_many(self._xi_configs, self.params.ordinal_onehot)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            wide.fit(X, np.asarray(self._optimizer.yi))
        n = len(self._optimizer.yi)
        gain = wide.log_marginal_likelihood_value_ - narrow.log_marginal_likelihood_value_
        self.onehot_gains.append((n, float(gain)))
        return gain > self.params.ordinal_onehot_evidence * 0.5 * added * np.log(n)

    def _retell(self, old: Observation, new: Observation) -> None:
        """A re-measured configuration's new mean replaces its target; the surrogate sees it at its next fit."""
        x = list(self._encode_many([new.config])[0])
        rows = [i for i, xi in enumerate(self._optimizer.Xi) if list(xi) == x]
        if not rows:
            return
        if new.loss is not None:
            y = self.warp(new.loss)
        else:
            losses = [self.warp(o.loss) for o in self.observations if o.loss is not None]
            y = (max(losses) + self.loss_scale(warped=True)) if losses else self._optimizer.yi[rows[-1]]
        self._optimizer.yi[rows[-1]] = y

    # --- ask --------------------------------------------------------------------------------------
    def _ask(self, n: int) -> list[Config]:
        candidates, X = self._candidates()
        if not candidates:
            return []
        explore = self.params.random_fraction > 0 and self.rng.random() < self.params.random_fraction
        if not self._optimizer.models or explore:  # the initial random points, or an interleaved one
            picks = self.rng.choice(len(candidates), size=min(n, len(candidates)), replace=False)
            return [candidates[i] for i in picks]
        revisit = self._revisit()
        if revisit is not None:
            keep = [i for i, c in enumerate(candidates) if c != revisit]
            candidates, X, n = [candidates[i] for i in keep], X[keep], n - 1
        score = self._acquisition(X) if candidates and n else np.empty(0)
        picks = [candidates[i] for i in np.argsort(-score, kind="stable")[:n]]
        return ([revisit] if revisit is not None else []) + picks

    def _since_best(self) -> int:
        """Evaluations told since the best one."""
        yi = self._optimizer.yi
        return len(yi) - 1 - int(np.argmin(yi)) if yi else 0

    def _revisit(self) -> Config | None:
        """While stalled, every ``revisit_every``-th ask: the unmeasured one-option neighbour of the best
        configurations (the incumbent's first) whose changed value was measured least often; None otherwise.
        Real-valued moves are left to the model: a real value is never measured twice."""
        if not self.revisit_after or self._since_best() < self.revisit_after:
            self._stalled_asks = 0
            return None
        self._stalled_asks += 1
        if self._stalled_asks % self.params.revisit_every:
            return None
        scored = sorted((o for o in self.observations if o.loss is not None), key=lambda o: o.loss)
        counts = Counter(kv for o in scored for kv in o.config.items())
        discrete = {p.name for p in self.space.parameters if p.kind is not Kind.REAL}
        for parent, neighbours in self._best_neighbours(scored):
            moves = []
            for c in neighbours:
                if self._members is not None and c not in self._index:
                    continue
                changed = [(k, v) for k, v in c.items() if parent.get(k) != v]
                if changed and all(k in discrete for k, _ in changed):
                    moves.append((min(counts[kv] for kv in changed), self.rng.random(), c))
            if moves:
                return min(moves, key=lambda m: m[:2])[2]
        return None

    def _acquisition(self, X: np.ndarray) -> np.ndarray:
        """Higher is better."""
        model = self._optimizer.models[-1]
        y_opt = float(np.min(self._optimizer.yi))
        if self.params.acq == "EI":
            ei = gaussian_ei(X, model, y_opt=y_opt, xi=self.params.xi)
            doubter = self._doubter(model)
            return ei if doubter is None else (ei + gaussian_ei(X, doubter, y_opt=y_opt, xi=self.params.xi)) / 2
        if self.params.acq == "PI":
            return gaussian_pi(X, model, y_opt=y_opt, xi=self.params.xi)
        return -gaussian_lcb(X, model, kappa=self.params.kappa)

    def _doubter(self, model: Any) -> GaussianProcessRegressor | None:
        """Once the search has stalled for ``doubt_after`` evaluations: the fitted GP with its length scales
        capped, refitted to the same data with the other hyperparameters fixed (else None)."""
        yi = self._optimizer.yi
        if not self.params.doubt_after:
            return None
        if self._since_best() < self.params.doubt_after:
            return None
        kernel = model.kernel_.clone_with_theta(model.kernel_.theta)
        matern = kernel.k1.k2
        matern.length_scale = np.minimum(matern.length_scale, self.params.doubt_length_scale)
        doubter = self._estimator(fit_hyperparameters=False).set_params(kernel=kernel)
        return doubter.fit(np.asarray(self._optimizer.Xi), np.asarray(yi))

    def _candidates(self) -> tuple[list[Config], np.ndarray]:
        """Unmeasured configurations to score, with their encodings."""
        limit = self.params.max_candidates
        if self._members is not None:
            free = np.flatnonzero(self._unmeasured)
            free = free[[not self.known(self._members[i]) for i in free]] if len(free) <= limit else free
            if len(free) > limit:
                local = [self._index[c] for c in self._local() if c in self._index]
                rest = self.rng.choice(free, size=limit - min(len(local), limit // 2), replace=False)
                chosen = list(dict.fromkeys(local[: limit // 2] + rest.tolist()))
                free = np.array([i for i in chosen if not self.known(self._members[i])], dtype=int)
            return [self._members[i] for i in free], self._encoded[free]
        out = list(dict.fromkeys(self._local()))
        seen = set(out)
        # at most 3 * limit valid draws, as one at a time; each batch asks only for what is still missing,
        # so on a table the draws are exactly those of one at a time
        drawn = 0
        while len(out) < limit and drawn < 3 * limit:
            wanted = min(limit - len(out), 3 * limit - drawn)
            batch = self.space.sample_many(self.rng, wanted)
            # valid draws are counted, and a batch forbidden whole as its size (it used to end the draw,
            # however few it was): the loop ends after at most 3 * limit batches
            drawn += len(batch) or wanted
            for c in batch:
                if c not in seen and not self.known(c):
                    out.append(c)
                    seen.add(c)
        return out, self._encode_many(out)

    def _local(self) -> list[Config]:
        """The unmeasured neighbours of the best configurations measured so far."""
        return [c for _, neighbours in self._best_neighbours() for c in neighbours]

    def _best_neighbours(self, scored: list[Observation] | None = None) -> Iterator[tuple[Config, list[Config]]]:
        """Each of the ``LOCAL_PARENTS`` best configurations, best first, with its unmeasured one-option
        neighbours (the neighbour lists are cached)."""
        if scored is None:
            scored = sorted((o for o in self.observations if o.loss is not None), key=lambda o: o.loss)
        for o in scored[:LOCAL_PARENTS]:
            if o.config not in self._neighbours:
                self._neighbours[o.config] = self.space.neighbours(o.config)
            yield o.config, [c for c in self._neighbours[o.config] if not self.known(c)]
