"""Objectives over several metrics: weighted scores, lexicographic priorities (rank), and the Pareto set
with its hypervolume, read from the history; NSGA-II; and every bad --objective's one-line error."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli, shared

from storetune.runners import Measurement, Status, make_runner
from storetune.search_spaces import Config
from storetune.tuner import Campaign, CampaignSpec, History
from storetune.tuner.search.spec import InvalidSpec
from storetune.tuner.objectives.objective import MultiObjective, trial_means
from storetune.tuner.analysis.pareto import hypervolume, non_dominated, pareto_set
from storetune.tuner.algorithms.registry import make_tuner


def write_table(path: Path, rows: list[tuple]) -> Path:
    """A MOOT table: options a and b, objectives Throughput+ and Latency-."""
    path.write_text("a,b,Throughput+,Latency-\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


@pytest.fixture
def grid_table(tmp_path: Path) -> Path:
    """36 configurations with a throughput/latency trade-off and noise-free values."""
    rng = np.random.default_rng(7)
    rows = []
    for a, b in itertools.product(range(6), range(6)):
        throughput = 100 + 40 * a + 5 * b + float(rng.integers(0, 30))
        latency = 10 + 6 * a - 1.5 * b + float(rng.integers(0, 8))
        rows.append((a, b, throughput, latency))
    return write_table(tmp_path / "grid.csv", rows)


def spec(table: Path, objective: str, **kw) -> CampaignSpec:
    return CampaignSpec(runner="dataset", runner_settings={"dataset": [str(table)], "metric": "Throughput"},
                        objective=objective, **{"algorithm": "random", "budget": 10, **kw})


# --- weighted --------------------------------------------------------------------------------------------
def test_weighted_score_is_relative_to_the_first_trial_and_stable_across_a_resume(tmp_path, grid_table):
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    campaign = Campaign.create(history, spec(grid_table, "Throughput:3,Latency:1", budget=8))
    campaign.run()
    first = history.trials(campaign.id, measurements=True)
    reference = trial_means(first[0], ["Throughput", "Latency"])
    record = history.campaign(campaign.id)
    assert record.objective["reference"] == reference and record.objective["weights"] == [3.0, 1.0]
    assert record.objective_direction == "max" and first[0].value == pytest.approx(1.0)
    for t in first:  # score = (3 x throughput ratio + 1 x inverse latency ratio) / 4
        m = trial_means(t, ["Throughput", "Latency"])
        expected = (3 * m["Throughput"] / reference["Throughput"] + reference["Latency"] / m["Latency"]) / 4
        assert t.value == pytest.approx(expected)
    # a resume (a new process would rebuild the objective from the history) keeps the reference and the values
    history.extend_campaign(campaign.id, 16, {})
    history.transition(campaign.id, ["finished"], state="interrupted")
    summary = Campaign.resume(history, campaign.id).run()
    after = history.trials(campaign.id, measurements=True)
    assert summary.evaluated == 16 and len(after) == 16
    assert [t.value for t in after[:8]] == [t.value for t in first]
    for t in after[8:]:
        m = trial_means(t, ["Throughput", "Latency"])
        expected = (3 * m["Throughput"] / reference["Throughput"] + reference["Latency"] / m["Latency"]) / 4
        assert t.value == pytest.approx(expected)
    assert summary.best_value == max(t.value for t in after)
    assert summary.objective["kind"] == "weighted" and summary.objective["reference"] == reference


def test_weighted_weights_move_the_best(tmp_path, grid_table):
    """All 36 measured: heavy on throughput picks a faster configuration than heavy on latency."""
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    fast = Campaign.create(history, spec(grid_table, "Throughput:10,Latency:1", budget=36)).run()
    low = Campaign.create(history, spec(grid_table, "Throughput:1,Latency:10", budget=36)).run()
    table = make_runner("dataset", {"dataset": [str(grid_table)], "metric": "Throughput"}).table
    throughput, latency = table.means("Throughput"), table.means("Latency")
    assert throughput[Config(fast.best_config)] > throughput[Config(low.best_config)]
    assert latency[Config(fast.best_config)] > latency[Config(low.best_config)]


# --- rank --------------------------------------------------------------------------------------------------
def test_rank_breaks_ties_within_the_tolerance_with_the_next_metric(tmp_path):
    # the best throughput (100) and one within 5% of it (97) differ on latency; 80 is far behind
    table = write_table(tmp_path / "rank.csv", [(0, 0, 90, 5), (0, 1, 100, 50), (1, 0, 97, 10), (1, 1, 80, 1)])
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    loose = Campaign.create(history, spec(table, "rank:Throughput,Latency;tol=0.05", budget=4)).run()
    assert loose.best_config == {"a": 1, "b": 0}  # 97 ties with 100 within 5%; its latency 10 beats 50
    strict = Campaign.create(history, spec(table, "rank:Throughput,Latency;tol=0.01", budget=4)).run()
    assert strict.best_config == {"a": 0, "b": 1}  # 97 is not within 1% of 100: throughput decides
    default = Campaign.create(history, spec(table, "rank:Throughput,Latency", budget=4)).run()
    assert default.objective["tol"] == 0.05 and default.best_config == {"a": 1, "b": 0}
    # the scalar the algorithms see: a throughput more than a bin behind is worse whatever its latency
    values = {json.dumps(t.config, sort_keys=True): t.value for t in history.trials(loose.campaign)}
    assert values['{"a": 1, "b": 1}'] < min(values['{"a": 0, "b": 1}'], values['{"a": 1, "b": 0}'])


def test_the_report_shows_the_lexicographic_best_where_the_scalar_differs(tmp_path):
    from storetune.tuner.analysis.report import campaign_data

    # 99 ties with 100 within 5% and has the better latency; measured after 100 (the reference), it falls a
    # bin below it in the scalar, so the largest value is not the lexicographic best
    table = write_table(  # b is constant, so the inferred space has a alone
        tmp_path / "edge.csv", [(0, 0, 100, 50), (1, 0, 99, 10)])
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    for seed in range(20):
        summary = Campaign.create(history, spec(table, "rank:Throughput,Latency", budget=2, seed=seed)).run()
        trials = history.trials(summary.campaign)
        if trials[0].config == {"a": 0}:
            break
    assert trials[0].config == {"a": 0} and trials[0].value > trials[1].value
    assert summary.best_config == {"a": 1}
    assert campaign_data(history, summary.campaign)["best"]["config"] == {"a": 1}  # the report agrees


def test_rank_scalar_is_lexicographic_between_bins():
    objective = MultiObjective("rank", ["t", "l"], ["max", "min"], tol=0.05, reference={"t": 100.0, "l": 10.0})
    much_faster_but_slow = objective.score({"t": 130.0, "l": 1000.0})
    slower_but_quick = objective.score({"t": 100.0, "l": 0.001})
    assert much_faster_but_slow > slower_but_quick
    assert objective.score({"t": 100.0, "l": 5.0}) > objective.score({"t": 100.0, "l": 6.0})


# --- Pareto --------------------------------------------------------------------------------------------------
def brute_front(points: dict) -> set:
    return {k for k, p in points.items()
            if not any(all(x <= y for x, y in zip(q, p)) and q != p for q in points.values())}


def test_the_pareto_set_from_the_history_is_the_non_dominated_trials(tmp_path, grid_table):
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    summary = Campaign.create(history, spec(grid_table, "pareto:Throughput,Latency", budget=36)).run()
    assert summary.algorithm == "random"
    table = make_runner("dataset", {"dataset": [str(grid_table)], "metric": "Throughput"}).table
    throughput, latency = table.means("Throughput"), table.means("Latency")
    losses = {json.dumps(dict(c), sort_keys=True): (-throughput[c], latency[c]) for c in throughput}
    expected = brute_front(losses)
    assert {json.dumps(p["config"], sort_keys=True) for p in summary.pareto} == expected
    for p in summary.pareto:
        assert p["values"] == {"Throughput": throughput[Config(p["config"])], "Latency": latency[Config(p["config"])]}
    worst = (max(x for x, _ in losses.values()), max(y for _, y in losses.values()))  # the worst losses
    assert summary.reference_point == {"Throughput": -worst[0], "Latency": worst[1]}
    assert summary.hypervolume == pytest.approx(hypervolume([losses[k] for k in expected], worst))
    as_json = summary.to_dict()
    assert set(as_json["pareto"][0]) >= {"config", "values"} and as_json["hypervolume"] > 0

    # the report is of the set, not only of the equal-weight score its figures draw (which it names)
    from storetune.api.report.page import campaign_figures, campaign_tables
    from storetune.tuner.analysis.report import campaign_data

    data = campaign_data(history, summary.campaign)
    assert data["pareto"]["pareto"] == as_json["pareto"] and data["pareto"]["hypervolume"] == summary.hypervolume
    assert len(data["pareto"]["points"]) == 36
    tables = campaign_tables(data)
    assert f"Pareto set: {len(expected)} trials, hypervolume {summary.hypervolume:.6g}" in tables
    # the reference point reads the same on the page and in the terminal's summary
    from rich.console import Console

    from storetune.api.cli.render import summary_table

    reference = f"Throughput = {-worst[0]:.6g}, Latency = {worst[1]:.6g}"
    console = Console(width=400, record=True)
    console.print(summary_table(summary))
    assert f"({reference})" in tables and f"the worst measured, {reference})" in console.export_text()
    assert "<th>best equal-weight score</th>" in tables and "max equal-weight score of Throughput, Latency" in tables
    figures = campaign_figures(data)
    others, front, cross = figures["pareto"]["figure"]["data"]  # the dominated trials, the front, the reference
    assert len(front["x"]) == len(expected) and sorted(front["x"]) == list(front["x"])
    assert len(others["x"]) == 36 - len(expected) and "0.35" in others["marker"]["color"]  # faint
    assert (cross["x"][0], cross["y"][0]) == (-worst[0], worst[1]) and cross["marker"]["symbol"] == "x"
    assert figures["convergence"]["figure"]["layout"]["yaxis"]["title"]["text"].startswith("equal-weight score")


def test_hypervolume_by_hand():
    # the staircase of (1,3), (2,2), (3,1) under (4,4): 3 + 2 + 1
    assert hypervolume([(1, 3), (2, 2), (3, 1)], (4, 4)) == pytest.approx(6.0)
    assert hypervolume([(1, 3), (2, 2), (3, 1), (3, 3), (2, 2)], (4, 4)) == pytest.approx(6.0)  # dominated, repeated
    assert hypervolume([(1, 3), (4, 0)], (4, 4)) == pytest.approx(3.0)  # on the reference's edge: nothing
    assert hypervolume([], (4, 4)) == 0.0
    assert hypervolume([(1, 1, 1)], (2, 3, 4)) == pytest.approx(6.0)
    # two boxes of 4 and 2 overlapping in 1
    assert hypervolume([(0, 0, 1), (1, 1, 0)], (2, 2, 2)) == pytest.approx(5.0)
    rng = np.random.default_rng(0)
    points = rng.random((8, 3))
    samples = rng.random((200_000, 3))
    dominated = np.zeros(len(samples), bool)
    for p in points:
        dominated |= np.all(samples >= p, axis=1)
    assert hypervolume(points, (1, 1, 1)) == pytest.approx(dominated.mean(), abs=0.005)
    assert non_dominated([(1, 2), (2, 1), (2, 2), (1, 2)]) == [0, 1, 3]


def test_nsga2_keeps_every_non_dominated_configuration_as_a_parent(grid_table):
    """NSGA-II's elitism: after a generation is told, the next parents hold its whole first front (it is
    smaller than the population), and the offspring asked are new configurations. (Whether it beats random
    search is a question of many seeds: bench/pareto.py; at 60 evaluations and 4 or 5 seeds it did on SS-A and
    SS-O in 5 and 8 of 10 seed blocks, too few for a test.)"""
    runner = make_runner("dataset", {"dataset": [str(grid_table)], "metric": "Throughput"})
    t, lat = runner.table.means("Throughput"), runner.table.means("Latency")
    tuner = make_tuner("nsga2", runner.space, seed=3, direction="max", params={"population_size": 8})
    first = tuner.ask(8)
    assert len(set(first)) == 8
    for c in first:
        tuner.tell(c, 1.0, Status.SUCCEEDED, vector=(-t[c], lat[c]))
    second = tuner.ask(8)
    assert not set(second) & set(first)
    losses = [(-t[c], lat[c]) for c in first]
    front = {first[i] for i in non_dominated(losses)}
    parents = {tuner._decode(ind) for ind in tuner._parents}
    assert front <= parents and len(parents) == 8


def test_nsga2_is_told_the_vector_and_resumes_from_the_history(tmp_path, grid_table):
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    campaign = Campaign.create(history, spec(grid_table, "pareto:Throughput,Latency", algorithm=None, budget=12))
    assert campaign.record.algorithm == "nsga2"
    campaign.run()
    history.extend_campaign(campaign.id, 20, {})
    history.transition(campaign.id, ["finished"], state="interrupted")
    resumed = Campaign.resume(history, campaign.id)
    summary = resumed.run()
    assert summary.evaluated == 20 and summary.trials_by_status == {"SUCCEEDED": 20}
    told = [o for o in resumed.tuner.observations if o.loss is not None]
    assert len(told) == 20 and all(o.vector is not None and len(o.vector) == 2 for o in told)
    assert len({json.dumps(t.config, sort_keys=True) for t in history.trials(campaign.id)}) == 20


def test_a_pareto_vector_is_the_losses_of_the_means():
    objective = MultiObjective("pareto", ["t", "l"], ["max", "min"])
    runs = [Measurement(Status.SUCCEEDED, {"t": 10.0, "l": 2.0}), Measurement(Status.SUCCEEDED, {"t": 20.0, "l": 4.0})]
    assert objective.vector(runs) == (-15.0, 3.0)
    assert objective.outcome(runs) == (Status.SUCCEEDED, 1.0, None)  # the first succeeded trial is the reference
    assert objective.outcome([Measurement(Status.SUCCEEDED, {"t": 0.0, "l": 2.0})])[0] is Status.FAILED


# --- bad input ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, field, message", [
    (dict(objective="Throughput:3,Colour:2"), "objective", "unknown metric 'Colour'; this runner reports: Throughput, Latency"),
    (dict(objective="Throughput:3,Latency:-1"), "objective", "the weight of 'Latency' must be a positive number, not -1"),
    (dict(objective="Throughput:0,Latency:1"), "objective", "the weight of 'Throughput' must be a positive number, not 0"),
    (dict(objective="pareto:Throughput"), "objective", "a pareto objective needs two or three metrics"),
    (dict(objective="best:Throughput,Latency"), "objective", "unknown form; write metric:weight,..."),
    (dict(objective="rank:Throughput,Latency;tol=2"), "objective", "tol must be above 0 and below 1"),
    (dict(objective="rank:Throughput,Throughput"), "objective", "metric 'Throughput' is named twice"),
    (dict(objective="Throughput:1,Latency:1", metric="Latency"), "objective", "use it without `metric`"),
    (dict(objective="pareto:Throughput,Latency", algorithm="bo"), "algorithm",
     "bo searches for one value and cannot search a Pareto set: use nsga2 or random"),
    (dict(objective="Throughput:1,Latency:1", warm_start="same"), "warm_start", "`warm_start` same needs a single"),
])
def test_bad_objectives_are_one_line_naming_the_field(grid_table, extra, field, message):
    given = {"algorithm": "random", **extra}
    with pytest.raises(InvalidSpec) as caught:
        Campaign.prepare(CampaignSpec(runner="dataset", runner_settings={"dataset": [str(grid_table)],
                                                                         "metric": "Throughput"}, **given))
    assert caught.value.field == field and message in str(caught.value) and "\n" not in str(caught.value)


def test_the_cli_takes_an_objective_and_refuses_a_bad_one(tmp_path, grid_table, sqlite_url):
    done = run_cli("tune", "--dataset", str(grid_table), "--objective", "pareto:Throughput,Latency", "--budget", "12",
                   "--json", db=sqlite_url, check=True)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["algorithm"] == "nsga2" and summary["pareto"] and summary["hypervolume"] > 0
    best = json.loads(run_cli("best", str(summary["campaign"]), "--json", db=sqlite_url, check=True).stdout)
    assert best["pareto"] == summary["pareto"] and best["hypervolume"] == summary["hypervolume"]
    refused = run_cli("tune", "--dataset", str(grid_table), "--objective", "Throughput:1", "--metric", "Latency",
                      db=f"sqlite:///{tmp_path / 'none.sqlite'}")
    assert refused.returncode == 2 and refused.stderr.startswith("error: --objective names the metrics")
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "none.sqlite").exists()


def test_the_api_takes_an_objective_and_serves_the_pareto_set(tmp_path):
    from rest_client import client_for, wait_for

    table = shared("moot_configs/SS-A.csv")
    url = f"sqlite:///{tmp_path / 'api.sqlite'}"
    body = {"runner": "dataset", "runner_settings": {"dataset": str(table)}, "budget": 12, "seed": 2,
            "objective": "pareto:Throughput,Latency"}
    with client_for(url, tmp_path) as client:
        created = client.post("/campaigns", json=body)
        assert created.status_code == 201, created.text
        c = created.json()
        assert c["algorithm"] == "nsga2" and c["objective_spec"]["kind"] == "pareto"
        assert c["objective"] == {"metric": "pareto:Throughput,Latency", "direction": "max"}
        done = wait_for(client, f"/campaigns/{c['id']}", ("finished",))
        assert done["progress"]["evaluated"] == 12 and done["objective_spec"]["reference"] is not None
        assert c["links"]["pareto"] == f"/campaigns/{c['id']}/pareto"  # a Pareto campaign links its set
        front = client.get(f"/campaigns/{c['id']}/pareto").json()
        history = History(url, migrate=False)
        expected = pareto_set(history.trials(c["id"], measurements=True),
                              MultiObjective.from_spec(history.campaign(c["id"]).objective))
        assert front["pareto"] == expected["pareto"] and front["hypervolume"] == pytest.approx(expected["hypervolume"])
        assert front["reference_point"] == expected["reference_point"] and front["pareto"]
        for wrong, where, message in (
            ({"objective": "pareto:Throughput,Colour"}, "objective", "unknown metric 'Colour'"),
            ({"objective": "pareto:Throughput,Latency", "algorithm": "bo"}, "algorithm", "cannot search a Pareto set"),
            # in the request's terms: its fields, not the command line's options
            ({"objective": "Throughput:1,Latency:1", "metric": "Latency"}, "objective", "without metric and direction"),
        ):
            refused = client.post("/campaigns", json={**body, **wrong})
            assert refused.status_code == 422, refused.text
            detail = refused.json()["detail"][0]
            assert detail["loc"] == ["body", where] and message in detail["msg"]
        single = client.post("/campaigns", json={**body, "objective": None, "runner_settings": {
            "dataset": str(table), "metric": "Latency"}}).json()
        assert client.get(f"/campaigns/{single['id']}/pareto").status_code == 409


@pytest.mark.parametrize("text, words", [
    ("Throughput:-1,Latency:1", "must be a positive number, not -1"),
    ("pareto:Throughput", "needs two or three metrics"),
    ("foo:Throughput", "unknown form"),
])
def test_a_malformed_objective_on_a_two_objective_table_says_what_is_wrong(tmp_path, sqlite_url, text, words):
    """A table with two objectives loads with one of them named by --objective: a text that does not parse
    must say so, not that the table needs --metric (which --objective refuses)."""
    table = write_table(tmp_path / "two.csv", [(0, 0, 90, 5), (0, 1, 100, 50), (1, 0, 97, 10), (1, 1, 80, 1)])
    proc = run_cli("tune", "--dataset", str(table), "--objective", text, db=sqlite_url)
    assert proc.returncode == 2 and words in proc.stderr and "--metric" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
