"""Which parameters matter: the ATC'18 OLS, type-II ANOVA shares and a forest's variance shares,
on data whose effects are known, and on a replayed table against the whole table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli, shared
from storetune.tuner import History
from storetune.tuner.analysis.importance import NA, common_values, importance, required_trials


def known_effects(n: int = 400, seed: int = 0) -> tuple[list[dict], list[float]]:
    """a matters most (x: +10, z: +5 over y), b linearly by level (2 per step), the conditional child
    (only when a=x) by 3 for k, r a numeric slope of 0.05, and c not at all; noise sd 1."""
    rng = np.random.default_rng(seed)
    configs, values = [], []
    for _ in range(n):
        c = {"a": str(rng.choice(["x", "y", "z"])), "b": int(rng.integers(0, 4)), "c": str(rng.choice(["p", "q"])),
             "r": float(rng.uniform(0, 100))}
        if c["a"] == "x":
            c["child"] = str(rng.choice(["k", "l"]))
        v = {"x": 10, "y": 0, "z": 5}[c["a"]] + 2 * c["b"] + 0.05 * c["r"] + (3 if c.get("child") == "k" else 0)
        configs.append(c)
        values.append(v + float(rng.normal(0, 1)))
    return configs, values


NAMES = ["a", "b", "c", "r", "child"]


def test_both_methods_find_the_known_effects_and_the_coefficients_are_right():
    configs, values = known_effects()
    result = importance(configs, values, NAMES)
    by_name = {p.name: p for p in result.parameters}
    assert result.ranking("anova")[-1] == "c" and result.ranking("forest")[-1] == "c"  # c does nothing
    assert by_name["c"].anova_share < 0.01 and by_name["c"].anova_p > 0.05
    assert set(result.ranking("anova")[:2]) == {"a", "child"}  # the two that carry a's condition
    assert by_name["b"].anova_p < 1e-10 and by_name["r"].anova_p < 1e-10
    assert result.r_squared > 0.9 and result.forest_r2 > 0.8

    b = {c.level: c for c in by_name["b"].coefficients}  # against b's most frequent level
    baseline = int(by_name["b"].baseline)
    for level, coefficient in b.items():
        assert coefficient.estimate == pytest.approx(2 * (int(level) - baseline), abs=0.5)
        assert coefficient.ci_low < coefficient.estimate < coefficient.ci_high
    (slope,) = by_name["r"].coefficients
    assert by_name["r"].kind == "numeric" and slope.level == "slope" and slope.estimate == pytest.approx(0.05, abs=0.01)
    # child is inactive where a != x: its own level n/a, and x's effect plus child's recovers the truth
    child = by_name["child"]
    assert child.baseline == NA and child.levels == 3
    a = {by_name["a"].baseline: 0.0, **{c.level: c.estimate for c in by_name["a"].coefficients}}
    k = {c.level: c.estimate for c in child.coefficients}["k"]
    assert a["x"] - a["y"] + k == pytest.approx(13, abs=0.6)  # a=x (+10) with child=k (+3), against a=y


def test_a_parameter_that_decides_everything_has_a_forest_share_of_at_most_one():
    """The forest's marginals average over a sample of rows: one parameter deciding all came out at 1.0014."""
    rng = np.random.default_rng(0)
    configs = [{"a": str(rng.choice(["x", "y", "z"])), "b": int(rng.integers(0, 4)), "c": str(rng.choice(["p", "q"]))}
               for _ in range(int(rng.integers(30, 600)))]
    values = [{"x": 0, "y": 10, "z": 3}[c["a"]] + 0.01 * c["b"] for c in configs]
    result = importance(configs, values, ["a", "b", "c"], seed=0)
    assert result.ranking("forest")[0] == "a"
    assert all(0 <= p.forest_share <= 1 for p in result.parameters)
    assert max(p.forest_share for p in result.parameters) > 0.99


def test_a_forest_that_predicts_worse_than_the_mean_is_flagged_not_trusted():
    configs, values = known_effects(n=120, seed=1)
    assert importance(configs, values, NAMES).to_dict()["forest_caution"] is None
    noise = list(np.random.default_rng(1).normal(size=len(values)))  # nothing to learn
    result = importance(configs, noise, NAMES)
    assert result.forest_r2 < 0
    assert result.to_dict()["forest_caution"] == (
        f"the forest predicts worse than the trials' mean (out-of-bag R^2 {result.forest_r2:.2f}): its shares "
        "describe noise, not the objective; read the ANOVA shares")


def test_a_numeric_parameter_inactive_under_its_condition_gets_its_own_n_a_level():
    rng = np.random.default_rng(3)
    configs, values = [], []
    for _ in range(300):
        c = {"fs": str(rng.choice(["ext4", "xfs"]))}
        if c["fs"] == "xfs":
            c["agcount"] = float(rng.uniform(0, 100))  # only xfs has it: n/a elsewhere
        configs.append(c)
        values.append((20.0 + 0.1 * c["agcount"] if "agcount" in c else 5.0) + float(rng.normal(0, 0.5)))
    result = importance(configs, values, ["fs", "agcount"])
    agcount = {p.name: p for p in result.parameters}["agcount"]
    assert agcount.kind == "numeric"
    levels = {c.level: c for c in agcount.coefficients}
    assert set(levels) == {"slope", NA}  # the slope among xfs, and inactive against active
    assert levels["slope"].estimate == pytest.approx(0.1, abs=0.01)
    assert result.r_squared > 0.95


def test_too_few_trials_says_how_many_are_needed():
    # a: 3 levels (2 coefficients), b: 4 (3), c: 2 (1), r: a slope (1), child: k, l, n/a (2), the intercept,
    # and one more (pandas 3 stores strings as 'str', not object: counting them as one column each was wrong)
    assert required_trials(known_effects()[0], NAMES) == 11
    configs, values = known_effects(n=6)
    needed = required_trials(configs, NAMES)
    with pytest.raises(ValueError, match=f"needs at least {needed} successful trials .* there are 6"):
        importance(configs, values, NAMES)


def test_a_parameter_with_one_value_is_constant_not_an_error():
    configs, values = known_effects(n=120)
    for c in configs:
        c["pinned"] = "on"
    result = importance(configs, values, [*NAMES, "pinned"])
    assert result.constant == ["pinned"] and "pinned" not in result.ranking()


def test_what_the_near_optimal_configurations_have_in_common():
    everything = [{"fs": "xfs"}, {"fs": "xfs"}, {"fs": "ext4"}, {"fs": "ext4"}, {"fs": "btrfs"}, {}]
    near = [{"fs": "xfs"}, {"fs": "xfs"}]
    (top, *rest) = common_values(near, everything, ["fs"])["fs"]
    assert (top["value"], top["near_optimal"], top["all"], top["lift"]) == ("xfs", 2, 2, 3.0)
    assert {r["value"]: r["near_optimal"] for r in rest} == {"ext4": 0, "btrfs": 0, NA: 0}


@pytest.mark.slow
def test_storetune_importance_on_a_replayed_table_compares_with_the_whole_table(sqlite_url, bdbc):
    campaign = json.loads(run_cli("tune", "--dataset", str(bdbc), "--budget", "80", "--seed", "2", "--json",
                                  db=sqlite_url, check=True).stdout.splitlines()[-1])["campaign"]
    result = json.loads(run_cli("importance", str(campaign), "--json", db=sqlite_url, check=True).stdout)
    shares = [p["anova_share"] for p in result["parameters"]]
    assert shares == sorted(shares, reverse=True) and result["trials"] == 80
    assert result["objective"] == {"metric": "PERF", "direction": "min"}
    # BDBC's whole table: encryption and the page size dominate
    assert result["table"]["configurations"] == 2560 and set(result["table"]["ranking"][:2]) == {"hAVE_CRYPTO", "pS"}
    assert -1 <= result["table"]["rank_agreement"] <= 1
    table = run_cli("importance", str(campaign), db=sqlite_url, check=True).stdout
    assert "the two rankings agree at Spearman" in table and "its Spearman agreement with this campaign's" in table

    missing = run_cli("importance", "999", db=sqlite_url)
    assert missing.returncode == 2 and missing.stderr.strip() == f"error: no campaign 999 in {sqlite_url}"
    few = json.loads(run_cli("tune", "--dataset", str(bdbc), "--budget", "5", "--json", db=sqlite_url,
                             check=True).stdout.splitlines()[-1])["campaign"]
    short = run_cli("importance", str(few), db=sqlite_url)
    assert short.returncode == 2 and "needs at least" in short.stderr and "there are 5" in short.stderr


def test_importance_of_a_pinned_campaign_is_checked_against_the_configurations_it_searched(sqlite_url, bdbc):
    """With --fix, the ground truth is the table's configurations with the pins, not the whole table
    (where the pinned option, encryption, dominates and no campaign holding it fixed can agree)."""
    campaign = json.loads(run_cli("tune", "--dataset", str(bdbc), "--budget", "40", "--seed", "1", "--fix",
                                  "hAVE_CRYPTO=0", "--json", db=sqlite_url, check=True).stdout.splitlines()[-1])["campaign"]
    result = json.loads(run_cli("importance", str(campaign), "--json", db=sqlite_url, check=True).stdout)
    table = result["table"]
    assert table["configurations"] == 1280 and table["fixed"] == {"hAVE_CRYPTO": 0}
    assert "hAVE_CRYPTO" not in table["ranking"] and table["ranking"][0] == "pS"
    shown = run_cli("importance", str(campaign), db=sqlite_url, check=True).stdout
    assert "1280 configurations with hAVE_CRYPTO=0" in " ".join(shown.split())


def test_the_report_says_when_its_importance_chart_shows_only_some_parameters(sqlite_url, tmp_path):
    """SQL_AllMeasurements has 39 options; the chart draws 15, and used to say nothing of the other 24."""
    table = shared("moot_configs/SQL_AllMeasurements.csv")
    campaign = json.loads(run_cli("tune", "--dataset", str(table), "--algorithm", "random", "--budget", "60", "--json",
                                  db=sqlite_url, check=True).stdout.splitlines()[-1])["campaign"]
    count = len(json.loads(run_cli("importance", str(campaign), "--json", db=sqlite_url, check=True).stdout)["parameters"])
    assert count > 15
    run_cli("report", str(campaign), "--out", str(tmp_path / "r.html"), db=sqlite_url, check=True)
    assert (f"Which parameters matter (the 15 of {count} with the largest ANOVA share; storetune importance lists "
            "all)") in (tmp_path / "r.html").read_text()


def test_the_report_says_its_line_is_the_incumbent_under_adaptive_repeats_and_shows_the_pins(sqlite_url, tmp_path):
    """With --max-repeats the line is the incumbent, which rises on a minimisation when a re-measurement shows
    a lucky configuration (a newcomer read it as a bug); a --fix campaign's report did not show its pins."""
    table = shared("moot_configs/PostgreSQL.csv")
    raced = json.loads(run_cli("tune", "--dataset", str(table), "--budget", "30", "--max-repeats", "3", "--seed", "1",
                               "--json", db=sqlite_url, check=True).stdout.splitlines()[-1])["campaign"]
    run_cli("report", str(raced), "--out", str(tmp_path / "raced.html"), db=sqlite_url, check=True)
    page = (tmp_path / "raced.html").read_text()
    assert "The line is the incumbent (adaptive repeats): the best mean among the configurations measured the most" \
        in page and '"name":"incumbent"' in page.replace(": ", ":")
    pinned = json.loads(run_cli("tune", "--dataset", str(shared("moot_configs/BDBC.csv")), "--budget", "10",
                                "--fix", "pS=4K", "--json", db=sqlite_url, check=True).stdout.splitlines()[-1])["campaign"]
    run_cli("report", str(pinned), "--out", str(tmp_path / "pinned.html"), db=sqlite_url, check=True)
    page = (tmp_path / "pinned.html").read_text()
    assert "BDBC / BDBC, pinned: pS=4K" in page and "The line is the incumbent" not in page


def test_report_bad_input_is_one_line_and_an_empty_campaign_still_renders(sqlite_url, tmp_path):
    History(sqlite_url).close()  # a history with no campaign (a reader refuses a file that does not exist)
    missing = run_cli("report", "999", "--out", str(tmp_path / "r.html"), db=sqlite_url)
    assert missing.returncode == 2 and missing.stderr.strip() == f"error: no campaign 999 in {sqlite_url}"
    missing = run_cli("report", "--comparison", "7", "--out", str(tmp_path / "r.html"), db=sqlite_url)
    assert missing.returncode == 2 and missing.stderr.strip() == f"error: no comparison 7 in {sqlite_url}"
    both = run_cli("report", "5", "--comparison", "7", db=sqlite_url)  # was "report needs a campaign id"
    assert both.returncode == 2 and both.stderr.strip() == "error: report one thing: campaign 5 or --comparison 7, not both"
    neither = run_cli("report", db=sqlite_url)
    assert neither.returncode == 2 and neither.stderr.strip() == "error: report needs a campaign id, or --comparison ID"
    # a benchmark that always fails: every trial FAILED, and the report says why it is empty
    failing = tmp_path / "bench.sh"
    failing.write_text("#!/bin/sh\necho 'disk on fire' >&2\nexit 3\n")
    failing.chmod(0o755)
    campaign = json.loads(run_cli("tune", "--runner", "command", "--command", str(failing), "--space", "storage_v1",
                                  "--metric", "ops", "--direction", "max", "--budget", "3", "--json",
                                  db=sqlite_url, check=True).stdout.splitlines()[-1])["campaign"]
    out = tmp_path / "empty.html"
    run_cli("report", str(campaign), "--out", str(out), db=sqlite_url, check=True)
    text = out.read_text()
    assert "This report is empty: no trial succeeded" in text and "disk on fire" in text


def test_a_long_campaign_s_values_are_binned_on_the_server_and_its_lines_are_svg():
    """Past INSTANT_POINTS evaluations the report draws bins (minimum, median, maximum), not a dot each;
    the parallel-coordinates lines are SVG scatter lines by band of rank, plotly's WebGL parcoords one click away."""
    from storetune.api.report.page import _parallel_lines, campaign_figures
    from storetune.tuner.analysis.report import INSTANT_POINTS, _instant, _parallel

    n = 10 * INSTANT_POINTS + 7
    evaluations, elapsed = list(range(1, n + 1)), [float(i) for i in range(n)]
    size = _instant(evaluations, [0.0] * n, elapsed)["bin"]
    values: list[float | None] = [float(i % 100) for i in range(n)]
    values[:size] = [None] * size  # the first bin failed entirely
    binned = _instant(evaluations, values, elapsed)
    assert size > 1 and len(binned["median"]) == -(-n // size) <= INSTANT_POINTS // 2 + 1
    assert binned["low"][0] is None and binned["median"][0] is None  # no value in it: a gap, not a zero
    second = values[size:2 * size]
    assert (binned["low"][1], binned["high"][1]) == (min(second), max(second))  # type: ignore[type-var]
    assert binned["median"][1] == float(np.median(second)) and binned["evaluation"][1] == 2 * size
    assert binned["evaluation"][-1] == n and binned["elapsed_s"][-1] == n - 1
    small = _instant([1, 2], [3.0, None], [0.0, 1.0])
    assert small == {"bin": 1, "evaluation": [1, 2], "elapsed_s": [0.0, 1.0], "value": [3.0, None]}

    class Trial:
        def __init__(self, i: int):
            self.config = {"fs": ["ext4", "xfs"][i % 2], "flag": i % 2, "size": float(i)}
            self.value = float(i + 1)

    par = _parallel([Trial(i) for i in range(40)], ["fs", "flag", "size"], seed=0, direction="min")
    assert _parallel([Trial(i) for i in range(40)], ["fs"], seed=0, direction="max")["rank"][39] == 1 / 40
    fig = _parallel_lines(par, "latency", False, "t")
    bands = [t for t in fig.data if t.mode == "lines"]
    assert [t.name for t in bands] == ["worst 50% (20)", "next 25% (10)", "next 15% (6)", "best 10% (4)"]
    best = bands[-1]  # drawn last, on top: the four lowest latencies, each line across all four axes
    assert len(best.x) == 4 * 5 and list(best.y[:4]) == [0.0, 0.0, 0.0, 0.0]  # trial 0: ext4, 0, smallest, best
    ticks = next(t for t in fig.data if t.mode == "text")
    assert ["0", "1"] == [label for x, label in zip(ticks.x, ticks.text) if x == 1]  # a flag: its values only
    data = {"objective": {"metric": "latency", "direction": "min"}, "log_scale": False, "parallel": par,
            "convergence": {"evaluation": [1], "best": [1.0], "elapsed_s": [0.0]}, "instant": small,
            "statuses": {"counts": {"SUCCEEDED": 40}}, "importance": {"error": "too few"}}
    parallel = campaign_figures(data)["parallel"]
    assert parallel["alternate"]["figure"]["data"][0]["type"] == "parcoords"


def test_importance_of_a_campaign_over_several_metrics_is_not_compared_with_one_metrics_means(sqlite_url):
    """It crashed: "ValueError: 'pareto:Throughput,Latency' is not in list" (the table's means are per metric)."""
    table = shared("moot_configs/SS-J.csv")
    campaign = json.loads(run_cli("tune", "--dataset", str(table), "--objective", "pareto:Throughput,Latency",
                                  "--budget", "60", "--seed", "1", "--json", db=sqlite_url,
                                  check=True).stdout.splitlines()[-1])["campaign"]
    result = json.loads(run_cli("importance", str(campaign), "--json", db=sqlite_url, check=True).stdout)
    assert result["trials"] == 60 and "a score of several" in result["table"]["error"]
