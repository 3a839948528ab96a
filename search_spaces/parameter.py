"""One tunable parameter: its kind, domain, default and the condition that makes it active."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from storetune.search_spaces.conditions import Condition
from storetune.search_spaces.config import Value

LISTED_VALUES = 20  # an ordinal of more values is described by its first and last ones
# A neighbour move on an integer or real parameter changes its encoded value by this much.
STEP_FRACTION = 0.05


class Kind(str, Enum):
    CATEGORICAL = "categorical"  # unordered choices
    ORDINAL = "ordinal"  # ordered choices, e.g. block sizes
    INTEGER = "integer"  # a whole-number range, optionally log scale
    REAL = "real"  # a continuous range, optionally log scale


class InvalidConfig(ValueError):
    """A configuration that is outside its space. The message names the parameter and what it allows."""

    def __init__(self, message: str, parameter: str | None = None):
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True)
class Parameter:
    name: str
    kind: Kind
    values: tuple[Value, ...] = ()  # categorical and ordinal, in order
    low: float | None = None  # integer and real, inclusive
    high: float | None = None
    log: bool = False
    default: Value | None = None
    when: Condition = field(default_factory=Condition)
    doc: str = ""
    source: str = ""  # where the domain comes from, e.g. "mke2fs(8) -b"
    unit: str = ""

    def __post_init__(self) -> None:
        if self.kind in (Kind.CATEGORICAL, Kind.ORDINAL):
            if not self.values:
                raise ValueError(f"parameter {self.name!r}: a {self.kind.value} parameter needs values")
            if len(set(map(repr, self.values))) != len(self.values):
                raise ValueError(f"parameter {self.name!r}: values repeat: {list(self.values)}")
        else:
            if self.low is None or self.high is None or self.low > self.high:
                raise ValueError(f"parameter {self.name!r}: needs low <= high, got {self.low}..{self.high}")
            if self.log and self.low <= 0:
                raise ValueError(f"parameter {self.name!r}: a log scale needs low > 0")
            if self.kind is Kind.INTEGER:
                object.__setattr__(self, "low", int(self.low))
                object.__setattr__(self, "high", int(self.high))
        if self.default is None:
            object.__setattr__(self, "default", self.values[0] if self.values else self._from_unit(0.5))
        else:
            object.__setattr__(self, "default", self.canonical(self.default))

    # --- the domain -------------------------------------------------------------------------
    @property
    def finite(self) -> bool:
        return self.kind is not Kind.REAL

    @property
    def size(self) -> int | None:
        if self.values:
            return len(self.values)
        if self.kind is Kind.INTEGER:
            return int(self.high) - int(self.low) + 1
        return None

    def domain(self) -> tuple[Value, ...]:
        """Every value of a finite parameter, in order."""
        if self.values:
            return self.values
        if self.kind is Kind.INTEGER:
            return tuple(range(int(self.low), int(self.high) + 1))
        raise TypeError(f"parameter {self.name!r} is real-valued: its domain cannot be listed")

    def describe_domain(self) -> str:
        if self.values and len(self.values) > LISTED_VALUES and self.kind is Kind.ORDINAL:
            head = ", ".join(map(str, self.values[:3]))
            return f"{head}, ..., {self.values[-1]} ({len(self.values):,} values, in order)"
        if self.values:
            return ", ".join(map(str, self.values))
        scale = ", log scale" if self.log else ""
        return f"{self.low:g} to {self.high:g} ({self.kind.value}{scale})"

    def canonical(self, value: object) -> Value:
        """The domain's own representation of ``value``; raises InvalidConfig when it is outside."""
        if self.values:
            for v in self.values:
                if type(v) is type(value) and v == value:
                    return v
            text = str(value).strip()
            for v in self.values:
                if str(v) == text or (_is_number(v) and _as_float(text) == v):
                    return v
            raise self._outside(value, f"allowed: {self.describe_domain()}")
        number = _as_float(value)
        if number is None or math.isnan(number):
            raise self._outside(value, f"expected a number from {self.describe_domain()}")
        if self.kind is Kind.INTEGER:
            if number != int(number):
                raise self._outside(value, f"expected a whole number from {self.describe_domain()}")
            number = int(number)
        if not self.low <= number <= self.high:
            raise self._outside(value, f"allowed: {self.describe_domain()}")
        return number if self.kind is Kind.INTEGER else float(number)

    def _outside(self, value: object, hint: str) -> InvalidConfig:
        return InvalidConfig(f"{self.name}={value!r} is outside the space; {hint}", self.name)

    # --- sampling and moves ---------------------------------------------------------------------
    def sample(self, rng: np.random.Generator) -> Value:
        if self.values:
            return self.values[int(rng.integers(len(self.values)))]
        return self._from_unit(float(rng.random()))

    def sample_many(self, rng: np.random.Generator, n: int) -> list[Value]:
        """``n`` values drawn as one array: what ``sample`` draws one at a time."""
        if self.values:
            return [self.values[i] for i in rng.integers(len(self.values), size=n)]
        return [self._from_unit(u) for u in rng.random(n).tolist()]

    def steps(self, value: Value) -> list[Value]:
        """The values one move away: every other category, or the adjacent ordinal/numeric values."""
        if self.kind is Kind.CATEGORICAL:
            return [v for v in self.values if v != value]
        if self.kind is Kind.ORDINAL:
            i = self.values.index(value)
            return [self.values[j] for j in (i - 1, i + 1) if 0 <= j < len(self.values)]
        u = self._to_unit(value)
        out: list[Value] = []
        for direction in (-1, 1):
            moved = self._from_unit(min(1.0, max(0.0, u + direction * STEP_FRACTION)))
            if self.kind is Kind.INTEGER and moved == value:
                moved = min(int(self.high), max(int(self.low), int(value) + direction))
            if moved != value and moved not in out:
                out.append(moved)
        return out

    # --- numeric encoding -----------------------------------------------------------------------
    @property
    def width(self) -> int:
        """How many numbers encode this parameter: one-hot for categoricals, else one in [0, 1]."""
        return len(self.values) if self.kind is Kind.CATEGORICAL else 1

    def encode(self, value: Value) -> list[float]:
        if self.kind is Kind.CATEGORICAL:
            return [1.0 if v == value else 0.0 for v in self.values]
        if self.kind is Kind.ORDINAL:
            k = len(self.values)
            return [self.values.index(value) / (k - 1) if k > 1 else 0.0]
        return [self._to_unit(value)]

    def encode_many(self, values: Sequence[Value]) -> np.ndarray:
        """``encode`` of many values at once: a (len(values), width) array."""
        if self.kind is Kind.CATEGORICAL:
            where = {v: i for i, v in enumerate(self.values)}
            out = np.zeros((len(values), len(self.values)))
            out[np.arange(len(values)), [where[v] for v in values]] = 1.0
            return out
        if self.kind is Kind.ORDINAL:
            k = len(self.values)
            where = {v: (i / (k - 1) if k > 1 else 0.0) for i, v in enumerate(self.values)}
            return np.array([[where[v]] for v in values], dtype=float).reshape(len(values), 1)
        return np.array([[self._to_unit(v)] for v in values], dtype=float).reshape(len(values), 1)

    def decode(self, chunk: Sequence[float]) -> Value:
        """The nearest domain value to an encoded chunk (argmax for categoricals)."""
        if self.kind is Kind.CATEGORICAL:
            return self.values[int(np.argmax(chunk))]
        u = min(1.0, max(0.0, float(chunk[0])))
        if self.kind is Kind.ORDINAL:
            return self.values[int(round(u * (len(self.values) - 1)))]
        return self._from_unit(u)

    def _to_unit(self, value: Value) -> float:
        low, high, x = float(self.low), float(self.high), float(value)
        if high == low:
            return 0.0
        if self.log:
            return (math.log(x) - math.log(low)) / (math.log(high) - math.log(low))
        return (x - low) / (high - low)

    def _from_unit(self, u: float) -> Value:
        low, high = float(self.low), float(self.high)
        x = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if self.log else low + u * (high - low)
        if self.kind is Kind.INTEGER:
            return int(min(high, max(low, round(x))))
        return float(min(high, max(low, x)))


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _as_float(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
