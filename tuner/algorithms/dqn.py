"""Deep Q-learning (stable-baselines3 DQN) over one-parameter moves, learning online.

The state is the encoded current configuration plus the last rewards; an action moves one
parameter one step down or up (the previous or next category, cyclically); the reward is the
improvement of the loss, normalised by the spread of the losses seen. ``DQN.learn()`` runs its own
loop, so this tuner drives the model's parts directly: epsilon-greedy around ``predict``,
``replay_buffer.add`` per transition and ``train()`` per step. Moves onto configurations already
measured are free (their loss is known) and still teach the network.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
from stable_baselines3 import DQN
from stable_baselines3.common.logger import configure

from pydantic import Field
from pydantic.dataclasses import dataclass

from storetune.search_spaces import Config, Kind, SearchSpace, TableSpace
from storetune.tuner.algorithms.base import Observation, Tuner

MAX_FREE_MOVES = 50  # moves over measured configurations per proposal before jumping somewhere new
REWARD_CLIP = 5.0


class ConfigurationEnv(gym.Env):
    """A search space as a gymnasium environment. ``evaluate(config)`` returns a loss (lower is
    better) or None for a failed configuration. The DQN tuner uses its moves and observations
    directly; ``reset``/``step`` make it a complete environment for ``learn()`` and env checkers."""

    def __init__(self, space: SearchSpace, evaluate: Callable[[Config], float | None] | None = None, memory: int = 4):
        self.space = space
        self.evaluate = evaluate
        self.memory = memory
        self.action_space = gym.spaces.Discrete(2 * len(space.parameters))
        width = space.width + memory
        self.observation_space = gym.spaces.Box(-REWARD_CLIP, max(REWARD_CLIP, 1.0), (width,), np.float32)
        self.config: Config | None = None
        self.rewards: deque[float] = deque([0.0] * memory, maxlen=memory)
        self._loss: float | None = None

    def observe(self, config: Config, rewards: deque[float] | None = None) -> np.ndarray:
        recent = list(self.rewards if rewards is None else rewards)
        return np.concatenate([self.space.encode(config), recent]).astype(np.float32)

    def move(self, config: Config, action: int) -> Config | None:
        """The configuration one step away along ``action``; None if the space refuses it."""
        p = self.space.parameters[action // 2]
        if p.name not in config:
            return config  # the parameter is inactive here: the move changes nothing
        up = action % 2 == 1
        value = config[p.name]
        if p.kind is Kind.CATEGORICAL:
            i = p.values.index(value)
            moved = p.values[(i + (1 if up else -1)) % len(p.values)]
        else:
            steps = p.steps(value)
            lower = [v for v in steps if v < value]
            higher = [v for v in steps if v > value]
            options = higher if up else lower
            if not options:
                return config
            moved = options[0]
        candidate = config.replace(**{p.name: moved})
        if isinstance(self.space, TableSpace) and not self.space.contains(candidate):
            return self.space.nearest(candidate, exclude={config})
        return self.space.repair(candidate)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.config = self.space.sample(self.np_random)
        self.rewards = deque([0.0] * self.memory, maxlen=self.memory)
        self._loss = self.evaluate(self.config) if self.evaluate else None
        return self.observe(self.config), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.evaluate is None or self.config is None:
            raise RuntimeError("ConfigurationEnv.step needs an evaluate function and a reset() first")
        moved = self.move(self.config, int(action))
        if moved is None:
            reward = -1.0
        else:
            loss = self.evaluate(moved)
            reward = -1.0 if loss is None or self._loss is None else float(np.clip(self._loss - loss, -REWARD_CLIP, REWARD_CLIP))
            self.config, self._loss = moved, loss if loss is not None else self._loss
        self.rewards.append(reward)
        return self.observe(self.config), reward, False, False, {}


@dataclass(frozen=True)
class Params:
    learning_rate: Annotated[float, Field(gt=0, le=1)] = 1e-3
    gamma: Annotated[float, Field(ge=0, le=1)] = 0.9
    batch_size: Annotated[int, Field(ge=1)] = 32
    buffer_size: Annotated[int, Field(ge=1)] = 10_000
    learning_starts: Annotated[int, Field(ge=0)] = 16  # transitions before training starts
    target_update_interval: Annotated[int, Field(ge=1)] = 25  # gradient steps between copies into the target network
    exploration_steps: Annotated[int, Field(ge=1)] = 60  # epsilon falls linearly from 1 to its final value over these decisions
    final_epsilon: Annotated[float, Field(ge=0, le=1)] = 0.05
    hidden_units: Annotated[int, Field(ge=1, le=4096)] = 64
    gradient_steps: Annotated[int, Field(ge=1, le=256)] = 1  # training steps per measured result


class DeepQNetwork(Tuner):
    name = "dqn"
    Params = Params

    def __init__(self, space: SearchSpace, **kwargs: Any):
        super().__init__(space, **kwargs)
        self.env = ConfigurationEnv(space)
        p = self.params
        self.model = DQN(  # seeds torch, numpy's and Python's global generators from `seed`
            "MlpPolicy",
            self.env,
            learning_rate=p.learning_rate,
            gamma=p.gamma,
            batch_size=p.batch_size,
            buffer_size=p.buffer_size,
            learning_starts=0,
            target_update_interval=1,
            policy_kwargs={"net_arch": [p.hidden_units, p.hidden_units]},
            seed=self.seed,
            device="cpu",
        )
        self.model.set_logger(configure(folder=None, format_strings=[]))
        self.model._current_progress_remaining = 1.0
        self._decisions = 0
        self._transitions = 0
        self._steps = 0
        self._current: Config | None = None
        self._pending: dict[Config, tuple[np.ndarray, int, Config]] = {}  # proposal -> (obs, action, from)

    def warm_start(self, observations: Any) -> None:
        """Tell the history, then fill the replay buffer with every one-move transition it holds."""
        super().warm_start(observations)
        measured = [o.config for o in self.observations if o.loss is not None]
        for config in measured:
            for action in range(self.env.action_space.n):
                moved = self.env.move(config, action)
                if moved is not None and moved != config and self.told_loss(moved) is not None:
                    self._remember(self.env.observe(config), action, config, moved)
        if self.best is not None:
            self._current = self.best.config

    # --- ask/tell -------------------------------------------------------------------------------------
    def _ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        for _ in range(n * MAX_FREE_MOVES):
            if len(out) == n:
                break
            if self._current is None or self.told_loss(self._current) is None:
                jump = self.fresh(1, out)
                if not jump:
                    break
                out += jump
                if self._current is None:
                    self._current = jump[0]
                continue
            obs = self.env.observe(self._current)
            action = self._choose(obs)
            moved = self.env.move(self._current, action)
            if moved is None or moved == self._current:  # a refused or empty move teaches a penalty
                self._add(obs, action, -1.0, obs)
                continue
            if self.told_loss(moved) is not None or (self.known(moved) and moved not in self._pending):
                self._remember(obs, action, self._current, moved)
                if self.told_loss(moved) is not None:
                    self._current = moved
                continue
            if moved not in out and not self.known(moved):
                self._pending[moved] = (obs, action, self._current)
                out.append(moved)
        return out + self.fresh(n - len(out), out)  # free moves ran out: jump somewhere new

    def _tell(self, observation: Observation) -> None:
        pending = self._pending.pop(observation.config, None)
        if pending is None:  # a jump, or a replayed trial: it can still become the current state
            if observation.loss is not None and (self._current is None or self.told_loss(self._current) is None):
                self._current = observation.config
            return
        obs, action, origin = pending
        self._remember(obs, action, origin, observation.config)
        if observation.loss is not None:
            self._current = observation.config
        self._train()

    # --- learning -------------------------------------------------------------------------------------
    def _remember(self, obs: np.ndarray, action: int, origin: Config, moved: Config) -> None:
        before, after = self.told_loss(origin), self.told_loss(moved)
        if before is None or after is None:
            reward = -1.0
        else:
            improvement = (self.warp(before) - self.warp(after)) / self.loss_scale(warped=True)
            reward = float(np.clip(improvement, -REWARD_CLIP, REWARD_CLIP))
        self.env.rewards.append(reward)
        self._add(obs, action, reward, self.env.observe(moved))

    def _add(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray) -> None:
        self.model.replay_buffer.add(
            obs[None], next_obs[None], np.array([[action]]), np.array([reward]), np.array([False]), [{}]
        )
        self._transitions += 1

    def _train(self) -> None:
        """``gradient_steps`` per measured result (free moves add transitions, not training time)."""
        if self._transitions < self.params.learning_starts:
            return
        for _ in range(self.params.gradient_steps):
            self.model.train(gradient_steps=1, batch_size=self.params.batch_size)
            self._steps += 1
            if self._steps % self.params.target_update_interval == 0:
                self.model._on_step()  # copies q_net into the target network

    def _choose(self, obs: np.ndarray) -> int:
        """Epsilon-greedy with this tuner's own generator; greedy on the Q-network."""
        p = self.params
        epsilon = max(p.final_epsilon, 1.0 - (1.0 - p.final_epsilon) * self._decisions / max(p.exploration_steps, 1))
        self._decisions += 1
        if self.rng.random() < epsilon:
            return int(self.rng.integers(self.env.action_space.n))
        action, _ = self.model.predict(obs, deterministic=True)  # deterministic: our epsilon, our generator
        return int(action)
