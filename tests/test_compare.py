"""The offline comparison: figures, the history it writes, the seam it runs through, bad input."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from storetune.tuner import History
from storetune.tuner.search.compare import Comparison, CompareSpec, Variant
from storetune.tuner.execution.local import LocalExecutor, ProcessExecutor


@pytest.fixture
def bowl(tmp_path: Path) -> Path:
    """128 configurations with one optimum (a=5, b=2, c=x): near-optimal within 1% is that one alone."""
    rows = ["a,b,c,PERF-"]
    for a in range(8):
        for b in range(8):
            for c in "xy":
                rows.append(f"{a},{b},{c},{(a - 5) ** 2 + (b - 2) ** 2 + 3 * (c == 'y') + 1}")
    path = tmp_path / "bowl.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def spec(path: Path, variants: str, **kw) -> CompareSpec:
    return CompareSpec(runner_settings={"dataset": [str(path)]}, variants=tuple(Variant.parse_list(variants)), **kw)


def test_figures_and_history(sqlite_url, bowl):
    history = History(sqlite_url)
    comparison = Comparison.create(history, spec(bowl, "random,ga:population_size=8", seeds=6, budget=40))
    results = comparison.run(LocalExecutor())
    assert (results["configurations"], results["near_optimal"]) == (128, 1)
    assert results["near_optimal_share"] == pytest.approx(1 / 128)
    assert set(results["algorithms"]) == {"random", "ga[population_size=8]"}
    for label, a in results["algorithms"].items():
        curve = a["success_at"]
        assert len(curve) == 40 and all(x <= y for x, y in zip(curve, curve[1:]))
        evals = np.array(a["evals_to_near_optimal"])
        assert a["success_at_budget"] == pytest.approx(np.mean(evals <= 40))
        assert a["censored"] == int(np.sum(evals == 41))
        assert len(a["instant_mean"]) == 40
    assert "diversity" in results["algorithms"]["ga[population_size=8]"]
    campaigns = [c for c in history.campaigns() if c.comparison_id == comparison.id]
    assert len(campaigns) == 12
    assert all(len(history.trials(c.id)) == 40 for c in campaigns)
    assert history.comparison(comparison.id).results["near_optimal"] == 1


def test_worker_processes_give_the_same_figures(sqlite_url, bowl):
    history = History(sqlite_url)
    local = Comparison.create(history, spec(bowl, "sa,bo", seeds=3, budget=20)).run(LocalExecutor())
    remote = Comparison.create(history, spec(bowl, "sa,bo", seeds=3, budget=20)).run(ProcessExecutor(2))
    for label in ("sa", "bo"):
        assert local["algorithms"][label]["evals_to_near_optimal"] == remote["algorithms"][label]["evals_to_near_optimal"]


def test_a_recorded_comparison_is_found_by_its_spec_and_table_and_goes_on_from_its_seeds(sqlite_url, bowl):
    """``Comparison.find``: the same spec on the same content finds the recorded comparison, whose run measures
    only the seeds it lacks; another spec, or the table changed, finds none."""
    history = History(sqlite_url)
    assert Comparison.find(history, spec(bowl, "sa", seeds=3, budget=20)) is None
    whole = Comparison.create(history, spec(bowl, "sa", seeds=3, budget=20)).run(LocalExecutor())
    found = Comparison.find(history, spec(bowl, "sa", seeds=3, budget=20))
    assert found is not None and found.id == whole["comparison"]
    last = history.comparison_campaigns(found.id)[-1]
    assert history.delete_campaign(last.id, ["finished"])  # as if the run had stopped during its last seed
    again = found.run(LocalExecutor())
    assert [c.seed for c in history.comparison_campaigns(found.id)] == [0, 1, 2]
    assert again["algorithms"]["sa"]["evals_to_near_optimal"] == whole["algorithms"]["sa"]["evals_to_near_optimal"]
    assert Comparison.find(history, spec(bowl, "sa", seeds=4, budget=20)) is None
    assert Comparison.find(history, spec(bowl, "sa", seeds=3, budget=20, first_seed=1)) is None
    bowl.write_text(bowl.read_text().replace(",1\n", ",1.5\n", 1))  # one measurement changed
    assert Comparison.find(history, spec(bowl, "sa", seeds=3, budget=20)) is None


def test_simulated_random_follows_its_exact_curve(sqlite_url, bowl):
    results = Comparison.create(History(sqlite_url), spec(bowl, "random", seeds=300, budget=64)).run(LocalExecutor())
    simulated = np.array(results["algorithms"]["random"]["success_at"])
    exact = np.array(results["random_expected_success_at"])
    assert np.max(np.abs(simulated - exact)) < 0.09  # 300 seeds: a few standard errors


def test_the_exact_random_curve_counts_configurations_recorded_as_failures(sqlite_url, tmp_path):
    rows = ["a,b,repeat,status,reason,ops"]  # 32 configurations: 16 measured, one of them best; 16 FAILED
    for a in range(4):
        for b in range(8):
            if b < 4:
                rows.append(f"{a},{b},0,SUCCEEDED,,{100 if (a, b) == (1, 1) else 10 + a + b}")
            else:
                rows.append(f"{a},{b},0,FAILED,crashed,")
    table = tmp_path / "half_failed.csv"
    table.write_text("\n".join(rows) + "\n")
    results = Comparison.create(History(sqlite_url), spec(table, "random", seeds=300, budget=32)).run(LocalExecutor())
    simulated = np.array(results["algorithms"]["random"]["success_at"])
    exact = np.array(results["random_expected_success_at"])
    assert exact[15] == pytest.approx(0.5) and exact[-1] == pytest.approx(1.0)  # 16 draws of 32 find it half the time
    assert np.max(np.abs(simulated - exact)) < 0.09


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(within=0.0, budget=50), r"`within` must be in \(0, 1\]"),
        (dict(within=1.5, budget=50), r"`within` must be in \(0, 1\]"),
        (dict(budget=500), "more than the 128 configurations of bowl"),
        (dict(seeds=0, budget=50), "`seeds` must be at least 1"),
    ],
)
def test_bad_settings_write_nothing(sqlite_url, bowl, kw, message):
    history = History(sqlite_url)
    with pytest.raises(ValueError, match=message):
        Comparison.create(history, spec(bowl, "random", **kw))
    with pytest.raises(ValueError, match="unknown hyperparameter 'rate' for ga"):
        Comparison.create(history, spec(bowl, "ga:rate=1", budget=50))
    with pytest.raises(ValueError, match="unknown algorithm 'hillclimb'"):
        Comparison.create(history, spec(bowl, "random,hillclimb", budget=50))
    with pytest.raises(ValueError, match="lists a variant twice"):
        Variant.parse_list("ga,ga")
    with history.session() as s:
        from storetune.tuner.history.models import ComparisonRecord

        assert s.query(ComparisonRecord).count() == 0


def test_compare_command(sqlite_url, bowl, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("compare", "--dataset", str(bowl), "--algorithms", "random,ga:mutation_rate=0.3",
                   "--seeds", "3", "--budget", "10", "--out", str(out), "--json", db=sqlite_url, check=True)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"algorithms", "near_optimal_share", "random_expected_success_at"} <= summary.keys()
    for a in summary["algorithms"].values():
        assert {"median_evals_to_near_optimal", "censored", "success_at_budget", "success_at"} <= a.keys()
        assert len(a["success_at"]) == 10
    assert {p.name for p in out.iterdir()} >= {"summary.json", "success.csv", "instant.csv", "evaluations.csv", "diversity.csv"}
    bad = run_cli("compare", "--dataset", str(bowl), "--within", "2", db=sqlite_url)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: --within must be in (0, 1]")


def test_compare_resume_measures_only_the_seeds_the_history_lacks(sqlite_url, bowl, tmp_path):
    """`storetune compare --resume` goes on with the interrupted comparison of the same settings: the same
    figures as the whole run, no second comparison, and the seeds it had are not measured again; a finished
    one is printed as recorded, and other settings start a new one."""
    args = ("compare", "--dataset", str(bowl), "--algorithms", "sa,random", "--seeds", "3", "--budget", "20",
            "--out", str(tmp_path / "out"), "--json")
    whole = json.loads(run_cli(*args, db=sqlite_url, check=True).stdout.strip().splitlines()[-1])
    history = History(sqlite_url)
    campaigns = history.comparison_campaigns(whole["comparison"])
    assert history.delete_campaign(campaigns[-1].id, ["finished"])  # as if Ctrl-C had come during the last seed
    history.transition_comparison(whole["comparison"], ["finished"], state="interrupted")
    proc = run_cli(*args, "--resume", db=sqlite_url, check=True)
    again = json.loads(proc.stdout.strip().splitlines()[-1])
    assert f"resuming comparison {whole['comparison']}: 5 of 6 seeds are in the history" in proc.stderr
    assert again["comparison"] == whole["comparison"] and len(history.comparisons()) == 1
    now = history.comparison_campaigns(whole["comparison"])
    assert len(now) == 6 and [c.id for c in now[:5]] == [c.id for c in campaigns[:5]]  # one seed measured
    for label in ("sa", "random"):
        assert again["algorithms"][label]["evals_to_near_optimal"] == whole["algorithms"][label]["evals_to_near_optimal"]
    table = run_cli(*args[:-1], "--resume", db=sqlite_url, check=True)  # finished: as recorded, as a table too
    assert f"comparison {whole['comparison']} is finished" in table.stderr and "sa" in table.stdout
    assert len(history.comparison_campaigns(whole["comparison"])) == 6
    other = run_cli(*args[:-5], "--budget", "21", "--resume", db=sqlite_url, check=True)
    assert "holds no comparison of these settings" in other.stderr and len(history.comparisons()) == 2


def test_two_tables_compared_as_one_are_warned_about_once(sqlite_url, bowl, tmp_path):
    """The rows of two files of the same configurations are averaged into one table: the driver says so
    in one line, and its worker processes, which read the table again, do not repeat it."""
    other = tmp_path / "other.csv"
    other.write_text(bowl.read_text().replace(",1\n", ",9\n"))
    proc = run_cli("compare", "--dataset", str(bowl), "--dataset", str(other), "--algorithms", "random",
                   "--seeds", "4", "--budget", "5", "--workers", "2", db=sqlite_url, check=True)
    lines = [line for line in proc.stderr.splitlines() if "configurations appear in more than one" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: 128 of 128 configurations"), proc.stderr


def test_seeds_stopped_at_their_first_near_optimal_give_the_same_counts(sqlite_url, bowl):
    """--stop-at-near-optimal: each campaign ends at its first hit, and every evaluation count and
    success rate is what the full budget gives; the figures that need the whole budget are None."""
    from storetune.api.report.page import comparison_figures, comparison_tables
    from storetune.tuner.analysis.report import comparison_data

    history = History(sqlite_url)
    variants = "random,sa,ga:population_size=8"  # the GA asks for whole generations
    full = Comparison.create(history, spec(bowl, variants, seeds=8, budget=60)).run(LocalExecutor())
    stopping = Comparison.create(history, spec(bowl, variants, seeds=8, budget=60, stop_at_near_optimal=True))
    short = stopping.run(ProcessExecutor(2))  # the near-optimal set travels to the worker processes
    assert short["stop_at_near_optimal"] and not full["stop_at_near_optimal"]
    assert "diversity" in full["algorithms"]["ga[population_size=8]"]  # not cut to the shortest stopped seed
    assert "diversity" not in short["algorithms"]["ga[population_size=8]"]
    for label in ("random", "sa", "ga[population_size=8]"):
        a, b = full["algorithms"][label], short["algorithms"][label]
        for key in ("evals_to_near_optimal", "success_at", "median_evals_to_near_optimal", "censored"):
            assert a[key] == b[key], (label, key)
        assert (b["best_mean_at_budget"], b["instant_mean"], b["ask_tell_ms_at_budget"]) == (None, None, None)
        assert a["best_mean_at_budget"] is not None and len(a["instant_mean"]) == 60
    evals = {(r.variant.label, r.seed): e for label, runs in stopping.runs.items()
             for r, e in zip(sorted(runs, key=lambda r: r.seed), short["algorithms"][label]["evals_to_near_optimal"])}
    assert any(e <= 60 for e in evals.values()) and any(e > 60 for e in evals.values())  # both kinds of seed
    campaigns = {c.id: c for c in history.campaigns() if c.comparison_id == stopping.id}
    for label, runs in stopping.runs.items():
        for r in runs:
            e, record = evals[(label, r.seed)], campaigns[r.campaign_id]
            assert len(history.trials(r.campaign_id)) == min(e, 60)
            if e < 60:
                assert record.note == f"stopped at its first near-optimal configuration, evaluation {e} of 60"
            else:
                assert record.note is None
    assert Comparison.load(history, stopping.id).spec.stop_at_near_optimal
    data = comparison_data(history, stopping.id)
    assert data["best_so_far"] == {}
    assert set(comparison_figures(data)) == {"success", "evals"}  # no curve that needs every budget
    assert "stopped at its first near-optimal configuration" in comparison_tables(data)
    assert list(comparison_figures(comparison_data(history, full["comparison"]))) == [
        "success", "best_so_far", "instant", "evals"]


def test_each_algorithm_has_one_colour_and_place_in_every_figure(sqlite_url, bowl):
    """The seeds' campaigns come back in the order they finished: the best-so-far figure listed (and so
    coloured) its algorithms in that order and the others in the variants' (sa red in one, ga in another)."""
    from storetune.api.report.page import comparison_figures
    from storetune.tuner.analysis.report import comparison_data

    history = History(sqlite_url)
    variants = "random,sa,ga:population_size=8"
    result = Comparison.create(history, spec(bowl, variants, seeds=3, budget=20)).run(LocalExecutor())
    data = comparison_data(history, result["comparison"])
    assert list(data["best_so_far"]) == list(data["algorithms"]) == ["random", "sa", "ga[population_size=8]"]
    data["best_so_far"] = dict(reversed(data["best_so_far"].items()))  # as another finish order would give
    colours: dict[str, set[str]] = {}
    for fig in comparison_figures(data).values():
        for trace in fig["figure"]["data"]:
            if trace["name"] in data["algorithms"]:
                colour = (trace.get("line") or {}).get("color") or trace["marker"]["color"]
                colours.setdefault(trace["name"], set()).add(colour)
    assert {len(c) for c in colours.values()} == {1} and len(set.union(*colours.values())) == 3
    from plotly.colors import qualitative  # the template's first three: the first algorithm is blue, as before

    assert [colours[label].pop() for label in data["algorithms"]] == qualitative.Plotly[:3]


def test_stopping_at_near_optimal_with_repeats_counts_trials_as_the_full_run(sqlite_url, bowl):
    history = History(sqlite_url)
    runs = [Comparison.create(history, spec(bowl, "sa", seeds=4, budget=40, repeats=2, stop_at_near_optimal=stop))
            .run(LocalExecutor())["algorithms"]["sa"] for stop in (False, True)]
    assert runs[0]["evals_to_near_optimal"] == runs[1]["evals_to_near_optimal"]
    assert runs[0]["success_at"] == runs[1]["success_at"]
    assert min(runs[1]["evals_to_near_optimal"]) < 40  # a seed did stop early


def test_compare_command_stopping_at_near_optimal(sqlite_url, bowl, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("compare", "--dataset", str(bowl), "--algorithms", "random", "--seeds", "3", "--budget", "10",
                   "--stop-at-near-optimal", "--out", str(out), db=sqlite_url, check=True)
    assert "each seed stopped at its first near-optimal configuration" in " ".join(proc.stdout.split())
    assert {p.name for p in out.iterdir()} == {"summary.json", "success.csv", "evaluations.csv"}  # no instant.csv
    assert json.loads((out / "summary.json").read_text())["stop_at_near_optimal"] is True


def test_the_best_so_far_curve_is_the_tables_mean_of_each_seeds_reported_best(sqlite_url, tmp_path):
    """On a table with noisy repeats, a seed's best measurement is partly a lucky draw: the median of those
    ran above the table's best mean (min: below) while the comparison's own 'best mean at budget' did not.
    The curve now follows the configuration each seed reports, at its table mean."""
    from storetune.tuner.analysis.report import comparison_data

    rng = np.random.default_rng(0)
    rows = ["a,b,PERF-"]
    for a in range(6):
        for b in range(6):
            true = 10 + abs(a - 2) + abs(b - 3)
            rows += [f"{a},{b},{true + rng.normal(0, 3):.4f}" for _ in range(5)]  # noise beyond the steps
    path = tmp_path / "noisy.csv"
    path.write_text("\n".join(rows) + "\n")
    history = History(sqlite_url)
    result = Comparison.create(history, spec(path, "random", seeds=8, budget=20)).run(LocalExecutor())
    data = comparison_data(history, result["comparison"])
    curve = data["best_so_far"]["random"]
    table_best = min(np.mean([float(r.split(",")[2]) for r in rows[1:] if r.startswith(f"{a},{b},")])
                     for a in range(6) for b in range(6))
    assert all(v >= table_best - 1e-9 for v in curve if v is not None)  # no seed beats the table's best
    best_means = result["algorithms"]["random"]["best_mean_at_budget"]
    assert curve[-1] == pytest.approx(float(np.median(best_means)))
    assert data["best_so_far_of"] == "table mean"
    # the table edited in place (its rows re-measured): the seeds' configurations are no longer judged by it
    path.write_text("\n".join([rows[0]] + [r.rsplit(",", 1)[0] + ",1.0" for r in rows[1:]]) + "\n")
    changed = comparison_data(history, result["comparison"])
    assert changed["best_so_far_of"] == "best value seen"
    assert 1.0 < changed["best_so_far"]["random"][-1] < table_best  # the best values seen, not the new table's 1.0
    assert "has changed since it was replayed" in changed["table_error"]


def test_the_comparison_tables_say_when_a_median_is_beyond_the_budget(sqlite_url, bowl):
    """The table showed "median evaluations to near-optimal 21" for a budget of 20 (a seed that never got
    there counts as budget + 1), with no word of the seeds that found none; the success chart's title
    named "the best found" where the reference is the table's best mean; a finished page said "live"."""
    import re

    from storetune.api.report.page import comparison_figures, comparison_tables, page
    from storetune.tuner.analysis.report import comparison_data

    history = History(sqlite_url)
    result = Comparison.create(history, spec(bowl, "random", seeds=6, budget=3)).run(LocalExecutor())
    a = result["algorithms"]["random"]
    assert a["median_evals_to_near_optimal"] == 4 and a["censored"] >= 3  # most of 6 seeds miss in 3 of 128
    data = comparison_data(history, result["comparison"])
    cells = re.findall(r"<td>([^<]*)</td>", comparison_tables(data))
    assert cells[:3] == ["random", "more than 3", str(a["censored"])]
    # exactly half the seeds found one: the median averages a find with the budget + 1 stand-in
    half = {**data, "algorithms": {"random": {**data["algorithms"]["random"], "median_evals_to_near_optimal": 2.5,
                                              "censored": 3}}}
    assert re.findall(r"<td>([^<]*)</td>", comparison_tables(half))[1] == "at least 2.5"
    from rich.console import Console

    from storetune.api.cli.render import comparison_table

    console = Console(record=True, width=200)  # the command line's table says the same ("41 (41-41)" before)
    console.print(comparison_table(result))
    row = next(line for line in console.export_text().splitlines() if line.lstrip("│ ").startswith("random"))
    assert "│ more than 3 (>3 - >3) │" in row
    title = comparison_figures(data)["success"]["figure"]["layout"]["title"]["text"]
    assert "of the table's best mean" in title and "best found" not in title
    assert "<p id='live'></p>" in page(data, plotly_src="plotly.js", live="/comparisons/1/report.json")
    assert "live: refreshes while the comparison runs" in page({**data, "state": "running"}, plotly_src="plotly.js",
                                                                live="/comparisons/1/report.json")


def test_a_judge_table_decides_near_optimal_while_the_searches_see_the_noisy_repeats(sqlite_url, bowl, tmp_path):
    """On a noisy sample the table's best mean can be a lucky single repeat: a judge of the same configurations
    (re-measured, or a generated table's truth) decides near-optimality, and a comparison records and reloads it.
    A judge that does not hold the table's configurations is refused before anything is written."""
    rows = bowl.read_text().splitlines()
    lucky = "0,0,x,0.5"  # measured once, far from the bowl's true best (5,2,x): 1
    noisy = tmp_path / "noisy.csv"
    noisy.write_text("\n".join([r for r in rows if not r.startswith("0,0,x,")] + [lucky]) + "\n")
    history = History(sqlite_url)
    plain = Comparison.create(history, spec(noisy, "random", seeds=4, budget=20))
    assert [dict(c) for c in plain.targets] == [{"a": 0, "b": 0, "c": "x"}]
    judged = Comparison.create(history, spec(noisy, "random", seeds=4, budget=20, judge=(str(bowl),)))
    assert [dict(c) for c in judged.targets] == [{"a": 5, "b": 2, "c": "x"}]
    results = judged.run(LocalExecutor())
    assert results["judge"] == [str(bowl.resolve())] and results["near_optimal"] == 1
    from storetune.api.report.page import comparison_tables
    from storetune.tuner.analysis.report import comparison_data

    assert f"judged on the means of {bowl}" in comparison_tables(comparison_data(history, judged.id))
    from storetune.tuner.analysis.report import _table_means

    record = history.comparison(judged.id)  # the report's best-so-far curve reads the judge's means too
    curve_means, _ = _table_means(record.runner_settings, "PERF", [], record.settings["judge"])
    assert curve_means[next(iter(plain.targets))] == 30 and judged.means == curve_means
    reloaded = Comparison.load(history, judged.id)
    assert reloaded.spec.judge == (str(bowl.resolve()),) and reloaded.targets == judged.targets
    short = tmp_path / "short.csv"
    short.write_text("\n".join(rows[:-1]) + "\n")
    before = len(history.comparisons())
    with pytest.raises(ValueError, match="must hold the table's configurations: it lacks 1 and adds 0"):
        Comparison.create(history, spec(noisy, "random", seeds=4, budget=20, judge=(str(short),)))
    assert len(history.comparisons()) == before
    # a table of two workloads, pinned to one: its judge is pinned and read the same way
    both, judge_both = tmp_path / "both.csv", tmp_path / "judge-both.csv"
    for path, source in ((both, noisy), (judge_both, bowl)):
        lines = source.read_text().splitlines()
        path.write_text("\n".join(["w," + lines[0]] + [f"{w},{r}" for w in (1, 2) for r in lines[1:]]) + "\n")
    pinned = Comparison.create(history, CompareSpec(
        runner_settings={"dataset": [str(both)], "context": {"w": 1}}, variants=(Variant("random"),), seeds=1,
        budget=5, judge=(str(judge_both),)))
    assert [dict(c) for c in pinned.targets] == [{"a": 5, "b": 2, "c": "x"}]
    proc = run_cli("compare", "--dataset", str(noisy), "--judge", str(bowl), "--algorithms", "random",
                   "--seeds", "2", "--budget", "5", db=sqlite_url, check=True)
    assert f"within 0.99 of the best mean of {bowl}" in " ".join(proc.stdout.split())


def test_a_near_optimal_set_of_single_runs_in_a_table_of_repeats_is_warned_about(sqlite_url, bowl, tmp_path):
    """Where most near-optimal configurations were measured once and the rest of the table more often, the
    comparison says its best means may be lucky repeats (CLI: a warning line; REST: the 201's warnings); a table
    measured once throughout, or a comparison judged on a re-measurement, is not warned about."""
    from storetune.runners.tables import TableWarning

    header, *rows = bowl.read_text().splitlines()
    twice = [r for r in rows if not r.startswith("0,0,x,")] * 2
    noisy = tmp_path / "repeats.csv"
    noisy.write_text("\n".join([header, *twice, "0,0,x,0.5"]) + "\n")
    history = History(sqlite_url)
    with pytest.warns(TableWarning, match=r"1 of the 1 near-optimal configurations of repeats were measured once, "
                                          r"against 1% of the table"):
        warned = Comparison.create(history, spec(noisy, "random", seeds=1, budget=5))
    assert warned.notes() == (warned.lucky,)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TableWarning)
        assert Comparison.create(history, spec(bowl, "random", seeds=1, budget=5)).lucky is None
        assert Comparison.create(history, spec(noisy, "random", seeds=1, budget=5, judge=(str(bowl),))).lucky is None
    proc = run_cli("compare", "--dataset", str(noisy), "--algorithms", "random", "--seeds", "1", "--budget", "5",
                   db=sqlite_url, check=True)
    assert "may be lucky repeats; judge the comparison on a re-measurement of the same configurations (--judge)" in \
        " ".join(proc.stderr.split())
