"""Conditions over a partial configuration, as written in the space YAML files.

One syntax serves both a parameter's ``when`` (is it active?) and a ``forbidden`` rule
(is this combination refused?):

    when: {fs: [ext3, ext4]}                       # fs is ext3 or ext4
    when: {fs: xfs, block_size: {max: 2048}}       # AND across parameters
    when: [{model_kind: regressor}, {labeling: cutoff}]   # a list is an OR of such mappings

A clause on a parameter that is absent (inactive) from the configuration is false.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Clause:
    """One parameter's test: membership in ``values``, or a numeric ``low``/``high`` bound."""

    name: str
    values: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None

    def holds(self, config: Mapping[str, Any]) -> bool:
        if self.name not in config:
            return False
        value = config[self.name]
        if self.values is not None:
            return value in self.values
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        if self.low is not None and value < self.low:
            return False
        return self.high is None or value <= self.high

    def describe(self) -> str:
        if self.values is not None:
            if len(self.values) == 1:
                return f"{self.name}={self.values[0]}"
            return f"{self.name} in {{{', '.join(map(str, self.values))}}}"
        bounds = []
        if self.low is not None:
            bounds.append(f"{self.name} >= {self.low:g}")
        if self.high is not None:
            bounds.append(f"{self.name} <= {self.high:g}")
        return " and ".join(bounds)


@dataclass(frozen=True)
class Condition:
    """An OR of ANDs of clauses. The empty condition always holds."""

    alternatives: tuple[tuple[Clause, ...], ...] = ()

    @classmethod
    def parse(cls, spec: Mapping[str, Any] | list[Mapping[str, Any]] | None) -> Condition:
        if not spec:
            return cls()
        groups = spec if isinstance(spec, list) else [spec]
        return cls(tuple(tuple(_parse_clause(k, v) for k, v in g.items()) for g in groups))

    @property
    def always(self) -> bool:
        return not self.alternatives

    def holds(self, config: Mapping[str, Any]) -> bool:
        if self.always:
            return True
        return any(all(c.holds(config) for c in group) for group in self.alternatives)

    def referenced(self) -> set[str]:
        return {c.name for group in self.alternatives for c in group}

    def describe(self) -> str:
        if self.always:
            return ""
        return " or ".join(" and ".join(c.describe() for c in g) for g in self.alternatives)

    def to_spec(self) -> list[dict[str, Any]]:
        out = []
        for group in self.alternatives:
            spec: dict[str, Any] = {}
            for c in group:
                if c.values is not None:
                    spec[c.name] = list(c.values)
                else:
                    spec[c.name] = {k: v for k, v in (("min", c.low), ("max", c.high)) if v is not None}
            out.append(spec)
        return out


def _parse_clause(name: str, spec: Any) -> Clause:
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"min", "max"}
        if unknown:
            raise ValueError(f"condition on {name!r}: unknown keys {sorted(unknown)}; use min/max or a value list")
        return Clause(name, low=spec.get("min"), high=spec.get("max"))
    if isinstance(spec, (list, tuple)):
        return Clause(name, values=tuple(spec))
    return Clause(name, values=(spec,))
