"""Adaptive repeats: noise handled by re-measuring, in the style of SMAC3's intensifier.

A configuration is measured ``repeats`` times when it is first asked. The incumbent is the
configuration with the best mean among those measured the most times. A challenger whose mean
looks better than the incumbent's is measured again, one run at a time, until it has as many runs
as the incumbent (then it has won, and is the incumbent) or until its mean stops looking better
(then it has lost, and keeps its runs). Whenever another configuration has as many runs as the
incumbent (a race just ended), the incumbent is measured once more, up to ``max_repeats``: the bar
a challenger must clear rises as the campaign goes, as SMAC's incumbent collects instance-seed pairs.

The rule reads only each configuration's runs and mean, which the history keeps, so a resumed
campaign picks its races up where they stopped. Written here rather than taken from SMAC3: its
intensifier is bound to its own runhistory and ConfigSpace, not to an ask/tell over our history.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from storetune.search_spaces.status import better
from storetune.search_spaces.status import loss as to_loss

MAX_REPEATS_LIMIT = 100


@dataclass(frozen=True)
class Standing:
    """What the rule knows of one finished trial: its runs, and its mean if it succeeded."""

    trial: int  # the trial's id; earlier trials have smaller ids (ties go to the earliest)
    runs: int
    value: float | None


def incumbent(standings: Iterable[Standing], direction: str) -> Standing | None:
    """The best mean among the succeeded trials measured the most times (``analysis.best_trial``'s rule)."""
    scored = [s for s in standings if s.value is not None]
    if not scored:
        return None
    most = max(s.runs for s in scored)
    return min((s for s in scored if s.runs == most), key=lambda s: (to_loss(s.value, direction), s.trial))


def next_remeasure(standings: Iterable[Standing], direction: str, max_repeats: int,
                   busy: Collection[int] = ()) -> int | None:
    """The trial to measure once more next, or None: the best-looking challenger if one looks better
    than the incumbent with fewer runs, else the incumbent if a race just ended at its runs and it is
    below the cap. ``busy`` trials are being measured already."""
    standings = list(standings)
    best = incumbent(standings, direction)
    if best is None or best.trial in busy:
        return None
    assert best.value is not None
    challengers = [s for s in standings if s.trial != best.trial and s.value is not None and s.runs < best.runs
                   and s.trial not in busy and better(s.value, best.value, direction)]
    if challengers:
        return min(challengers, key=lambda s: (to_loss(s.value, direction), s.trial)).trial
    raced = any(s.trial != best.trial and s.value is not None and s.runs == best.runs for s in standings)
    return best.trial if raced and best.runs < max_repeats else None


FINALIST_Z = 2.0  # a finalist's mean is within this many standard errors of the incumbent's
# with rungs, the budget's end is kept for this many configurations' further runs (a round number, not tuned: on the
# replayed tables the space runs out first)
FINALISTS = 3


def next_finalist(standings: Iterable[Standing], direction: str, max_repeats: int, run_sd: float | None,
                  busy: Collection[int] = ()) -> int | None:
    """Once the search has nothing new to ask: the trial to measure once more so that the reported best rests on
    more than one run's noise, or None. A finalist has fewer runs than the incumbent, is below the cap, and its mean
    is within ``FINALIST_Z`` standard errors of the incumbent's (``run_sd``: one run's standard deviation, pooled
    over the configurations measured more than once), the closest first. ``next_remeasure`` races only what looks
    better; a configuration whose one run fell a little behind would otherwise never be measured again."""
    standings = list(standings)
    best = incumbent(standings, direction)
    if best is None or best.value is None or not run_sd:
        return None
    bar = to_loss(best.value, direction)

    def gap(s: Standing) -> float:  # how far behind the incumbent, in standard errors of the difference
        assert s.value is not None
        return (to_loss(s.value, direction) - bar) / (run_sd * (1 / s.runs + 1 / best.runs) ** 0.5)

    finalists = [s for s in standings if s.trial != best.trial and s.value is not None and s.runs < best.runs
                 and s.runs < max_repeats and s.trial not in busy and gap(s) < FINALIST_Z]
    return min(finalists, key=lambda s: (gap(s), s.trial)).trial if finalists else None


def check_max_repeats(max_repeats: int | None, repeats: int) -> None:
    """A cap below the repeats every configuration gets anyway, or beyond reason, raises ValueError."""
    if max_repeats is None:
        return
    if max_repeats < repeats:
        raise ValueError(f"`max_repeats` {max_repeats} is below `repeats` {repeats}: every configuration is "
                         f"measured {repeats} times first; the cap must be at least that")
    if max_repeats > MAX_REPEATS_LIMIT:
        raise ValueError(f"`max_repeats` {max_repeats}: at most {MAX_REPEATS_LIMIT} runs of one configuration")


RACE_ALPHA = 0.1  # Optuna's WilcoxonPruner's default p_threshold
RACE_MIN_PAIRS = 4  # a one-sided signed-rank test over fewer pairs cannot reach p below 0.1 (over 4: 1/16)


@dataclass
class RepeatRace:
    """Repeats as a fidelity: a configuration's runs race the incumbent's, run by run, and stop as soon as a one-sided
    Wilcoxon signed-rank test over the pairs so far (run k against the incumbent's run k, in the order they ran)
    says it is worse, at ``alpha``. The pairs share no seed: a replayed table draws each run from a few recorded
    repeats, and one seed for both sides would pair the same two repeats again and again, counting one difference
    as several (a device's fio draws the same workload in every run anyway). The incumbent is the best mean among the
    configurations measured with every repeat (``offer``). What Optuna's WilcoxonPruner does over a trial's steps,
    here over a configuration's repeats, with scipy's test (exact where no pair ties, else its normal approximation,
    zero differences split)."""

    direction: str
    repeats: int
    alpha: float = RACE_ALPHA
    incumbent: list[float] | None = None

    def offer(self, runs: list[float]) -> None:
        """A configuration measured with every repeat: the incumbent from now on if its mean is better."""
        if len(runs) < self.repeats:
            return
        if self.incumbent is None or better(sum(runs) / len(runs), sum(self.incumbent) / len(self.incumbent),
                                            self.direction):
            self.incumbent = list(runs[:self.repeats])

    def race(self, runs: list[float]) -> str | None:
        """None while ``runs`` (a configuration's first runs) may still beat the incumbent; else why they stop."""
        n = len(runs)
        if self.incumbent is None or n < RACE_MIN_PAIRS or n >= self.repeats:
            return None
        from scipy.stats import wilcoxon

        worse = [to_loss(a, self.direction) - to_loss(b, self.direction) for a, b in zip(runs, self.incumbent)]
        if not any(worse):
            return None
        p = float(wilcoxon(worse, alternative="greater", zero_method="zsplit").pvalue)
        if p >= self.alpha:
            return None
        return (f"raced out after {n} of {self.repeats} runs: worse than the incumbent, run for run (Wilcoxon "
                f"signed-rank p = {p:.3f} < {self.alpha:g})")

    def counts(self) -> list[int]:
        """The incumbent's runs (a board's count, for the loop's summary)."""
        return [0 if self.incumbent is None else len(self.incumbent)]


def check_race(race: str, repeats: int) -> None:
    """A race needs repeats enough for the test to ever stop one: refused in one line otherwise."""
    if race not in ("none", "wilcoxon"):
        raise ValueError(f"race {race!r}: choose none or wilcoxon")
    if race == "wilcoxon" and repeats <= RACE_MIN_PAIRS:
        raise ValueError(f"race wilcoxon with {repeats} repeats cannot stop a configuration early: a one-sided "
                         f"signed-rank test reaches p below {RACE_ALPHA} from {RACE_MIN_PAIRS} runs, so give "
                         f"--repeats {RACE_MIN_PAIRS + 1} or more")
