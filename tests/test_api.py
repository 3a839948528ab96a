"""The REST service, route by route: the same suite on a real SQLite history and on a real PostgreSQL
(``history_url``). Campaigns run in real worker processes of the service, through the same loop as
`storetune tune`. Comparisons over REST are in test_api_comparisons.py."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from storetune.runners import RUNNERS
from storetune.runners.tables import TableWarning
from storetune.tuner.objectives.fidelity import BURN_IN, GUARD
from conftest import ROOT, run_cli
from rest_client import client_for, wait_for


def bdbc_campaign(bdbc: Path, **kw) -> dict:
    return {"runner": "dataset", "runner_settings": {"dataset": str(bdbc)}, "algorithm": "random", "budget": 12,
            "seed": 1, **kw}


@pytest.mark.slow
def test_a_campaign_launched_over_rest_runs_in_a_worker_and_every_route_reads_it(history_url, tmp_path, bdbc):
    with client_for(history_url, tmp_path) as client:
        created = client.post("/campaigns", json=bdbc_campaign(bdbc, algorithm="sa", repeats=2))
        assert created.status_code == 201, created.text
        body = created.json()
        assert created.headers["location"] == f"/campaigns/{body['id']}" == body["links"]["self"]
        assert body["state"] in ("queued", "running") and body["origin"] == "api"

        done = wait_for(client, f"/campaigns/{body['id']}", ("finished",))
        assert done["progress"] == {"evaluated": 12, "budget": 12, "trials_by_status": {"SUCCEEDED": 12}}
        assert done["objective"] == {"metric": "PERF", "direction": "min"} and done["repeats"] == 2

        page = client.get(f"/campaigns/{body['id']}/trials", params={"offset": 5, "limit": 4}).json()
        assert page["total"] == 12 and [t["number"] for t in page["items"]] == [5, 6, 7, 8]
        everything = client.get(f"/campaigns/{body['id']}/trials", params={"limit": 1000}).json()["items"]
        values = [t["value"] for t in everything]
        assert done["best"]["value"] == min(values)
        assert done["best"]["config"] == everything[values.index(min(values))]["config"]

        trial = client.get(f"/campaigns/{body['id']}/trials/{done['best']['trial']}").json()
        assert [m["repeat"] for m in trial["measurements"]] == [0, 1]  # every repeat, with its environment
        assert all(m["env"]["engine"] == "dataset" and "PERF" in m["metrics"] for m in trial["measurements"])
        assert trial["value"] == pytest.approx(sum(m["metrics"]["PERF"] for m in trial["measurements"]) / 2)
        assert client.get(f"/campaigns/{body['id']}/trials/12").status_code == 404

        assert {"report", "trials", "near_optimal"} <= body["links"].keys() and "pareto" not in body["links"]
        for name in ("trials", "convergence", "near_optimal", "report"):  # every link a reader can follow works
            assert client.get(body["links"][name]).status_code == 200, name
        near = client.get(f"/campaigns/{body['id']}/near-optimal", params={"within": 0.5}).json()
        assert near["items"][0]["value"] == near["best_value"] == min(values)
        assert near["total"] == sum(v <= min(values) / 0.5 for v in values)
        assert client.get(f"/campaigns/{body['id']}/near-optimal", params={"within": 1.5}).status_code == 422

        curve = client.get(f"/campaigns/{body['id']}/convergence").json()
        assert curve["evaluation"] == list(range(1, 13)) and curve["trial"] == list(range(12))
        assert curve["value"] == values
        assert curve["best"] == [min(values[: k + 1]) for k in range(12)]
        assert all(t is not None and t >= 0 for t in curve["elapsed_s"])
        assert curve["elapsed_s"] == sorted(curve["elapsed_s"])

        listed = client.get("/campaigns", params={"limit": 1}).json()
        assert listed["total"] == 1 and listed["items"][0]["id"] == body["id"]


@pytest.mark.slow
def test_the_api_and_the_cli_give_the_same_numbers(tmp_path, bdbc):
    spec = bdbc_campaign(bdbc, algorithm="ga", budget=15, seed=3, algorithm_params={"population_size": 5})
    with client_for(f"sqlite:///{tmp_path / 'api.sqlite'}", tmp_path) as client:
        campaign = client.post("/campaigns", json=spec).json()
        wait_for(client, f"/campaigns/{campaign['id']}", ("finished",))
        over_rest = client.get(f"/campaigns/{campaign['id']}/trials").json()["items"]
    cli = run_cli("tune", "--dataset", str(bdbc), "--algorithm", "ga", "--param", "population_size=5", "--budget", "15",
                  "--seed", "3", "--json", db=f"sqlite:///{tmp_path / 'cli.sqlite'}", check=True)
    campaign_id = json.loads(cli.stdout.splitlines()[-1])["campaign"]
    on_the_command_line = json.loads(run_cli("trials", str(campaign_id), "--format", "json",
                                             db=f"sqlite:///{tmp_path / 'cli.sqlite'}", check=True).stdout)
    assert [(t["config"], t["value"]) for t in over_rest] == [(t["config"], t["value"]) for t in on_the_command_line]


@pytest.mark.slow
def test_which_parameters_matter_over_rest_is_what_the_cli_says(tmp_path, bdbc):
    """The design card's "reports ... parameter correlations": GET /campaigns/{id}/importance is
    `storetune importance --json`; too few trials is a 409 that says how many it needs."""
    url = f"sqlite:///{tmp_path / 'api.sqlite'}"
    with client_for(url, tmp_path) as client:
        long = client.post("/campaigns", json=bdbc_campaign(bdbc, budget=60)).json()
        short = client.post("/campaigns", json=bdbc_campaign(bdbc, budget=5, seed=2)).json()
        wait_for(client, f"/campaigns/{long['id']}", ("finished",))
        wait_for(client, f"/campaigns/{short['id']}", ("finished",))
        over_rest = client.get(long["links"]["importance"])
        assert over_rest.status_code == 200
        few = client.get(short["links"]["importance"])
        assert few.status_code == 409 and "needs at least" in few.json()["detail"]
        assert client.get("/campaigns/999/importance").status_code == 404
        assert client.get(long["links"]["importance"], params={"seed": -1}).status_code == 422
    on_the_command_line = json.loads(run_cli("importance", str(long["id"]), "--json", db=url, check=True).stdout)
    rest = over_rest.json()
    for result in (rest, on_the_command_line):  # the forest's threads sum its trees in any order: the last digits
        for p in result["parameters"]:
            p["forest_share"] = round(p["forest_share"], 9)
    assert rest == on_the_command_line
    assert over_rest.json()["table"]["configurations"] == 2560  # compared with the whole table, as the CLI does


@pytest.mark.slow
def test_cancel_drains_a_running_campaign_and_a_queued_one_never_starts(history_url, tmp_path, bdbc):
    with client_for(history_url, tmp_path, max_campaigns=1) as client:
        long = client.post("/campaigns", json=bdbc_campaign(bdbc, budget=2500)).json()
        queued = client.post("/campaigns", json=bdbc_campaign(bdbc, seed=2)).json()
        wait_for(client, f"/campaigns/{long['id']}", ("running",))
        assert client.get(f"/campaigns/{queued['id']}").json()["state"] == "queued"  # one at a time: it waits

        stopped = client.post(f"/campaigns/{queued['id']}/cancel")
        assert stopped.status_code == 200 and stopped.json()["state"] == "cancelled"
        deadline = time.monotonic() + 60
        while client.get(f"/campaigns/{long['id']}").json()["progress"]["evaluated"] < 5:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert client.post(f"/campaigns/{long['id']}/cancel").json()["cancel_requested"] is True
        drained = wait_for(client, f"/campaigns/{long['id']}", ("cancelled",))
        assert 5 <= drained["progress"]["evaluated"] < 2500
        assert set(drained["progress"]["trials_by_status"]) <= {"SUCCEEDED", "PENDING"}  # nothing left RUNNING

        assert client.post(f"/campaigns/{long['id']}/cancel").status_code == 409
        time.sleep(1)
        assert client.get(f"/campaigns/{queued['id']}").json()["progress"]["evaluated"] == 0

        resumed = client.post(f"/campaigns/{queued['id']}/resume")
        assert resumed.status_code == 200 and resumed.json()["state"] in ("queued", "running")
        assert wait_for(client, f"/campaigns/{queued['id']}", ("finished",))["progress"]["evaluated"] == 12
        assert client.post(f"/campaigns/{queued['id']}/resume").status_code == 409  # finished: nothing to resume


@pytest.mark.slow
def test_a_finished_campaign_is_deleted_with_its_trials_and_a_running_one_is_not(history_url, tmp_path, bdbc):
    with client_for(history_url, tmp_path, max_campaigns=1, token="s3cret") as client:
        auth = {"Authorization": "Bearer s3cret"}
        done = client.post("/campaigns", json=bdbc_campaign(bdbc, repeats=2), headers=auth).json()
        kept = client.post("/campaigns", json=bdbc_campaign(bdbc, seed=2), headers=auth).json()
        wait_for(client, f"/campaigns/{done['id']}", ("finished",))
        wait_for(client, f"/campaigns/{kept['id']}", ("finished",))
        long = client.post("/campaigns", json=bdbc_campaign(bdbc, budget=2500), headers=auth).json()
        wait_for(client, f"/campaigns/{long['id']}", ("running",))
        assert client.delete(f"/campaigns/{done['id']}").status_code == 401  # the token guards it
        refused = client.delete(f"/campaigns/{long['id']}", headers=auth)
        assert refused.status_code == 409 and "cancel it first" in refused.json()["detail"]

        assert client.delete(f"/campaigns/{done['id']}", headers=auth).status_code == 204
        assert client.get(f"/campaigns/{done['id']}").status_code == 404
        assert client.delete(f"/campaigns/{done['id']}", headers=auth).status_code == 404
        from sqlalchemy import create_engine, text

        engine = create_engine(history_url)
        with engine.connect() as c:  # its trials and measurements went with it; the other campaign's stayed
            trials = dict(c.execute(text("SELECT campaign_id, count(*) FROM trials GROUP BY campaign_id")).all())
            orphans = c.execute(text("SELECT count(*) FROM measurements m LEFT JOIN trials t ON m.trial_id = t.id "
                                     "WHERE t.id IS NULL")).scalar()
        engine.dispose()
        assert done["id"] not in trials and trials[kept["id"]] == 12 and orphans == 0
        assert client.get(f"/campaigns/{kept['id']}/trials").json()["total"] == 12
        client.post(f"/campaigns/{long['id']}/cancel", headers=auth)
        wait_for(client, f"/campaigns/{long['id']}", ("cancelled",))
        deadline = time.monotonic() + 30
        while (gone := client.delete(f"/campaigns/{long['id']}", headers=auth)).status_code == 409:
            assert "its worker is still ending" in gone.json()["detail"] and time.monotonic() < deadline
            time.sleep(0.2)  # cancelled, and its worker still recording its end: a moment later it can go
        assert gone.status_code == 204


def test_adaptive_repeats_over_rest_count_re_measurements_and_report_the_incumbent(history_url, tmp_path, bdbc):
    postgres = bdbc.parent / "PostgreSQL.csv"  # 22 noisy repeats per configuration
    with client_for(history_url, tmp_path) as client:
        created = client.post("/campaigns", json={"runner": "dataset", "runner_settings": {"dataset": str(postgres)},
                                                  "budget": 30, "seed": 2, "max_repeats": 3})
        assert created.status_code == 201, created.text
        done = wait_for(client, f"/campaigns/{created.json()['id']}", ("finished",))
        assert done["max_repeats"] == 3 and done["progress"]["evaluated"] == 30
        trials = client.get(f"/campaigns/{done['id']}/trials", params={"limit": 1000}).json()["items"]
        assert len(trials) < 30  # some evaluations re-measured a challenger
        best = client.get(f"/campaigns/{done['id']}/trials/{done['best']['trial']}").json()
        runs = [len(client.get(f"/campaigns/{done['id']}/trials/{t['number']}").json()["measurements"])
                for t in trials]
        assert len(best["measurements"]) == max(runs)


def test_a_campaign_with_asha_over_rest_spends_its_device_seconds_and_shows_stopped_runs(sqlite_url, tmp_path):
    from test_fidelity import _series_table

    table = _series_table(tmp_path / "measurements.csv")
    with client_for(sqlite_url, tmp_path, data_dirs=str(tmp_path)) as client:
        created = client.post("/campaigns", json={"runner": "dataset", "runner_settings": {"dataset": str(table)},
                                                  "fidelity": "asha", "budget_s": 60, "seed": 4})
        assert created.status_code == 201, created.text
        done = wait_for(client, f"/campaigns/{created.json()['id']}", ("finished",))
        assert done["fidelity"] == {"kind": "asha", "rungs": [1.0, 3.0, 9.0], "eta": 3.0, "burn_in": BURN_IN, "guard": GUARD,
                                    "budget_s": 60.0}
        assert done["budget"] == 120 and "device-seconds was spent" in done["note"]  # 60 configurations, 2 runs each
        assert done["progress"]["trials_by_status"]["STOPPED"] > 0
        trials = client.get(f"/campaigns/{done['id']}/trials", params={"limit": 100}).json()["items"]
        stopped = next(t for t in trials if t["status"] == "STOPPED")
        shown = client.get(f"/campaigns/{done['id']}/trials/{stopped['number']}").json()
        [m] = shown["measurements"]
        assert m["env"]["run_length_s"] in (1, 3) and len(m["series"]["ops_per_s"]) == m["env"]["run_length_s"]
        refused = client.post("/campaigns", json={"runner": "dataset", "runner_settings": {"dataset": str(table)},
                                                  "guard": 0})
        assert refused.status_code == 422 and "eta, min_run_s, burn_in and guard set the rungs of fidelity asha" in refused.text
        refused = client.post("/campaigns", json={"runner": "dataset", "runner_settings": {"dataset": str(table)},
                                                  "fidelity": "asha", "budget_s": 60, "burn_in": -1})
        assert refused.status_code == 422 and "burn_in" in refused.text
        plain = client.post("/campaigns", json={"runner": "dataset", "runner_settings": {"dataset": str(table)},
                                                "fidelity": "asha", "budget_s": 60, "seed": 4, "burn_in": 0, "guard": 0})
        assert plain.status_code == 201, plain.text
        done = wait_for(client, f"/campaigns/{plain.json()['id']}", ("finished",))
        assert (done["fidelity"]["burn_in"], done["fidelity"]["guard"]) == (0, 0)  # plain ASHA, recorded to resume so


def test_tables_read_with_a_warning_say_so_in_the_response_that_created_the_run(sqlite_url, tmp_path):
    """Python's warnings reach no REST client: two tables that would be read as one say so in the 201."""
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text("a,b,PERF-\n1,1,2\n1,2,3\n2,1,4\n2,2,6\n")
    second.write_text("a,b,PERF-\n1,1,8\n2,2,5\n")
    both = [str(first), str(second)]
    with client_for(sqlite_url, tmp_path, data_dirs=str(tmp_path)) as client, \
            pytest.warns(TableWarning, match="appear in more than one of first.csv, second.csv"):  # the service's log
        created = client.post("/campaigns", json={"runner": "dataset", "runner_settings": {"dataset": both},
                                                  "algorithm": "random", "budget": 3})
        assert created.status_code == 201, created.text
        [warning] = created.json()["warnings"]
        assert warning.startswith("2 of 4 configurations appear in more than one of first.csv, second.csv")
        done = wait_for(client, f"/campaigns/{created.json()['id']}", ("finished",))
        assert done["warnings"] == []  # not stored: said once, when the request was checked
        compared = client.post("/comparisons", json={"dataset": both, "algorithms": ["random"], "seeds": 1,
                                                     "budget": 3})
        assert compared.status_code == 201 and compared.json()["warnings"] == [warning], compared.text
        wait_for(client, f"/comparisons/{compared.json()['id']}", ("finished",))
        alone = client.post("/campaigns", json={"runner": "dataset", "runner_settings": {"dataset": str(first)},
                                                "algorithm": "random", "budget": 3})
        assert alone.status_code == 201 and alone.json()["warnings"] == []
        wait_for(client, f"/campaigns/{alone.json()['id']}", ("finished",))


def test_bad_input_is_a_4xx_naming_the_field(history_url, tmp_path, bdbc):
    outside = tmp_path / "elsewhere.csv"
    outside.write_text("a,b,PERF\n1,2,3\n")

    def post(body: dict, status: int, where: list) -> None:
        response = client.post("/campaigns", json=body)
        assert response.status_code == status, response.text
        assert response.json()["detail"][0]["loc"][: len(where)] == where, response.text

    with client_for(history_url, tmp_path, allow_devices="/dev/sdz") as client:
        post({**bdbc_campaign(bdbc), "runner": "nope"}, 422, ["body", "runner"])
        post(bdbc_campaign(bdbc, algorithm="nope"), 422, ["body", "algorithm"])
        post(bdbc_campaign(bdbc, algorithm="ga", algorithm_params={"mutation_rate": 2}), 422,
             ["body", "algorithm_params", "mutation_rate"])
        post(bdbc_campaign(bdbc, algorithm="ga", algorithm_params={"no_such": 1}), 422,
             ["body", "algorithm_params", "no_such"])
        post(bdbc_campaign(bdbc, budget=0), 422, ["body", "budget"])
        post(bdbc_campaign(bdbc, budget=100_000), 422, ["body", "budget"])  # more than the table's configurations
        post(bdbc_campaign(bdbc, parallel=0), 422, ["body", "parallel"])
        post(bdbc_campaign(bdbc, repeats=3, max_repeats=2), 422, ["body", "max_repeats"])  # a cap below the repeats
        post(bdbc_campaign(bdbc, max_repeats=1000), 422, ["body", "max_repeats"])
        post(bdbc_campaign(bdbc, fidelity="asha"), 422, ["body", "fidelity"])  # a table without per-second series
        post(bdbc_campaign(bdbc, budget_s=-1), 422, ["body", "budget_s"])
        post(bdbc_campaign(bdbc, parallel=10_000), 422, ["body", "parallel"])  # more than the server allows
        post(bdbc_campaign(bdbc, metric="colour"), 422, ["body", "metric"])
        post({**bdbc_campaign(bdbc), "runner_settings": {"dataset": str(outside)}}, 403,
             ["body", "runner_settings", "dataset", 0])
        post({**bdbc_campaign(bdbc), "runner_settings": {"dataset": str(bdbc), "colour": 1}}, 422,
             ["body", "runner_settings", "colour"])
        post({"runner": "device", "runner_settings": {"space": "no_such_space"}}, 422,
             ["body", "runner_settings", "space"])
        post({"runner": "device", "runner_settings": {"workload": "tpcc"}}, 422, ["body", "runner_settings", "workload"])
        post({"runner": "device", "runner_settings": {"device": "/dev/sda"}}, 403, ["body", "runner_settings", "device"])
        post({"runner": "device", "runner_settings": {"device": "/dev/sdz", "allow_device": ["/dev/sda"]}}, 422,
             ["body", "runner_settings", "allow_device"])
        post({"runner": "command", "runner_settings": {"command": "rm -rf /", "space": "storage_v1"}}, 403,
             ["body", "runner"])
        post({**bdbc_campaign(bdbc), "fix": {"no_such_knob": 1}}, 422, ["body", "fix"])
        post({**bdbc_campaign(bdbc), "runner_settings": {"dataset": "datasets/" + "a" * 300}}, 422,
             ["body", "runner_settings", "dataset", 0])  # a name too long for the file system
        post({"runner": "device", "runner_settings": {"space": "../../etc/some"}}, 422,
             ["body", "runner_settings", "space"])  # a space is a name, never a path
        post({"runner": "device", "runner_settings": {"loop_size_mib": 10**7}}, 422,
             ["body", "runner_settings", "loop_size_mib"])
        post({"runner": "device", "runner_settings": {"loop_size_mib": "lots"}}, 422,
             ["body", "runner_settings", "loop_size_mib"])
        malformed = client.post("/campaigns", content=b'{"runner": "dataset",', headers={"content-type": "application/json"})
        assert malformed.status_code == 422
        assert client.get("/campaigns/999").status_code == 404
        assert client.post("/campaigns/999/cancel").status_code == 404
        assert client.get("/campaigns").json()["total"] == 0  # nothing was written by a refused request
        bad_page = client.get("/campaigns", params={"limit": 0})
        assert bad_page.status_code == 422 and "limit" in bad_page.json()["detail"][0]["loc"]
        assert client.post("/comparisons", json={"dataset": [str(bdbc)], "algorithms": ["ga:mutation_rate=7"]}
                           ).json()["detail"][0]["loc"] == ["body", "algorithms"]
        assert client.post("/comparisons", json={"dataset": [str(bdbc)], "algorithms": ["random,ga"]}
                           ).json()["detail"][0]["loc"] == ["body", "algorithms", 0]
        assert client.get("/campaigns", params={"state": "bogus"}).status_code == 422
        # the layers below name the command line's options; a REST client is told its own JSON paths
        sweep = str(ROOT / "datasets" / "loop-storage-v3")  # four workloads: one must be chosen
        no_context = client.post("/campaigns", json={"runner": "dataset", "runner_settings": {"dataset": sweep}})
        [detail] = no_context.json()["detail"]
        assert detail["loc"] == ["body", "runner_settings", "context"] and "--" not in detail["msg"], detail
        assert "choose one with runner_settings.context workload=<value>" in detail["msg"]
        [detail] = client.post("/comparisons", json={"dataset": str(bdbc), "budget": 5000}).json()["detail"]
        assert detail["loc"] == ["body", "budget"] and "use budget 2560 or less" in detail["msg"], detail
        # an unknown algorithm or metric names its field, as for a campaign (both said only ["body"])
        for body, field in (({"algorithms": ["random", "nosuch"]}, "algorithms"), ({"metric": "nosuch"}, "metric")):
            [detail] = client.post("/comparisons", json={"dataset": str(bdbc), **body}).json()["detail"]
            assert detail["loc"] == ["body", field] and "nosuch" in detail["msg"], detail
        assert client.get("/comparisons").json()["total"] == 0  # and nothing was recorded


def test_a_token_guards_every_mutating_call_and_reads_stay_open(history_url, tmp_path, bdbc):
    with client_for(history_url, tmp_path, token="s3cret") as client:
        assert client.post("/campaigns", json=bdbc_campaign(bdbc)).status_code == 401
        wrong = client.post("/campaigns", json=bdbc_campaign(bdbc), headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        assert client.post("/comparisons", json={"dataset": [str(bdbc)]}).status_code == 401
        assert client.post("/campaigns/1/cancel").status_code == 401
        # a body that is not JSON is refused for the token first, before it is parsed
        for path in ("/campaigns", "/comparisons", "/fingerprints"):
            bad = client.post(path, content="{not json", headers={"Content-Type": "application/json"})
            assert bad.status_code == 401 and bad.headers["www-authenticate"] == "Bearer", (path, bad.text)
        assert client.get("/campaigns", params={"limit": "x"}).status_code == 422  # a read's bad query: no token asked
        # api.deps.guarded answers 401 before 422 by the method: right only while every call that is not a
        # read carries Auth, which answers a well-formed call without the token with 401 too
        from storetune.api.service.deps import READS

        calls = [(method.upper(), re.sub(r"\{[^}]+\}", "1", path))
                 for path, item in client.get("/openapi.json").json()["paths"].items()
                 for method in item if method.upper() not in READS]
        assert len(calls) >= 5
        for method, path in calls:
            assert client.request(method, path, json={}).status_code == 401, (method, path)
        malformed = client.post("/campaigns", content="{not json", headers={"Content-Type": "application/json",
                                                                             "Authorization": "Bearer s3cret"})
        assert malformed.status_code == 422 and malformed.json()["detail"][0]["type"] == "json_invalid"
        assert client.get("/campaigns").status_code == 200 and client.get("/health").json()["auth"] is True
        ok = client.post("/campaigns", json=bdbc_campaign(bdbc), headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 201


def test_the_catalog_says_what_can_be_asked_for(history_url, tmp_path, bdbc):
    with client_for(history_url, tmp_path) as client:
        spaces = client.get("/spaces").json()
        assert {"storage_v1", "storage_v2", "admission"} <= {s["name"] for s in spaces["items"]}
        v2 = client.get("/spaces/storage_v2").json()
        assert v2["configurations"] == 400_320 and any(p["name"] == "io_scheduler" for p in v2["parameters"])
        assert client.get("/spaces/nope").status_code == 404

        runners = {r["name"]: r["settings_schema"] for r in client.get("/runners").json()["items"]}
        assert set(runners) == set(RUNNERS) >= {"dataset", "command", "device", "admission"}  # the registry's
        assert runners["device"]["properties"]["runtime_s"]["default"] == 10.0
        assert runners["dataset"]["required"] == ["dataset"]

        algorithms = {a["name"]: a for a in client.get("/algorithms").json()["items"]}
        assert client.get("/algorithms", params={"offset": 1, "limit": 2}).json()["total"] == len(algorithms)
        assert {"random", "sa", "ga", "bo", "dqn"} <= set(algorithms)
        mutation = algorithms["ga"]["hyperparameters"]["properties"]["mutation_rate"]
        assert (mutation["minimum"], mutation["maximum"], mutation["default"]) == (0, 1, 0.1)

        tables = client.get("/datasets", params={"limit": 1000}).json()
        paths = {d["path"]: d for d in tables["items"]}
        assert paths[str(bdbc.resolve())]["kind"] == "table"  # the server names what it resolved
        own = ROOT / "datasets" / "loop-storage-v2"
        assert paths[str(own)]["kind"] == "dataset"
        assert tables["total"] == len(tables["items"])

        health = client.get("/health").json()
        assert health["status"] == "ok" and health["executor"]["kind"] == "local"
        assert client.get("/openapi.json").json()["info"]["title"] == "StoreTune"
        assert client.get("/docs").status_code == 200


@pytest.mark.slow
def test_campaigns_of_an_exclusive_runner_run_one_at_a_time(tmp_path, bdbc, monkeypatch):
    import storetune.api.service.scheduler as scheduler_module
    from storetune.runners import runner_class

    class Exclusive:
        exclusive = True

    monkeypatch.setattr(scheduler_module, "runner_class", lambda name: Exclusive if name == "dataset"
                        else runner_class(name))
    with client_for(f"sqlite:///{tmp_path / 'h.sqlite'}", tmp_path, max_campaigns=2) as client:
        first = client.post("/campaigns", json=bdbc_campaign(bdbc, budget=2500)).json()
        second = client.post("/campaigns", json=bdbc_campaign(bdbc, seed=2)).json()
        wait_for(client, f"/campaigns/{first['id']}", ("running",))
        time.sleep(1.5)
        assert client.get(f"/campaigns/{second['id']}").json()["state"] == "queued"  # a slot is free; the disk is not
        client.post(f"/campaigns/{first['id']}/cancel")
        wait_for(client, f"/campaigns/{first['id']}", ("cancelled",))
        assert wait_for(client, f"/campaigns/{second['id']}", ("finished",))["progress"]["evaluated"] == 12


def test_resuming_a_cli_campaign_the_server_would_not_run_names_the_campaign(sqlite_url, tmp_path):
    """A CLI campaign of the command runner, resumed over REST on a server that runs no commands: the 403
    pointed at ["body", "runner"], in a request that has no body."""
    from storetune.tuner import History

    created = run_cli("tune", "--runner", "command", "--space", "storage_v1", "--command", "echo '{\"x\": 1}'",
                      "--metric", "x", "--direction", "max", "--budget", "1", "--json", db=sqlite_url, check=True)
    campaign = json.loads(created.stdout.splitlines()[-1])["campaign"]
    assert History(sqlite_url).transition(campaign, ["finished"], state="cancelled")
    with client_for(sqlite_url, tmp_path) as client:
        refused = client.post(f"/campaigns/{campaign}/resume")
        assert refused.status_code == 403, refused.text
        [detail] = refused.json()["detail"]
        assert detail["loc"] == ["path", "campaign_id"] and "this campaign's command runner" in detail["msg"]
        assert client.get(f"/campaigns/{campaign}").json()["state"] == "cancelled"  # nothing changed
