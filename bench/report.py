"""Benchmark: the web report at 100, 1,000 and 10,000 trials, against optuna-dashboard's page for an
Optuna study holding the same trials; and StoreTune's importance against Optuna's fANOVA.

    .venv/bin/pip install -e '.[test,bench]'          # selenium; Optuna and optuna-dashboard, the peer
    apt-get install chromium chromium-driver          # make test installs them
    .venv/bin/python bench/report.py [--sizes 100,1000,10000] [--json]

For each size, in a temporary directory:
1. A campaign of that many trials (random search replaying ../shared/datasets/moot_configs/7z.csv)
   through StoreTune's loop into a fresh SQLite history, and the same trials in an Optuna study
   (bench/api_load.py's ingestion).
2. Build: the seconds `storetune report` spends on the report's data (tuner/report.py: convergence,
   near-optimal set, OLS/ANOVA and forest importance, the parallel-coordinates sample) and on the page
   (api/report.py: the plotly figures and the HTML).
3. Render: headless Chromium (Debian's, through Selenium) opens the self-contained file; the clock
   stops when every chart has drawn data points. Each size is a new file, so the browser compiles the
   4.8 MB of plotly.js inlined in it afresh, as it does for a user opening a new report.
4. Served: one `storetune serve`, started before the first size, holds every size's campaign; the
   browser opens GET /campaigns/{id}/report, the campaign's first view: the server builds the report,
   then the page draws with plotly.js from /static, which the browser keeps in its cache from one size
   to the next, as a user's would. The clock runs from navigation to every chart drawn, so this one
   figure is build + render.
5. The peer: the same browser opens optuna-dashboard's page of the study (its own server, threaded
   wsgiref; its JavaScript bundle cached the same way) and the clock stops when its first plot has
   drawn data points (its history plot), or after --peer-timeout seconds.
6. Importance on the first --fanova-trials trials: Optuna's FanovaImportanceEvaluator, against StoreTune's
   forest share and ANOVA share on the same trials: Spearman's rho of the rankings (over parameters
   that vary).
Target: build + render <= 2 s at 10,000 trials, for the self-contained file and for the served page.

The clients, the servers and the browser share the machine's cores: the load average is printed at the
top, and figures measured beside other work are not results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from api_load import free_port, ingest_optuna, ingest_storetune, start, stop, tool, wait_ready  # noqa: E402

TARGET_S = 2.0
READY = """
const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
const drawn = plots.filter(gd => (gd._fullData || []).some(t => Math.max((t.x || []).length, (t.y || []).length,
    ((t.dimensions || [])[0] || {values: []}).values.length) > 0));
return [plots.length, drawn.length];
"""


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        raise SystemExit("needs Debian's chromium and chromium-driver (make test installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,3000"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


def render(driver: Any, url: str, expect_all: bool, timeout: float) -> float | None:
    """Seconds from navigation until the charts have drawn data (all of them, or the first one)."""
    started = time.perf_counter()
    driver.get(url)
    while time.perf_counter() - started < timeout:
        plots, drawn = driver.execute_script(READY)
        if plots and (drawn == plots if expect_all else drawn >= 1):
            return time.perf_counter() - started
        time.sleep(0.05)
    return None


def fanova_agreement(study_url: str, ours: dict[str, Any]) -> dict[str, Any]:
    import optuna
    from optuna.importance import FanovaImportanceEvaluator
    from scipy.stats import spearmanr

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="7z-random", storage=study_url)
    started = time.perf_counter()
    theirs = optuna.importance.get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=0))
    seconds = time.perf_counter() - started
    names = [p["name"] for p in ours["parameters"] if p["name"] in theirs]
    fanova = [theirs[n] for n in names]
    by_name = {p["name"]: p for p in ours["parameters"]}
    return {
        "parameters": len(names), "optuna_seconds": seconds,
        "forest_vs_fanova": float(spearmanr([by_name[n]["forest_share"] for n in names], fanova).statistic),
        "anova_vs_fanova": float(spearmanr([by_name[n]["anova_share"] for n in names], fanova).statistic),
        "top3": {"ours_forest": sorted(names, key=lambda n: -by_name[n]["forest_share"])[:3],
                 "ours_anova": sorted(names, key=lambda n: -by_name[n]["anova_share"])[:3],
                 "optuna_fanova": list(theirs)[:3]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--peer-timeout", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fanova-trials", type=int, default=300,
                        help="Trials of the fANOVA comparison (Optuna's evaluator is slow: minutes at 300)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from storetune.api.report.page import page
    from storetune.tuner.analysis.importance import importance
    from storetune.tuner.analysis.report import campaign_data

    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"machine load: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min) on {os.cpu_count()} cores",
          flush=True)
    report: dict[str, Any] = {"sizes": {}}
    import httpx2

    root = Path(tempfile.mkdtemp(prefix="storetune-report-"))
    served_url = f"sqlite:///{root / 'ours.sqlite'}"  # every size's campaign, behind one running service
    port = free_port()
    ours_proc = start([tool("storetune"), "serve", "--host", "127.0.0.1", "--port", str(port), "--db", served_url,
                       "--log-level", "warning"], root / "serve.log", {**os.environ, "STORETUNE_DATABASE_URL": served_url})
    driver = browser()
    try:
        wait_ready(httpx2, ours_proc, f"http://127.0.0.1:{port}", "/health", root / "serve.log")
        print(f"{'':>8}{'self-contained file':^30}{'served':^20}{'optuna-dashboard':^18}", flush=True)
        print(f"{'trials':>8}{'build s':>10}{'render s':>10}{'total s':>10}{'total s':>10}{'/ peer':>10}"
              f"{'render s':>18}{'file MB':>9}", flush=True)
        for n in sizes:
            work = root / str(n)
            work.mkdir()
            peer_proc = None
            try:
                history, campaign_id, _, recorded, space = ingest_storetune(served_url, n, args.seed)
                peer_url = f"sqlite:///{work / 'optuna.sqlite'}"
                study_id, _ = ingest_optuna(peer_url, recorded, space, history.campaign(campaign_id).objective_direction)
                started = time.perf_counter()
                data = campaign_data(history, campaign_id)
                html = page(data)
                build = time.perf_counter() - started
                out = work / "report.html"
                out.write_text(html, encoding="utf-8")
                ours = render(driver, out.as_uri(), expect_all=True, timeout=60)
                served = render(driver, f"http://127.0.0.1:{port}/campaigns/{campaign_id}/report", expect_all=True,
                                timeout=60)
                peer_port = free_port()
                peer_proc = start([tool("optuna-dashboard"), peer_url, "--host", "127.0.0.1", "--port", str(peer_port),
                                   "--server", "wsgiref", "--quiet"], work / "peer.log")
                wait_ready(httpx2, peer_proc, f"http://127.0.0.1:{peer_port}", "/api/meta", work / "peer.log")
                theirs = render(driver, f"http://127.0.0.1:{peer_port}/dashboard/studies/{study_id}", expect_all=False,
                                timeout=args.peer_timeout)
                total = build + (ours or float("nan"))
                ratio = served / theirs if theirs and served else None
                row = {"build_s": build, "render_s": ours, "total_s": total, "served_s": served,
                       "peer_render_s": theirs, "served_over_peer": ratio, "file_mb": len(html) / 1e6}
                report["sizes"][n] = row
                print(f"{n:>8,}{build:>10.2f}{_f(ours):>10}{total:>10.2f}{_f(served):>10}{_f(ratio):>10}"
                      f"{_f(theirs):>18}{len(html) / 1e6:>9.1f}", flush=True)
                if n >= args.fanova_trials and "fanova" not in report:  # the first trials of a random search
                    first = recorded[: args.fanova_trials]
                    fanova_url = f"sqlite:///{work / 'fanova.sqlite'}"
                    ingest_optuna(fanova_url, first, space, history.campaign(campaign_id).objective_direction)
                    trials = [t for t in first if t.status == "SUCCEEDED"]
                    ours_imp = importance([t.config for t in trials], [t.value for t in trials],
                                          [p.name for p in space.parameters]).to_dict()
                    report["fanova"] = {"trials": len(first), **fanova_agreement(fanova_url, ours_imp)}
            finally:
                stop(peer_proc)
    finally:
        driver.quit()
        stop(ours_proc)
        shutil.rmtree(root, ignore_errors=True)
    largest = report["sizes"].get(max(sizes))
    if "fanova" in report:
        f = report["fanova"]
        print(f"\nimportance at {f['trials']:,} trials, {f['parameters']} parameters: Spearman's rho against "
              f"Optuna's FanovaImportanceEvaluator: forest share {f['forest_vs_fanova']:.2f}, ANOVA share "
              f"{f['anova_vs_fanova']:.2f}; top 3: ours (forest) {f['top3']['ours_forest']}, ours (ANOVA) "
              f"{f['top3']['ours_anova']}, Optuna {f['top3']['optuna_fanova']} (Optuna took "
              f"{f['optuna_seconds']:.1f} s)")
    if largest:
        report["target"] = {}
        for label, key in (("self-contained file", "total_s"), ("served page", "served_s")):
            seconds = largest[key]
            met = seconds is not None and seconds <= TARGET_S
            print(f"target: build + render <= {TARGET_S:g} s at {max(sizes):,} trials, {label}: "
                  f"{'met' if met else 'NOT met'} ({_f(seconds)} s)")
            report["target"][key] = {"met": met, "seconds": seconds}
    if args.json:
        print(json.dumps(report))


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
