"""The contract every runner keeps, as a test class to subclass (as Optuna ships ``StorageTestCase``).

A runner's tests, StoreTune's or a user's, subclass ``RunnerContract`` and say how to build the runner:

    class TestMyRunner(RunnerContract):
        def make(self, tmp_path):
            return make_runner("mine", {"space": "storage_v1", ...})

and pytest runs every check below against it. Nothing here imports pytest: the checks are plain asserts, and
``tmp_path`` is pytest's fixture when pytest runs them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from storetune.runners import Runner, Status, make_runner


class RunnerContract:
    """What every runner does, whatever it measures. Subclasses implement ``make``."""

    def make(self, tmp_path: Path) -> Runner:
        raise NotImplementedError("a runner's contract test builds its runner in make(tmp_path)")

    def test_is_a_runner(self, tmp_path: Path) -> None:
        runner = self.make(tmp_path)
        assert isinstance(runner, Runner)
        assert runner.name and runner.workload.fingerprint()

    def test_a_valid_configuration_is_measured(self, tmp_path: Path) -> None:
        runner = self.make(tmp_path)
        config = runner.space.sample(np.random.default_rng(0))
        m = runner.run(config, runner.workload, seed=7)
        assert m.status is Status.SUCCEEDED, m.reason
        assert m.metrics and all(math.isfinite(v) for v in m.metrics.values())
        assert set(runner.metrics()) <= set(m.metrics)
        assert m.env.get("engine") and m.env.get("seed") == 7

    def test_the_same_seed_gives_the_same_measurement(self, tmp_path: Path) -> None:
        runner = self.make(tmp_path)
        config = runner.space.sample(np.random.default_rng(1))
        first = runner.run(config, runner.workload, seed=11)
        again = runner.run(config, runner.workload, seed=11)
        assert first.metrics == again.metrics

    def test_a_configuration_outside_the_space_is_invalid_not_raised(self, tmp_path: Path) -> None:
        runner = self.make(tmp_path)
        config = runner.space.sample(np.random.default_rng(2)).replace(no_such_knob=1)
        m = runner.run(config, runner.workload, seed=0)
        assert m.status is Status.INVALID
        assert "no_such_knob" in m.reason

    def test_settings_rebuild_the_same_runner(self, tmp_path: Path) -> None:
        runner = self.make(tmp_path)
        again = make_runner(runner.name, **runner.settings())
        assert again.workload.fingerprint() == runner.workload.fingerprint()
        assert again.space.fingerprint() == runner.space.fingerprint()

    def test_resources_and_pins_are_answered(self, tmp_path: Path) -> None:
        """The rest of the protocol: what a measurement holds of a node, and pins that leave nothing to tune."""
        runner = self.make(tmp_path)
        assert all(isinstance(k, str) and v > 0 for k, v in runner.resources().items())
        assert runner.check_pins({}) is None
