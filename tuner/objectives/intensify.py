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


def check_max_repeats(max_repeats: int | None, repeats: int) -> None:
    """A cap below the repeats every configuration gets anyway, or beyond reason, raises ValueError."""
    if max_repeats is None:
        return
    if max_repeats < repeats:
        raise ValueError(f"`max_repeats` {max_repeats} is below `repeats` {repeats}: every configuration is "
                         f"measured {repeats} times first; the cap must be at least that")
    if max_repeats > MAX_REPEATS_LIMIT:
        raise ValueError(f"`max_repeats` {max_repeats}: at most {MAX_REPEATS_LIMIT} runs of one configuration")
