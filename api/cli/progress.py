"""The rich progress bar shown on every campaign: trials done/total, best so far, time per trial."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from storetune.tuner import TrialResult


class CampaignProgress:
    """A context manager whose ``update`` is the campaign's ``on_trial`` callback."""

    def __init__(self, console: Console, title: str, budget: int, done: int = 0, best: float | None = None):
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("best [bold]{task.fields[best]}"),
            TextColumn("{task.fields[pace]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task(title, total=budget, completed=done, best=_best(best), pace="")
        self._started = time.monotonic()
        self._done_at_start = done
        self._title = title

    def __enter__(self) -> CampaignProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._progress.stop()

    def update(self, result: TrialResult) -> None:
        done_here = result.evaluated - self._done_at_start
        pace = (time.monotonic() - self._started) / max(done_here, 1)
        best = _best(result.best_value)
        title = self._title + (f" (warm start: {result.warm_started} earlier trials)" if result.warm_started else "")
        self._progress.update(self._task, description=title, completed=result.evaluated, best=best,
                              pace=f"{pace:.3g} s/trial")


def _best(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


class ComparisonProgress:
    """Seeded campaigns done out of all, for `storetune compare` (``done``: recorded before a resume)."""

    def __init__(self, console: Console, title: str, total: int, done: int = 0):
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[last]}"),
            TimeElapsedColumn(), console=console,
        )
        self._task = self._progress.add_task(title, total=total, completed=done, last="")

    def __enter__(self) -> ComparisonProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._progress.stop()

    def update(self, run: Any) -> None:
        self._progress.update(self._task, advance=1, last=f"{run.variant.label} seed {run.seed}")
