"""The checks that a table's cells, header and repeats are what their columns say, and the errors a table raises.

Each check names the file and line of the first cell that fails it (``DatasetError``), so that a bad table
loses nothing and costs one read to mend. ``runners/tables.py`` reads the formats and calls these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storetune.runners.base import DatasetError, Status

_NON_FINITE = ("nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity")


IDENTIFIER_MIN_ROWS = 20  # a smaller table may well measure each value of a knob once


def refuse_identifiers(frame: pd.DataFrame, config_columns: list[str], path: Path) -> None:
    """A column of whole numbers that differ in every row is a row's id, not a knob: searched, it would be a
    knob of as many levels as rows, each level one row. Said in one line, with the two ways out."""
    if len(frame) < IDENTIFIER_MIN_ROWS:
        return
    for column in config_columns:
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.notna().all() and (values == values.round()).all() and values.is_unique:
            raise DatasetError(f"{path}: column {column!r} has a different whole number in each of its {len(frame):,} "
                               f"rows: a row's id, not a knob; leave it out with `drop` {column}, "
                               "or pin it with `context`")


def check_header(path: Path, header: list[str]) -> None:
    for i, name in enumerate(header):
        if not name:
            raise DatasetError(f"{path}: line 1: column {i + 1} has no name")
        if name in header[:i]:
            raise DatasetError(f"{path}: line 1: two columns are named {name!r}")


def check_cells(frame: pd.DataFrame, config_columns: list[str], metrics: list[str], empty_options: bool,
                 empty_metrics: bool) -> None:
    """Every cell where it belongs, numbers converted in place. A metric is a finite number (or, in
    the long format, empty: not measured); an option or setup column holds finite numbers or text,
    not both, and no empty cell unless ``empty_options``."""
    for column in [*config_columns, *metrics]:
        text = frame[column].astype(str)
        numbers = pd.to_numeric(text, errors="coerce")
        empty = (text == "").to_numpy()
        finite = np.isfinite(numbers.to_numpy(dtype=float))
        words = ~empty & numbers.isna().to_numpy() & ~text.str.lower().isin(_NON_FINITE).to_numpy()
        bad = ~empty & ~finite & ~words  # nan, inf, -Infinity...
        if bad.any():
            _fail(frame, bad, column, "is {cell}, not a finite number")
        if empty.any() and not (empty_metrics if column in metrics else empty_options):
            _fail(frame, empty, column, "is empty")
        if column in metrics:
            if words.any():
                _fail(frame, words, column, "is {cell}, not a number", what="metric")
        elif words.any() and finite.any():  # one kind is a slip: name its first cell
            minority = finite if finite.sum() < words.sum() else words
            kind = "text" if minority is finite else "numbers"
            _fail(frame, minority, column, f"is {{cell}}, but the column holds {kind}")
        frame[column] = numbers if not words.any() else text.where(~empty, np.nan)
    if "status" in frame:
        known = {s.value for s in Status}
        wrong = ~frame["status"].isin(known).to_numpy()
        if wrong.any():
            _fail(frame, wrong, "status", f"is {{cell}}, not one of {', '.join(sorted(known))}")


def check_repeats(frame: pd.DataFrame, config_columns: list[str]) -> None:
    """A long table's ``repeat`` is a count from 0, and no configuration has the same repeat twice (a
    file copied into the folder twice would otherwise double every configuration's repeats)."""
    text = frame["repeat"].astype(str)
    numbers = pd.to_numeric(text, errors="coerce")
    wrong = ~(text.str.fullmatch(r"\d+")).to_numpy()
    if wrong.any():
        _fail(frame, wrong, "repeat", "is {cell}, not a count from 0")
    frame["repeat"] = numbers
    keys = frame[[*config_columns, "repeat"]].astype(str)
    twice = keys.duplicated(keep=False).to_numpy()
    if twice.any():
        rows = np.flatnonzero(twice)
        first = rows[0]
        second = next(r for r in rows[1:] if keys.iloc[r].equals(keys.iloc[first]))
        raise DatasetError(f"{where_in_file(frame, int(second))}: the same configuration and repeat as "
                           f"{where_in_file(frame, int(first)).split(': ')[-1]}")


def _fail(frame: pd.DataFrame, rows: np.ndarray, column: str, message: str, what: str = "column") -> None:
    row = int(np.flatnonzero(rows)[0])
    raise DatasetError(f"{where_in_file(frame, row)}: {what} {column!r} {message.format(cell=show_cell(frame[column].iloc[row]))}")


def where_in_file(frame: pd.DataFrame, row: int) -> str:
    """The file and line of the frame's ``row``-th row (by position)."""
    paths, origin = frame.attrs["origin"].paths, frame.attrs["origin"].rows
    file, line = origin[frame.index[row]]
    return f"{paths[file]}: line {line}"


def show_cell(cell: Any) -> str:
    text = str(cell)
    return repr(text if len(text) <= 40 else text[:40] + "...")
