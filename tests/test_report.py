"""The web report in a real browser: headless Chromium from Debian's packages loads the report of a
finished campaign (the CLI's self-contained file), of a running one (the service's live page) and of a
comparison; every chart must have drawn data points, the console must have no error, and a
screenshot of each is saved under the test's directory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, STORETUNE, run_cli

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs chromium and chromium-driver (make test installs them)"),
]

CHARTS = """  // _fullData: what plotly drew, its arrays decoded (numpy arrays arrive base64-encoded in .data)
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
  id: gd.id,
  points: (gd._fullData || []).reduce((n, t) => n + Math.max((t.x || []).length, (t.y || []).length,
      ((t.dimensions || [])[0] || {values: []}).values.length), 0),
  title: ((gd.layout || {}).title || {}).text || '',
}));
"""


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium fetch a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,4000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def check_page(driver, url: str, shot: Path, expected: set[str]) -> list[dict]:
    driver.get(url)
    deadline = time.monotonic() + 30
    charts: list[dict] = []
    while time.monotonic() < deadline:
        charts = driver.execute_script(CHARTS)
        if {c["id"] for c in charts} >= expected:
            break
        time.sleep(0.3)
    driver.save_screenshot(str(shot))
    assert {c["id"] for c in charts} >= expected, charts
    empty = [c for c in charts if c["points"] == 0]
    assert not empty, f"charts without data points: {empty}"
    assert all(c["title"] for c in charts)
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    return charts


CAMPAIGN_CHARTS = {f"chart-{n}" for n in ("convergence", "convergence_time", "statuses", "importance",
                                           "coefficients", "parallel")}


def test_the_report_of_a_finished_campaign_and_of_a_comparison(browser, sqlite_url, bdbc, tmp_path):
    campaign = json.loads(run_cli("tune", "--dataset", str(bdbc), "--budget", "40", "--seed", "1", "--json",
                                  db=sqlite_url, check=True).stdout.splitlines()[-1])["campaign"]
    out = tmp_path / "campaign.html"
    run_cli("report", str(campaign), "--out", str(out), db=sqlite_url, check=True)
    check_page(browser, out.as_uri(), tmp_path / "campaign.png", CAMPAIGN_CHARTS)
    text = browser.find_element("tag name", "body").text
    assert "Near-optimal configurations" in text and "what each evaluation cost production" in text
    # the parallel coordinates are SVG lines; one click swaps in plotly's WebGL parcoords (select by axis), and back
    browser.find_element("id", "toggle-parallel").click()
    kind = "return document.getElementById('chart-parallel').data.map(t => t.type)"
    deadline = time.monotonic() + 20
    while browser.execute_script(kind) != ["parcoords"]:
        assert time.monotonic() < deadline, browser.execute_script(kind)
        time.sleep(0.2)
    lines = browser.execute_script("return document.getElementById('chart-parallel')._fullData[0].dimensions[0]"
                                   ".values.length")
    assert lines == 40 and "back to the lines" in browser.find_element("id", "toggle-parallel").text
    browser.save_screenshot(str(tmp_path / "parcoords.png"))
    browser.find_element("id", "toggle-parallel").click()
    assert set(browser.execute_script(kind)) == {"scatter"}
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]

    # a Pareto campaign draws its front: two objectives of the same table, the set joined, the reference marked
    ss_o = bdbc.parent / "SS-O.csv"
    pareto = json.loads(run_cli("tune", "--dataset", str(ss_o), "--objective", "pareto:Performance,Cpu",
                                "--budget", "30", "--seed", "1", "--json", db=sqlite_url, check=True,
                                ).stdout.splitlines()[-1])["campaign"]
    out = tmp_path / "pareto.html"
    run_cli("report", str(pareto), "--out", str(out), db=sqlite_url, check=True)
    charts = check_page(browser, out.as_uri(), tmp_path / "pareto.png", {"chart-pareto"})
    assert next(c for c in charts if c["id"] == "chart-pareto")["points"] >= 30 + 1  # every trial and the cross

    compare = run_cli("compare", "--dataset", str(bdbc), "--algorithms", "random,ga", "--seeds", "2", "--budget",
                      "20", "--workers", "1", "--json", db=sqlite_url, check=True)
    comparison = json.loads(compare.stdout.splitlines()[-1])["comparison"]
    out = tmp_path / "compare.html"
    run_cli("report", "--comparison", str(comparison), "--out", str(out), db=sqlite_url, check=True)
    charts = check_page(browser, out.as_uri(), tmp_path / "compare.png",
                        {f"chart-{n}" for n in ("success", "best_so_far", "instant", "evals")})
    success = next(c for c in charts if c["id"] == "chart-success")
    assert success["points"] == 3 * 20  # random, ga and random search's exact curve


def test_a_running_campaign_s_report_updates_itself(browser, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STORETUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'h.sqlite'}",
           "STORETUNE_ALLOW_COMMANDS": "1"}
    # a benchmark of 0.1 s a run: the campaign is still running when the test cancels it, however loaded the
    # machine (a replayed table ran through its whole budget first under load, and the test failed)
    bench = tmp_path / "bench.sh"
    bench.write_text('#!/bin/sh\nsleep 0.1\necho "{\\"ops\\": $(date +%s%N)}"\n')  # each run a new best
    bench.chmod(0o755)
    service = subprocess.Popen([*STORETUNE, "serve", "--port", str(port), "--log-level", "warning"], env=env,
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        import httpx2

        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx2.get(f"{base}/health").status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert time.monotonic() < deadline and service.poll() is None
            time.sleep(0.2)
        campaign = httpx2.post(f"{base}/campaigns", json={
            "runner": "command", "runner_settings": {"command": str(bench), "space": "storage_v1"}, "metric": "ops",
            "direction": "max", "algorithm": "random", "budget": 5000, "seed": 1}).json()
        while httpx2.get(f"{base}/campaigns/{campaign['id']}").json()["progress"]["evaluated"] < 30:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        check_page(browser, f"{base}/campaigns/{campaign['id']}/report", tmp_path / "live.png", CAMPAIGN_CHARTS)
        last_evaluation = ("const d = document.getElementById('chart-convergence').data;"  # the best-so-far line's end
                           "const x = d[d.length - 1].x; return x[x.length - 1];")
        first = browser.execute_script(last_evaluation)
        deadline = time.monotonic() + 30
        # it redraws with the trials measured since (a refresh may have come before `first` was read: waited for)
        while browser.execute_script(last_evaluation) <= first:
            assert time.monotonic() < deadline, "the live page never redrew"
            time.sleep(0.3)
        assert "live: updated" in browser.find_element("id", "live").text
        # cancelled, the page that watched it stops saying "live" (it kept "live: updated" for good)
        httpx2.post(f"{base}/campaigns/{campaign['id']}/cancel")
        deadline = time.monotonic() + 60
        while "no longer refreshed" not in browser.find_element("id", "live").text:
            assert time.monotonic() < deadline, browser.find_element("id", "live").text
            time.sleep(0.3)
        assert browser.find_element("id", "live").text.startswith("cancelled at ")
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert httpx2.get(f"{base}/campaigns/999/report").status_code == 404
    finally:
        os.killpg(service.pid, signal.SIGINT)
        try:
            service.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(service.pid, signal.SIGKILL)
