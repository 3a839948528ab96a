"""Reading exhaustive tables: formats, one-hot groups, repeats, setup columns, and bad files."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import shared
from storetune.runners import Status
from storetune.runners.tables import DatasetError, TableWarning, load_table
from storetune.search_spaces import Config, Kind


def write(path: Path, text: str) -> Path:
    path.write_text(text.strip() + "\n")
    return path


def test_moot_objective_direction_and_one_hot_groups():
    table = load_table(shared("moot_configs/BDBC.csv"))
    assert table.format == "moot" and table.metrics == {"PERF": "min"}
    ps = table.space["pS"]
    assert ps.kind is Kind.CATEGORICAL and ps.values == ("1K", "4K", "8K", "16K", "32K")
    assert table.space["cS"].values == ("32MB", "16MB", "64MB", "512MB")
    assert "pS1K" not in table.space
    assert table.space.cardinality() == 2560 == len(table.repeats)


def test_repeats_are_grouped_and_their_mean_is_the_ground_truth():
    table = load_table(shared("moot_configs/PostgreSQL.csv"))
    assert table.space.cardinality() == 864
    assert {len(r) for r in table.repeats.values()} == {22}
    assert "root" not in table.space  # a constant column is not a knob
    means = table.means("Performance")
    config = next(iter(table.repeats))
    assert means[config] == pytest.approx(float(np.mean(table.repeats[config][:, 0])))


def test_repeat_noise_is_the_coefficient_of_variation_and_the_ranking_against_itself(tmp_path: Path):
    rows = ["x,repeat,ops"] + [f"{x},{r},{v}" for x, vs in enumerate([(100, 110), (200, 180), (300, 330), (50, 50)])
                               for r, v in enumerate(vs)] + ["9,0,70"]  # measured once: no spread to read
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "long", "metrics": {"ops": "max"}}))
    write(tmp_path / "measurements.csv", "\n".join(rows))
    noise = load_table(tmp_path).noise("ops")
    cvs = sorted([np.std(v, ddof=1) / np.mean(v) for v in [(100, 110), (200, 180), (300, 330), (50, 50)]])
    assert noise["configurations"] == 4 and noise["median_cv"] == pytest.approx(np.median(cvs), abs=1e-4)
    assert noise["p90_cv"] == pytest.approx(np.quantile(cvs, 0.9), abs=1e-4) and noise["repeat_spearman"] == 1.0
    assert load_table(shared("moot_configs/BDBC.csv")).noise("PERF") == {"metric": "PERF", "configurations": 0}


def test_optional_one_hot_group_gets_a_none_value():
    table = load_table(shared("moot_configs/SQL_AllMeasurements.csv"))
    assert table.space["sQLITE_TEMP_STORE"].values == ("zero", "one", "two", "three", "none")


def test_atc18_subset_needs_its_setup_pinned():
    folder = shared("cao_atc18_subset")
    with pytest.raises(DatasetError, match="'workload_id' describes the setup.*`context` workload_id=<value>"):
        load_table(folder)
    table = load_table(folder, {"workload_id": "4", "disk_type": "3"})
    assert table.context == {"workload_id": 4, "machine_id": 6, "disk_type": 3}
    assert set(table.space.names) == {"file_system", "io_scheduler", "block_size", "bg_count", "inode_size"}
    assert table.space["io_scheduler"].values == ("cfq", "deadline", "noop")  # codes spelled out
    assert table.metrics == {"throughput": "max"}


def test_a_context_value_that_is_absent_lists_the_present_ones():
    with pytest.raises(DatasetError, match="workload_id=9: not in the table; values: 1, 4"):
        load_table(shared("cao_atc18_subset"), {"workload_id": 9, "disk_type": 3})


def test_long_format_with_failures_and_a_manifest(tmp_path: Path):
    write(
        tmp_path / "measurements.csv",
        """
workload,fs,block_size,repeat,status,reason,throughput_ops,latency_p99_us
fileserver,ext4,4096,0,SUCCEEDED,,1000,900
fileserver,ext4,4096,1,SUCCEEDED,,1100,950
fileserver,xfs,4096,0,SUCCEEDED,,1500,700
fileserver,xfs,1024,0,INVALID,mkfs.xfs: block size 1024 too small,,
varmail,ext4,4096,0,SUCCEEDED,,300,2000
""",
    )
    (tmp_path / "manifest.json").write_text(json.dumps({"files": ["measurements.csv"], "metrics": {"throughput_ops": "max"}}))
    table = load_table(tmp_path, {"workload": "fileserver"})
    assert table.format == "long"
    assert table.metrics == {"throughput_ops": "max", "latency_p99_us": "min"}
    assert table.repeats[Config(fs="ext4", block_size=4096)].tolist() == [[1000, 900], [1100, 950]]
    assert table.outcomes[Config(fs="xfs", block_size=1024)] == (Status.INVALID, "mkfs.xfs: block size 1024 too small")
    assert table.workload.params["context"] == {"workload": "fileserver"}


def test_plain_table_needs_its_metric_named(tmp_path: Path):
    path = write(tmp_path / "t.csv", "a,b,PERF\n1,2,3.5\n2,2,4.5")
    with pytest.raises(DatasetError, match="name it with `metric`"):
        load_table(path)
    assert load_table(path, metric="PERF").metrics == {"PERF": None}


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "the file is empty"),
        ("a,b,PERF-", "the table has a header but no rows"),
        ("a,b,PERF-\n1,2,3\n1,2,3,4\n", "line 3: 4 fields where the header has 3"),
        ("a,b,PERF-\n1,2,3\n1,3,fast\n", "line 3: metric 'PERF' is 'fast', not a number"),
        # the issue's findings: a short row, text in a number column, non-finite values, binary
        ("a,b,PERF-\n1,2,3\n2,3\n", "line 3: 2 fields where the header has 3"),
        ("a,PERF-,b\n1,2,3\n2,3\n", "line 3: 2 fields where the header has 3"),
        ("a,b,PERF-\n1,2,3\n1,3,4\nx,2,5\n", "line 4: column 'a' is 'x', but the column holds numbers"),
        ("a,b,PERF-\n1,2,3\n1,3,inf\n", "line 3: column 'PERF' is 'inf', not a finite number"),
        ("a,b,PERF-\n1,2,3\n1,3,NaN\n", "line 3: column 'PERF' is 'NaN', not a finite number"),
        ("a,b,PERF-\n1,2,3\n1,,4\n", "line 3: column 'b' is empty"),
        ("a,b,PERF-\n1,2,3\n1,\x00,4\n", "line 3: not text \\(character 0x00\\)"),
        ("a,b,PERF-\n1,2,3\n\n1,3,4\xff\n", "line 4: not text \\(byte 0xff\\)"),
        ("a,a,PERF-\n1,2,3\n", "line 1: two columns are named 'a'"),
    ],
)
def test_malformed_tables_say_which_file_and_line(tmp_path: Path, text: str, message: str):
    path = tmp_path / "bad.csv"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text else text.encode("latin-1"))
    with pytest.raises(DatasetError, match=f"^{path}: {message}") as raised:
        load_table(path)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "text, message",
    [  # the review's findings in the long format
        ("a,b,repeat,ops\n1,,0,7\n1,x,0,8\n2,,0,9\n", "line 2: column 'b' is empty"),  # no space to say it is n/a
        ("a,repeat,ops\n1,0,7\n2,0,8\n1,0,9\n", "line 4: the same configuration and repeat as line 2"),
        ("a,repeat,ops\n1,x,7\n", "line 2: column 'repeat' is 'x', not a count from 0"),
        ("a,PERF,PERF-\n1,2,3\n", "line 1: columns 'PERF' and 'PERF-' would both be named 'PERF'"),
        ("a,PERF-,PERF+\n1,2,3\n2,3,4\n",  # was a TypeError traceback
         "line 1: columns 'PERF-' and 'PERF\\+' would both be the objective 'PERF', minimised and maximised"),
    ],
)
def test_long_tables_are_checked_too(tmp_path: Path, text: str, message: str):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(DatasetError, match=f"^{path}: {message}"):
        load_table(path)


def test_a_table_with_nothing_to_tune_and_a_table_named_twice_are_refused(tmp_path: Path):
    """Found by a helper's trial: a one-configuration table ran a campaign whose best configuration was
    empty; the same file given twice looked like every configuration measured twice in two files."""
    one = write(tmp_path / "one.csv", "a,b,PERF-\n1,2,3\n1,2,4\n")
    with pytest.raises(DatasetError, match=fr"^{one}: no option column varies \(1 distinct configuration\(s\) over "
                                           r"a, b\): nothing to tune$"):
        load_table(one)
    two = write(tmp_path / "two.csv", "a,PERF-\n1,3\n2,4\n")
    with pytest.raises(DatasetError, match=fr"^{two}: named twice as a dataset: give each file or folder once$"):
        load_table([two, tmp_path / "." / "two.csv"])
    assert load_table([two]).space.cardinality() == 2


def test_a_manifest_direction_is_min_or_max(tmp_path: Path):
    write(tmp_path / "m.csv", "a,repeat,ops\n1,0,7\n2,0,8")
    (tmp_path / "manifest.json").write_text(json.dumps({"metrics": {"ops": "up"}}))
    with pytest.raises(DatasetError, match="metric 'ops' has direction 'up'; a direction is min or max"):
        load_table(tmp_path)


def test_a_configuration_that_never_measured_the_metric_has_no_mean(tmp_path: Path):
    """A SUCCEEDED row with an empty metric gave a NaN mean: no near-optimal set, a rank against NaN."""
    path = write(tmp_path / "t.csv", "a,status,repeat,reason,ops\n1,SUCCEEDED,0,,\n2,SUCCEEDED,0,,10\n3,SUCCEEDED,0,,5")
    table = load_table(path)
    assert table.space.names == ["a"]  # status is not an option, wherever it stands
    assert table.means("ops") == {Config(a=2): 10.0, Config(a=3): 5.0}


def test_a_short_row_in_a_wide_table_is_an_error_not_a_nan_configuration(tmp_path: Path):
    path = write(tmp_path / "t.csv", "a,PERF,b\n1,3,1\n2,1")  # the issue: {"a": 2, "b": NaN} won
    with pytest.raises(DatasetError, match="line 3: 2 fields"):
        load_table(path, metric="PERF")


def test_a_last_line_without_newline_is_read_with_a_warning(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text("a,PERF-\n1,2\n2,3")
    with pytest.warns(UserWarning, match="line 3, the last, has no newline"):
        table = load_table(path)
    assert table.means("PERF") == {Config(a=1): 2.0, Config(a=2): 3.0}


def test_files_that_measured_the_same_configurations_are_repeats_with_a_warning(tmp_path: Path):
    """Two different tables passed together would otherwise be compared as one, averaged, in silence;
    a table whose rows are split across files is read without a word."""
    first = write(tmp_path / "first.csv", "a,b,PERF-\n1,1,2\n1,2,3\n2,1,4")
    second = write(tmp_path / "second.csv", "a,b,PERF-\n1,1,8\n2,2,5")
    with pytest.warns(UserWarning, match=r"1 of 4 configurations appear in more than one of first.csv, second.csv: "
                                         r"their rows are read as repeats of one table"):
        table = load_table([first, second])
    assert table.means("PERF")[Config(a=1, b=1)] == 5.0 and len(table.repeats[Config(a=1, b=1)]) == 2
    split = write(tmp_path / "rest.csv", "a,b,PERF-\n2,2,5")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_table([first, split]).repeats) == 4


def test_every_signed_column_of_a_moot_table_is_an_objective():
    path = shared("moot_configs/SS-A.csv")
    with pytest.raises(DatasetError, match=r"2 objectives \(Throughput\+, Latency-\): choose one with `metric`"):
        load_table(path)
    table = load_table(path, metric="Latency")
    assert table.metrics == {"Latency": "min", "Throughput": "max"}
    assert set(table.space.names) == {"Spout_wait", "Spliters", "Counters"}
    assert table.default_metric == "Latency"
    ss_o = load_table(shared("moot_configs/SS-O.csv"), metric="Performance")
    assert "Performance" not in ss_o.space and ss_o.metrics == {"Performance": "min", "Cpu": "min"}


def test_a_sweeps_folder_is_named_after_the_folder_and_its_workload(tmp_path: Path):
    folder = tmp_path / "my-sweep"
    folder.mkdir()
    write(folder / "measurements.csv", "workload,fs,repeat,throughput_ops\nfileserver,ext4,0,10\nfileserver,xfs,0,12")
    table = load_table(folder, {"workload": "fileserver"})
    assert table.name == table.space.name == "my-sweep"
    assert table.workload.name == "fileserver"


def test_tables_must_share_a_header(tmp_path: Path):
    a = write(tmp_path / "a.csv", "x,PERF-\n1,2")
    b = write(tmp_path / "b.csv", "y,PERF-\n1,2")
    with pytest.raises(DatasetError, match="columns differ"):
        load_table([a, b])


def test_the_workload_fingerprint_follows_the_content(tmp_path: Path):
    path = write(tmp_path / "t.csv", "a,PERF-\n1,2\n2,3")
    before = load_table(path).workload.fingerprint()
    write(path, "a,PERF-\n1,2\n2,4")
    assert load_table(path).workload.fingerprint() != before


def test_a_table_is_read_once_per_process_until_its_file_changes(tmp_path):
    """The service checks each request against its table: it reads it once, and again once the file changed;
    the warnings of the read come again with every load."""
    path = tmp_path / "t.csv"
    path.write_text("a,b,PERF+\n1,x,3\n2,y,4\n2,y,5\n2,x,6")  # a last line without its newline warns
    with pytest.warns(TableWarning, match="no newline"):
        first = load_table(path)
    with pytest.warns(TableWarning, match="no newline"):
        assert load_table(path) is first
    path.write_text("a,b,PERF+\n1,x,3\n2,y,4\n2,y,5\n2,x,7\n")
    again = load_table(path)
    assert again is not first and sorted(again.means("PERF").values()) == [3.0, 4.5, 7.0]


def test_a_column_that_numbers_the_rows_is_refused_and_can_be_left_out(tmp_path: Path):
    rows = [f"{i},{i % 2},{i % 5},{10.0 + (i % 2) + (i % 5)}" for i in range(40)]
    path = write(tmp_path / "with_id.csv", "run,a,b,Time-\n" + "\n".join(rows))
    with pytest.raises(DatasetError) as refused:
        load_table(path)
    said = str(refused.value)
    assert "column 'run' has a different whole number in each of its 40 rows" in said and "leave it out with `drop` run" in said
    assert "\n" not in said
    table = load_table(path, drop=["run"])
    assert "run" not in table.space and table.space.cardinality() == 10 and table.dropped == ("run",)
    assert {len(r) for r in table.repeats.values()} == {4}  # rows that differed only in their id: repeats
    with pytest.raises(DatasetError, match="`drop` nope: no such option column"):
        load_table(path, drop=["nope"])


def test_a_sampled_knob_with_some_values_shared_is_a_knob_not_an_id(tmp_path: Path):
    rng = np.random.default_rng(3)
    knob = rng.integers(0, 5000, size=300)  # a many-valued knob sampled at random: some values recur
    assert len(set(knob)) < len(knob)
    rows = [f"{k},{i % 3},{1.0 + k / 5000 + i % 3}" for i, k in enumerate(knob)]
    table = load_table(write(tmp_path / "sampled.csv", "read_ahead,c,Time-\n" + "\n".join(rows)))
    assert table.space["read_ahead"].kind is Kind.ORDINAL and len(table.space["read_ahead"].values) == len(set(knob))
    low, high, n = min(knob), max(knob), len(set(knob))
    assert table.space["read_ahead"].describe_domain().endswith(f", ..., {high} ({n:,} values, in order)")
    assert table.space["read_ahead"].describe_domain().startswith(f"{low}, ")


def test_a_sampled_table_says_how_much_of_its_grid_it_holds_in_spaces_and_the_report(tmp_path: Path):
    from conftest import run_cli
    from storetune.api.report.tables import campaign_tables
    from storetune.tuner import Campaign, CampaignSpec, History
    from storetune.tuner.analysis.report import campaign_data

    grid = [(a, b, c) for a in range(4) for b in range(5) for c in range(6)]
    rows = [f"{a},{b},{c},{1.0 + a + b / 10 + c / 100}" for a, b, c in grid]
    full = write(tmp_path / "full.csv", "a,b,c,Time-\n" + "\n".join(rows))
    kept = [r for r, (a, b, c) in zip(rows, grid) if (a + b + c) % 4 == 0]  # every value of each, 30 of the 120
    sample = write(tmp_path / "sample.csv", "a,b,c,Time-\n" + "\n".join(kept))
    assert load_table(full).space.holding() == "120 configurations, the whole grid of its parameters' values"
    said = load_table(sample).space.holding()
    assert said.startswith("30 configurations, 25% of the 120 combinations") and "a sample" in said
    shown = run_cli("spaces", "--dataset", str(sample), check=True).stdout
    assert "The table holds 30 configurations, 25% of the 120 combinations" in " ".join(shown.split())
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    spec = CampaignSpec(runner="dataset", runner_settings={"dataset": [str(sample)]}, algorithm="random", budget=5)
    summary = Campaign.create(history, spec).run()
    data = campaign_data(history, summary.campaign)
    assert data["holds"] == {"configurations": 30, "grid": 120}
    assert "<th>table holds</th><td>30 configurations, 25% of the 120 combinations" in campaign_tables(data)


def test_a_table_space_s_fingerprint_is_its_definition_and_members_not_its_coverage():
    """The coverage kept with a campaign's space is not hashed: the fingerprints of campaigns recorded before it
    was kept still match (these two were recorded by StoreTune before it)."""
    for name, recorded in (("Apache_AllMeasurements", "6e8808e3da0970a6"), ("BDBC", "5ea581b6ea6242b8")):
        space = load_table(shared(f"moot_configs/{name}.csv")).space
        assert "holds" in space.to_dict() and space.fingerprint() == recorded
