"""Property-based tests of the input layer (runners/tables.py, runners/traces.py): a table or a
trace corrupted at random gives a one-line error naming the file and the line, and formatting noise
gives exactly the clean input's result. Nothing a corruption makes can pass for data."""

from __future__ import annotations

import re
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from storetune.runners.tables import DatasetError, TableWarning, load_table
from storetune.runners.traces import TraceError, read_trace

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ANY_LINE = r"\d+"
# A binary blob holds at least one byte no text file holds (a control character or invalid UTF-8).
BLOBS = st.tuples(st.binary(max_size=12), st.sampled_from([b"\x00", b"\x01", b"\x1b", b"\x7f", b"\xff", b"\xc3("]),
                  st.binary(max_size=12)).map(lambda parts: b"".join(parts))
NON_FINITE = st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity", "+inf"])
WORDS = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(lambda w: w.lower() not in (
    "nan", "inf", "infinity"))


# ---- tables ---------------------------------------------------------------------------------------

@st.composite
def tables(draw) -> tuple[list[str], list[list[str]], list[int]]:
    """A MOOT table: 1-3 numeric options, maybe a text one, the objective last; repeats allowed.
    Returns the header, the rows as text, and which columns hold numbers."""
    n_numeric = draw(st.integers(1, 3))
    text_option = draw(st.booleans())
    header = [f"o{i}" for i in range(n_numeric)] + (["fs"] if text_option else []) + ["PERF-"]
    n = draw(st.integers(2, 12))
    rows = []
    for _ in range(n):
        row = [str(draw(st.integers(0, 3))) for _ in range(n_numeric)]
        if text_option:
            row.append(draw(st.sampled_from(["ext4", "xfs", "btrfs"])))
        row.append(repr(draw(st.floats(0.01, 1e6, allow_nan=False, allow_infinity=False))))
        rows.append(row)
    # at least two configurations: a table whose options never vary has nothing to tune (an error)
    assume(len({tuple(r[:-1]) for r in rows}) > 1)
    numeric = [*range(n_numeric), len(header) - 1]
    return header, rows, numeric


def csv_text(header: list[str], rows: list[list[str]], newline: str = "\n") -> str:
    return newline.join(",".join(r) for r in [header, *rows]) + newline


def same_table(a, b) -> bool:
    return (a.metrics == b.metrics and a.context == b.context and a.space.members == b.space.members
            and a.outcomes == b.outcomes and a.repeats.keys() == b.repeats.keys()
            and all(np.array_equal(a.repeats[c], b.repeats[c]) for c in a.repeats))


def load(path: Path, data: bytes):
    path.write_bytes(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return load_table(path), [str(w.message) for w in caught if issubclass(w.category, TableWarning)]
        except DatasetError as e:
            return e, []


def assert_names_line(error: Exception, path: Path, line: int | None) -> None:
    message = str(error)
    assert "\n" not in message, message
    number = str(line) if line is not None else ANY_LINE
    pattern = rf"^{re.escape(str(path))}: line {number}[:,] "
    assert re.match(pattern, message), message


CELL_CORRUPTIONS = ("dropped field", "nan or inf", "text in a number column", "empty cell")


def corrupt_cell(row: list[str], corruption: str, numeric: list[int], emptiable: list[int], data) -> list[str]:
    """A copy of ``row`` with one of CELL_CORRUPTIONS: a field dropped, a number made non-finite or
    text, or a cell of ``emptiable`` emptied."""
    row = list(row)
    if corruption == "dropped field":
        del row[data.draw(st.integers(0, len(row) - 1), label="field")]
    elif corruption == "nan or inf":
        row[data.draw(st.sampled_from(numeric), label="column")] = data.draw(NON_FINITE)
    elif corruption == "text in a number column":
        row[data.draw(st.sampled_from(numeric), label="column")] = data.draw(WORDS)
    else:
        row[data.draw(st.sampled_from(emptiable), label="column")] = ""
    return row


@st.composite
def long_tables(draw) -> tuple[list[str], list[list[str]], list[int], list[int]]:
    """A sweep's long table: a workload, 1-2 options, repeat, status, reason and two metrics; each
    configuration measured 1-2 times. Returns the header, the rows, the columns of numbers, and the
    option columns (where an empty cell is an error: no manifest says a parameter does not apply)."""
    n_options = draw(st.integers(1, 2))
    header = ["workload", *(f"o{i}" for i in range(n_options)), "repeat", "status", "reason", "ops", "lat_us"]
    configs = draw(st.lists(st.tuples(*(st.integers(0, 3) for _ in range(n_options))), min_size=2, max_size=8,
                            unique=True))
    rows = []
    for config in configs:
        for repeat in range(draw(st.integers(1, 2))):
            ops = repr(draw(st.floats(1, 1e6, allow_nan=False)))
            rows.append(["fileserver", *map(str, config), str(repeat), "SUCCEEDED", "", ops, "12.5"])
    options = list(range(1, 1 + n_options))
    return header, rows, [*options, len(header) - 2, len(header) - 1], options


@SETTINGS
@given(tables(), st.sampled_from(CELL_CORRUPTIONS), st.data())
def test_a_corrupted_table_cell_is_an_error_naming_its_line(table, corruption, data):
    header, rows, numeric = table
    i = data.draw(st.integers(0, len(rows) - 1), label="row")
    row = corrupt_cell(rows[i], corruption, numeric, list(range(len(header))), data)
    corrupted = [*rows[:i], row, *rows[i + 1:]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        result, _ = load(path, csv_text(header, corrupted).encode())
        assert isinstance(result, DatasetError), f"{corruption} at line {i + 2} was read as data"
        assert_names_line(result, path, i + 2)


@SETTINGS
@given(long_tables(), st.sampled_from((*CELL_CORRUPTIONS, "repeat", "duplicate row")), st.data())
def test_a_corrupted_long_table_is_an_error_naming_its_line(table, corruption, data):
    header, rows, numeric, options = table
    i = data.draw(st.integers(0, len(rows) - 1), label="row")
    row = list(rows[i])
    corrupted = [list(r) for r in rows]
    line = i + 2
    if corruption in CELL_CORRUPTIONS:  # a metric may be empty (not measured); an option may not, here
        row = corrupt_cell(row, corruption, numeric, options, data)
    elif corruption == "repeat":
        row[header.index("repeat")] = data.draw(st.sampled_from(["-1", "x", "1.5", "nan", ""]))
    else:  # the row again at the end, as a file copied twice into a folder would give
        corrupted.append(list(row))
        line = len(rows) + 2
    if corruption != "duplicate row":
        corrupted[i] = row
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        clean, _ = load(path, csv_text(header, rows).encode())
        assert not isinstance(clean, Exception), clean
        result, _ = load(path, csv_text(header, corrupted).encode())
        assert isinstance(result, DatasetError), f"{corruption} at line {line} was read as data"
        assert_names_line(result, path, line)


@SETTINGS
@given(tables(), BLOBS, st.data())
def test_a_binary_blob_anywhere_in_a_table_is_an_error_naming_a_line(table, blob, data):
    header, rows, _ = table
    clean = csv_text(header, rows).encode()
    at = data.draw(st.integers(0, len(clean)), label="offset")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        result, _ = load(path, clean[:at] + blob + clean[at:])
        assert isinstance(result, DatasetError)
        assert_names_line(result, path, None)


@SETTINGS
@given(tables(), st.data())
def test_a_table_cut_short_is_an_error_or_a_warning_naming_its_last_line(table, data):
    """A cut inside the last number cannot be told from a shorter number (RFC 4180 allows a last
    line without a newline, and MOOT's Apache table has one): the reader warns, naming the line."""
    header, rows, _ = table
    clean = csv_text(header, rows)
    last = clean.rstrip("\n").rfind("\n") + 1
    cut = data.draw(st.integers(last + 1, len(clean) - 1), label="cut")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        result, warned = load(path, clean[:cut].encode())
        if isinstance(result, DatasetError):
            assert_names_line(result, path, len(rows) + 1)
        else:
            assert warned and warned[0].startswith(f"{path}: line {len(rows) + 1}, the last, has no newline")


@SETTINGS
@given(tables(), st.booleans(), st.booleans(), st.booleans())
def test_formatting_noise_gives_exactly_the_clean_tables_result(table, crlf, blank_lines, spaces):
    header, rows, _ = table
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        clean, _ = load(path, csv_text(header, rows).encode())
        assert not isinstance(clean, Exception), clean
        noisy = [[(" " + c if spaces else c) for c in r] for r in rows]
        text = csv_text(header, noisy, "\r\n" if crlf else "\n")
        if blank_lines:
            text = text.replace("\n", "\n\n", 2)
        again, warned = load(path, text.encode())
        assert not isinstance(again, Exception), again
        assert not warned and same_table(clean, again)


# ---- traces ---------------------------------------------------------------------------------------

@st.composite
def traces(draw, fmt: str) -> list[list[str]]:
    """A FlashNet or MSR trace in arrival order; its clock ticks in us (the first stamp says so),
    and arrivals are at least two ticks apart, so that any two swapped stamps go back by more
    than the one tick a coarse clock is allowed."""
    n = draw(st.integers(2, 20))
    steps = draw(st.lists(st.integers(2, 5000), min_size=n - 1, max_size=n - 1))
    ts = np.cumsum([1, *steps]) / 1000.0
    rows = []
    for t in ts:
        size = draw(st.integers(1, 64)) * 512
        offset = draw(st.integers(0, 2**20)) * 512
        read = draw(st.integers(0, 1))
        if fmt == "flashnet":
            latency = draw(st.integers(1, 20_000))
            rows.append([f"{t:.3f}", str(latency), str(read), str(size), str(offset), f"{t + 0.05:.3f}", str(size)])
        else:
            rows.append([f"{t:.3f}", "0", str(offset), str(size), str(read)])
    return rows


SEPARATOR = {"flashnet": ",", "msr": " "}
NUMERIC_FIELDS = {"flashnet": [0, 1, 3, 4, 5], "msr": [0, 2, 3]}
TRACE_CORRUPTIONS = ("dropped field", "nan or inf", "text in a number field", "negative", "shuffled timestamp",
                     "cut last line", "binary blob")


def trace_text(fmt: str, rows: list[list[str]], newline: str = "\n") -> str:
    return newline.join(SEPARATOR[fmt].join(r) for r in rows) + newline


def read(path: Path, data: bytes, fmt: str):
    path.write_bytes(data)
    try:
        return read_trace(path, fmt)
    except TraceError as e:
        return e


@SETTINGS
@given(st.sampled_from(["flashnet", "msr"]), st.data())
def test_a_corrupted_trace_is_an_error_naming_its_line(fmt, data):
    rows = data.draw(traces(fmt), label="trace")
    corruption = data.draw(st.sampled_from(TRACE_CORRUPTIONS), label="corruption")
    i = data.draw(st.integers(0, len(rows) - 1), label="row")
    corrupted = [list(r) for r in rows]
    line: int | None = i + 1
    if corruption == "dropped field":
        del corrupted[i][data.draw(st.integers(0, len(rows[i]) - 1), label="field")]
    elif corruption == "nan or inf":
        corrupted[i][data.draw(st.sampled_from(NUMERIC_FIELDS[fmt]))] = data.draw(NON_FINITE)
    elif corruption == "text in a number field":
        corrupted[i][data.draw(st.sampled_from(NUMERIC_FIELDS[fmt]))] = data.draw(WORDS)
    elif corruption == "negative":  # -1 means "not measured" in a latency; anything lower is wrong
        field = data.draw(st.sampled_from(NUMERIC_FIELDS[fmt]))
        corrupted[i][field] = str(-data.draw(st.integers(2, 10**6)))
    elif corruption == "shuffled timestamp":
        j = data.draw(st.integers(0, len(rows) - 1).filter(lambda j: j != i), label="other row")
        corrupted[i][0], corrupted[j][0] = rows[j][0], rows[i][0]
        line = None  # the first line whose stamp goes back: i's or j's successor
    text = trace_text(fmt, corrupted)
    if corruption == "cut last line":
        start = text.rstrip("\n").rfind("\n") + 1
        text, line = text[:data.draw(st.integers(start + 1, len(text) - 1), label="cut")], len(rows)
    raw = text.encode()
    if corruption == "binary blob":
        at = data.draw(st.integers(0, len(raw)), label="offset")
        raw, line = raw[:at] + data.draw(BLOBS) + raw[at:], None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.trace"
        result = read(path, raw, fmt)
        assert isinstance(result, TraceError), f"{corruption} at line {i + 1} was read as data"
        message = str(result)
        assert "\n" not in message
        number = str(line) if line else ANY_LINE
        assert re.match(rf"^{re.escape(str(path))}: line {number}[:,] ", message), message


@SETTINGS
@given(st.sampled_from(["flashnet", "msr"]), st.booleans(), st.booleans(), st.data())
def test_formatting_noise_gives_exactly_the_clean_traces_result(fmt, crlf, blank_lines, data):
    rows = data.draw(traces(fmt), label="trace")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.trace"
        clean = read(path, trace_text(fmt, rows).encode(), fmt)
        text = trace_text(fmt, rows, "\r\n" if crlf else "\n")
        if blank_lines:
            text = text.replace("\n", "\n\n", 2)
        again = read(path, text.encode(), fmt)
        assert not isinstance(clean, Exception) and not isinstance(again, Exception), (clean, again)
        for field in ("ts_ms", "is_read", "size", "offset", "latency_us", "submit_ms", "returned"):
            np.testing.assert_array_equal(getattr(clean, field), getattr(again, field))


def test_a_real_trace_with_one_nan_latency_is_refused(tmp_path):
    """The issue's finding: admission trained on rw_60_40.490 with one latency set to nan."""
    from conftest import shared

    source = shared("flashnet_tencent/tencent.cut.per_50k.rw_60_40.490.trace.csv")
    lines = source.read_text().splitlines(keepends=True)
    fields = lines[1234].split(",")
    fields[1] = "nan"
    lines[1234] = ",".join(fields)
    path = tmp_path / "t.csv"
    path.write_text("".join(lines))
    with pytest.raises(TraceError, match=r"line 1235: flashnet field latency is 'nan', not a finite number"):
        read_trace(path)
