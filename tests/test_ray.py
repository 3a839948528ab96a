"""The Ray executor on real Ray: an embedded local cluster, and a two-node cluster of separate
processes on 127.0.0.1 (a head and a worker node, started with `ray start`), whose worker node's
raylet is killed mid-campaign. The clusters these tests start are stopped by their own processes
(found by the temp dir only they use), never with `ray stop`, which would stop every cluster here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT, STORETUNE, run_cli
from ray_cluster import Cluster, free_port, processes
from storetune.tuner.history.store import History

pytestmark = pytest.mark.slow
def slow_benchmark(tmp_path: Path, seconds: float) -> Path:
    """A benchmark command that takes ``seconds`` and prints a throughput from the configuration."""
    script = tmp_path / "bench.sh"
    script.write_text(f"#!/bin/sh\nsleep {seconds}\n"
                      'echo "{\\"ops\\": $(( ${#STORETUNE_CONFIG} * 10 + STORETUNE_SEED % 7 ))}"\n')
    script.chmod(0o755)
    return script


def recorded(url: str, campaign: int) -> tuple[list, list]:
    history = History(url)
    trials = history.trials(campaign, measurements=True)
    return trials, [m for t in trials for m in (t.measurements or ())]


def test_an_embedded_ray_runs_a_campaign_and_records_every_trial_once(sqlite_url, bdbc):
    # random search: its asks do not depend on which result arrives first, so both executors ask alike
    out = run_cli("tune", "--dataset", str(bdbc), "--algorithm", "random", "--budget", "24", "--parallel", "2",
                  "--executor", "ray", "--seed", "3", "--json", db=sqlite_url, check=True, env={"RAY_ADDRESS": ""})
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["executor"]["kind"] == "ray" and summary["executor"]["nodes"] == 1
    assert summary["executor"]["address"] == "embedded"
    trials, measurements = recorded(sqlite_url, summary["campaign"])
    assert sorted(t.number for t in trials) == list(range(24))  # each once
    assert all(t.status == "SUCCEEDED" for t in trials)
    assert len({m.env["ray_node"] for m in measurements}) == 1 and all(m.env["executor"] == "ray" for m in measurements)
    # the same seed on the local executor asks the same configurations
    local = run_cli("tune", "--dataset", str(bdbc), "--algorithm", "random", "--budget", "24", "--seed", "3", "--json",
                    db=sqlite_url, check=True, env={"RAY_ADDRESS": ""})
    local = json.loads(local.stdout.splitlines()[-1])
    assert local["executor"] == {"kind": "local", "nodes": 1, "workers": 1}
    assert local["best_value"] == summary["best_value"]


def test_bad_ray_input_is_one_line_and_no_hang(sqlite_url, bdbc):
    started = time.monotonic()
    out = run_cli("tune", "--dataset", str(bdbc), "--budget", "3", "--json", db=sqlite_url,
                  env={"RAY_ADDRESS": f"127.0.0.1:{free_port()}"})  # RAY_ADDRESS selects Ray
    assert out.returncode == 2 and time.monotonic() - started < 60
    assert out.stderr.count("\n") == 1 and "unreachable" in out.stderr and "RAY_ADDRESS" in out.stderr
    out = run_cli("tune", "--dataset", str(bdbc), "--budget", "3", "--parallel", "0", "--executor", "ray",
                  db=sqlite_url)
    assert out.returncode == 2 and "--parallel must be at least 1, not 0" in out.stderr
    out = run_cli("tune", "--dataset", str(bdbc), "--budget", "3", "--executor", "spark", db=sqlite_url)
    assert out.returncode == 2 and "unknown executor 'spark'" in out.stderr
    out = run_cli("compare", "--dataset", str(bdbc), "--workers", "-1", db=sqlite_url)
    assert out.returncode == 2 and "--workers must be" in out.stderr
    out = run_cli("compare", "--dataset", str(bdbc), "--seeds", "1", "--budget", "5", db=sqlite_url,
                  env={"RAY_ADDRESS": f"127.0.0.1:{free_port()}"})
    assert out.returncode == 2 and "unreachable" in out.stderr
    out = run_cli("compare", "--dataset", str(bdbc), "--seeds", "1", "--budget", "5", "--executor", "spark",
                  db=sqlite_url)
    assert out.returncode == 2 and "unknown executor 'spark'" in out.stderr
    history = History(sqlite_url)  # a refusal leaves nothing behind, no campaign or comparison 'running'
    assert history.campaigns() == [] and history.comparisons() == []


def test_a_port_that_answers_but_is_no_ray_head_is_one_line_in_seconds(sqlite_url, bdbc):
    """RAY_ADDRESS at another service's port (PostgreSQL's, the REST service's) made Ray retry for minutes:
    a listener that says nothing, and one that answers HTTP/1.1, are each refused at once."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    web = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    resetting = socket.socket()  # takes the connection, then resets it (was: "unreachable ... ray start --head")
    resetting.bind(("127.0.0.1", 0))
    resetting.listen(8)

    def reset() -> None:
        import struct

        while True:
            try:
                conn, _ = resetting.accept()
            except OSError:
                return
            time.sleep(0.2)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    threading.Thread(target=reset, daemon=True).start()
    try:
        for port in (silent.getsockname()[1], web.server_address[1], resetting.getsockname()[1]):
            started = time.monotonic()
            out = run_cli("tune", "--dataset", str(bdbc), "--budget", "3", db=sqlite_url,
                          env={"RAY_ADDRESS": f"127.0.0.1:{port}"}, timeout=120)
            assert out.returncode == 2 and time.monotonic() - started < 45, out.stderr[-500:]
            assert out.stderr.count("\n") == 1 and "answers, but not as a Ray head" in out.stderr
    finally:
        web.shutdown()
        silent.close()
        resetting.close()
    assert History(sqlite_url).campaigns() == []


@pytest.fixture
def cluster():
    c = Cluster(Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp")))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_a_two_node_cluster_runs_tasks_on_both_and_survives_losing_one(cluster, sqlite_url, tmp_path):
    bench = slow_benchmark(tmp_path, 0.5)
    env = {"RAY_ADDRESS": cluster.address, **cluster.auth}
    common = ["--runner", "command", "--command", str(bench), "--space", "storage_v1", "--metric", "ops",
              "--direction", "max", "--json"]
    out = run_cli("tune", *common, "--budget", "12", "--parallel", "2", "--seed", "1", db=sqlite_url, check=True,
                  env=env)
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["executor"]["kind"] == "ray" and summary["executor"]["address"] == cluster.address
    trials, measurements = recorded(sqlite_url, summary["campaign"])
    assert sorted(t.number for t in trials) == list(range(12)) and all(t.status == "SUCCEEDED" for t in trials)
    nodes = Counter(m.env["ray_node"] for m in measurements)
    assert len(nodes) == 2 and summary["executor"]["nodes"] == 2, nodes  # one IP, two node ids

    # the worker node's raylet dies mid-campaign: its tasks are retried on the head, nothing lost or doubled
    proc = subprocess.Popen([*STORETUNE, "tune", *common, "--budget", "16", "--parallel", "2", "--seed", "2",
                             "--max-retries", "3"], env={**os.environ, "PYTHONPATH": str(ROOT),
                                                         "STORETUNE_DATABASE_URL": sqlite_url, **env},
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        history, deadline = History(sqlite_url), time.monotonic() + 120
        campaign = None
        while time.monotonic() < deadline:
            ids = [c.id for c in history.campaigns() if c.id != summary["campaign"]]
            if ids and history.status_counts(ids[0]).get("SUCCEEDED", 0) >= 3:
                campaign = ids[0]
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert campaign is not None, "the campaign never got going"
        os.kill(cluster.worker_raylet(), signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    trials, _ = recorded(sqlite_url, campaign)
    assert sorted(t.number for t in trials) == list(range(16))  # every trial once
    assert Counter(t.status for t in trials) == {"SUCCEEDED": 16}, [(t.number, t.status, t.reason) for t in trials]


@pytest.mark.device
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("fio") or not shutil.which("losetup"),
                    reason="the device runner needs root, fio and losetup")
def test_a_device_campaign_uses_two_loop_slots_at_once_and_leaks_none(cluster, sqlite_url, tmp_path):
    """Each node advertises one loop slot: two measurements at once, each on a loop device of its own
    worker; --parallel beyond the slots is capped and said; nothing is left attached."""
    loops = tmp_path / "loops"
    env = {"RAY_ADDRESS": cluster.address, **cluster.auth}
    out = run_cli("tune", "--runner", "device", "--loop-dir", str(loops), "--loop-size-mib", "320", "--fileset-mib",
                  "16", "--runtime", "1", "--workload", "varmail", "--fix", "fs=ext4", "--budget", "4", "--parallel",
                  "3", "--seed", "1", "--json", db=sqlite_url, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "--parallel 3 capped to 2: the Ray cluster advertises 2 loop_slot" in out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["executor"]["workers"] == 2 and summary["executor"]["nodes"] == 2
    trials, measurements = recorded(sqlite_url, summary["campaign"])
    assert sorted(t.number for t in trials) == list(range(4))
    assert Counter(t.status for t in trials)["SUCCEEDED"] >= 3, [(t.status, t.reason) for t in trials]
    devices = {m.env.get("device") for m in measurements}
    assert len(devices) == 2, devices  # one loop device per worker, two workers at once
    # each loop slot's actor set its device up and warmed it up once, not before every job
    warmed = [m for m in measurements if "warmup_ops_per_s" in m.env]
    assert 1 <= len(warmed) <= 2 and len({m.env["device"] for m in warmed}) == len(warmed), warmed
    attached = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(loops) not in attached  # every worker detached its own
    assert not list(loops.glob("*.img")) if loops.exists() else True


@pytest.mark.device
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("fio") or not shutil.which("losetup"),
                    reason="the device runner needs root, fio and losetup")
def test_asha_on_two_nodes_stops_device_runs_short_and_frees_their_loop_slots(cluster, sqlite_url, tmp_path):
    """fio runs on two nodes' loop slots, judged on one actor at 1 s and 3 s of 6: the stopped runs end there (their
    tasks, and so their loop slots, are done seconds before a whole run's) and nothing is left attached."""
    loops = tmp_path / "loops"
    env = {"RAY_ADDRESS": cluster.address, **cluster.auth}
    out = run_cli("tune", "--runner", "device", "--loop-dir", str(loops), "--loop-size-mib", "320", "--fileset-mib",
                  "16", "--runtime", "6", "--workload", "varmail", "--fix", "fs=ext4", "--budget", "8", "--parallel",
                  "2", "--fidelity", "asha", "--burn-in", "0", "--guard", "0", "--seed", "3", "--warmup-runs", "0",
                  "--json", db=sqlite_url, env=env, timeout=900)
    # plain ASHA: the rungs judge from the first run, so of 8 some stop unless each beats most before it (tune's
    # burn-in and guard let 10 go whole in one CI run: test_fidelity checks that rule). No warm-up: a whole run, not watched, would blur
    # the durations compared below
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    trials, measurements = recorded(sqlite_url, summary["campaign"])
    assert len(trials) == 8 and summary["executor"]["nodes"] == 2
    ran = {t.number: t.measurements[-1] for t in trials if t.status in ("SUCCEEDED", "STOPPED")}
    stopped = [n for n, m in ran.items() if m.env["run_length_s"] < 6]
    whole = [n for n, m in ran.items() if m.env["run_length_s"] == 6]
    assert stopped and whole, [(t.number, t.status, t.reason) for t in trials]
    assert all(next(t for t in trials if t.number == n).status == "STOPPED" for n in stopped)
    # a stopped run's task took its setup and its seconds, not the whole run's: seconds sooner
    import statistics

    assert statistics.median(ran[n].duration_s for n in stopped) + 2 < statistics.median(ran[n].duration_s
                                                                                         for n in whole), \
        {n: (m.env["run_length_s"], round(m.duration_s, 1)) for n, m in ran.items()}
    assert str(loops) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


@pytest.mark.device
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("fio") or not shutil.which("losetup"),
                    reason="the device runner needs root, fio and losetup")
def test_a_device_holder_killed_mid_run_is_replaced_and_its_job_run_again(sqlite_url, tmp_path):
    """The actor that holds the loop slot is SIGKILLed while it measures: another takes the slot (the dead one's
    device is reaped), the job runs again there, every trial is recorded once, and nothing is left attached."""
    loops = tmp_path / "loops"
    proc = subprocess.Popen([*STORETUNE, "tune", "--runner", "device", "--loop-dir", str(loops), "--loop-size-mib",
                             "320", "--fileset-mib", "16", "--runtime", "3", "--workload", "varmail", "--fix",
                             "fs=ext4", "--budget", "3", "--executor", "ray", "--parallel", "1", "--seed", "1",
                             "--warmup-runs", "0", "--json"],
                            env={**os.environ, "PYTHONPATH": str(ROOT), "STORETUNE_DATABASE_URL": sqlite_url,
                                 "RAY_ADDRESS": ""}, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, holder = time.monotonic() + 180, None
        while holder is None and time.monotonic() < deadline:  # the holder, once its fio runs
            assert proc.poll() is None, proc.communicate()
            fios = [pid for pid, cmdline in processes() if cmdline[0] == "fio" and any(str(loops) in c for c in cmdline)]
            for pid in fios:
                parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                if "DeviceHolder" in " ".join(dict(processes()).get(parent, [""])):
                    holder = parent
            time.sleep(0.2)
        assert holder is not None, "no holder ran fio"
        os.kill(holder, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    trials, measurements = recorded(sqlite_url, json.loads(stdout.splitlines()[-1])["campaign"])
    assert sorted(t.number for t in trials) == [0, 1, 2]
    assert Counter(t.status for t in trials) == {"SUCCEEDED": 3}, [(t.status, t.reason) for t in trials]
    assert str(loops) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


def test_a_resource_no_node_advertises_is_one_line(cluster, sqlite_url, tmp_path):
    env = {"RAY_ADDRESS": cluster.address, **cluster.auth}
    out = run_cli("tune", "--runner", "device", "--device", "/dev/nvme9n9", "--allow-device", "/dev/nvme9n9",
                  "--budget", "2", db=sqlite_url, env=env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "no node of the Ray cluster advertises 'device:/dev/nvme9n9'" in out.stderr


def test_a_worker_killed_mid_evaluation_is_retried_then_the_trial_is_failed_with_the_reason(sqlite_url, tmp_path):
    """The benchmark kills the Ray worker that runs it (its parent) when asked to measure ext2: Ray
    retries the task --max-retries times, then the trial is FAILED with Ray's reason; the rest succeed."""
    bench = tmp_path / "bench.sh"
    bench.write_text('#!/bin/sh\n[ "$STORETUNE_FS" = ext2 ] && kill -9 $PPID && sleep 5\necho \'{"ops": 1}\'\n')
    bench.chmod(0o755)
    out = run_cli("tune", "--runner", "command", "--command", str(bench), "--space", "storage_v1", "--metric", "ops",
                  "--direction", "max", "--fix", "fs=ext2", "--budget", "2", "--parallel", "2", "--executor", "ray",
                  "--max-retries", "1", "--json", db=sqlite_url, env={"RAY_ADDRESS": ""}, timeout=300)
    assert out.returncode == 0, out.stderr
    trials, _ = recorded(sqlite_url, json.loads(out.stdout.splitlines()[-1])["campaign"])
    assert [t.status for t in trials] == ["FAILED", "FAILED"]
    assert all(t.reason.startswith("the Ray task failed 2 times: ") for t in trials), [t.reason for t in trials]


def test_an_offline_comparison_on_ray_gives_the_same_results_as_the_process_pool(sqlite_url, bdbc):
    args = ("compare", "--dataset", str(bdbc), "--algorithms", "random,sa", "--seeds", "3", "--budget", "20",
            "--workers", "2", "--json")
    pool = json.loads(run_cli(*args, db=sqlite_url, check=True, env={"RAY_ADDRESS": ""}).stdout.splitlines()[-1])
    ray = json.loads(run_cli(*args, "--executor", "ray", db=sqlite_url, check=True,
                             env={"RAY_ADDRESS": ""}).stdout.splitlines()[-1])
    assert pool.pop("executor")["kind"] == "local" and ray.pop("executor")["kind"] == "ray"
    assert pool.pop("comparison") != ray.pop("comparison")
    for result in (pool, ray):  # the algorithms' own time is measured, not decided by the seeds
        for algorithm in result["algorithms"].values():
            algorithm.pop("ask_tell_ms"), algorithm.pop("ask_tell_ms_at_budget")
    assert pool == ray  # the seeds decide everything else, not where they ran: and no seed is lost


def test_a_driver_killed_mid_campaign_resumes_on_ray(sqlite_url, tmp_path):
    """SIGKILL the driver of a campaign on an embedded Ray; --resume finishes it: every trial once, the
    one it left RUNNING re-run. The embedded cluster lives in a temp dir of its own (RAY_TMPDIR), so
    what Ray leaves behind a killed driver (its agents) is found and stopped here."""
    bench = slow_benchmark(tmp_path, 0.5)
    ray_tmp = Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STORETUNE_DATABASE_URL": sqlite_url, "RAY_ADDRESS": "",
           "RAY_TMPDIR": str(ray_tmp)}
    args = ["--runner", "command", "--command", str(bench), "--space", "storage_v1", "--metric", "ops",
            "--direction", "max", "--budget", "30", "--parallel", "2", "--executor", "ray", "--json"]
    leftovers = Cluster(ray_tmp)
    try:
        proc = subprocess.Popen([*STORETUNE, "tune", *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        history, deadline = History(sqlite_url), time.monotonic() + 120
        while not (history.campaigns() and history.status_counts(history.campaigns()[0].id).get("SUCCEEDED", 0) >= 4):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        proc.kill()
        proc.wait()
        campaign = history.campaigns()[0].id
        out = subprocess.run([*STORETUNE, "tune", "--resume", str(campaign), "--executor", "ray", "--parallel", "2",
                              "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
    finally:
        leftovers.stop()
    trials = History(sqlite_url).trials(campaign)
    assert Counter(t.status for t in trials)["SUCCEEDED"] == 30
    assert len({t.config_hash for t in trials if t.status == "SUCCEEDED"}) == 30  # no configuration measured twice
    stale = [t for t in trials if t.status == "STALE"]  # left RUNNING by the killed driver, each re-run once
    assert all(t.status in ("SUCCEEDED", "STALE") for t in trials) and stale
    assert sorted(t.retry_of for t in trials if t.retry_of is not None) == sorted(t.id for t in stale)


def test_a_head_that_asks_for_a_token_is_refused_with_what_to_set(sqlite_url, bdbc):
    """Ray 2.59+: a head with token auth refuses a driver that has not opted in; StoreTune says what to
    set, and records nothing."""
    tmp = Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp"))
    (tmp / "token").write_text("0123456789abcdef" * 4)
    head = Cluster(tmp, auth={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp / "token")})
    try:
        head.start(worker=False)
        out = run_cli("tune", "--dataset", str(bdbc), "--budget", "3", db=sqlite_url,
                      env={"RAY_ADDRESS": head.address, "RAY_AUTH_MODE": "disabled"}, timeout=180)
    finally:
        head.stop()
    assert out.returncode == 2
    assert f"could not join the Ray cluster at {head.address}" in out.stderr and "RAY_AUTH_MODE=token" in out.stderr
    assert History(sqlite_url).campaigns() == []


def test_an_embedded_ray_leaves_the_users_home_alone(sqlite_url, bdbc, tmp_path):
    """Ray's own default writes ~/.ray/auth_token for an embedded cluster, after which the user's plain
    `ray start --head` turns token authentication on and their drivers cannot join: StoreTune's embedded
    cluster keeps its token in its processes' environment, and nothing of it lands in the home."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "RAY_ADDRESS": "", "XDG_CACHE_HOME": "", "XDG_CONFIG_HOME": "", "XDG_DATA_HOME": ""}
    out = run_cli("tune", "--dataset", str(bdbc), "--algorithm", "random", "--budget", "6", "--parallel", "2",
                  "--executor", "ray", "--json", db=sqlite_url, check=True, env=env)
    assert json.loads(out.stdout.splitlines()[-1])["executor"]["kind"] == "ray"
    left = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert left == [], left


def test_asha_on_ray_judges_every_run_on_one_actor_and_stops_the_hopeless(sqlite_url, tmp_path):
    """Multi-fidelity search with Ray tasks: each task judges its run at the rungs on the campaign's actor, so
    runs on different workers are ranked against each other; the stopped ones end early and free their worker."""
    from test_fidelity import _series_table

    table = _series_table(tmp_path / "measurements.csv")
    out = run_cli("tune", "--dataset", str(table), "--fidelity", "asha", "--budget", "30", "--parallel", "2",
                  "--executor", "ray", "--seed", "2", "--json", db=sqlite_url, check=True, env={"RAY_ADDRESS": ""})
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["executor"]["kind"] == "ray"
    trials, measurements = recorded(sqlite_url, summary["campaign"])
    assert len(trials) == 30 and all(m.env["executor"] == "ray" for m in measurements)
    lengths = Counter(m.env["run_length_s"] for m in measurements)
    assert set(lengths) <= {1, 3, 9} and lengths[1] > 0 and lengths[9] > 0
    stopped = [t for t in trials if t.status == "STOPPED"]
    assert len(stopped) == lengths[1] + lengths[3] and 30 / 2 <= len(stopped) < 30


def test_a_race_on_repeats_on_ray_stops_losers_in_their_tasks(sqlite_url, tmp_path):
    """The race's incumbent lives in an actor: tasks on any worker stop a losing configuration's runs."""
    from test_intensify import _repeated_table

    table = _repeated_table(tmp_path / "t.csv")
    out = run_cli("tune", "--dataset", str(table), "--repeats", "8", "--race", "wilcoxon", "--budget", "20",
                  "--parallel", "2", "--executor", "ray", "--algorithm", "random", "--seed", "2", "--json",
                  db=sqlite_url, check=True, env={"RAY_ADDRESS": ""})
    summary = json.loads(out.stdout.splitlines()[-1])
    trials, measurements = recorded(sqlite_url, summary["campaign"])
    assert len(trials) == 20 and all(m.env["executor"] == "ray" for m in measurements)
    raced = [t for t in trials if t.reason and t.reason.startswith("raced out after")]
    assert raced and all(t.runs < 8 for t in raced) and len(measurements) < 8 * 20
