"""The container deployment started for real under `make test-deploy` (STORETUNE_TEST_DEPLOY=1): the images
built here with local base images, and docker-compose.yml run end to end; and deploy/with-dockerd.sh's one-line
errors on a machine without a Docker engine, in `make test`.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from deploy_files import COMPOSE_FILE, ROOT, docker_compose


# --- the deployment started for real (make test-deploy) ------------------------------------------------

BASE_IMAGE = "storetune-base:bookworm"
POSTGRES_IMAGE = "storetune-postgres:local"
DEPLOY = os.environ.get("STORETUNE_TEST_DEPLOY") == "1"
# the user's benchmark: one second, then a throughput that depends on the configuration only
BENCH_1S = ("python3 -c \"import json, os, time, zlib; time.sleep(1); c = os.environ['STORETUNE_CONFIG']; "
            "print(json.dumps({'ops': zlib.crc32(c.encode()) % 1000 + 1}))\"")


class Deployment:
    """One docker-compose project of docker-compose.yml, under a name of its own (a user's project is left alone)."""

    def __init__(self, tmp_path: Path):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.project = f"storetune-e2e-{os.getpid()}"
        self.token = "e2e-" + os.urandom(8).hex()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("STORETUNE_", "COMPOSE_", "RAY_"))}
        self.env.update(COMPOSE_PROJECT_NAME=self.project, STORETUNE_TOKEN=self.token, STORETUNE_PORT=str(self.port),
                        STORETUNE_BASE_IMAGE=BASE_IMAGE, STORETUNE_EXTRAS="service,ray", POSTGRES_IMAGE=POSTGRES_IMAGE,
                        STORETUNE_ALLOW_COMMANDS="1")
        self.timings: dict[str, float] = {}

    def run(self, *argv: str, timeout: float = 1800) -> str:
        proc = subprocess.run(list(argv), cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        return proc.stdout

    def compose(self, *args: str, timeout: float = 1800) -> str:
        return self.run(docker_compose(), "-f", str(COMPOSE_FILE), *args, timeout=timeout)

    def timed(self, name: str, *argv: str, timeout: float = 1800) -> str:
        started = time.monotonic()
        try:
            return self.run(*argv, timeout=timeout)
        finally:
            self.timings[name] = time.monotonic() - started

    def containers(self, service: str) -> list[str]:
        return self.compose("ps", "-q", service).split()

    def client(self):  # type: ignore[no-untyped-def]
        import httpx2

        return httpx2.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30,
                             headers={"Authorization": f"Bearer {self.token}"})


def until(what: str, check, timeout: float, logs=None):  # type: ignore[no-untyped-def]
    """Poll ``check()`` until it returns something true; its value. A transport error is a not-yet."""
    import httpx2

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (httpx2.TransportError, ValueError, KeyError) as e:
            last = e
        time.sleep(1)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s (last: {last!r})\n{logs() if logs else ''}")


@pytest.mark.skipif(not DEPLOY, reason="builds images and starts containers: make test-deploy runs it")
def test_the_compose_deployment_runs_end_to_end(tmp_path):
    """up (postgres, api, ray-head, two ray-workers) -> a campaign over REST runs on the workers -> one worker
    container killed -> the api container restarted -> the postgres container restarted -> the campaign
    finishes with every trial recorded once -> down -v. Prints the images' sizes and the durations."""
    started = time.monotonic()
    d = Deployment(tmp_path)
    d.timed("base image (debootstrap)", str(ROOT / "deploy" / "base-image.sh"), BASE_IMAGE)
    d.timed("postgres image", "docker", "build", "-q", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
            "-t", POSTGRES_IMAGE, str(ROOT / "deploy" / "postgres"))
    started_build = time.monotonic()
    d.compose("build", "api")
    d.timings["storetune image"] = time.monotonic() - started_build
    budget = 60

    def logs() -> str:
        return d.compose("logs", "--no-color", "--tail", "60", "api")

    try:
        up = time.monotonic()
        d.compose("up", "-d", "--scale", "ray-worker=2")
        client = d.client()
        health = until("the api answering with its cluster", lambda: (h := client.get("/health").json())["executor"]
                       ["ready"] and h["executor"]["nodes"] >= 4 and h, 240, logs)  # head, 2 workers, the api's node
        d.timings["up until ready"] = time.monotonic() - up
        assert health["database"].startswith("postgresql")
        workers = {c[:12] for c in d.containers("ray-worker")}
        assert len(workers) == 2

        created = client.post("/campaigns", json={
            "runner": "command", "runner_settings": {"command": BENCH_1S, "space": "storage_v1"}, "metric": "ops",
            "direction": "max", "algorithm": "random", "budget": budget, "seed": 7, "parallel": 4})
        assert created.status_code == 201, created.text
        campaign = f"/campaigns/{created.json()['id']}"
        until("8 trials", lambda: client.get(campaign).json()["progress"]["evaluated"] >= 8, 180, logs)
        cluster = client.get("/cluster").json()
        assert cluster["campaigns"][0]["holds"] == {"CPU": 4.0}, cluster
        trials = client.get(f"{campaign}/trials", params={"limit": 1000}).json()["items"]
        hosts = {n.split("/")[0] for t in trials for n in t["nodes"]}
        assert hosts <= workers, (hosts, workers)  # measured on the worker containers, not the head or the api

        d.run("docker", "kill", d.containers("ray-worker")[0])  # a worker node dies mid-campaign
        until("4 more trials", lambda: client.get(campaign).json()["progress"]["evaluated"] >= 12, 180, logs)
        d.compose("restart", "api")  # the service restarts: it adopts the campaign
        client = d.client()
        until("the api back with its cluster", lambda: client.get("/health").json()["executor"]["ready"], 240, logs)
        until("4 more trials", lambda: client.get(campaign).json()["progress"]["evaluated"] >= 20, 240, logs)
        d.compose("restart", "postgres")  # the history's server restarts: the campaign rides it out
        done = until("the campaign to finish", lambda: (c := client.get(campaign).json())["state"] in (
            "finished", "failed") and c, 600, logs)
        assert done["state"] == "finished", (done["note"], logs())
        assert done["progress"]["evaluated"] == budget
        trials = client.get(f"{campaign}/trials", params={"limit": 1000}).json()["items"]
        succeeded = [t for t in trials if t["status"] == "SUCCEEDED"]
        assert len(succeeded) == budget and len({t["config_hash"] for t in succeeded}) == budget  # each once
        assert {t["status"] for t in trials} <= {"SUCCEEDED", "STALE"}
        stale = sorted(t["number"] for t in trials if t["status"] == "STALE")
        assert sorted(t["retry_of"] for t in trials if t["retry_of"] is not None) == stale  # each re-run once
        print(f"\ncampaign: {budget} trials finished, {len(stale)} re-run after the api's restart; measured on "
              f"{sorted({n for t in succeeded for n in t['nodes']})}")
    finally:
        down = time.monotonic()
        d.compose("down", "-v", "--remove-orphans", timeout=300)
        d.timings["down -v"] = time.monotonic() - down
    for image in (BASE_IMAGE, POSTGRES_IMAGE, "storetune:latest"):
        size = int(d.run("docker", "image", "inspect", "-f", "{{.Size}}", image).strip())
        print(f"image {image}: {size / 1e6:.0f} MB")
    for name, seconds in d.timings.items():
        print(f"{name}: {seconds:.0f} s")
    print(f"make test-deploy's test took {time.monotonic() - started:.0f} s")


def test_make_test_deploy_without_an_engine_says_what_is_missing_in_one_line(tmp_path):
    """deploy/with-dockerd.sh on a machine whose docker client finds no engine: without dockerd installed, one
    line naming the package; with a dockerd that cannot start, one line with its reason."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    (bin_dir / "docker").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{_without_dockerd(tmp_path)}", "HOME": str(tmp_path)}
    script = str(ROOT / "deploy" / "with-dockerd.sh")
    out = subprocess.run([script, "true"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout.count("\n") == 1, out
    assert "no Docker engine runs and none is installed: apt-get install docker.io" in out.stdout
    if os.geteuid() == 0:
        (bin_dir / "dockerd").write_text("#!/bin/sh\necho 'time=\"x\" level=fatal msg=\"no cgroup mount found\"' >&2\n"
                                         "exit 1\n")
        (bin_dir / "dockerd").chmod(0o755)
        out = subprocess.run([script, "true"], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and out.stdout == "dockerd could not start: no cgroup mount found\n", out


def _without_dockerd(tmp_path: Path) -> str:
    """A PATH of the system's tools without dockerd: a folder of links to /usr/bin and /bin's other programs."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for folder in (Path("/usr/bin"), Path("/bin"), Path("/usr/sbin")):
        for program in folder.iterdir():
            if program.name not in ("dockerd", "docker") and not (tools / program.name).exists():
                (tools / program.name).symlink_to(program)
    return str(tools)
