"""A measurement's per-interval series: fio's per-second logs read and checked, SNIA's steady-state rule, and the
series kept in the history with its measurement."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storetune.runners import Measurement, Status
from storetune.runners.series import Series, SeriesError, read_fio_logs, steady_state
from storetune.search_spaces import Config
from storetune.tuner import History


def write_log(path: Path, rows: list[tuple[int, float, int]]) -> Path:
    path.write_text("".join(f"{ms}, {value:g}, {direction}, 0, 0\n" for ms, value, direction in rows))
    return path


def test_fio_logs_are_summed_over_threads_and_directions_per_second(tmp_path):
    a = write_log(tmp_path / "series_iops.1.log", [(1004, 100, 0), (1004, 50, 1), (2004, 90, 0), (2004, 40, 1)])
    b = write_log(tmp_path / "series_iops.2.log", [(1004, 10, 0), (2004, 20, 0), (3004, 30, 0)])  # ran longer
    bw = write_log(tmp_path / "series_bw.1.log", [(1004, 1000, 0), (2004, 2000, 0)])
    write_log(tmp_path / "series_bw.2.log", [(1004, 1000, 0), (2004, 1000, 0)])
    early = write_log(tmp_path / "series_iops.3.log", [])  # a thread done before the first mark logs nothing
    s = read_fio_logs([a, b, early, bw, tmp_path / "series_bw.2.log", tmp_path / "unrelated.log"])
    # the third second: thread 1 logged the second but not it (the run ended before its mark), so it is left
    # out rather than counting thread 1 as idle
    assert s.values["ops_per_s"] == (160.0, 150.0)
    assert s.values["mb_per_s"] == pytest.approx((2000 * 1024 / 1e6, 3000 * 1024 / 1e6))
    assert s.interval_s == 1.0 and len(s) == 2 and s.seconds == 2.0
    write_log(b, [(1004, 10, 0), (2004, 20, 0), (3004, 30, 0)])
    write_log(a, [(1004, 100, 0)])  # ended in its second second: idle from then on, as fio counts it
    assert read_fio_logs([a, b]).values["ops_per_s"] == (110.0, 20.0, 30.0)


def test_a_log_line_that_does_not_parse_is_refused_naming_the_file_and_line(tmp_path):
    path = tmp_path / "series_iops.1.log"
    path.write_text("1004, 100, 0, 0, 0\n2004, lots, 0, 0, 0\n")
    with pytest.raises(SeriesError, match=r"series_iops\.1\.log: line 2: '2004, lots, 0, 0, 0' is not fio's"):
        read_fio_logs([path])
    path.write_text("1004, -5, 0, 0, 0\n")
    with pytest.raises(SeriesError, match=r"line 1: -5.0 is not a rate"):
        read_fio_logs([path])
    with pytest.raises(SeriesError, match="no per-interval IOPS log among 0 file"):
        read_fio_logs([])
    path.write_text("")  # a run interrupted before any thread's first mark
    with pytest.raises(SeriesError, match="fio logged no whole interval"):
        read_fio_logs([path])


def test_a_second_value_for_an_interval_is_refused_naming_the_line_and_a_silent_interval_is_idle(tmp_path):
    path = tmp_path / "series_iops.1.log"
    # a thread blocked for a whole window (in fsync, say) logs no line for it: that second did 0 ops
    write_log(path, [(1004, 100, 0), (2004, 90, 0), (4004, 80, 0), (5004, 80, 0)])
    other = tmp_path / "series_iops.2.log"
    write_log(other, [(1004, 10, 0), (2004, 10, 0), (3004, 10, 0), (4004, 10, 0), (5004, 10, 0)])
    assert read_fio_logs([path, other]).values["ops_per_s"] == (110.0, 100.0, 10.0, 90.0, 90.0)
    other.unlink()
    write_log(path, [(1004, 100, 0), (2004, 90, 0), (2204, 85, 0), (3004, 80, 0)])
    with pytest.raises(SeriesError, match=r"line 3: a second value for the interval of 2204 ms \(line 2 has one\)"):
        read_fio_logs([path])
    # the run's end: fio's last, partial window lands beside a whole one; it is left out, not added to it
    write_log(path, [(1004, 100, 0), (1004, 10, 1), (2004, 90, 0), (2004, 9, 1), (2350, 40, 0), (2350, 4, 1)])
    assert read_fio_logs([path]).values["ops_per_s"] == (110.0, 99.0)


def test_a_series_with_a_non_finite_value_or_uneven_metrics_is_refused_naming_the_interval():
    with pytest.raises(SeriesError, match=r"ops_per_s: interval 3 \(2-3 s\) is nan, not a finite number"):
        Series(1.0, {"ops_per_s": (1.0, 2.0, math.nan)})
    with pytest.raises(SeriesError, match="differ in length: ops_per_s 2, mb_per_s 1"):
        Series(1.0, {"ops_per_s": (1.0, 2.0), "mb_per_s": (1.0,)})
    with pytest.raises(SeriesError, match="positive number of seconds"):
        Series(0.0, {"ops_per_s": (1.0,)})
    with pytest.raises(SeriesError, match="needs interval_s"):
        Series.from_dict({"ops_per_s": [1.0]})
    with pytest.raises(SeriesError, match="holds numbers"):
        Series.from_dict({"interval_s": 1, "ops_per_s": [1.0, "2"]})


def test_steady_state_is_snia_s_rule_over_five_intervals():
    warm = [10, 50, 90, 100, 101, 99, 100, 102, 98]
    assert steady_state(warm).from_s == 2.0  # 90..101: range 11 of a mean of 98, flat enough
    assert steady_state(warm, interval_s=2.0).from_s == 4.0
    assert not steady_state([10, 20, 30, 40, 50, 60, 70]).reached  # a ramp never settles
    assert not steady_state([100, 60, 100, 60, 100, 60]).reached  # flat on average, but a 50% range
    assert not steady_state([100, 100, 100]).reached  # shorter than a window
    assert not steady_state([100, 104, 108, 112, 116]).reached  # a 15% range, but a 15% excursion: the slope
    assert steady_state([100, 104, 108, 104, 100]).reached  # the same range, no slope


def test_the_mean_of_a_prefix_after_a_warm_up_is_what_a_shorter_run_would_say():
    s = Series(1.0, {"ops_per_s": (10.0, 20.0, 30.0, 40.0)})
    assert s.mean("ops_per_s", 2) == 15.0
    assert s.mean("ops_per_s", 2, skip_s=1) == 25.0
    with pytest.raises(SeriesError, match="asks for more than the series' 4 s"):
        s.mean("ops_per_s", 4, skip_s=1)


@given(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), min_size=1, max_size=40),
       st.sampled_from([0.5, 1.0, 2.0]))
def test_a_series_comes_back_from_what_the_history_keeps(values, interval):
    s = Series(interval, {"ops_per_s": tuple(values)})
    kept = s.to_dict()
    assert Series.from_dict(kept) == s
    assert kept["steady"]["reached"] == steady_state(values, interval).reached


def test_the_history_keeps_a_measurement_s_series_and_gives_it_back(tmp_path):
    from conftest import shared
    from storetune.tuner import Campaign, CampaignSpec

    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    campaign = Campaign.create(history, CampaignSpec(runner="dataset", budget=1, runner_settings={
        "dataset": str(shared("moot_configs/BDBC.csv"))})).id
    trial = history.add_trials(campaign, [Config({"fs": "ext4"})], [1])[0]
    series = Series(1.0, {"ops_per_s": (5.0, 100.0, 101.0, 99.0, 100.0, 100.0), "mb_per_s": (1.0,) * 6})
    history.add_measurement(trial.id, 0, Measurement(Status.SUCCEEDED, {"ops_per_s": 84.2}, series=series))
    history.add_measurement(trial.id, 1, Measurement(Status.SUCCEEDED, {"ops_per_s": 80.0}))  # a runner without one
    first, second = history.trials(campaign, measurements=True)[0].measurements
    assert Series.from_dict(first.series) == series
    assert first.series["steady"] == {"reached": True, "from_s": 1.0, "rule": series.steady().rule}
    assert second.series is None


def test_the_rest_api_shows_a_measurement_s_series_with_its_steady_state():
    from storetune.api.service.schemas import MeasurementPublic
    from storetune.tuner.history.views import MeasurementView

    series = Series(1.0, {"ops_per_s": (5.0, 100.0, 101.0, 99.0, 100.0, 100.0), "mb_per_s": (1.0,) * 6})
    view = MeasurementView.of_measurement(0, Measurement(Status.SUCCEEDED, {"ops_per_s": 84.2}, series=series))
    shown = MeasurementPublic(**view.__dict__).model_dump()["series"]
    assert shown["ops_per_s"] == list(series.values["ops_per_s"]) and shown["interval_s"] == 1.0
    assert shown["steady"]["reached"] and shown["steady"]["from_s"] == 1.0
    assert MeasurementPublic(**MeasurementView.of_measurement(0, Measurement(Status.SUCCEEDED, {})).__dict__).series is None


def long_table(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "measurements.csv"
    path.write_text("fs,block_size,repeat,status,reason,ops_per_s,series:ops_per_s,series:mb_per_s\n" + "\n".join(rows) + "\n")
    return path


def test_a_long_table_s_series_columns_are_each_repeat_s_run_second_by_second(tmp_path):
    from storetune.runners import make_runner

    path = long_table(tmp_path, [
        "ext4,4096,0,SUCCEEDED,,100,90 100 110,1 1 1",
        "ext4,4096,1,SUCCEEDED,,120,110 120 130,2 2 2",
        "xfs,4096,0,SUCCEEDED,,50,80 40 30,1 1 1",
        "xfs,1024,0,SUCCEEDED,,60,,",  # a repeat measured without its series
    ])
    runner = make_runner("dataset", dataset=[str(path)])
    assert "series:ops_per_s" not in runner.table.metrics and list(runner.table.metrics) == ["ops_per_s"]
    ext4 = runner.space.validate({"fs": "ext4", "block_size": 4096})
    full = runner.run(ext4, runner.workload, seed=0)
    assert full.series is not None and full.metrics["ops_per_s"] in (100, 120)
    short = runner.measure_at(ext4, runner.workload, seed=0, seconds=1, skip_s=1)  # the same repeat, its 2nd second
    assert short.metrics == {"ops_per_s": full.series.values["ops_per_s"][1], "mb_per_s": full.series.values["mb_per_s"][1]}
    assert short.duration_s == 1 and short.env["run_length_s"] == 1
    # a fast start is not a fast run: the 1 s prefix ranks xfs above ext4, the whole run does not
    xfs = runner.space.validate({"fs": "xfs", "block_size": 4096})
    assert runner.measure_at(xfs, runner.workload, seed=0, seconds=1).metrics["ops_per_s"] == 80
    assert runner.measure_at(xfs, runner.workload, seed=0, seconds=3).metrics["ops_per_s"] == 50
    no_series = runner.measure_at(runner.space.validate({"fs": "xfs", "block_size": 1024}), runner.workload, seed=0,
                                  seconds=1)
    assert no_series.status is Status.FAILED and "keeps no per-interval series" in no_series.reason
    too_long = runner.measure_at(ext4, runner.workload, seed=0, seconds=3, skip_s=1)
    assert too_long.status is Status.FAILED and "asks for more than the series' 3 s" in too_long.reason


def test_a_series_cell_that_is_not_numbers_is_refused_naming_the_line_and_interval(tmp_path):
    from storetune.runners.tables import DatasetError, load_table

    with pytest.raises(DatasetError, match=r"measurements\.csv: line 3: series:ops_per_s: interval 2 is 'inf', not a finite number"):
        load_table([long_table(tmp_path, ["ext4,4096,0,SUCCEEDED,,100,90 100,1 1", "xfs,4096,0,SUCCEEDED,,50,80 inf,1 1"])])
    with pytest.raises(DatasetError, match=r"line 2: a series' metrics differ in length: ops_per_s 2, mb_per_s 1"):
        load_table([long_table(tmp_path, ["ext4,4096,0,SUCCEEDED,,100,90 100,1", "xfs,4096,0,SUCCEEDED,,50,80 70,1 1"])])
