"""The YAML space definitions in this folder: their schema, ``extends``, and lookup by name."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from storetune.search_spaces.conditions import Condition
from storetune.search_spaces.parameter import Kind, Parameter
from storetune.search_spaces.space import Forbidden, SearchSpace

SPACES_DIR = Path(__file__).parent

ConditionSpec = Union[dict[str, Any], list[dict[str, Any]], None]


class ParameterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    kind: Kind
    values: list[Any] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    default: Any = None
    when: ConditionSpec = None
    doc: str = ""
    source: str = ""
    unit: str = ""

    @model_validator(mode="after")
    def _domain_fits_kind(self) -> ParameterSpec:
        listed = self.kind in (Kind.CATEGORICAL, Kind.ORDINAL)
        if listed and not self.values:
            raise ValueError(f"{self.kind.value} parameter {self.name!r} needs 'values'")
        if not listed and (self.low is None or self.high is None):
            raise ValueError(f"{self.kind.value} parameter {self.name!r} needs 'low' and 'high'")
        return self

    def build(self) -> Parameter:
        return Parameter(
            name=self.name,
            kind=self.kind,
            values=tuple(self.values or ()),
            low=self.low,
            high=self.high,
            log=self.log,
            default=self.default,
            when=Condition.parse(self.when),
            doc=self.doc,
            source=self.source,
            unit=self.unit,
        )


class ForbiddenSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    when: ConditionSpec
    reason: str


class SpaceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    extends: str | None = None
    parameters: list[ParameterSpec] = []
    forbidden: list[ForbiddenSpec] = []
    start: Literal["default"] | None = None  # "default": a campaign measures the defaults first


def space_from_dict(data: dict[str, Any], *, base: SearchSpace | None = None) -> SearchSpace:
    """Build a space from its definition (YAML-shaped); ``base`` is the space it extends."""
    try:
        spec = SpaceSpec.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise ValueError(f"space {data.get('name', '?')!r}: {where}: {first['msg']}") from None
    # a parameter named as one of the base's replaces it where it stands (storage_full widens storage_v2's
    # domains); the others follow the base's
    own = {p.name: p.build() for p in spec.parameters}
    if len(own) != len(spec.parameters):
        raise ValueError(f"space {spec.name!r}: parameter names repeat")
    params = [own.pop(p.name, p) for p in base.parameters] if base else []
    forbidden = list(base.forbidden) if base else []
    params += list(own.values())
    forbidden += [Forbidden(Condition.parse(f.when), f.reason) for f in spec.forbidden]
    description = spec.description or (base.description if base else "")
    start = spec.start or (base.start if base else None)
    return SearchSpace(spec.name, params, forbidden, description, start)


@lru_cache(maxsize=None)
def _load_file(path: Path) -> dict[str, Any]:
    with open(path) as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a space file holds one mapping")
    return data


def list_spaces(directory: Path = SPACES_DIR) -> list[str]:
    """The names of the YAML spaces, sorted."""
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_space(name: str, directory: Path = SPACES_DIR) -> SearchSpace:
    """The space ``name`` from ``<directory>/<name>.yaml``, with what it extends."""
    path = directory / f"{name}.yaml"
    if "/" in name or name.startswith(".") or not path.is_file():  # a name, not a path
        raise KeyError(f"unknown search space {name!r}; known: {', '.join(list_spaces(directory))}")
    data = _load_file(path)
    if data.get("name") != name:
        raise ValueError(f"{path}: 'name' must be {name!r}, the file's stem")
    base = load_space(data["extends"], directory) if data.get("extends") else None
    return space_from_dict(data, base=base)
