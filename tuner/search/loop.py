"""The ask -> measure -> tell -> record loop, shared by campaigns (recorded as they go in the SQL
history) and by the offline comparison (recorded in memory in a worker process, written at the end).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from storetune.runners import HostUnavailable, Measurement, Runner, Status
from storetune.search_spaces import Config, config_hash
from storetune.search_spaces.status import loss as to_loss
from storetune.tuner.algorithms.base import Tuner
from storetune.tuner.execution.jobs import Executor, Job, board_lost, repeat_seeds
from storetune.tuner.execution.local import LocalExecutor
from storetune.tuner.history.views import TrialStore, TrialView
from storetune.tuner.objectives.fidelity import Rungs
from storetune.tuner.objectives.intensify import FINALISTS, RepeatRace
from storetune.tuner.objectives.objective import MultiObjective, Objective
from storetune.tuner.search.remeasure import Races, Shortened, stored_measurements


@dataclass(frozen=True)
class TrialResult:
    """One finished trial, as progress displays see it."""

    number: int
    config: Config
    status: Status
    value: float | None
    reason: str | None
    duration_s: float
    evaluated: int
    budget: int
    best_value: float | None  # the campaign's own best: warm-started trials are not its measurements
    warm_started: int = 0  # earlier trials the algorithm was told before this campaign's first
    runs: int = 1  # the trial's measurements so far; more than its repeats after an adaptive re-measurement
    remeasured: bool = False  # this evaluation re-measured an earlier trial (adaptive repeats)


@dataclass
class LoopOutcome:
    evaluated: int
    note: str | None = None  # why the loop stopped before the budget
    stopped: bool = False  # ``stop`` asked the loop to drain (a cancel)
    overhead_s: list[float] = field(default_factory=list)  # the algorithm's ask+tell time per evaluation
    device_s: float = 0.0  # the seconds the runs ran (their run lengths, short ones too), this loop's
    judged: list[int] = field(default_factory=list)  # multi-fidelity: the runs judged at each rung


def run_seconds(measurements: Sequence[Measurement]) -> float:
    """The device time runs took: each one's run length where it says (watched runs), else its duration."""
    return sum(float(m.env.get("run_length_s", m.duration_s)) for m in measurements)


def trial_seed(campaign_seed: int, config: Config) -> int:
    """The seed a configuration is measured with in a campaign: campaigns with the same seed draw the
    same noise for the same configuration (common random numbers), which makes comparisons fairer."""
    return int(np.random.SeedSequence([campaign_seed, int(config_hash(config), 16)]).generate_state(1)[0])


def run_loop(
    *,
    campaign_id: int,
    tuner: Tuner,
    runner: Runner,
    objective: Objective | MultiObjective,
    store: TrialStore,
    budget: int,
    repeats: int,
    batch_size: int,
    seed: int,
    evaluated: int = 0,
    queue: Sequence[TrialView] = (),
    executor: Executor | None = None,
    on_trial: Callable[[TrialResult], None] | None = None,
    stop: Callable[[], bool] | None = None,
    on_start: Callable[[int, Config], None] | None = None,
    max_repeats: int | None = None,
    finished: Sequence[TrialView] = (),
    fidelity: Rungs | None = None,
    budget_s: float | None = None,
    device_s: float = 0.0,
    race: RepeatRace | None = None,
) -> LoopOutcome:
    """Spend the budget: ``queue`` holds trials to measure before asking for new ones (those
    pending or re-run after a crash), ``evaluated`` the finished trials that already count.

    With ``max_repeats`` (adaptive repeats, tuner/intensify.py), a challenger that looks better than
    the incumbent is measured again before the algorithm is asked for anything new (with rungs, at the end: below);
    each such re-measurement is one evaluation of the budget, and the algorithm is told the trial's new mean.
    ``finished`` holds the trials measured before a resume, with their measurements, for the races.

    An asynchronous executor (worker processes, Ray) keeps ``batch_size`` trials in flight: as each
    finishes, the algorithm is told and asked for the next one. An algorithm that needs a whole batch
    (a GA's generation, ``Tuner.whole_batches``) and a local executor are asked for a batch when the
    previous one has finished. ``stop`` is asked before any trial starts: when it says yes, the loop
    drains (the trials in flight are recorded; none is started) and returns with ``stopped`` set.
    When a job raises HostUnavailable (the host cannot measure now), the loop drains the same way, after
    withdrawing what the stream can of the jobs submitted (``Stream.drop_queued``), and raises: the trials
    left running are the campaign's to re-run.

    With ``fidelity`` (multi-fidelity search, tuner/objectives/fidelity.py), each run is judged at its rungs
    against the others' and stopped short where it is not in their best 1/eta: the trial is STOPPED, and the
    algorithm is told its value at the rung, never better than the worst full-length run (``told_value``).
    ``budget_s`` stops starting trials once the runs have taken that many device-seconds (run lengths), with
    ``device_s`` taken already (a resume's). With ``max_repeats`` as well, repeats are the second fidelity, spent at the
    end: once nothing new can be asked, the whole runs that look better than the incumbent are raced, the stopped runs
    promoted and the finalists measured again, so the reported best rests on more than one run's noise; in the
    budget's kept end (``kept_runs``), a race or a finalist that is due goes before anything new, and before the
    stopped runs. Racing them at once would spend device time on re-measurements before the search had found the
    best (bench/multifidelity.py).

    With ``race`` (repeats as a fidelity), a configuration's repeats race the incumbent's run by run in the worker,
    and stop where a Wilcoxon signed-rank test says it is worse: its trial keeps the runs it took, and says why."""
    executor = executor or LocalExecutor()
    outcome = LoopOutcome(evaluated, device_s=device_s)
    queue = list(queue)
    if fidelity is not None and (repeats != 1 or not isinstance(objective, Objective)):
        raise ValueError("multi-fidelity search judges runs by one metric, one run each: it does not combine with "
                         "repeats or an objective over several metrics")
    races = None if max_repeats is None else Races(objective, max_repeats, finished)
    tuner.reserve([Config(t.config) for t in queue])  # measured from the queue: never asked for again
    short = None if fidelity is None else Shortened(fidelity, objective, finished)  # type: ignore[arg-type]
    if race is not None and (fidelity is not None or max_repeats is not None or not isinstance(objective, Objective)):
        raise ValueError("a race on repeats judges one metric over a configuration's fixed repeats: it does not "
                         "combine with multi-fidelity runs, adaptive repeats or an objective over several metrics")
    if race is not None:
        for t in finished:  # a resume: the incumbent among the configurations measured with every repeat
            runs = [m.metrics[objective.metric] for m in stored_measurements(t) if objective.metric in m.metrics]  # type: ignore[union-attr]
            if t.status == Status.SUCCEEDED.value:
                race.offer(runs)
    board = executor.board(short.halving()) if short is not None else executor.board(race) if race is not None \
        else None
    stream = executor.stream(runner, runner.workload, lambda job, repeat, m: store.add_measurement(
        job.trial_id, repeat, m), board=board)
    batches = not executor.asynchronous or tuner.whole_batches
    in_flight: dict[int, TrialView] = {}
    ask_share: dict[int, float] = {}
    exhausted = False
    host_error: HostUnavailable | None = None
    promoted: set[int] = set()  # stopped trials being measured whole, once the space is exhausted
    kept = 0 if fidelity is None or races is None else kept_runs(budget, races.max_repeats)  # the budget's kept end

    def promote(busy: set[int]) -> TrialView | None:  # a stopped run to measure whole
        chosen = None if short is None else short.promote(busy=busy)
        if chosen is not None:
            promoted.add(chosen.id)
        return chosen

    def challenger(busy: set[int]) -> TrialView | None:  # with rungs, the races held back until now
        return None if races is None or short is None else races.next(busy=busy)

    def finalist(busy: set[int]) -> TrialView | None:
        return None if races is None else races.finalist(busy=busy)

    while True:
        starting: list[TrialView] = []
        while (host_error is None and not outcome.stopped
               and len(in_flight) + len(starting) < batch_size
               and outcome.evaluated + len(in_flight) + len(starting) < budget
               and (budget_s is None or outcome.device_s < budget_s)
               and not (batches and in_flight)):
            if not starting and stop is not None and stop():
                outcome.stopped = True
                break
            # a resume's queued trials first (they were in flight before), then re-measurements (with rungs they wait
            # for the end: repeats are the second fidelity, spent on the configurations the first one left standing)
            busy = set(in_flight) | {t.id for t in starting}
            again = None if races is None or queue or short is not None else races.next(busy=busy)
            if again is not None:  # a re-measurement: the trial keeps its state and counts one evaluation
                starting.append(again)
                continue
            closing = bool(kept) and _in_kept_end(outcome, len(busy), budget, budget_s, kept,
                                                  fidelity.lengths[-1])  # type: ignore[union-attr]
            if closing and not queue:  # the budget's kept end: a re-measurement that is due goes first
                again = challenger(busy) or finalist(busy) or promote(busy)
                if again is not None:
                    starting.append(again)
                    continue
            if not queue and not exhausted:
                left = budget - outcome.evaluated - len(busy)
                # one at a time in the kept end (a re-measurement may fall due); before it, a batch stops short of it
                room = 1 if closing else min(batch_size - len(busy), left - kept)
                started = time.perf_counter()
                configs = tuner.ask(room)
                exhausted = not configs
                if configs:
                    queue = list(store.add_trials(campaign_id, configs, [trial_seed(seed, c) for c in configs]))
                    share = (time.perf_counter() - started) / len(configs)
                    ask_share.update({t.id: share for t in queue})
            if not queue:  # nothing new to measure: a race, then a stopped run measured whole, then a finalist
                again = challenger(busy) or promote(busy) or finalist(busy)
                if again is None:
                    break
                starting.append(again)
                continue
            starting.append(queue.pop(0))
        if starting:
            fresh = [t for t in starting if t.id not in promoted and (races is None or not races.known(t.id))]
            if fresh:
                store.start_trials([t.id for t in fresh])
            for t in starting:
                if on_start is not None:
                    on_start(t.number, Config(t.config))
                done = races.runs(t.id) if races is not None else short.runs(t.id) if t.id in promoted else 0  # type: ignore[union-attr]
                if done:
                    job = Job(t.id, Config(t.config), repeat_seeds(t.seed, done + 1)[done:], first_repeat=done)
                elif fidelity is not None:
                    job = Job(t.id, Config(t.config), repeat_seeds(t.seed, repeats), rungs=fidelity.lengths,
                              metric=objective.metric)  # type: ignore[union-attr]  # one metric: checked above
                elif race is not None:
                    job = Job(t.id, Config(t.config), repeat_seeds(t.seed, repeats), metric=objective.metric,  # type: ignore[union-attr]
                              race=True)
                else:
                    job = Job(t.id, Config(t.config), repeat_seeds(t.seed, repeats))
                stream.submit(job)
                in_flight[t.id] = t
        if not in_flight or (host_error is not None and not stream.pending):
            break
        try:
            job, measurements = stream.next()
        except HostUnavailable as e:  # the other jobs in flight are measured on: their results are kept
            if host_error is None:
                host_error = e
                stream.drop_queued()
            continue
        except Exception as e:  # the drain broke (a worker died): the host's error is still why the loop stops
            if host_error is None:
                raise
            raise host_error from e
        trial = in_flight.pop(job.trial_id)
        outcome.device_s += run_seconds(measurements)  # the job's own runs
        if races is not None:
            measurements = races.add(trial, measurements)
        elif trial.id in promoted:
            measurements = short.earlier(trial.id) + measurements  # type: ignore[union-attr]
        status, value, reason = objective.outcome(measurements)
        if status is Status.STOPPED and fidelity is not None:
            reason = fidelity.stop_reason(int(measurements[-1].env["stopped_at_rung"]))
        told_board = None  # what the board learns of a finished job: an incumbent's runs, or a whole run's rungs
        if status is Status.SUCCEEDED and measurements and "raced_out" in measurements[-1].env:
            reason = str(measurements[-1].env["raced_out"])
        elif race is not None and board is not None and status is Status.SUCCEEDED and len(measurements) == repeats:
            runs = [m.metrics[objective.metric] for m in measurements]  # type: ignore[union-attr]  # one metric
            told_board = partial(board.offer, runs)  # type: ignore[union-attr,attr-defined]
        elif (short is not None and board is not None
              and (whole := short.whole_run(status, measurements, job.first_repeat))):
            told_board = partial(board.learn, *whole)  # type: ignore[union-attr]  # would the rungs have stopped it
        if told_board is not None:
            try:
                told_board()
            except Exception as e:  # its manager or actor is gone: as a busy host, the campaign stops, resumable
                if host_error is None:
                    host_error = board_lost(e)
                    stream.drop_queued()
        store.finish_trial(job.trial_id, status, value, reason)
        vector = objective.vector(measurements) if status is Status.SUCCEEDED else None
        told, told_status, again = value, status, []
        if short is not None and trial.id in promoted:  # a stopped run measured whole: told what it measured
            promoted.discard(trial.id)
            again = short.promoted(trial.id, status, value)
        elif short is not None and not job.first_repeat:  # a stopped run: how bad, never that it beat a whole run
            told, told_status, again = short.finished(job.config, status, value, measurements, trial)
        started = time.perf_counter()
        if job.first_repeat:
            tuner.retell(job.config, told, told_status, vector)
        else:
            tuner.tell(job.config, told, told_status, vector)
        for config, capped in again:  # a new worst whole run lowers the cap on what stopped runs are told
            tuner.retell(config, capped)
        if races is not None:
            races.finish(trial.id, value if status is Status.SUCCEEDED else None)
        outcome.overhead_s.append(ask_share.pop(job.trial_id, 0.0) + time.perf_counter() - started)
        outcome.evaluated += 1
        if on_trial is not None:
            if races is not None:  # the incumbent, which the campaign reports; not a lucky first run
                incumbent = races.incumbent()
                best_value = None if incumbent is None else incumbent.value
            else:
                best = tuner.own_best
                best_value = None if best is None else to_loss(best.loss, objective.direction)
            duration = sum(m.duration_s for m in measurements[job.first_repeat:])
            on_trial(TrialResult(trial.number, job.config, status, value, reason, duration, outcome.evaluated,
                                 budget, best_value, tuner.warm_started, len(measurements), job.first_repeat > 0))
    if board is not None and host_error is None:
        try:
            outcome.judged = list(board.counts())
        except Exception as e:  # what the summary says of the rungs is lost; the measurements are not
            host_error = board_lost(e)
    if host_error is not None:
        raise host_error
    if outcome.stopped:
        outcome.note = f"cancelled after {outcome.evaluated} of {budget} evaluations"
    elif budget_s is not None and outcome.device_s >= budget_s:
        outcome.note = (f"the budget of {budget_s:g} device-seconds was spent after {outcome.evaluated} evaluations "
                        f"({outcome.device_s:.0f} s)")
    elif exhausted:
        outcome.note = f"the search space was exhausted after {outcome.evaluated} trials"
    return outcome


def kept_runs(budget: int, max_repeats: int) -> int:
    """With rungs and adaptive repeats, the evaluations at the budget's end where a re-measurement that is due goes
    before anything new: ``FINALISTS`` configurations' further runs, at most half the budget."""
    return min(FINALISTS * (max_repeats - 1), budget // 2)


def _in_kept_end(outcome: LoopOutcome, busy: int, budget: int, budget_s: float | None, kept: int,
                 whole_s: float) -> bool:
    """Whether the budget left is the kept end (``kept_runs``, in device-seconds as many whole runs, at most half of
    ``budget_s``; the runs in flight counted by number, not by what they will take): a device campaign's space is
    seldom exhausted, and its reported best would otherwise rest on one run."""
    if budget - outcome.evaluated - busy <= kept:
        return True
    return budget_s is not None and budget_s - outcome.device_s <= min(kept * whole_s, budget_s / 2)


def settle(trials: Sequence[TrialView], objective: Objective | MultiObjective, store: TrialStore) -> list[TrialView]:
    """Each finished trial's status and value recomputed from all its measurements (read with them), and
    recorded where they differ: a driver that died between an adaptive re-measurement and the new mean
    left the old one. A resumed campaign settles its trials before it tells the algorithm anything."""
    out = []
    for t in trials:
        if Status(t.status).terminal and t.measurements:
            status, value, reason = objective.outcome(stored_measurements(t))
            if (status.value, value) != (t.status, t.value):
                store.finish_trial(t.id, status, value, reason)
                t = dataclasses.replace(t, status=status.value, value=value, reason=reason)
        out.append(t)
    return out
