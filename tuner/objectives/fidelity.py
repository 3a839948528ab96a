"""Measure short, continue the promising: asynchronous successive halving (ASHA) over a run's length.

A run is watched at its rungs, run lengths that grow by ``eta`` up to the full length. At each rung the
run's mean so far is recorded; the run goes on only if it is in the best ``1/eta`` of the values recorded at
that rung so far (itself included), so that about one run in ``eta`` reaches the next rung and one in
``eta^(k-1)`` the full length. This is the stopping form of ASHA (Li et al., MLSys 2020) that Ray Tune's
``ASHAScheduler`` implements: decisions need no other trial to finish, which suits asynchronous workers. Once the
search has nothing new to propose, the loop turns to the promoting form: the stopped runs are measured whole, the
furthest rung and the best standing there first (``Shortened.promote`` in tuner/search/loop.py).
Written here rather than taken from Ray Tune: its scheduler works on Tune's own trial objects and runner,
not on a run that reports its seconds to our loop.

The rule reads each run's value at each rung and nothing else, so it is the same offline (a dataset's
per-second series) and on a device (a run's series as it grows).

A rung stops runs only while it would let the best whole runs through. A short run's rank is not always the whole
run's: on varmail (datasets/loop-storage-ts) the best configuration is 18th of 70 after 1 s and 15th after 3 s,
first only from 10 s, and the configurations a search proposes late are the good ones, among which the first
seconds rank worst. So the first ``burn_in`` runs go whole, and a rung stops a run only where the best ``guard``
whole runs so far each stand in its best 1/eta, against the rung's record now. A rung that would have stopped one of
them lets every run through, and is asked again as the record grows. Every whole run is told to the record with
its value at each rung (``learn``). Plain ASHA trusts every rung from the first run, and stops exactly the runs
whose first seconds mislead it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from storetune.runners import Runner, WatchedRunner
from storetune.search_spaces.status import Direction, better


class RungError(ValueError):
    """A rung schedule that cannot be used; the message names the values."""


@dataclass(frozen=True)
class Rungs:
    """The run lengths (seconds) at which a run is judged, the last being the full length; and ``eta``, the
    factor between them (about one run in ``eta`` is continued past each)."""

    lengths: tuple[float, ...]
    eta: float = 3.0
    burn_in: int = 0  # whole runs before any rung stops one (0: from the first run, plain ASHA)
    guard: int = 0  # a rung stops runs only while the best ``guard`` whole runs would pass it (0: always)

    def __post_init__(self) -> None:
        if not self.lengths:
            raise RungError("a rung schedule needs at least one run length")
        if not (self.eta > 1 and math.isfinite(self.eta)):
            raise RungError(f"eta must be a number above 1 (the factor between rungs), not {self.eta!r}")
        if any(not (b > a) for a, b in zip(self.lengths, self.lengths[1:])) or self.lengths[0] <= 0:
            raise RungError(f"rungs must be positive run lengths that grow: {', '.join(f'{x:g}' for x in self.lengths)} s")
        if self.burn_in < 0 or self.guard < 0:
            raise RungError(f"burn_in ({self.burn_in}) and guard ({self.guard}) count whole runs: 0 or more")

    @classmethod
    def geometric(cls, full_s: float, eta: float = 3.0, min_s: float = 1.0, interval_s: float | None = None,
                  burn_in: int = 0, guard: int = 0) -> Rungs:
        """``min_s``, ``min_s * eta``, ... below ``full_s``, then ``full_s``: the schedule ASHA uses. A rung
        within a factor of sqrt(eta) of the full length is left out (30 s with eta 3: 1, 3, 9, 30, not 27).
        With ``interval_s`` (how often a run reports) each rung is the nearest whole number of intervals: a
        run cannot be judged between two reports (eta 2.5 from 1 s: 1, 3, 6, 16, 30)."""
        if not (0 < min_s <= full_s):
            raise RungError(f"the shortest rung ({min_s:g} s) must be positive and at most the run's length "
                            f"({full_s:g} s)")
        if not (eta > 1 and math.isfinite(eta)):
            raise RungError(f"eta must be a number above 1 (the factor between rungs), not {eta!r}")
        if interval_s is not None and min_s < interval_s - 1e-9:
            raise RungError(f"the shortest rung ({min_s:g} s) is shorter than the interval the runs report at "
                            f"({interval_s:g} s): a run cannot be judged before its first report")
        lengths, length = [], float(min_s)
        while length < full_s - 1e-9:
            snapped = length if interval_s is None else math.floor(length / interval_s + 0.5) * interval_s
            if snapped < full_s - 1e-9 and (not lengths or snapped > lengths[-1]):
                lengths.append(snapped)
            length *= eta
        if len(lengths) > 1 and full_s / lengths[-1] < math.sqrt(eta):
            lengths.pop()
        return cls((*lengths, float(full_s)), eta, burn_in, guard)

    @classmethod
    def recorded(cls, fidelity: dict) -> Rungs:
        """The schedule a campaign recorded (``campaigns.fidelity``); one recorded before the rungs learned from
        whole runs resumes as plain ASHA, as it was measured."""
        return cls(tuple(fidelity["rungs"]), fidelity["eta"], int(fidelity.get("burn_in", 0)),
                   int(fidelity.get("guard", 0)))

    @property
    def full_s(self) -> float:
        return self.lengths[-1]

    def stop_reason(self, rung: int) -> str:
        """Why a run stopped at ``rung`` (an index) was stopped, as its trial says."""
        return (f"stopped after {self.lengths[rung]:g} s of {self.full_s:g} (rung {rung + 1} of {len(self.lengths)}): "
                f"not in the best 1/{self.eta:g} of the runs measured that long"
                + (" (a rung that the best whole runs so far pass)" if self.guard else ""))

    def check(self, full_s: float, budget_s: float | None = None, interval_s: float | None = None) -> None:
        """Refuse a schedule that does not fit the run length or fall on the runs' reports (every ``interval_s``),
        or a device-time budget that cannot pay for one run at full length (one line naming the values)."""
        named = ", ".join(f"{x:g}" for x in self.lengths)
        if abs(self.full_s - full_s) > 1e-9:
            raise RungError(f"the last rung ({self.full_s:g} s) must be the run's length ({full_s:g} s): rungs {named} s")
        if interval_s is not None and any(abs(x / interval_s - round(x / interval_s)) > 1e-6 or x < interval_s - 1e-9
                                          for x in self.lengths[:-1]):
            raise RungError(f"rungs {named} s: each must be a whole number of the runs' reporting interval "
                            f"({interval_s:g} s)")
        if budget_s is not None and budget_s < full_s:
            raise RungError(f"a budget of {budget_s:g} device-seconds cannot pay for one run of {full_s:g} s")


@dataclass
class SuccessiveHalving:
    """The rung records and the rule: ``judge(rung, value)`` records a run's value at a rung and says whether it
    goes on; ``learn(judged, value)`` tells it a whole run, which decides which rungs may stop runs (the module's
    docstring). ``direction`` is the metric's (``max`` for ops/s)."""

    rungs: Rungs
    direction: Direction = "max"
    recorded: list[list[float]] = field(default_factory=list)
    wholes: list[tuple[tuple[float, ...], float]] = field(default_factory=list)  # (value at each rung, whole value)

    def __post_init__(self) -> None:
        self.recorded = [list(r) for r in self.recorded] or [[] for _ in self.rungs.lengths]
        self.wholes = [(tuple(map(float, j)), float(v)) for j, v in self.wholes]

    def learn(self, judged: Sequence[float], value: float) -> None:
        """A run measured whole: ``judged``, its value at each rung it passed, and ``value``, the whole run's."""
        if math.isfinite(value) and all(math.isfinite(v) for v in judged):
            self.wholes.append((tuple(map(float, judged)), float(value)))

    def trusted(self, rung: int) -> bool:
        """Whether ``rung`` may stop a run now: past the burn-in, the best ``guard`` whole runs so far each stand in
        the best 1/eta of its record (a whole run a late report took past the rung counts as standing there)."""
        if len(self.wholes) < self.rungs.burn_in:
            return False
        if not self.rungs.guard:
            return True
        sign = -1.0 if self.direction == "max" else 1.0
        best = sorted(self.wholes, key=lambda w: sign * w[1])[:self.rungs.guard]
        return all(self._stands(rung, judged[rung]) for judged, _ in best if len(judged) > rung)

    def judge(self, rung: int, value: float) -> bool:
        """Record ``value`` at ``rung`` (an index into the lengths) and say whether the run goes on to the next:
        it does where it is in the best ``1/eta`` of the values recorded there (itself included). The last rung is
        the full length: there is nothing to go on to."""
        if not math.isfinite(value):
            raise ValueError(f"a rung's value must be a finite number, not {value!r}")
        self.recorded[rung].append(float(value))
        if rung == len(self.rungs.lengths) - 1:
            return False
        return not self.trusted(rung) or self._stands(rung, value)

    def _stands(self, rung: int, value: float) -> bool:
        """``value`` is in the best 1/eta of the rung's record: at or above its (1 - 1/eta) quantile for a maximised
        metric."""
        values, share = self.recorded[rung], 1 - 1 / self.rungs.eta
        if not values:  # nothing judged there yet (a record rebuilt without it): nothing to fall behind
            return True
        if self.direction == "max":
            return value >= float(np.quantile(values, share))
        return value <= float(np.quantile(values, 1 - share))

    def counts(self) -> list[int]:
        """How many runs were judged at each rung."""
        return [len(r) for r in self.recorded]


def told_value(value: float, full_values: Sequence[float], direction: Direction) -> float:
    """What the search algorithm is told of a stopped run: its value at the rung, but never better than the worst run
    measured at full length. A short run's mean is no full run's (warm-up, a page cache still filling): told as it is,
    an early burst would be taken for the best. Optuna's TPE ranks its pruned trials below its complete ones the same
    way; the rung's value keeps the model's sense of how bad."""
    if not full_values:
        return value
    worst = min(full_values, key=lambda v: -v if direction == "min" else v)
    return worst if better(value, worst, direction) else value


# tune's defaults: chosen on loop-storage-ts's fileserver and varmail at seeds 0-19, with stopped runs promoted once
# the space is exhausted (bench/multifidelity.py; docs/results/multifidelity.md)
BURN_IN = 0
GUARD = 2
FIDELITIES = ("none", "asha")  # whole runs only; asynchronous successive halving over the run's length


def watchable(runner: Runner, rungs: Rungs) -> WatchedRunner:
    """``runner`` as one whose runs can be stopped at ``rungs``; refused with the reason where it cannot (a
    command that does not stream its metrics, a replayed table without per-interval series) or where the
    schedule does not fit its run length (a resumed campaign's, on a table that changed)."""
    full = _full_length(runner)
    rungs.check(full, interval_s=runner.interval_s())  # type: ignore[attr-defined]  # _full_length refused any other
    return runner  # type: ignore[return-value]


def schedule(runner: Runner, eta: float = 3.0, min_s: float = 1.0, budget_s: float | None = None,
             burn_in: int = BURN_IN, guard: int = GUARD) -> Rungs:
    """ASHA's rungs for ``runner``'s runs (``Rungs.geometric`` up to its full length, on its reports), checked
    against a device-seconds budget; refused with the reason for a runner that cannot stop a run short, or a
    schedule with no rung before the whole run (nothing would be judged)."""
    full = _full_length(runner)
    rungs = Rungs.geometric(full, eta, min_s, runner.interval_s(), burn_in, guard)  # type: ignore[attr-defined]
    if len(rungs.lengths) < 2:
        raise RungError(f"the shortest rung ({min_s:g} s) leaves no rung before the whole run ({full:g} s): nothing "
                        "would be judged; give a shorter shortest rung (min_run)")
    rungs.check(rungs.full_s, budget_s)
    return rungs


def _full_length(runner: Runner) -> float:
    full = runner.full_length_s() if isinstance(runner, WatchedRunner) else 0.0
    if not full:
        what = f"the {runner.name} runner on {runner.label()}"
        why = ("its table keeps no per-interval series (series:<metric> columns): it can only be replayed whole"
               if runner.replays else "it measures whole runs only, with no run length to stop at")
        raise RungError(f"{what} cannot measure short runs: {why}")
    return full
