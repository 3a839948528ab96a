"""The REST service's comparisons: cancelled and resumed, their success curves, and judged on a re-measurement,
on a real SQLite history and on a real PostgreSQL (``history_url``), in real worker processes of the service."""

from __future__ import annotations

import time

import pytest

from storetune.runners.tables import TableWarning
from rest_client import client_for, wait_for


@pytest.mark.slow
def test_a_comparison_is_cancelled_and_resumed_keeping_the_seeds_it_ran(history_url, tmp_path, bdbc):
    with client_for(history_url, tmp_path) as client:
        created = client.post("/comparisons", json={"dataset": str(bdbc), "algorithms": ["random", "sa"],
                                                    "seeds": 40, "budget": 60})
        assert created.status_code == 201, created.text
        path = f"/comparisons/{created.json()['id']}"
        deadline = time.monotonic() + 120
        while client.get(path).json()["campaigns"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        cancelled = client.post(f"{path}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        stopped = wait_for(client, path, ("cancelled", "finished"))
        assert stopped["state"] == "cancelled", "the comparison finished before the cancel reached it"
        assert stopped["results"] is None and "resume it to run the others" in stopped["note"]
        from storetune.tuner import History

        history = History(history_url)
        before = {(c.algorithm, c.seed): c.id for c in history.comparison_campaigns(created.json()["id"])}
        assert 2 <= len(before) < 80
        assert client.post(f"{path}/cancel").status_code == 409

        resumed = client.post(f"{path}/resume")
        assert resumed.status_code == 200 and resumed.json()["state"] in ("queued", "running")
        done = wait_for(client, path, ("finished",))
        after = {(c.algorithm, c.seed): c.id for c in history.comparison_campaigns(created.json()["id"])}
        assert len(after) == 80 == done["campaigns"]  # every seed once: the resume ran only the others
        assert all(after[key] == campaign for key, campaign in before.items())
        assert all(a["evals_to_near_optimal"] and len(a["evals_to_near_optimal"]) == 40
                   for a in done["results"]["algorithms"].values())
        assert client.post(f"{path}/resume").status_code == 409


@pytest.mark.slow
def test_a_comparison_over_rest_has_success_curves(history_url, tmp_path, bdbc):
    with client_for(history_url, tmp_path) as client:
        created = client.post("/comparisons", json={
            "dataset": [str(bdbc)], "algorithms": ["random", {"algorithm": "ga", "params": {"population_size": 6}}],
            "seeds": 2, "budget": 20})
        assert created.status_code == 201, created.text
        done = wait_for(client, f"/comparisons/{created.json()['id']}", ("finished",))
        assert set(done["results"]["algorithms"]) == {"random", "ga[population_size=6]"}
        assert all(len(a["success_at"]) == 20 for a in done["results"]["algorithms"].values())
        assert done["campaigns"] == 4
        assert client.get("/comparisons").json()["total"] == 1
        assert client.get(done["links"]["report"]).status_code == 200  # the links name the report
        # within 0.5: 768 of BDBC's 2,560 are near-optimal, so every seed gets there well before 20
        # the dataset as one path, as POST /campaigns takes it (a list was required)
        stopping = client.post("/comparisons", json={"dataset": str(bdbc), "algorithms": ["random"], "seeds": 2,
                                                     "budget": 20, "within": 0.5, "stop_at_near_optimal": True})
        assert stopping.status_code == 201 and stopping.json()["settings"]["stop_at_near_optimal"] is True
        stopped = wait_for(client, f"/comparisons/{stopping.json()['id']}", ("finished",))
        assert stopped["results"]["stop_at_near_optimal"] is True
        random = stopped["results"]["algorithms"]["random"]
        assert random["instant_mean"] is None and max(random["evals_to_near_optimal"]) < 20
        from storetune.tuner import History

        history = History(history_url)
        seeds = [c for c in history.campaigns() if c.comparison_id == stopping.json()["id"]]
        assert sorted(len(history.trials(c.id)) for c in seeds) == sorted(random["evals_to_near_optimal"])


def test_a_comparison_over_rest_is_judged_on_its_judge_and_warns_of_lucky_targets(sqlite_url, tmp_path):
    """A table whose best mean is one lucky run: unjudged, the 201 warns of it; judged on a re-measurement it does
    not, and the comparison, its results and its report name the judge; a judge outside the data directories,
    or one that lacks a configuration, is refused at `judge`."""
    rows = [f"{a},{b},{(a - 3) ** 2 + (b - 1) ** 2 + 1}" for a in range(6) for b in range(6)]
    truth, noisy, short = tmp_path / "truth.csv", tmp_path / "noisy.csv", tmp_path / "short.csv"
    truth.write_text("\n".join(["a,b,PERF-", *rows]) + "\n")
    noisy.write_text("\n".join(["a,b,PERF-", *[r for r in rows if not r.startswith("0,0,")] * 2, "0,0,0.5"]) + "\n")
    short.write_text("\n".join(["a,b,PERF-", *rows[:-1]]) + "\n")
    body = {"dataset": str(noisy), "algorithms": ["random"], "seeds": 1, "budget": 5}
    with client_for(sqlite_url, tmp_path, data_dirs=str(tmp_path)) as client, pytest.warns(TableWarning):
        plain = client.post("/comparisons", json=body)
        assert plain.status_code == 201 and "may be lucky repeats" in " ".join(plain.json()["warnings"]), plain.text
        judged = client.post("/comparisons", json={**body, "judge": [str(truth)]})
        assert judged.status_code == 201 and judged.json()["warnings"] == [], judged.text
        done = wait_for(client, f"/comparisons/{judged.json()['id']}", ("finished",))
        assert done["settings"]["judge"] == done["results"]["judge"] == [str(truth.resolve())]
        assert "judged on the means of" in client.get(f"/comparisons/{done['id']}/report").text
        outside = client.post("/comparisons", json={**body, "judge": ["/etc/passwd"]})
        assert outside.status_code == 403 and outside.json()["detail"][0]["loc"] == ["body", "judge", 0], outside.text
        lacking = client.post("/comparisons", json={**body, "judge": [str(short)]})
        assert lacking.status_code == 422 and lacking.json()["detail"][0]["loc"] == ["body", "judge"], lacking.text
        assert "it lacks 1 and adds 0" in lacking.text
