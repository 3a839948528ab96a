"""A space inferred from a table of measured configurations, for offline replay.

Many tables are samples rather than full grids, so a TableSpace ranges only over the
configurations present: sample and enumerate draw from them, and a neighbour move that lands
outside the table goes to the nearest present configuration instead.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from storetune.search_spaces.config import Config, Value
from storetune.search_spaces.parameter import InvalidConfig, Kind, Parameter
from storetune.search_spaces.space import SearchSpace, _pinned_to

NONE_CHOSEN = "none"  # the value of a one-hot group where no column is set


@dataclass(frozen=True)
class OneHotGroup:
    """Binary columns of which at most one is set per row, folded into one categorical."""

    name: str
    columns: tuple[str, ...]
    labels: tuple[str, ...]  # the value each column stands for
    optional: bool  # some rows set none of the columns

    def value(self, row: Mapping[str, Any]) -> str:
        for column, label in zip(self.columns, self.labels):
            if float(row[column]) == 1.0:
                return label
        return NONE_CHOSEN


class TableSpace(SearchSpace):
    """A space whose configurations are exactly the distinct ones present in a table."""

    def __init__(self, name: str, parameters: Sequence[Parameter], members: Sequence[Config], description: str = ""):
        super().__init__(name, parameters, (), description)
        self.members: list[Config] = list(dict.fromkeys(members))
        if not self.members:
            raise ValueError(f"space {name!r}: the table has no configurations")
        self._index = {c: i for i, c in enumerate(self.members)}
        self._encoded = self.encode_many(self.members)
        self._norms = (self._encoded**2).sum(axis=1)

    def grid_size(self) -> int:
        """Combinations of the parameters' values: what the table would hold if it were a full grid."""
        return math.prod(len(p.values) if p.values else (p.size or 1) for p in self.parameters)

    def holding(self) -> str:
        """How much of that grid the table holds, in words (``holding``)."""
        return holding(self.cardinality(), self.grid_size())

    def to_dict(self) -> dict[str, Any]:
        """The definition, and how much of its grid the table holds (kept with a campaign, for its report;
        not part of the fingerprint, which has the members themselves)."""
        return {**super().to_dict(), "holds": {"configurations": self.cardinality(), "grid": self.grid_size()}}

    def contains(self, config: Mapping[str, Any]) -> bool:
        return Config(config) in self._index

    def sample(self, rng: np.random.Generator) -> Config:
        return self.members[int(rng.integers(len(self.members)))]

    def sample_many(self, rng: np.random.Generator, n: int) -> list[Config]:
        return [self.members[i] for i in rng.integers(len(self.members), size=n)]

    def enumerate(self) -> Iterator[Config]:
        return iter(self.members)

    def cardinality(self) -> int:
        return len(self.members)

    def neighbours(self, config: Mapping[str, Any]) -> list[Config]:
        """One-parameter moves; a move to a configuration absent from the table lands on the
        nearest present one (squared distance of the encodings), so moves never leave the table."""
        base = self.validate(config)
        moves = [self._resolve({**base, name: v}) for name, value in base.items() for v in self[name].steps(value)]
        return self._land([m for m in moves if m is not None], exclude={base})

    def repair(self, values: Mapping[str, Any]) -> Config | None:
        """The present configuration nearest to ``values`` (conditions resolved first)."""
        config = self._resolve(values) or Config(values)
        return config if config in self._index else self._land([config], exclude=set())[0]

    def nearest(self, config: Mapping[str, Any], exclude: set[Config] = frozenset()) -> Config | None:
        """The present configuration closest to ``config``, skipping ``exclude``."""
        landed = self._land([Config(config)], exclude=set(exclude), keep_present=False)
        return landed[0] if landed else None

    def _land(self, configs: list[Config], exclude: set[Config], keep_present: bool = True) -> list[Config]:
        """Each configuration, or the nearest present one not yet taken; distinct, in order."""
        taken = set(exclude)
        absent = [c for c in configs if not (keep_present and c in self._index)]
        order = {}
        if absent:  # one matrix product for all distances: |a|^2 + |b|^2 - 2ab
            queries = np.vstack([self.encode(c) for c in absent])
            distance = self._norms[None, :] + (queries**2).sum(axis=1)[:, None] - 2 * queries @ self._encoded.T
            order = {c: np.argsort(d, kind="stable") for c, d in zip(absent, distance)}
        out: list[Config] = []
        for c in configs:
            if c in order:
                c = next((self.members[i] for i in order[c] if self.members[i] not in taken), None)
            if c is not None and c not in taken:
                taken.add(c)
                out.append(c)
        return out

    def fix(self, values: Mapping[str, Any], *, strict: bool = False) -> TableSpace:
        """The configurations of the table whose pinned parameters have the given values (``strict``: see
        ``SearchSpace.fix``; here, a pinned column that no configuration left has)."""
        if not values:
            return self
        pinned = {name: self[name].canonical(value) for name, value in values.items()}
        members = [c for c in self.members if all(c.get(k, v) == v for k, v in pinned.items())]
        if not members:
            raise InvalidConfig(f"no configuration of {self.name} has {pinned}")
        narrowed = SearchSpace.fix(self, pinned)
        if strict:  # every pin so far, this call's and earlier ones: a pin no configuration has pins nothing
            fixed = {p.name: p.default for p in narrowed.parameters if _pinned_to(p, p.default)}
            for name, value in fixed.items():
                if not any(name in c for c in members):
                    others = ", ".join(f"{k}={v}" for k, v in fixed.items() if k != name)
                    raise InvalidConfig(f"{name}={value} is pinned where it never applies: no configuration of "
                                        f"{self.name}{f' with {others}' if others else ''} has {name}")
        return TableSpace(self.name, narrowed.parameters, members, narrowed.description)

    def fingerprint(self) -> str:
        digest = hashlib.sha256(super().fingerprint().encode())
        for c in self.members:
            digest.update(self.hash(c).encode())
        return digest.hexdigest()[:16]


def holding(held: int, grid: int) -> str:
    """A table of ``held`` configurations out of a grid of ``grid`` combinations, in words: in a sample, a
    one-parameter move does not reach a neighbour of the grid but the nearest listed configuration."""
    if held >= grid:
        return f"{held:,} configurations, the whole grid of its parameters' values"
    share = held / grid
    if share >= 0.01:
        shown = f"{share:.0%}"
    elif share >= 1e-4:
        shown = f"{share:.2%}"
    elif share >= 1e-6:
        shown = f"1 in {round(1 / share):,}"
    else:  # a sample of a grid of 10^20: the ratio's exponent is what a reader can take in
        shown = f"1 in {1 / share:.1e}"
    return (f"{held:,} configurations, {shown} of the {grid:,} combinations of its parameters' values: a sample, "
            "where a one-parameter move lands on the nearest listed configuration")


def infer_table_space(
    name: str, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> tuple[TableSpace, Callable[[Mapping[str, Any]], Config]]:
    """The space of the configurations in ``rows`` (each a mapping over ``columns``) and the
    function that turns a row into its Config. Constant columns are not knobs and are dropped."""
    varying = [c for c in columns if len({_typed(r[c]) for r in rows}) > 1]
    groups = _one_hot_groups(varying, rows)
    grouped = {c for g in groups for c in g.columns}
    parameters: list[Parameter] = []
    group_at = {g.columns[0]: g for g in groups}
    for column in varying:
        if column in group_at:
            g = group_at[column]
            labels = g.labels + ((NONE_CHOSEN,) if g.optional else ())
            doc = f"one-hot columns {', '.join(g.columns)}"
            parameters.append(Parameter(g.name, Kind.CATEGORICAL, values=labels, doc=doc))
        elif column not in grouped:
            parameters.append(_column_parameter(column, [r[column] for r in rows]))

    def to_config(row: Mapping[str, Any]) -> Config:
        out: dict[str, Value] = {}
        for column in varying:
            if column in group_at:
                out[group_at[column].name] = group_at[column].value(row)
            elif column not in grouped:
                out[column] = _typed(row[column])
        return Config(out)

    members = [to_config(r) for r in rows]
    description = f"inferred from {name}: {len(set(members))} configurations"
    return TableSpace(name, parameters, members, description), to_config


def _column_parameter(column: str, values: list[Any]) -> Parameter:
    distinct = sorted({_typed(v) for v in values}, key=lambda v: (isinstance(v, str), v))
    if all(isinstance(v, (int, float)) for v in distinct):
        return Parameter(column, Kind.ORDINAL, values=tuple(distinct), doc="column of the table")
    return Parameter(column, Kind.CATEGORICAL, values=tuple(map(str, distinct)), doc="column of the table")


def _one_hot_groups(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[OneHotGroup]:
    """Runs of adjacent binary columns that are never set together: of length >= 2 when exactly
    one is set in every row (BDBC's pS1K..pS32K), of length >= 3 when at most one is."""
    binary = [c for c in columns if {_typed(r[c]) for r in rows} <= {0, 1}]
    matrix = {c: np.array([float(r[c]) for r in rows]) for c in binary}
    groups, i = [], 0
    while i < len(columns):
        run = [columns[i]] if columns[i] in matrix else []
        j = i + 1
        while run and j < len(columns) and columns[j] in matrix:
            total = sum(matrix[c] for c in run) + matrix[columns[j]]
            if total.max() > 1:
                break
            run.append(columns[j])
            j += 1
        if len(run) >= 2:
            total = sum(matrix[c] for c in run)
            exact = bool((total == 1).all())
            if exact or len(run) >= 3:
                groups.append(_name_group(run, optional=not exact, taken=set(columns)))
                i = j
                continue
        i += 1
    return groups


def _name_group(columns: list[str], optional: bool, taken: set[str]) -> OneHotGroup:
    prefix = os.path.commonprefix(columns)
    suffix = os.path.commonprefix([c[::-1] for c in columns])[::-1]
    if len(prefix) >= 2:
        name, labels = prefix, [c[len(prefix) :] for c in columns]
    elif len(suffix) >= 3:
        name, labels = suffix, [c[: len(c) - len(suffix)] for c in columns]
    else:
        name, labels = "_".join(columns), list(columns)
    if any(not label for label in labels) or len(set(labels)) != len(labels) or NONE_CHOSEN in labels:
        labels = list(columns)
    while name in taken:
        name += "_choice"
    return OneHotGroup(name, tuple(columns), tuple(labels), optional)


def _typed(value: Any) -> Value:
    """Numbers as int where integral, else float; anything else as stripped text."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return int(value) if float(value).is_integer() else float(value)
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() else number
