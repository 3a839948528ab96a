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
   stops when every chart has drawn data points. The peer: the same browser opens optuna-dashboard's
   page of the study (its own server, threaded wsgiref) and the clock stops when its first plot has
   drawn data points (its history plot), or after --peer-timeout seconds.
4. Importance on the first --fanova-trials trials: Optuna's FanovaImportanceEvaluator, against StoreTune's
   forest share and ANOVA share on the same trials: Spearman's rho of the rankings (over parameters
   that vary).
Target: build + render <= 2 s at 10,000 trials.

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
const drawn = plots.filter(gd => (gd.data || []).some(t => Math.max((t.x || []).length, (t.y || []).length,
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
    from api.report import page
    from tuner.importance import importance
    from tuner.report import campaign_data

    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"machine load: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min) on {os.cpu_count()} cores",
          flush=True)
    report: dict[str, Any] = {"sizes": {}}
    driver = browser()
    try:
        print(f"{'trials':>8}{'build s':>10}{'render s':>10}{'total s':>10}{'peer render s':>15}{'ours/peer':>11}"
              f"{'file MB':>9}", flush=True)
        for n in sizes:
            work = Path(tempfile.mkdtemp(prefix=f"storetune-report-{n}-"))
            peer_proc = None
            try:
                history, campaign_id, _, recorded, space = ingest_storetune(f"sqlite:///{work / 'ours.sqlite'}", n,
                                                                            args.seed)
                peer_url = f"sqlite:///{work / 'optuna.sqlite'}"
                study_id, _ = ingest_optuna(peer_url, recorded, space, history.campaign(campaign_id).objective_direction)
                started = time.perf_counter()
                data = campaign_data(history, campaign_id)
                html = page(data)
                build = time.perf_counter() - started
                out = work / "report.html"
                out.write_text(html, encoding="utf-8")
                ours = render(driver, out.as_uri(), expect_all=True, timeout=60)
                port = free_port()
                peer_proc = start([tool("optuna-dashboard"), peer_url, "--host", "127.0.0.1", "--port", str(port),
                                   "--server", "wsgiref", "--quiet"], work / "peer.log")
                import httpx

                wait_ready(httpx, peer_proc, f"http://127.0.0.1:{port}", "/api/meta", work / "peer.log")
                theirs = render(driver, f"http://127.0.0.1:{port}/dashboard/studies/{study_id}", expect_all=False,
                                timeout=args.peer_timeout)
                total = build + (ours or float("nan"))
                ratio = total / theirs if theirs and ours else None
                row = {"build_s": build, "render_s": ours, "total_s": total, "peer_render_s": theirs,
                       "ratio": ratio, "file_mb": len(html) / 1e6}
                report["sizes"][n] = row
                print(f"{n:>8,}{build:>10.2f}{_f(ours):>10}{total:>10.2f}{_f(theirs):>15}{_f(ratio):>11}"
                      f"{len(html) / 1e6:>9.1f}", flush=True)
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
                shutil.rmtree(work, ignore_errors=True)
    finally:
        driver.quit()
    largest = report["sizes"].get(max(sizes))
    if "fanova" in report:
        f = report["fanova"]
        print(f"\nimportance at {f['trials']:,} trials, {f['parameters']} parameters: Spearman's rho against "
              f"Optuna's FanovaImportanceEvaluator: forest share {f['forest_vs_fanova']:.2f}, ANOVA share "
              f"{f['anova_vs_fanova']:.2f}; top 3: ours (forest) {f['top3']['ours_forest']}, ours (ANOVA) "
              f"{f['top3']['ours_anova']}, Optuna {f['top3']['optuna_fanova']} (Optuna took "
              f"{f['optuna_seconds']:.1f} s)")
    if largest:
        met = largest["total_s"] <= TARGET_S
        print(f"target: build + render <= {TARGET_S:g} s at {max(sizes):,} trials: {'met' if met else 'NOT met'} "
              f"({largest['total_s']:.2f} s)")
        report["target"] = {"met": met, "total_s": largest["total_s"]}
    if args.json:
        print(json.dumps(report))


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
