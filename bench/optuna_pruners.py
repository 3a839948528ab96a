"""Optuna's TPE with a pruner, as `bench/multifidelity.py`'s peers: ``optuna-hyperband`` (its HyperbandPruner, told
each second's mean as an intermediate value) and ``optuna-wilcoxon`` (its WilcoxonPruner over whole repeats)."""

from __future__ import annotations

from typing import Any

import numpy as np


def pruned_tpe(task: Any, runner: Any) -> list[tuple[tuple[float, ...], float | None, bool, bool]]:
    """Optuna's TPE, with a pruner, on the table: each proposal snapped to a configuration the table holds, as the
    suite's TPE peer does (bench/optuna_tpe.py), then measured with the pruner watching. ``task`` is the bench's Task;
    each trial is returned as the fields of its Step: its runs' lengths, its whole value (None: pruned or failed),
    whether it is near-optimal, whether it was pruned."""
    import optuna
    from optuna.trial import TrialState

    from optuna_tpe import OptunaTPE
    from storetune.search_spaces import Config

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    full = runner.full_length_s()
    repeats = max(len(r) for r in runner.table.series.values())
    if task.contestant == "optuna-hyperband":  # set up as its users would: its defaults, told the run's length
        pruner: Any = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=int(full), reduction_factor=3)
    else:
        pruner = optuna.pruners.WilcoxonPruner(p_threshold=0.1)
    sign = 1.0 if task.direction == "min" else -1.0  # the study minimises a loss

    class Pruned(OptunaTPE):
        def _make_study(self) -> Any:
            # named: Hyperband assigns trials to brackets by a hash of the study's name, random unless given
            return optuna.create_study(direction="minimize", pruner=pruner, study_name=f"seed-{self.seed}",
                                       sampler=optuna.samplers.TPESampler(seed=self.seed))

        def _moved(self, trial: Any, config: Any) -> Any:
            """A proposal the table does not hold, measured as its nearest configuration: the proposal fails, as for
            the suite's TPE peer, and the configuration measured is a trial of its own (enqueued), so that the
            pruner watches the run it judges (otherwise no moved run could be pruned)."""
            self._report(trial, None)
            self._study.enqueue_trial({k: v for k, v in config.items() if k in self._distributions})
            return self._study.ask(self._distributions)

    tuner = Pruned(runner.space, seed=task.seed, direction=task.direction)
    steps: list[tuple[tuple[float, ...], float | None, bool, bool]] = []
    spent, evaluations = dict.fromkeys(task.setups, 0.0), 0
    while not task.spent_all(spent):
        configs = tuner.ask(1)
        if not configs:
            break
        config = configs[0]
        trial = tuner._asked_trials.pop(config, None)  # None: a proposal moved to another configuration (snapped)
        seed = task.seed * 1_000_003 + evaluations
        evaluations += 1
        if task.contestant == "optuna-hyperband":
            values: list[float] = []

            def go_on(k: int, metrics: Any) -> bool:
                values.append(metrics[task.metric])
                if trial is None:
                    return True
                trial.report(sign * metrics[task.metric], step=k + 1)
                return not trial.should_prune()

            m = runner.run_watched(config, runner.workload, seed=seed, rungs=tuple(range(1, int(full) + 1)), go_on=go_on)
            lengths = [m.env.get("run_length_s", m.duration_s)]
            pruned = "stopped_at_rung" in m.env
            value = None if m.status.value != "SUCCEEDED" else m.metrics.get(task.metric)
        else:  # whole repeats, one step each, up to the table's repeats
            pruned, runs, lengths = False, [], []
            for r in range(repeats):
                m = runner.run(config, runner.workload, seed=seed + r)
                lengths.append(m.duration_s or full)
                if m.status.value != "SUCCEEDED":
                    break
                runs.append(m.metrics[task.metric])
                if trial is not None:
                    trial.report(sign * runs[-1], step=r)
                    if r < repeats - 1 and trial.should_prune():
                        pruned = True
                        break
            value = float(np.mean(runs)) if runs else None
        for s in spent:
            spent[s] += sum(length + s for length in lengths)
        steps.append((tuple(lengths), None if pruned else value, Config(config) in task.targets, pruned))
        if pruned:
            tuner._study.tell(trial, state=TrialState.PRUNED)  # TPE ranks it below the complete trials
            tuner.reserve([config])  # never proposed again
            continue
        if trial is not None:
            tuner._asked_trials[config] = trial
        tuner.tell(config, value)
    return steps
