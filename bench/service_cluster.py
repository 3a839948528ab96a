"""Benchmark: campaigns launched through the REST service, measured on a Ray cluster of a head and two worker
nodes, against the same service measuring on its own machine with the local executor (the peer).

    .venv/bin/python bench/service_cluster.py [--campaigns 2] [--budget 100] [--seconds 1] [--json]

Each evaluation is the command runner on a benchmark that sleeps --seconds (a real process, as a user's
benchmark is), so the figure is the service's scheduling, not the CPU. Both runs are a real `storetune serve`
over its own SQLite history, launching --campaigns campaigns of --budget evaluations at once through POST
/campaigns and timing from the first POST to the last campaign finished:

- peer: no RAY_ADDRESS, so each campaign runs in a worker process of the service with the local executor
  (parallel 1: one evaluation at a time, as `storetune tune` without --parallel);
- cluster: RAY_ADDRESS at a head started with `ray start --head --num-cpus 0` and two worker nodes of one CPU
  each, all on 127.0.0.1; each campaign asks parallel 2, one evaluation on each worker node.

Both services run one campaign at a time (STORETUNE_MAX_CAMPAIGNS=1), so the speed-up is what two worker
nodes give one campaign.

It prints the trials per second of each and the speed-up (target >= 1.8x with two workers), each campaign's
start-up (seconds from its POST to its first trial's start, and the first trials' extra time: on Ray a new
driver, and new worker processes on each node, per campaign), and the machine's load average before each run:
run it alone, since figures taken beside other work are not results. A campaign of 100 one-second evaluations
is the default: the start-up is paid once per campaign, so a short campaign gains less (20: about 1.4x here).
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
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
STORETUNE = str(Path(sys.executable).with_name("storetune"))
TARGET = 1.8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A head without CPUs and two one-CPU worker nodes, each a `ray start` process, in a temp dir of their own."""

    def __init__(self, work: Path):
        self.tmp = Path(tempfile.mkdtemp(prefix="st-bench-ray-", dir="/tmp"))  # short: Ray's socket paths
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                    "PYTHONPATH": str(ROOT)}

    def start(self) -> None:
        self._ray("--head", f"--port={self.port}", "--num-cpus=0", f"--temp-dir={self.tmp}",
                  "--include-dashboard=false")
        for _ in range(2):
            self._ray(f"--address={self.address}", "--num-cpus=1", f"--node-manager-port={free_port()}")

    def _ray(self, *args: str) -> None:
        subprocess.run([RAY, "start", *args, "--disable-usage-stats"], env=self.env, check=True,
                       capture_output=True, timeout=180)

    def stop(self) -> None:
        """Every process whose command line or open files name this cluster's temp dir (never `ray stop`,
        which would stop every cluster of the machine)."""
        for _ in range(3):
            mine = []
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
                    files = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
                except OSError:
                    continue
                if str(self.tmp) in cmdline or any(str(self.tmp) in f for f in files):
                    mine.append(int(entry.name))
            if not mine:
                break
            for pid in mine:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(1)
        shutil.rmtree(self.tmp, ignore_errors=True)


class Service:
    def __init__(self, work: Path, name: str, env: dict[str, str]):
        import httpx2

        self.port = free_port()
        self.db = f"sqlite:///{work / (name + '.sqlite')}"
        self.log = open(work / f"{name}.log", "w")  # noqa: SIM115
        full = {**os.environ, "STORETUNE_ALLOW_COMMANDS": "1", "STORETUNE_MAX_CAMPAIGNS": "1",
                "STORETUNE_MAX_PARALLEL": "8", "PYTHONPATH": str(ROOT), **env}
        full.pop("STORETUNE_TOKEN", None)
        if "RAY_ADDRESS" not in env:
            full.pop("RAY_ADDRESS", None)
        self.process = subprocess.Popen([STORETUNE, "serve", "--port", str(self.port), "--db", self.db,
                                         "--log-level", "warning"], env=full, stdout=self.log,
                                        stderr=subprocess.STDOUT, cwd=ROOT)
        self.client = httpx2.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)
        deadline = time.monotonic() + 120
        while True:
            try:
                health = self.client.get("/health").json()
                if "RAY_ADDRESS" not in env or health["executor"].get("ready"):
                    return
            except (httpx2.TransportError, ValueError):
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"the service did not come up: {(work / (name + '.log')).read_text()[-2000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def run(service: Service, args: argparse.Namespace, bench: Path, parallel: int) -> dict[str, Any]:
    """--campaigns campaigns launched at once; seconds from the first POST to the last one finished."""
    started = time.perf_counter()
    ids = []
    for seed in range(args.campaigns):
        response = service.client.post("/campaigns", json={
            "runner": "command", "runner_settings": {"command": str(bench), "space": "storage_v1"},
            "metric": "ops", "direction": "max", "algorithm": "random", "budget": args.budget, "seed": seed,
            "parallel": parallel})
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    posted = time.time()
    nodes: set[str] = set()
    startup = []
    for campaign in ids:
        while (body := service.client.get(f"/campaigns/{campaign}").json())["state"] in ("queued", "running"):
            time.sleep(0.2)
        assert body["state"] == "finished", body
        trials = service.client.get(f"/campaigns/{campaign}/trials", params={"limit": 1000}).json()["items"]
        nodes |= {n for t in trials for n in t["nodes"]}
        first = min(datetime.fromisoformat(t["started_at"]).timestamp() for t in trials)
        queued = datetime.fromisoformat(body["created_at"]).timestamp()
        startup.append(first - max(queued, posted if campaign == ids[0] else queued))
    wall = time.perf_counter() - started
    trials = args.campaigns * args.budget
    return {"wall_s": round(wall, 2), "trials": trials, "trials_per_s": round(trials / wall, 3),
            "nodes": sorted(nodes), "first_campaign_startup_s": round(startup[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=2)
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="storetune-bench-"))
    bench = work / "bench.sh"
    bench.write_text(f'#!/bin/sh\nsleep {args.seconds}\necho "{{\\"ops\\": ${{#STORETUNE_CONFIG}}}}"\n')
    bench.chmod(0o755)
    out: dict[str, Any] = {"host": socket.gethostname(), "cpus": os.cpu_count(), "campaigns": args.campaigns,
                           "budget": args.budget, "seconds_per_evaluation": args.seconds}

    out["load_before_peer"] = os.getloadavg()[0]
    peer = Service(work, "local", {})
    try:
        out["local"] = run(peer, args, bench, parallel=1)
    finally:
        peer.stop()

    cluster = Cluster(work)
    try:
        cluster.start()
        out["load_before_cluster"] = os.getloadavg()[0]
        service = Service(work, "cluster", {"RAY_ADDRESS": cluster.address, "RAY_AUTH_MODE": "disabled"})
        try:
            out["ray"] = run(service, args, bench, parallel=2)
        finally:
            service.stop()
    finally:
        cluster.stop()
    out["speedup"] = round(out["local"]["wall_s"] / out["ray"]["wall_s"], 2)
    out["target"] = TARGET
    out["met"] = out["speedup"] >= TARGET
    if args.json:
        print(json.dumps(out))
        return
    print(f"{args.campaigns} campaigns x {args.budget} evaluations of {args.seconds:g} s, on {out['host']} "
          f"({out['cpus']} cores; load {out['load_before_peer']:.2f} before the peer, "
          f"{out['load_before_cluster']:.2f} before the cluster)")
    for name in ("local", "ray"):
        r = out[name]
        print(f"  {name:6s} {r['wall_s']:7.1f} s  {r['trials_per_s']:.2f} trials/s  on {len(r['nodes'])} node(s); "
              f"its first campaign's first trial started {r['first_campaign_startup_s']:.1f} s after its POST")
    print(f"  speed-up {out['speedup']:.2f}x (target >= {TARGET}x): {'met' if out['met'] else 'NOT met'}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
