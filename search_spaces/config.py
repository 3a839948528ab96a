"""A configuration: an immutable, hashable mapping from parameter name to value."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Union

Value = Union[str, int, float, bool]


class Config(Mapping[str, Value]):
    """One point of a search space. Only the active parameters are present.

    Equality and ``hash()`` ignore key order, so a Config can key a dict or a set.
    Use :func:`config_hash` for a hash that is stable across processes and machines.
    """

    __slots__ = ("_items", "_frozen")

    def __init__(self, items: Mapping[str, Value] | Iterable[tuple[str, Value]] = (), /, **values: Value):
        self._items = {**dict(items), **values}
        self._frozen = frozenset(self._items.items())

    def __getitem__(self, name: str) -> Value:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._frozen)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._frozen == other._frozen
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._items.items())
        return f"Config({inner})"

    def to_dict(self) -> dict[str, Value]:
        return dict(self._items)

    def replace(self, **changes: Value) -> Config:
        return Config({**self._items, **changes})


def config_hash(config: Mapping[str, Value]) -> str:
    """A stable 16-hex-digit hash of a configuration: the same on every machine and run."""
    canonical = json.dumps(sorted(config.items()), separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def format_config(config: Mapping[str, Value]) -> str:
    """``fs=ext4 block_size=4096 ...``: compact, for tables and log lines."""
    return " ".join(f"{k}={format_value(v)}" for k, v in config.items())


def format_value(value: Any) -> str:
    """A value as shown: a real one to 10 significant digits (0.455, not the 0.45500000000000007 a move's
    arithmetic left; --json keeps it whole)."""
    return format(value, ".10g") if isinstance(value, float) else str(value)
