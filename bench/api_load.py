"""Benchmark: the REST service under concurrent readers, against optuna-dashboard serving the same trials.

    .venv/bin/pip install -e '.[test,bench]'  # httpx2 (the clients); Optuna and optuna-dashboard, the peer
    .venv/bin/python bench/api_load.py [--trials 10000] [--clients 8] [--seconds 10] [--max-requests 20000]
                                       [--keep DIR] [--json] [--plot docs/results/img/api-load.svg]

What it does, all in a temporary directory (kept, in DIR, with --keep):
1. Ingestion. Runs a real campaign of --trials trials (random search replaying
   ../shared/datasets/moot_configs/7z.csv, 68,640 configurations) through StoreTune's campaign loop
   into a fresh SQLite history, and prints the trials recorded per second by `Campaign.run()` (the
   algorithm's asks, the table lookups and every history write; the table is read before the clock
   starts). The peer: the same trials (configurations, values, states: SUCCEEDED -> COMPLETE, any
   other -> FAIL) loaded into an Optuna study on RDB storage (a SQLite file, Optuna's defaults) with
   `optuna.trial.create_trial` + `study.add_trials`: storage writes only, so the ratio flatters the peer.
   At 10,000 trials the peer's ingestion takes minutes on a 2-core machine: most of the run.
2. Servers. `storetune serve` on that history, and the peer `optuna-dashboard` (its own command, with
   its threaded wsgiref server: what it picks when gunicorn is absent) on the Optuna study, each a
   subprocess on a free loopback port, access logs off; waits until both answer.
3. Load. Per endpoint, --clients threads, each with its own httpx2 client on 127.0.0.1, send requests
   back to back for --seconds or until --max-requests requests (a hard cap per endpoint), after a
   checked warm-up request. StoreTune's endpoints and the closest peer call for each:
     GET /campaigns/{id}                      <-> GET /api/studies/{id}?after={N}
         the campaign with progress and best trial  <->  the study with its best trial and no trial rows
     GET /campaigns/{id}/trials?offset=K&limit=100 (K random)  <->  GET /api/studies/{id}?after={N-100}
         a page of 100 trials  <->  the dashboard's incremental fetch, which has no limit: after=N-100
         is the call that returns 100 trials
     GET /campaigns/{id}/convergence           <-> GET /api/studies/{id}
         every evaluation's value and best-so-far  <->  the study with all its trials, from which the
         dashboard draws its history plot (its main data call; its server-side plots need plotly)
   and, unpaired, the dashboard's study-summaries list GET /api/studies. Each row also gives the time
   of the first request, alone: for /convergence that is the computation every later request of an
   unchanged campaign is served from (a running campaign pays it once per finished trial). Note that optuna-dashboard
   keeps a study's trials in memory for up to 10 s between reads of its storage; StoreTune reads the
   history on every request.
4. Prints, per endpoint, p50 and p99 latency (ms, successful requests), requests/s and errors, and
   StoreTune/peer ratios of p99 (below 1: ours faster) and of requests/s (above 1: ours faster).
   Target: p99 <= 200 ms on every StoreTune endpoint, and a lower p99 and higher requests/s than its
   peer call on each pair.

The clients run on the same machine as the servers and share its cores with them, so the load
average printed at the top matters: figures measured beside other work are not results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.figures import COLOURS, Conditions, grid, save  # noqa: E402
from storetune.runners import Status, make_runner  # noqa: E402
from storetune.search_spaces import Kind  # noqa: E402
from storetune.tuner import Campaign, CampaignSpec, History  # noqa: E402

DATASET = ROOT.parent / "shared" / "datasets" / "moot_configs" / "7z.csv"
HOST = "127.0.0.1"  # every request of this benchmark goes to the loopback address only
PAGE = 100
TARGET_P99_MS = 200.0
FEW = 100  # answers below which a p99 is little more than the slowest one


@dataclass
class Endpoint:
    label: str  # what the output calls it
    side: str  # "storetune" or "peer"
    path: Callable[[np.random.Generator], str]  # the request path, drawn per request
    check: Callable[[Any], str]  # checks a warm-up answer; returns what it saw, raises if wrong
    pair: str | None = None  # the StoreTune endpoint's key, for the ratio


@dataclass
class Load:
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    first_error: str | None = None

    def summary(self) -> dict[str, Any]:
        lat = np.array(self.latencies_ms) if self.latencies_ms else np.array([float("nan")])
        return {"requests": self.requests, "errors": self.errors, "seconds": round(self.seconds, 3),
                "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
                "req_per_s": len(self.latencies_ms) / self.seconds if self.seconds else 0.0,
                "first_error": self.first_error}


# --- 1. ingestion ----------------------------------------------------------------------------------
def ingest_storetune(url: str, trials: int, seed: int) -> tuple[History, int, dict[str, Any], list[Any], Any]:
    history = History(url)
    runner = make_runner("dataset", dataset=str(DATASET))
    spec = CampaignSpec(runner="dataset", runner_settings={"dataset": str(DATASET)}, algorithm="random",
                        budget=trials, seed=seed)
    campaign = Campaign.create(history, spec, runner=runner)
    started = time.perf_counter()
    summary = campaign.run()
    seconds = time.perf_counter() - started
    recorded = history.trials(campaign.id)
    result = {"trials": len(recorded), "seconds": seconds, "trials_per_s": len(recorded) / seconds,
              "trials_by_status": summary.trials_by_status, "objective": summary.objective}
    return history, campaign.id, result, recorded, runner.space


def ingest_optuna(url: str, recorded: list[Any], space: Any, direction: str) -> tuple[int, dict[str, Any]]:
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions: dict[str, Any] = {}
    for p in space.parameters:
        if p.kind in (Kind.CATEGORICAL, Kind.ORDINAL):
            distributions[p.name] = CategoricalDistribution(p.values)
        elif p.kind is Kind.INTEGER:
            distributions[p.name] = IntDistribution(int(p.low), int(p.high), log=p.log)
        else:
            distributions[p.name] = FloatDistribution(p.low, p.high, log=p.log)
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(storage=storage, study_name="7z-random",
                                direction="minimize" if direction == "min" else "maximize")
    started = time.perf_counter()
    frozen = []
    for t in recorded:
        params = {k: v for k, v in t.config.items() if k in distributions}
        dists = {k: distributions[k] for k in params}
        if t.status == Status.SUCCEEDED.value and t.value is not None:
            frozen.append(create_trial(state=TrialState.COMPLETE, value=t.value, params=params, distributions=dists))
        else:
            frozen.append(create_trial(state=TrialState.FAIL, params=params, distributions=dists))
    study.add_trials(frozen)
    seconds = time.perf_counter() - started
    n = len(study.get_trials(deepcopy=False))
    study_id = study._study_id
    storage.engine.dispose()
    return study_id, {"trials": n, "seconds": seconds, "trials_per_s": n / seconds}


# --- 2. servers ------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def tool(name: str) -> str:
    beside = Path(sys.executable).with_name(name)  # the venv's own script when run with .venv/bin/python
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        raise SystemExit(f"{name} is not installed: .venv/bin/pip install -e '.[bench]'")
    return found


def start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


def stop(proc: subprocess.Popen | None) -> None:
    """SIGTERM to the server's own process group (it and the workers it started), SIGKILL after 10 s."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


def wait_ready(httpx2: Any, proc: subprocess.Popen, base: str, path: str, log: Path, timeout_s: float = 90) -> float:
    started = time.monotonic()
    with httpx2.Client(base_url=base, timeout=5) as client:
        while time.monotonic() - started < timeout_s:
            if proc.poll() is not None:
                raise SystemExit(f"{base} exited with {proc.returncode} before answering:\n{tail(log)}")
            try:
                if client.get(path).status_code == 200:
                    return time.monotonic() - started
            except httpx2.TransportError:
                pass
            time.sleep(0.2)
    raise SystemExit(f"{base}{path} did not answer within {timeout_s:.0f} s:\n{tail(log)}")


def tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- 3. load ---------------------------------------------------------------------------------------
def load(httpx2: Any, base: str, endpoint: Endpoint, clients: int, seconds: float, max_requests: int,
         seed: int) -> Load:
    result = Load()
    lock = threading.Lock()
    budget = [max_requests]  # requests not yet handed out: the hard cap
    go = threading.Event()

    def client(index: int) -> None:
        rng = np.random.default_rng([seed, index])
        latencies: list[float] = []
        errors, first_error = 0, None
        with httpx2.Client(base_url=base, timeout=60) as http:
            go.wait()
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                with lock:
                    if budget[0] <= 0:
                        break
                    budget[0] -= 1
                path = endpoint.path(rng)
                sent = time.perf_counter()
                try:
                    r = http.get(path)
                    ok = r.status_code == 200
                    problem = None if ok else f"{path}: HTTP {r.status_code} {r.text[:200]}"
                except httpx2.HTTPError as e:
                    ok, problem = False, f"{path}: {type(e).__name__}: {e}"
                if ok:
                    latencies.append((time.perf_counter() - sent) * 1000)
                else:
                    errors += 1
                    first_error = first_error or problem
        with lock:
            result.latencies_ms.extend(latencies)
            result.errors += errors
            result.requests += len(latencies) + errors
            result.first_error = result.first_error or first_error

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    time.sleep(0.2)  # every client connected before the clock starts
    started = time.perf_counter()
    go.set()
    for t in threads:
        t.join(seconds + 120)
    result.seconds = time.perf_counter() - started
    return result


def endpoints(campaign: int, study: int, n: int) -> list[Endpoint]:
    last_page = max(n - PAGE, 0)

    def expect(condition: bool, what: str) -> None:
        if not condition:
            raise SystemExit(f"warm-up answer is wrong: {what}")

    def campaign_check(body: Any) -> str:
        evaluated = body["progress"]["evaluated"]
        expect(body["id"] == campaign and evaluated == n and body["best"] is not None, f"campaign {body}"[:300])
        return f"evaluated {evaluated}, best {body['best']['value']:g}"

    def trials_check(body: Any) -> str:
        expect(len(body["items"]) == min(PAGE, n) and body["total"] == n,
               f"page of {len(body['items'])} of {body['total']}")
        return f"{len(body['items'])} items of {body['total']}"

    def convergence_check(body: Any) -> str:
        expect(len(body["evaluation"]) == len(body["best"]) == n, f"{len(body['evaluation'])} points")
        return f"{len(body['evaluation'])} points, best {body['best'][-1]:g}"

    def study_check(rows: int) -> Callable[[Any], str]:
        def check(body: Any) -> str:
            expect(len(body["trials"]) == rows and len(body["best_trials"]) == 1,
                   f"{len(body['trials'])} trials, {len(body['best_trials'])} best")
            return f"{len(body['trials'])} trials, best {body['best_trials'][0]['values'][0]:g}"
        return check

    def summaries_check(body: Any) -> str:
        expect(any(s["study_id"] == study for s in body["study_summaries"]), "study missing")
        return f"{len(body['study_summaries'])} studies"

    return [
        Endpoint(f"GET /campaigns/{campaign}", "storetune", lambda _r: f"/campaigns/{campaign}", campaign_check,
                 pair="campaign"),
        Endpoint(f"GET /api/studies/{study}?after={n}", "peer", lambda _r: f"/api/studies/{study}?after={n}",
                 study_check(0), pair="campaign"),
        Endpoint(f"GET /campaigns/{campaign}/trials?offset=K&limit={PAGE}", "storetune",
                 lambda r: f"/campaigns/{campaign}/trials?offset={int(r.integers(0, last_page + 1))}&limit={PAGE}",
                 trials_check, pair="trials"),
        Endpoint(f"GET /api/studies/{study}?after={last_page}", "peer",
                 lambda _r: f"/api/studies/{study}?after={last_page}", study_check(min(PAGE, n)), pair="trials"),
        Endpoint(f"GET /campaigns/{campaign}/convergence", "storetune",
                 lambda _r: f"/campaigns/{campaign}/convergence", convergence_check, pair="convergence"),
        Endpoint(f"GET /api/studies/{study}", "peer", lambda _r: f"/api/studies/{study}", study_check(n),
                 pair="convergence"),
        Endpoint("GET /api/studies (study summaries, unpaired)", "peer", lambda _r: "/api/studies", summaries_check),
    ]


# --- 4. report -------------------------------------------------------------------------------------
def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def finite(value: Any) -> Any:
    """The report with NaN (no successful request) as null, so that --json prints strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10000, help="trials in the campaign (at most 68,640)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads per endpoint")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of load per endpoint")
    parser.add_argument("--max-requests", type=int, default=20000, help="hard cap on requests per endpoint")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="work in DIR (new or empty) and keep the histories and server logs there")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--plot", type=Path, metavar="SVG", help="draw each pair's latency and throughput here")
    parser.add_argument("--from", dest="saved", type=Path, metavar="FILE",
                        help="draw a saved run again from its printed output (its --json line)")
    args = parser.parse_args()
    if args.saved:
        lines = [line for line in args.saved.read_text().splitlines() if line.startswith("{")]
        if not lines:
            raise SystemExit(f"--from {args.saved}: no line of it is a run's --json output")
        report = json.loads(lines[-1])
        if args.plot:
            plot(report, args.plot, Conditions.of(report["conditions"]))
        return
    if args.trials < PAGE or args.clients < 1 or args.seconds <= 0 or args.max_requests < 1:
        parser.error(f"--trials must be at least {PAGE}; --clients, --seconds and --max-requests positive")
    if not DATASET.exists():
        raise SystemExit(f"{DATASET} is missing: this benchmark needs ../shared/datasets beside the repository")
    try:
        import httpx2
    except ImportError:
        raise SystemExit("httpx2 is not installed: .venv/bin/pip install -e '.[test,bench]'") from None

    conditions = Conditions()  # before the run loads the machine
    load1, load5, load15 = conditions.load
    print(f"machine load: {load1:.2f} {load5:.2f} {load15:.2f} (1/5/15 min) on {os.cpu_count()} cores; the clients "
          "share these cores with both servers, so figures taken beside other work are upper bounds, not results",
          flush=True)

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        if any(args.keep.iterdir()):
            raise SystemExit(f"--keep {args.keep}: the directory must be new or empty (the history must be fresh)")
        work = args.keep
    else:
        work = Path(tempfile.mkdtemp(prefix="storetune-api-load-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers and clean up on kill, too
    ours_proc = peer_proc = None
    report: dict[str, Any] = {"load_average": [load1, load5, load15], "cpus": os.cpu_count(),
                              "conditions": conditions.as_dict(),
                              "trials": args.trials, "clients": args.clients, "seconds": args.seconds,
                              "max_requests": args.max_requests, "dir": str(work) if args.keep else None}
    try:
        # 1. ingestion
        print(f"\n== ingestion: {args.trials:,} trials of random search on {DATASET.name}", flush=True)
        ours_url = f"sqlite:///{work / 'history.sqlite'}"
        history, campaign_id, ours_ingest, recorded, space = ingest_storetune(ours_url, args.trials, args.seed)
        print(f"storetune campaign loop:   {ours_ingest['trials']:>7,} trials in {ours_ingest['seconds']:7.2f} s = "
              f"{ours_ingest['trials_per_s']:8.0f} trials/s  {ours_ingest['trials_by_status']}", flush=True)
        direction = ours_ingest["objective"]["direction"]
        history.close()
        peer_url = f"sqlite:///{work / 'optuna.sqlite'}"
        study_id, peer_ingest = ingest_optuna(peer_url, recorded, space, direction)
        print(f"optuna add_trials (peer):  {peer_ingest['trials']:>7,} trials in {peer_ingest['seconds']:7.2f} s = "
              f"{peer_ingest['trials_per_s']:8.0f} trials/s", flush=True)
        ingest_ratio = ratio(ours_ingest["trials_per_s"], peer_ingest["trials_per_s"])
        print(f"ingestion rate storetune/peer: {ingest_ratio:.2f} (above 1: ours faster; ours includes the "
              "algorithm and the table lookups)", flush=True)
        report["ingestion"] = {"storetune": ours_ingest, "peer": peer_ingest, "ratio": ingest_ratio}
        n = ours_ingest["trials"]

        # 2. servers
        ours_port, peer_port = free_port(), free_port()
        env = {**os.environ, "STORETUNE_DATABASE_URL": ours_url}
        ours_log, peer_log = work / "storetune-serve.log", work / "optuna-dashboard.log"
        ours_proc = start([tool("storetune"), "serve", "--host", HOST, "--port", str(ours_port), "--db", ours_url,
                           "--log-level", "warning"], ours_log, env)
        peer_proc = start([tool("optuna-dashboard"), peer_url, "--host", HOST, "--port", str(peer_port),
                           "--server", "wsgiref", "--quiet"], peer_log)
        bases = {"storetune": f"http://{HOST}:{ours_port}", "peer": f"http://{HOST}:{peer_port}"}
        ours_up = wait_ready(httpx2, ours_proc, bases["storetune"], "/health", ours_log)
        peer_up = wait_ready(httpx2, peer_proc, bases["peer"], "/api/meta", peer_log)
        print(f"\n== servers: storetune serve on {bases['storetune']} (up in {ours_up:.1f} s), "
              f"optuna-dashboard on {bases['peer']} (threaded wsgiref, up in {peer_up:.1f} s)", flush=True)

        # 3. load
        print(f"\n== load: {args.clients} clients, {args.seconds:g} s per endpoint (at most {args.max_requests:,} "
              f"requests), campaign {campaign_id} / study {study_id} with {n:,} trials", flush=True)
        print(f"{'endpoint':<58}{'p50 ms':>9}{'p99 ms':>10}{'req/s':>9}{'errors':>8}{'requests':>10}", flush=True)
        results: dict[str, Any] = {}
        for i, e in enumerate(endpoints(campaign_id, study_id, n)):
            with httpx2.Client(base_url=bases[e.side], timeout=120) as warm:
                started = time.perf_counter()
                r = warm.get(e.path(np.random.default_rng(0)))
                first_ms = 1000 * (time.perf_counter() - started)
                if r.status_code != 200:
                    raise SystemExit(f"warm-up {e.label}: HTTP {r.status_code} {r.text[:300]}")
                seen = e.check(r.json())
                size = len(r.content)
            s = load(httpx2, bases[e.side], e, args.clients, args.seconds, args.max_requests, args.seed + i).summary()
            s.update(side=e.side, pair=e.pair, checked=seen, response_bytes=size, first_ms=first_ms)
            results[e.label] = s
            name = ("storetune " if e.side == "storetune" else "  peer    ") + e.label
            few = s["requests"] - s["errors"] < FEW
            p99 = f"{s['p99_ms']:.1f}" + ("*" if few else " ")
            print(f"{name:<58}{s['p50_ms']:>9.1f}{p99:>10}{s['req_per_s']:>9.1f}{s['errors']:>8}"
                  f"{s['requests']:>10}   ({seen}; {size / 1024:,.0f} KiB; first request {first_ms:,.0f} ms)",
                  flush=True)
            if s["first_error"]:
                print(f"    first error: {s['first_error']}", flush=True)
        if any(s["requests"] - s["errors"] < FEW for s in results.values()):
            print(f"* fewer than {FEW} answers: that p99 is close to the slowest answer (more --seconds for more)")
        report["endpoints"] = results

        # 4. ratios and target
        print("\n== storetune / peer, per mapped pair (p99: below 1 is ours faster; req/s: above 1 is ours faster)")
        pairs, misses = {}, []
        for key in ("campaign", "trials", "convergence"):
            ours = next((label, s) for label, s in results.items() if s["pair"] == key and s["side"] == "storetune")
            peer = next((label, s) for label, s in results.items() if s["pair"] == key and s["side"] == "peer")
            p99, rps = ratio(ours[1]["p99_ms"], peer[1]["p99_ms"]), ratio(ours[1]["req_per_s"], peer[1]["req_per_s"])
            pairs[key] = {"storetune": ours[0], "peer": peer[0], "p99_ratio": p99, "req_per_s_ratio": rps}
            print(f"{ours[0]:<52} <-> {peer[0]:<36} p99 {p99:6.2f}   req/s {rps:6.2f}")
            if not ours[1]["p99_ms"] <= TARGET_P99_MS:
                misses.append(f"{key}: p99 {ours[1]['p99_ms']:.0f} ms > {TARGET_P99_MS:.0f}")
            if not (p99 < 1 and rps > 1):
                misses.append(f"{key}: not faster than the peer (p99 x{p99:.2f}, req/s x{rps:.2f})")
            if ours[1]["errors"]:
                misses.append(f"{key}: {ours[1]['errors']} errors")
        met = not misses
        print(f"target: p99 <= {TARGET_P99_MS:.0f} ms on every StoreTune endpoint and faster than the peer: "
              f"{'met' if met else 'NOT met'}" + ("" if met else f" ({'; '.join(misses)})"))
        report.update(pairs=pairs, target={"met": met, "misses": misses})
    finally:
        stop(ours_proc)
        stop(peer_proc)
        if args.keep:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(finite(report)))
    if args.plot and "pairs" in report:
        plot(report, args.plot, conditions)


def plot(report: dict[str, Any], path: Path, conditions: Conditions) -> Path:
    """Per mapped pair, StoreTune's and the peer's p50 and p99 latency, and their requests per second (log axes)."""
    fig, (latency, rate) = grid(2, columns=2, size=(4.4, 3.0))
    pairs = report["pairs"]
    x = np.arange(len(pairs))
    for k, side in enumerate(("storetune", "peer")):
        rows = [report["endpoints"][p[side]] for p in pairs.values()]
        name = "StoreTune" if side == "storetune" else "optuna-dashboard"
        offset = (k - 0.5) * 0.38
        latency.bar(x + offset, [r["p99_ms"] for r in rows], 0.36, color=COLOURS[side], alpha=0.45, label=f"{name} p99")
        latency.bar(x + offset, [r["p50_ms"] for r in rows], 0.36, color=COLOURS[side], label=f"{name} p50")
        rate.bar(x + offset, [r["req_per_s"] for r in rows], 0.36, color=COLOURS[side], label=name)
    for ax, label in ((latency, "latency, ms (log)"), (rate, "requests per second (log)")):
        ax.set_xticks(x, list(pairs))
        ax.set_yscale("log")
        ax.set_ylim(bottom=1 if ax is latency else 0.05)  # the bars start near zero, not at the smallest one
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
    latency.axhline(TARGET_P99_MS, color="black", ls=":", lw=1)
    title = (f"The REST service against optuna-dashboard: {report['trials']:,} trials, {report['clients']} clients, "
             f"{report['seconds']:g} s per endpoint; dotted: the {TARGET_P99_MS:.0f} ms p99 target")
    return save(fig, path, title, conditions)


if __name__ == "__main__":
    main()
