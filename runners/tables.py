"""Reading exhaustive configuration -> performance tables.

Four formats, told apart by their header:
- MOOT: every column is an option but the last, the objective; a trailing ``-`` on its name means
  minimise and ``+`` maximise (``PERF-``).
- ATC'18 (Cao et al.): option columns plus ``throughput`` (maximise), with setup columns such as
  ``workload_id``, ``machine_id`` and ``disk_type``.
- long: configuration columns, then ``repeat``, then optional ``status``/``reason``, then metric
  columns. StoreTune's own sweeps write it, beside a ``manifest.json`` giving metric directions. A
  ``series:<metric>`` column holds the repeat's per-interval values, space-separated (the manifest's
  ``series_interval_s``, 1 s by default), so that a replay can answer what a shorter run would have said.
- wide: any other table, whose objective column the caller names (``--metric PERF``).

Rows with the same configuration are repeats. Setup columns are not knobs: each is pinned with a
context value (``workload_id=4``), or dropped when it holds one value.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storetune.runners.base import (  # noqa: F401 (DatasetError and TableWarning are this module's too)
    DatasetError, Direction, Status, TableWarning, Workload, guess_direction)
from storetune.runners.table_checks import (
    check_cells, check_header, check_repeats, refuse_identifiers, show_cell, where_in_file)
from storetune.runners.series import Series, SeriesError
from storetune.runners.text import decode
from storetune.search_spaces import Config, TableSpace, Value, infer_table_space, load_space

# Columns that describe the setup a row was measured on, not a knob to tune.
CONTEXT_COLUMNS = ("workload_id", "machine_id", "disk_type", "workload", "device", "machine", "worker_id", "Platform")
# Codes of the ATC'18 files, spelled out (their README.txt).
ATC18_LABELS = {"io_scheduler": {0: "cfq", 1: "deadline", 2: "noop"}}
LONG_EXTRA = ("status", "reason")
SERIES_PREFIX = "series:"  # a long table's per-interval column: series:ops_per_s


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
    notes: tuple[str, ...] = ()  # the warnings its reading raised, for callers that cannot show warnings (REST)
    dropped: tuple[str, ...] = ()  # columns left out as not knobs (``drop``)
    # per configuration, each repeat's per-interval series (aligned with ``repeats``; None where a repeat has
    # none); empty for a table without series columns
    series: dict[Config, tuple[Series | None, ...]] = field(default_factory=dict)

    @property
    def default_metric(self) -> str:
        return next(iter(self.metrics))

    def measured(self, metric: str) -> dict[Config, np.ndarray]:
        """Each configuration's repeats that measured ``metric``, in file order (a failed repeat is skipped, and a
        sweep leaves a metric its engine does not report empty): possibly none."""
        j = list(self.metrics).index(metric)
        return {c: rows[:, j][np.isfinite(rows[:, j])] for c, rows in self.repeats.items()}

    def means(self, metric: str) -> dict[Config, float]:
        """The ground truth: each configuration's mean over its repeats that measured ``metric``; one that never
        did has none."""
        return {c: float(runs.mean()) for c, runs in self.measured(metric).items() if len(runs)}

    def noise(self, metric: str) -> dict[str, Any]:
        """How much ``metric`` moves between repeats of one configuration: the median and 90th percentile
        of the coefficient of variation (sample standard deviation over mean) over the configurations
        measured at least twice, and Spearman's rho between each configuration's first two measured repeats
        (in file order: a failed repeat is skipped), the ranking's agreement with itself (what any ranking
        drawn from this table can reach); None under three configurations."""
        from scipy.stats import spearmanr

        runs = [r for r in self.measured(metric).values() if len(r) >= 2 and r.mean() != 0]
        if not runs:
            return {"metric": metric, "configurations": 0}
        cvs = np.array([r.std(ddof=1) / abs(r.mean()) for r in runs])
        rho = spearmanr([r[0] for r in runs], [r[1] for r in runs]).statistic if len(runs) >= 3 else float("nan")
        return {"metric": metric, "configurations": len(runs), "median_cv": round(float(np.median(cvs)), 4),
                "p90_cv": round(float(np.quantile(cvs, 0.9)), 4),
                "repeat_spearman": round(float(rho), 3) if np.isfinite(rho) else None}

    @property
    def workload(self) -> Workload:
        """Named by the pinned ``workload`` column where the table has one (a sweep's), else by the table."""
        params = {"format": self.format, "sha256": self.sha256, "context": self.context}
        return Workload(kind="dataset", name=str(self.context.get("workload", self.name)), params=params)


TABLE_CACHE_SIZE = 8  # tables a process keeps read (the service checks every request against its table)
_tables: dict[tuple[Any, ...], Table] = {}
_tables_lock = threading.Lock()  # the service's request threads share it


def load_table(
    sources: str | Path | Sequence[str | Path],
    context: Mapping[str, Any] | None = None,
    metric: str | None = None,
    drop: Sequence[str] = (),
) -> Table:
    """Read one or more CSV files (or a folder of them) and pin the setup columns to ``context``.

    ``metric`` names the objective column of a plain table whose header does not say which it is; ``drop``
    names columns that are not knobs (an id): left out, so rows that differ only there are repeats.
    A table is read once per process while its files keep their size and modification time; its
    warnings are raised again at every load.
    """
    paths = _expand(sources)
    folder = len(paths) > 1 or (isinstance(sources, (str, Path)) and Path(sources).is_dir())
    try:
        key: tuple[Any, ...] | None = (folder, metric, tuple(sorted((context or {}).items())), tuple(drop),
                                       tuple((str(p.resolve()), p.stat().st_mtime_ns, p.stat().st_size) for p in paths))
        hash(key)
    except TypeError:  # a context value that cannot be a key (a list): read it afresh
        key = None
    if key is not None and (table := _tables.get(key)) is not None:
        for note in table.notes:
            warnings.warn(note, TableWarning, stacklevel=2)
        return table
    table = _load_table(paths, folder, context, metric, tuple(drop))
    if key is not None:
        # by hand: functools.lru_cache cannot re-raise the warnings of a cached read
        with _tables_lock:
            _tables[key] = table
            while len(_tables) > TABLE_CACHE_SIZE:
                _tables.pop(next(iter(_tables)))
    return table


def _load_table(paths: list[Path], folder: bool, context: Mapping[str, Any] | None, metric: str | None,
                drop: tuple[str, ...] = ()) -> Table:
    notes: list[str] = []
    frame, fmt, manifest = _read(paths, metric, notes)
    frame, config_columns, metrics = _split_columns(frame, fmt, manifest, paths, metric)
    unknown = [c for c in drop if c not in config_columns]
    if unknown:
        raise DatasetError(f"`drop` {unknown[0]}: no such option column in {paths[0].name}; columns: "
                           f"{', '.join(config_columns)}")
    config_columns = [c for c in config_columns if c not in drop]
    frame, pinned, config_columns = _pin_context(frame, config_columns, dict(context or {}), manifest, paths)
    for column, labels in (ATC18_LABELS.items() if fmt == "atc18" else ()):
        if column in frame:
            frame[column] = frame[column].map(lambda v, m=labels: m.get(v, v))
    name = paths[0].parent.name if folder else paths[0].stem
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()[:16]

    codes = frame.groupby(config_columns, sort=False, dropna=False).ngroup().to_numpy()
    if len(paths) > 1 and fmt != "long":  # a long table's repeat column says which rows are repeats
        _warn_shared_configurations(frame, codes, paths, name, notes)
    order = np.argsort(codes, kind="stable")
    starts = np.r_[0, np.cumsum(np.bincount(codes))[:-1]]
    distinct = frame.iloc[order[starts]][config_columns].to_dict("records")
    if fmt == "long" and manifest.get("space"):
        where = [where_in_file(frame, int(i)) for i in order[starts]]
        space, to_config = _declared_space(manifest["space"], name, config_columns, distinct, where)
    else:
        refuse_identifiers(frame, config_columns, paths[0])
        space, to_config = infer_table_space(name, config_columns, distinct)
        if not space.parameters:  # a campaign on it ran with an empty best configuration
            pinned_note = f" once {', '.join(f'{k}={v}' for k, v in pinned.items())} is pinned" if pinned else ""
            raise DatasetError(f"{paths[0]}: no option column varies{pinned_note} ({len(distinct)} distinct "
                               f"configuration(s) over {', '.join(config_columns) or 'no option column'}): nothing "
                               "to tune")
    values = frame[list(metrics)].to_numpy(dtype=float)[order]
    per_row = _series(frame, float(manifest.get("series_interval_s", 1.0))) if fmt == "long" else None
    succeeded = (frame["status"].astype(str) == Status.SUCCEEDED.value).to_numpy()[order] if "status" in frame else None
    repeats: dict[Config, np.ndarray] = {}
    outcomes: dict[Config, tuple[Status, str | None]] = {}
    series: dict[Config, tuple[Series | None, ...]] = {}
    for row, group in zip(distinct, np.split(np.arange(len(order)), starts[1:])):
        config = to_config(row)
        ok = group if succeeded is None else group[succeeded[group]]
        if len(ok):
            repeats[config] = values[ok]
            if per_row is not None:
                series[config] = tuple(per_row[i] for i in order[ok])
        else:
            first = frame.iloc[order[group[0]]]
            reason = first.get("reason")
            outcomes[config] = (Status(first["status"]), None if pd.isna(reason) or reason == "" else str(reason))
    return Table(name, tuple(paths), digest, fmt, metrics, pinned, space, repeats, outcomes, tuple(notes), drop,
                 series)


def _series(frame: pd.DataFrame, interval_s: float) -> list[Series | None] | None:
    """Each row's series from its ``series:<metric>`` cells (values separated by spaces; an empty cell: the
    repeat has none), by row position; None where the table has no series column. A value that is not a finite
    number, or metrics of different lengths in one row, name the file, line and interval."""
    columns = [c for c in frame.columns if str(c).startswith(SERIES_PREFIX)]
    if not columns:
        return None
    out: list[Series | None] = []
    for i in range(len(frame)):
        cells = {c[len(SERIES_PREFIX):]: str(frame[c].iloc[i]).strip() for c in columns}
        if all(v in ("", "nan") for v in cells.values()):
            out.append(None)
            continue
        values = {}
        for metric, text in cells.items():
            numbers = []
            for k, word in enumerate(text.split(), 1):
                try:
                    number = float(word)
                except ValueError:
                    number = float("nan")
                if not np.isfinite(number):
                    raise DatasetError(f"{where_in_file(frame, i)}: {SERIES_PREFIX}{metric}: interval {k} is "
                                       f"{show_cell(word)}, not a finite number")
                numbers.append(number)
            values[metric] = tuple(numbers)
        try:
            out.append(Series(interval_s, values))
        except SeriesError as e:
            raise DatasetError(f"{where_in_file(frame, i)}: {e}") from None
    return out


def _warn(notes: list[str], message: str) -> None:
    """A warning about the table being read, shown (the CLI prints it as one line) and kept in its notes."""
    notes.append(message)
    warnings.warn(message, TableWarning, stacklevel=3)


def _warn_shared_configurations(frame: pd.DataFrame, codes: np.ndarray, paths: list[Path], name: str,
                                notes: list[str]) -> None:
    """Files that measured the same configurations are read as repeats of one table: right for one
    table's runs split across files, silently wrong for different tables passed together."""
    files = frame.attrs["origin"].rows[frame.index.to_numpy(), 0]
    pairs = np.unique(np.column_stack([codes, files]), axis=0)  # (configuration, file), once each
    in_files = np.bincount(pairs[:, 0], minlength=int(codes.max()) + 1)
    shared = int((in_files > 1).sum())
    if shared:
        holding = sorted({paths[f].name for f in pairs[in_files[pairs[:, 0]] > 1, 1]})
        _warn(notes, f"{shared} of {len(in_files)} configurations appear in more than one of "
                     f"{', '.join(holding)}: their rows are read as repeats of one table, {name!r}. "
                     "If these are different tables, pass each on its own")


def _declared_space(
    space_name: str, name: str, columns: list[str], rows: list[dict[str, Any]], where: list[str]
) -> tuple[TableSpace, Any]:
    """The table's configurations in the space its manifest names (a sweep's own data): the space's
    conditions hold, and an empty cell is a parameter that does not apply."""
    declared = load_space(space_name)
    unknown = [c for c in columns if c not in declared]
    if unknown:
        raise DatasetError(f"{where[0].split(': line')[0]}: columns {unknown} are not parameters of {space_name}")

    def to_config(row: Mapping[str, Any], where: str = "a row") -> Config:
        present = {k: v for k, v in row.items() if not (v is None or (isinstance(v, float) and np.isnan(v)) or v == "")}
        try:
            return declared.validate(present)
        except ValueError as e:
            raise DatasetError(f"{where}: a configuration outside {space_name}: {e}") from None

    members = [to_config(r, w) for r, w in zip(rows, where)]
    return TableSpace(name, declared.parameters, members, f"{space_name}, as measured in {name}"), to_config


def _expand(sources: str | Path | Sequence[str | Path]) -> list[Path]:
    items = [sources] if isinstance(sources, (str, Path)) else list(sources)
    named = [Path(i).resolve() for i in items]
    twice = next((i for n, i in zip(named, items) if named.count(n) > 1), None)
    if twice is not None:  # read twice, every configuration looked measured twice in two files
        raise DatasetError(f"{twice}: named twice as a dataset: give each file or folder once")
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


@dataclass(frozen=True, eq=False)  # compared by identity: pandas compares attrs when it combines frames
class _Origin:
    paths: tuple[Path, ...]
    rows: np.ndarray  # per row of the frame: (file index, line)


def _read(paths: list[Path], metric: str | None, notes: list[str]) -> tuple[pd.DataFrame, str, dict[str, Any]]:
    """Every file's cells as stripped text, checked for shape; ``frame.attrs["origin"]`` gives each
    row's (file, line) for the messages of the checks that follow."""
    frames, origins = [], []
    header: list[str] = []
    for index, path in enumerate(paths):
        columns, rows, lines = _read_rows(path, notes)
        if frames and set(columns) != set(header):
            raise DatasetError(f"{path}: its columns differ from those of {paths[0]}; tables must share a header")
        frame = pd.DataFrame(rows, columns=columns, dtype=object)
        frames.append(frame[header] if frames else frame)
        header = header or columns
        origins.append(np.column_stack([np.full(len(lines), index), lines]))
    frame = pd.concat(frames, ignore_index=True)
    frame.attrs["origin"] = _Origin(tuple(paths), np.vstack(origins))
    manifest_path = paths[0].parent / "manifest.json"
    manifest = _manifest(manifest_path) if manifest_path.is_file() else {}
    if "repeat" in header:
        return frame, "long", manifest
    if any(c.endswith(("-", "+")) for c in header):
        return frame, "moot", manifest
    if "throughput" in header:
        return frame, "atc18", manifest
    if metric in header:
        return frame, "wide", manifest
    raise DatasetError(
        f"{paths[0]}: cannot tell the objective column: name it with `metric` (columns: {', '.join(header)}), "
        "end its name with '-' (minimise) or '+' (maximise) as MOOT tables do, or write the long format"
    )


def _read_rows(path: Path, notes: list[str]) -> tuple[list[str], list[list[str]], list[int]]:
    """The header, the rows and their line numbers, with every row checked for its field count.

    By hand over the csv module because pandas fills a short row with NaN without a word."""
    data = path.read_bytes()
    if not data.strip():
        raise DatasetError(f"{path}: the file is empty")
    text = decode(path, data, DatasetError, "a table is a UTF-8 CSV file")
    reader = csv.reader(io.StringIO(text, newline=""), skipinitialspace=True)
    try:
        header = [c.strip() for c in next(reader)]
        check_header(path, header)
        rows, lines = [], []
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # a blank line, or one of spaces
            if len(row) != len(header):
                raise DatasetError(f"{path}: line {reader.line_num}: {len(row)} fields where the header has "
                                   f"{len(header)}: {show_cell(','.join(row))}")
            rows.append([c.strip() for c in row])
            lines.append(reader.line_num)
    except csv.Error as e:
        raise DatasetError(f"{path}: line {reader.line_num}: malformed CSV: {e}") from None
    if not rows:
        raise DatasetError(f"{path}: the table has a header but no rows")
    if not text.endswith(("\n", "\r")):
        _warn(notes, f"{path}: line {lines[-1]}, the last, has no newline at its end: if the file was cut short, "
                     "that row is wrong")
    return header, rows, lines


def has_header(path: Path) -> bool:
    """Does the CSV file start with a header, as every table does? A file of numbers from its first line is
    something else: a latency CDF, a trace. Reads the first line only (a catalogue lists many files)."""
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            first = next(csv.reader(f, skipinitialspace=True), [])
    except OSError:
        return False
    names = [c.strip() for c in first if c.strip()]
    if len(names) < 2:
        return False
    try:
        [float(c) for c in names]
    except ValueError:
        return True
    return False


def _split_columns(
    frame: pd.DataFrame, fmt: str, manifest: dict[str, Any], paths: list[Path], metric: str | None
) -> tuple[pd.DataFrame, list[str], dict[str, Direction | None]]:
    columns = list(frame.columns)
    if fmt == "moot":  # every column named with a trailing - or + is an objective
        objectives = [c for c in columns if c.endswith(("-", "+"))]
        both = [c for c in objectives if c.endswith("-") and f"{c[:-1]}+" in objectives]
        if both:  # two columns would both be the metric, one minimised and one maximised
            raise DatasetError(f"{paths[0]}: line 1: columns {both[0]!r} and {both[0][:-1] + '+'!r} would both be "
                               f"the objective {both[0][:-1]!r}, minimised and maximised")
        metrics = {c[:-1]: "min" if c.endswith("-") else "max" for c in objectives}
        if len(metrics) > 1:
            if metric is None:
                raise DatasetError(
                    f"{paths[0]}: {len(metrics)} objectives ({', '.join(objectives)}): choose one with `metric` "
                    f"({' or '.join(metrics)}); the others are kept as metrics"
                )
            if metric in metrics:  # the chosen one first: it is the table's default metric
                metrics = {metric: metrics[metric], **metrics}
        clash = [c for c in objectives if c[:-1] in columns]
        if clash:
            raise DatasetError(f"{paths[0]}: line 1: columns {clash[0][:-1]!r} and {clash[0]!r} would both be "
                               f"named {clash[0][:-1]!r}")
        frame = frame.rename(columns={c: c[:-1] for c in objectives})
        config_columns = [c for c in columns if c not in objectives]
    elif fmt == "wide":
        metrics = {metric: guess_direction(metric)}
        config_columns = [c for c in columns if c != metric]
    elif fmt == "atc18":
        metrics = {"throughput": "max"}
        config_columns = [c for c in columns if c != "throughput"]
    else:
        at = columns.index("repeat")
        config_columns = [c for c in columns[:at] if c not in LONG_EXTRA]
        names = [c for c in columns[at + 1 :] if c not in LONG_EXTRA and not c.startswith(SERIES_PREFIX)]
        declared = manifest.get("metrics", {})
        for m, given in declared.items():
            if given is not None and _direction(given) is None:
                raise DatasetError(f"{paths[0].parent / 'manifest.json'}: metric {m!r} has direction {given!r}; "
                                   "a direction is min or max")
        metrics = {m: _direction(declared.get(m)) or guess_direction(m) for m in names}
    if not config_columns or not metrics:
        raise DatasetError(f"{paths[0]}: needs at least one configuration column and one metric column")
    # an empty cell is "a parameter that does not apply" only in a sweep's table, whose space says which
    check_cells(frame, config_columns, list(metrics), empty_options=fmt == "long" and bool(manifest.get("space")),
                 empty_metrics=fmt == "long")
    if fmt == "long":
        check_repeats(frame, config_columns)
    return frame, config_columns, metrics


def _direction(declared: Any) -> Direction | None:
    if isinstance(declared, dict):
        declared = declared.get("direction")
    return declared if declared in ("min", "max") else None


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
            f"`context` {unknown[0]}: no such column in {paths[0].name}; columns: {', '.join(config_columns)}"
        )
    pinned: dict[str, Value] = {}
    for column in config_columns:
        present = frame[column].drop_duplicates().tolist()
        if column in context:
            wanted = _match(context[column], present)
            if wanted is None:
                raise DatasetError(
                    f"`context` {column}={context[column]}: not in the table; values: {', '.join(map(str, present))}"
                )
            frame = frame[frame[column] == wanted]
            pinned[column] = _plain(wanted)
        elif column in setup:
            if len(present) > 1:
                raise DatasetError(
                    f"column {column!r} describes the setup, not a knob (values: {', '.join(map(str, present))}); "
                    f"choose one with `context` {column}=<value>"
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
