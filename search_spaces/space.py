"""A search space: parameters with conditions and forbidden combinations, and the operations
every algorithm needs (sample, validate, encode/decode, neighbours, enumerate, hash)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from storetune.search_spaces.conditions import Condition
from storetune.search_spaces.config import Config, Value, config_hash
from storetune.search_spaces.parameter import InvalidConfig, Kind, Parameter

MAX_SAMPLE_ATTEMPTS = 10_000


def _pinned_to(p: Parameter, value: Value) -> bool:
    return p.values == (value,) if p.values else p.low == p.high == value


def _pin(p: Parameter, value: Value) -> Parameter:
    if p.values:
        return replace(p, values=(value,), default=value)
    return replace(p, low=value, high=value, log=p.log and value > 0, default=value)


def _refuse_idle_pins(parameters: Sequence[Parameter]) -> None:
    """InvalidConfig for a pinned parameter whose condition the pins decide, and decide false: pinned
    where it never applies (whichever was pinned first)."""
    fixed = {p.name: p.default for p in parameters if _pinned_to(p, p.default)}
    for p in parameters:
        if p.name in fixed and p.when.referenced() <= fixed.keys() and not p.when.holds(fixed):
            because = ", ".join(f"{r}={fixed[r]}" for r in sorted(p.when.referenced()))
            raise InvalidConfig(f"{p.name}={fixed[p.name]} is pinned where it never applies: {p.name} does not "
                                f"apply when {because}; it applies only when {p.when.describe()}", p.name)


@dataclass(frozen=True)
class Forbidden:
    """A combination the tools refuse, e.g. an inode larger than the block on ext4."""

    condition: Condition
    reason: str

    def describe(self) -> str:
        return f"{self.reason} ({self.condition.describe()})"


class SearchSpace:
    """Parameters in dependency order: a parameter's ``when`` may refer only to those before it."""

    def __init__(
        self,
        name: str,
        parameters: Sequence[Parameter],
        forbidden: Sequence[Forbidden] = (),
        description: str = "",
        start: str | None = None,
    ):
        self.name = name
        self.description = description
        # "default": the defaults are a known-good configuration, and a search asks for them first unless it
        # knows them already (SMAC's initial design does the same), so they are always among what it knows
        self.start = start
        self.parameters: tuple[Parameter, ...] = tuple(parameters)
        self.forbidden: tuple[Forbidden, ...] = tuple(forbidden)
        self._by_name = {p.name: p for p in self.parameters}
        if len(self._by_name) != len(self.parameters):
            raise ValueError(f"space {name!r}: parameter names repeat")
        index = {p.name: i for i, p in enumerate(self.parameters)}
        for i, p in enumerate(self.parameters):
            for ref in p.when.referenced():
                if index.get(ref, i) >= i:
                    raise ValueError(f"space {name!r}: {p.name!r} depends on {ref!r}, which is not declared before it")
        # A forbidden rule can be judged as soon as the last parameter it names is decided.
        self._rules_at: dict[int, list[Forbidden]] = {}
        for rule in self.forbidden:
            unknown = rule.condition.referenced() - set(index)
            if unknown:
                raise ValueError(f"space {name!r}: forbidden rule names unknown parameters {sorted(unknown)}")
            self._rules_at.setdefault(max(index[r] for r in rule.condition.referenced()), []).append(rule)
        referenced = {r for p in self.parameters for r in p.when.referenced()}
        referenced |= {r for f in self.forbidden for r in f.condition.referenced()}
        # Free parameters multiply the space; factoring them out keeps enumerate and count fast.
        self._free = [p for p in self.parameters if p.when.always and p.name not in referenced]
        self._bound = [p for p in self.parameters if p not in self._free]
        self._position = {p.name: i for i, p in enumerate(self.parameters)}
        # per bound parameter: the names whose values a later bound parameter's condition or rule reads
        self._decides = [set().union(*[q.when.referenced() | {n for r in self._rules_at.get(self._position[q.name], ())
                                                              for n in r.condition.referenced()}
                                       for q in self._bound[k + 1:]]) for k in range(len(self._bound))]

    # --- lookup ---------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Parameter:
        try:
            return self._by_name[name]
        except KeyError:
            raise InvalidConfig(
                f"unknown parameter {name!r} for space {self.name!r}; known: {', '.join(self._by_name)}", name
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    @property
    def finite(self) -> bool:
        return all(p.finite for p in self.parameters)

    # --- validity -------------------------------------------------------------------------------
    def validate(self, config: Mapping[str, Any], *, fill_defaults: bool = False) -> Config:
        """The canonical Config, or InvalidConfig naming the parameter and what it allows.

        With ``fill_defaults``, active parameters that are missing take their defaults.
        """
        try:
            return self._validated(config, fill_defaults)
        except InvalidConfig:
            # what is wrong with the values given is said before what is missing ("missing parameter 'fs'"
            # hid a bad value and a forbidden combination); looked for only on failure: validate is hot
            self._refuse_given(config)
            raise

    def _refuse_given(self, config: Mapping[str, Any]) -> None:
        """InvalidConfig for the first wrong thing in the values given alone: an unknown name or a bad value
        (in the order given), then a forbidden combination of the values that apply."""
        given = {name: self[name].canonical(value) for name, value in config.items()}
        active = {name: value for name, value in given.items() if self[name].when.holds(given)}
        for rule in self.forbidden:
            if rule.condition.referenced() <= active.keys() and rule.condition.holds(active):
                raise InvalidConfig(f"forbidden combination: {rule.describe()}")

    def _validated(self, config: Mapping[str, Any], fill_defaults: bool) -> Config:
        for name in config:
            self[name]  # raises on an unknown parameter
        out: dict[str, Value] = {}
        for p in self.parameters:
            if not p.when.holds(out):
                if p.name in config:
                    because = ", ".join(f"{r}={out.get(r, '(unset)')}" for r in sorted(p.when.referenced()))
                    raise InvalidConfig(
                        f"{p.name} does not apply when {because}; it applies only when {p.when.describe()}", p.name
                    )
                continue
            if p.name in config:
                out[p.name] = p.canonical(config[p.name])
            elif fill_defaults:
                out[p.name] = p.default
            else:
                raise InvalidConfig(f"missing parameter {p.name!r}; allowed: {p.describe_domain()}", p.name)
        for rule in self.forbidden:
            if rule.condition.holds(out):
                raise InvalidConfig(f"forbidden combination: {rule.describe()}")
        return Config(out)

    def contains(self, config: Mapping[str, Any]) -> bool:
        try:
            return self.validate(config) == Config(config)
        except InvalidConfig:
            return False

    def default(self) -> Config:
        return self.validate({}, fill_defaults=True)

    def hash(self, config: Mapping[str, Any]) -> str:
        return config_hash(config)

    def fix(self, values: Mapping[str, Any], *, strict: bool = False) -> SearchSpace:
        """The same space with some parameters pinned to one value each (``--fix replicas=3``).
        The conditions stay: a pinned parameter still applies only where its ``when`` holds. ``strict``
        (a new campaign's pins) also refuses a parameter pinned where the other pins leave it inactive;
        a recorded campaign's pins are taken as they are, so that it still resumes and reports."""
        pinned = {name: self[name].canonical(value) for name, value in values.items()}
        # pinning a parameter again to its one value changes nothing, the description included (a campaign's
        # runner is pinned by its checks and again by its creation: twice-labelled, it could not be resumed)
        pinned = {name: value for name, value in pinned.items() if not _pinned_to(self[name], value)}
        if not pinned:
            return self
        parameters = [_pin(p, pinned[p.name]) if p.name in pinned else p for p in self.parameters]
        if strict:
            _refuse_idle_pins(parameters)
        label = ", ".join(f"{k}={v}" for k, v in pinned.items())
        return SearchSpace(self.name, parameters, self.forbidden, f"{self.description} ({label} fixed)", self.start)

    # --- sampling and moves -----------------------------------------------------------------------
    def sample(self, rng: np.random.Generator) -> Config:
        """A uniformly drawn valid configuration (per parameter, then rejection of forbidden ones)."""
        for _ in range(MAX_SAMPLE_ATTEMPTS):
            out: dict[str, Value] = {}
            for p in self.parameters:
                if p.when.holds(out):
                    out[p.name] = p.sample(rng)
            if not any(rule.condition.holds(out) for rule in self.forbidden):
                return Config(out)
        raise RuntimeError(f"space {self.name!r}: no valid configuration in {MAX_SAMPLE_ATTEMPTS} draws")

    def sample_many(self, rng: np.random.Generator, n: int) -> list[Config]:
        """Up to ``n`` uniformly drawn valid configurations, each parameter's values drawn as one array; a
        draw that a forbidden rule rejects is dropped, not redrawn. (BO draws 1,000 candidates per ask: one
        at a time they took 40 ms of a 43 ms ask on the admission space, batched 22 ms.)"""
        columns = [(p.name, None if p.when.always else p.when, p.sample_many(rng, n)) for p in self.parameters]
        out: list[Config] = []
        for i in range(n):
            row: dict[str, Any] = {}
            for name, when, column in columns:
                if when is None or when.holds(row):
                    row[name] = column[i]
            if not any(rule.condition.holds(row) for rule in self.forbidden):
                out.append(Config(row))
        return out

    def neighbours(self, config: Mapping[str, Any]) -> list[Config]:
        """Valid configurations one parameter move away; newly active parameters take their defaults."""
        base = self.validate(config)
        seen = {base}
        out: list[Config] = []
        for name, value in base.items():
            for moved in self[name].steps(value):
                candidate = self._resolve({**base, name: moved})
                if candidate is not None and candidate not in seen:
                    seen.add(candidate)
                    out.append(candidate)
        return out

    def repair(self, values: Mapping[str, Value]) -> Config | None:
        """The valid configuration closest to ``values`` (for a child of crossover or a mutation):
        inactive parameters dropped, newly active ones at their defaults; None if it is forbidden."""
        return self._resolve(values)

    def _resolve(self, values: Mapping[str, Value]) -> Config | None:
        """Keep the active parameters (defaults for missing ones); None if forbidden."""
        out: dict[str, Value] = {}
        for p in self.parameters:
            if p.when.holds(out):
                out[p.name] = values.get(p.name, p.default)
        if any(rule.condition.holds(out) for rule in self.forbidden):
            return None
        return Config(out)

    # --- enumeration ----------------------------------------------------------------------------
    def enumerate(self) -> Iterator[Config]:
        """Every valid configuration, in a fixed order. Only for finite spaces."""
        self._require_finite("enumerate")
        order = {p.name: i for i, p in enumerate(self.parameters)}
        free_names = [p.name for p in self._free]
        for bound in self._enumerate_bound():
            for free in itertools.product(*(p.domain() for p in self._free)):
                merged = {**bound, **dict(zip(free_names, free))}
                yield Config(sorted(merged.items(), key=lambda kv: order[kv[0]]))

    def cardinality(self) -> int | None:
        """How many valid configurations there are; None for a space with a real parameter."""
        if not self.finite:
            return None
        return self._count_bound(0, {}) * math.prod(p.size for p in self._free)

    def _count_bound(self, k: int, partial: dict[str, Value]) -> int:
        """The valid combinations of the bound parameters from the k-th on, given the earlier ones: counted, not
        listed, wherever a parameter's value decides nothing later (storage_full's conditional integers have
        billions of combinations; listing them to count them never ends)."""
        if k == len(self._bound):
            return 1
        p = self._bound[k]
        rules = self._rules_at.get(self._position[p.name], ())
        if not p.when.holds(partial):  # inactive: its rules are judged as _enumerate_bound judges them, without it
            return 0 if any(rule.condition.holds(partial) for rule in rules) else self._count_bound(k + 1, partial)
        if p.name not in self._decides[k] and not rules:
            return p.size * self._count_bound(k + 1, partial)
        total = 0
        for v in p.domain():
            partial[p.name] = v
            if not any(rule.condition.holds(partial) for rule in rules):
                total += self._count_bound(k + 1, partial)
            partial.pop(p.name)
        return total

    def _enumerate_bound(self) -> Iterator[dict[str, Value]]:
        index = self._position

        def walk(k: int, partial: dict[str, Value]) -> Iterator[dict[str, Value]]:
            if k == len(self._bound):
                yield dict(partial)
                return
            p = self._bound[k]
            choices = p.domain() if p.when.holds(partial) else (None,)
            for v in choices:
                if v is not None:
                    partial[p.name] = v
                rules = self._rules_at.get(index[p.name], ())
                if not any(rule.condition.holds(partial) for rule in rules):
                    yield from walk(k + 1, partial)
                partial.pop(p.name, None)

        return walk(0, {})

    def _require_finite(self, what: str) -> None:
        if not self.finite:
            reals = [p.name for p in self.parameters if not p.finite]
            raise TypeError(f"cannot {what} space {self.name!r}: real-valued parameters {reals}")

    # --- numeric encoding -----------------------------------------------------------------------
    @property
    def width(self) -> int:
        return sum(p.width for p in self.parameters)

    def encode(self, config: Mapping[str, Any]) -> np.ndarray:
        """A vector in [0, 1]^width; an inactive parameter is encoded as its default."""
        parts: list[float] = []
        for p in self.parameters:
            parts.extend(p.encode(config[p.name] if p.name in config else p.default))
        return np.asarray(parts, dtype=float)

    def encode_many(self, configs: Sequence[Mapping[str, Any]], ordinal_onehot: int = 0) -> np.ndarray:
        """``encode`` of many configurations at once: a (len(configs), width) array. With ``ordinal_onehot``,
        each ordinal of 3 to that many values is also encoded one-hot, in columns after those: a model can
        then weigh each value on its own, where the [0, 1] column alone lets it say only "more is better"
        (Xval 4 of 0-5 is 7z's best). ``encoded_width`` gives the width."""
        hot = self._onehot_ordinals(ordinal_onehot)
        if not configs or not self.parameters:
            return np.empty((len(configs), self.encoded_width(ordinal_onehot)))
        columns = [p.encode_many([c[p.name] if p.name in c else p.default for c in configs]) for p in self.parameters]
        for p in hot:
            where = {v: i for i, v in enumerate(p.values)}
            onehot = np.zeros((len(configs), len(where)))
            onehot[np.arange(len(configs)), [where[c.get(p.name, p.default)] for c in configs]] = 1.0
            columns.append(onehot)
        return np.hstack(columns)

    def encoded_width(self, ordinal_onehot: int = 0) -> int:
        """The width of ``encode_many(configs, ordinal_onehot)``."""
        return self.width + sum(len(p.values) for p in self._onehot_ordinals(ordinal_onehot))

    def _onehot_ordinals(self, limit: int) -> list[Parameter]:
        return [p for p in self.parameters if p.kind is Kind.ORDINAL and 2 < len(p.values) <= limit]

    def decode(self, vector: Sequence[float]) -> Config:
        """The configuration nearest to a vector; inactive parameters are dropped. Forbidden
        combinations are not checked here: call validate() on the result where that matters."""
        if len(vector) != self.width:
            raise ValueError(f"space {self.name!r}: expected a vector of {self.width} numbers, got {len(vector)}")
        values, at = {}, 0
        for p in self.parameters:
            values[p.name] = p.decode(vector[at : at + p.width])
            at += p.width
        out: dict[str, Value] = {}
        for p in self.parameters:
            if p.when.holds(out):
                out[p.name] = values[p.name]
        return Config(out)

    # --- description ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The definition, in the same shape as the YAML files (see search_spaces.catalog)."""
        params = []
        for p in self.parameters:
            d: dict[str, Any] = {"name": p.name, "kind": p.kind.value}
            if p.values:
                d["values"] = list(p.values)
            else:
                d.update(low=p.low, high=p.high, log=p.log)
            d["default"] = p.default
            if not p.when.always:
                d["when"] = p.when.to_spec()
            d.update({k: v for k, v in (("doc", p.doc), ("source", p.source), ("unit", p.unit)) if v})
            params.append(d)
        forbidden = [{"when": f.condition.to_spec(), "reason": f.reason} for f in self.forbidden]
        out = {"name": self.name, "description": self.description, "parameters": params, "forbidden": forbidden}
        if self.start:  # only when set: the fingerprints of the spaces without it stay as they were
            out["start"] = self.start
        return out

    def fingerprint(self) -> str:
        """A stable hash of the definition: campaigns on the same fingerprint share a history."""
        definition = SearchSpace.to_dict(self)  # a subclass's extras (a table's coverage) are not the definition
        return hashlib.sha256(json.dumps(definition, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"SearchSpace({self.name!r}, {len(self.parameters)} parameters)"
