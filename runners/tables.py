"""Reading exhaustive configuration -> performance tables.

Four formats, told apart by their header:
- MOOT: every column is an option but the last, the objective; a trailing ``-`` on its name means
  minimise and ``+`` maximise (``PERF-``).
- ATC'18 (Cao et al.): option columns plus ``throughput`` (maximise), with setup columns such as
  ``workload_id``, ``machine_id`` and ``disk_type``.
- long: configuration columns, then ``repeat``, then optional ``status``/``reason``, then metric
  columns. StoreTune's own sweeps write it, beside a ``manifest.json`` giving metric directions.
- wide: any other table, whose objective column the caller names (``--metric PERF``).

Rows with the same configuration are repeats. Setup columns are not knobs: each is pinned with a
context value (``workload_id=4``), or dropped when it holds one value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from runners.base import Direction, Status, Workload, guess_direction
from search_spaces import Config, TableSpace, Value, infer_table_space, load_space

# Columns that describe the setup a row was measured on, not a knob to tune.
CONTEXT_COLUMNS = ("workload_id", "machine_id", "disk_type", "workload", "device", "machine", "worker_id", "Platform")
# Codes of the ATC'18 files, spelled out (their README.txt).
ATC18_LABELS = {"io_scheduler": {0: "cfq", 1: "deadline", 2: "noop"}}
LONG_EXTRA = ("status", "reason")


class DatasetError(ValueError):
    """A table that cannot be read or sliced as asked; the message says which file and line."""


@dataclass(frozen=True)
class Table:
    """Configurations with their measured repeats. ``metrics`` keeps the file's column order."""

    name: str
    sources: tuple[Path, ...]
    sha256: str
    format: str
    metrics: dict[str, Direction | None]
    context: dict[str, Value]
    space: TableSpace
    repeats: dict[Config, np.ndarray]  # per configuration: (n_repeats, n_metrics)
    outcomes: dict[Config, tuple[Status, str | None]]  # configurations the sweep recorded as failed

    @property
    def default_metric(self) -> str:
        return next(iter(self.metrics))

    def means(self, metric: str) -> dict[Config, float]:
        """The ground truth: each configuration's mean over its repeats."""
        j = list(self.metrics).index(metric)
        return {c: float(np.nanmean(rows[:, j])) for c, rows in self.repeats.items()}

    @property
    def workload(self) -> Workload:
        params = {"format": self.format, "sha256": self.sha256, "context": self.context}
        return Workload(kind="dataset", name=self.name, params=params)


def load_table(
    sources: str | Path | Sequence[str | Path],
    context: Mapping[str, Any] | None = None,
    metric: str | None = None,
) -> Table:
    """Read one or more CSV files (or a folder of them) and pin the setup columns to ``context``.

    ``metric`` names the objective column of a plain table whose header does not say which it is.
    """
    paths = _expand(sources)
    frame, fmt, manifest = _read(paths, metric)
    frame, config_columns, metrics = _split_columns(frame, fmt, manifest, paths, metric)
    frame, pinned, config_columns = _pin_context(frame, config_columns, dict(context or {}), manifest, paths)
    for column, labels in (ATC18_LABELS.items() if fmt == "atc18" else ()):
        if column in frame:
            frame[column] = frame[column].map(lambda v, m=labels: m.get(v, v))
    name = paths[0].parent.name if len(paths) > 1 else paths[0].stem
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()[:16]

    codes = frame.groupby(config_columns, sort=False, dropna=False).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    starts = np.r_[0, np.cumsum(np.bincount(codes))[:-1]]
    distinct = frame.iloc[order[starts]][config_columns].to_dict("records")
    if fmt == "long" and manifest.get("space"):
        space, to_config = _declared_space(manifest["space"], name, config_columns, distinct, paths[0])
    else:
        space, to_config = infer_table_space(name, config_columns, distinct)
    values = frame[list(metrics)].to_numpy(dtype=float)[order]
    succeeded = (frame["status"].astype(str) == Status.SUCCEEDED.value).to_numpy()[order] if "status" in frame else None
    repeats: dict[Config, np.ndarray] = {}
    outcomes: dict[Config, tuple[Status, str | None]] = {}
    for row, group in zip(distinct, np.split(np.arange(len(order)), starts[1:])):
        config = to_config(row)
        ok = group if succeeded is None else group[succeeded[group]]
        if len(ok):
            repeats[config] = values[ok]
        else:
            first = frame.iloc[order[group[0]]]
            reason = first.get("reason")
            outcomes[config] = (Status(first["status"]), None if pd.isna(reason) else str(reason))
    return Table(name, tuple(paths), digest, fmt, metrics, pinned, space, repeats, outcomes)


def _declared_space(
    space_name: str, name: str, columns: list[str], rows: list[dict[str, Any]], path: Path
) -> tuple[TableSpace, Any]:
    """The table's configurations in the space its manifest names (a sweep's own data): the space's
    conditions hold, and an empty cell is a parameter that does not apply."""
    declared = load_space(space_name)
    unknown = [c for c in columns if c not in declared]
    if unknown:
        raise DatasetError(f"{path}: columns {unknown} are not parameters of {space_name}")

    def to_config(row: Mapping[str, Any]) -> Config:
        present = {k: v for k, v in row.items() if not (v is None or (isinstance(v, float) and np.isnan(v)) or v == "")}
        try:
            return declared.validate(present)
        except ValueError as e:
            raise DatasetError(f"{path}: a configuration outside {space_name}: {e}") from None

    members = [to_config(r) for r in rows]
    return TableSpace(name, declared.parameters, members, f"{space_name}, as measured in {name}"), to_config


def _expand(sources: str | Path | Sequence[str | Path]) -> list[Path]:
    items = [sources] if isinstance(sources, (str, Path)) else list(sources)
    paths: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            manifest = item / "manifest.json"
            found = [item / f for f in _manifest(manifest).get("files", [])] if manifest.is_file() else []
            found = found or sorted(item.glob("*.csv"))
            if not found:
                raise DatasetError(f"{item}: a dataset folder needs CSV files (or a manifest.json naming them)")
            paths += found
        elif item.is_file():
            paths.append(item)
        else:
            raise DatasetError(f"{item}: no such dataset file or folder")
    return paths


def _manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DatasetError(f"{path}: not a readable JSON manifest ({e})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: a manifest holds one JSON object")
    return data


def _read(paths: list[Path], metric: str | None) -> tuple[pd.DataFrame, str, dict[str, Any]]:
    frames = []
    for path in paths:
        try:
            frame = pd.read_csv(path, skipinitialspace=True)
        except pd.errors.EmptyDataError:
            raise DatasetError(f"{path}: the file is empty") from None
        except (pd.errors.ParserError, UnicodeDecodeError) as e:
            raise DatasetError(f"{path}: malformed CSV: {str(e).strip().splitlines()[-1]}") from None
        if frames and set(frame.columns) != set(frames[0].columns):
            raise DatasetError(f"{path}: its columns differ from those of {paths[0]}; tables must share a header")
        if frames:
            frame = frame[list(frames[0].columns)]
        if frame.empty:
            raise DatasetError(f"{path}: the table has a header but no rows")
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True)
    manifest_path = paths[0].parent / "manifest.json"
    manifest = _manifest(manifest_path) if manifest_path.is_file() else {}
    columns = list(frame.columns)
    if "repeat" in columns:
        return frame, "long", manifest
    if columns[-1].endswith(("-", "+")):
        return frame, "moot", manifest
    if "throughput" in columns:
        return frame, "atc18", manifest
    if metric in columns:
        return frame, "wide", manifest
    raise DatasetError(
        f"{paths[0]}: cannot tell the objective column: name it with --metric (columns: {', '.join(columns)}), "
        "end its name with '-' (minimise) or '+' (maximise) as MOOT tables do, or write the long format"
    )


def _split_columns(
    frame: pd.DataFrame, fmt: str, manifest: dict[str, Any], paths: list[Path], metric: str | None
) -> tuple[pd.DataFrame, list[str], dict[str, Direction | None]]:
    columns = list(frame.columns)
    if fmt == "moot":
        objective = columns[-1]
        metrics = {objective.rstrip("+-"): "min" if objective.endswith("-") else "max"}
        frame = frame.rename(columns={objective: objective.rstrip("+-")})
        config_columns = columns[:-1]
    elif fmt == "wide":
        metrics = {metric: guess_direction(metric)}
        config_columns = [c for c in columns if c != metric]
    elif fmt == "atc18":
        metrics = {"throughput": "max"}
        config_columns = [c for c in columns if c != "throughput"]
    else:
        at = columns.index("repeat")
        config_columns = columns[:at]
        names = [c for c in columns[at + 1 :] if c not in LONG_EXTRA]
        declared = manifest.get("metrics", {})
        metrics = {m: _direction(declared.get(m)) or guess_direction(m) for m in names}
    if not config_columns or not metrics:
        raise DatasetError(f"{paths[0]}: needs at least one configuration column and one metric column")
    _check_numeric(frame, list(metrics), paths[0], allow_missing="status" in frame)
    return frame, config_columns, metrics


def _direction(declared: Any) -> Direction | None:
    if isinstance(declared, dict):
        declared = declared.get("direction")
    return declared if declared in ("min", "max") else None


def _check_numeric(frame: pd.DataFrame, metrics: list[str], path: Path, allow_missing: bool) -> None:
    for metric in metrics:
        values = pd.to_numeric(frame[metric], errors="coerce")
        bad = values.isna() & (frame[metric].notna() | (not allow_missing))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise DatasetError(
                f"{path}: line {row + 2}: metric {metric!r} is {frame[metric].iloc[row]!r}, not a number"
            )
        frame[metric] = values


def _pin_context(
    frame: pd.DataFrame,
    config_columns: list[str],
    context: dict[str, Any],
    manifest: dict[str, Any],
    paths: list[Path],
) -> tuple[pd.DataFrame, dict[str, Value], list[str]]:
    setup = set(CONTEXT_COLUMNS) | set(manifest.get("context", []))
    unknown = [c for c in context if c not in config_columns]
    if unknown:
        raise DatasetError(
            f"--context {unknown[0]}: no such column in {paths[0].name}; columns: {', '.join(config_columns)}"
        )
    pinned: dict[str, Value] = {}
    for column in config_columns:
        present = frame[column].drop_duplicates().tolist()
        if column in context:
            wanted = _match(context[column], present)
            if wanted is None:
                raise DatasetError(
                    f"--context {column}={context[column]}: not in the table; values: {', '.join(map(str, present))}"
                )
            frame = frame[frame[column] == wanted]
            pinned[column] = _plain(wanted)
        elif column in setup:
            if len(present) > 1:
                raise DatasetError(
                    f"column {column!r} describes the setup, not a knob (values: {', '.join(map(str, present))}); "
                    f"choose one with --context {column}=<value>"
                )
            pinned[column] = _plain(present[0])
    return frame, pinned, [c for c in config_columns if c not in pinned]


def _match(wanted: Any, present: list[Any]) -> Any:
    for value in present:
        if value == wanted or str(value) == str(wanted):
            return value
        try:
            if float(value) == float(wanted):
                return value
        except (TypeError, ValueError):
            pass
    return None


def _plain(value: Any) -> Value:
    return value.item() if isinstance(value, np.generic) else value
