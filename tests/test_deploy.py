"""The deployment files: docker-compose.yml (validated by Debian's docker-compose), the Dockerfile, .dockerignore;
and, under `make test-deploy`, the deployment itself, started for real.

In `make test` no image is built and no container is started: `docker-compose config` validates and resolves
the compose file, and the Dockerfile is read as text. The health-check commands are run for real, against a
small HTTP server on the loopback address. `make test-deploy` (STORETUNE_TEST_DEPLOY=1) builds the images
here, with local base images, and runs docker-compose.yml end to end.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
HEALTH_URL = "http://127.0.0.1:8000/health"


# --- docker-compose config ---------------------------------------------------------------------------


def docker_compose() -> str:
    """Debian's docker-compose (the apt package `docker-compose`, 1.29.2 on bookworm)."""
    path = shutil.which("docker-compose")
    if path is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose): the compose file is not validated")
    return path


def compose_config(compose_file: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`docker-compose -f FILE config`, in an environment without STORETUNE_* or COMPOSE_* variables."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("STORETUNE_", "COMPOSE_", "DOCKER_", "POSTGRES_", "RAY_"))}
    clean.update(env)
    return subprocess.run(
        [docker_compose(), "-f", str(compose_file), "config"],
        capture_output=True, text=True, cwd=cwd, env=clean, timeout=120,
    )


TOKEN = "t0ken-from-the-host"


def resolved(tmp_path: Path, **env: str) -> dict:
    proc = compose_config(COMPOSE_FILE, tmp_path, **{"STORETUNE_TOKEN": TOKEN, **env})
    assert proc.returncode == 0, f"docker-compose config rejected {COMPOSE_FILE}:\n{proc.stderr}"
    config = yaml.safe_load(proc.stdout)
    assert isinstance(config, dict) and "services" in config, proc.stdout
    return config


def mounts(service: dict) -> list[tuple[str, str, bool]]:
    """A service's volumes as (source, target, read_only), from the short or the long syntax."""
    out = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            parts = volume.split(":")
            source, target = parts[0], parts[1]
            read_only = len(parts) > 2 and "ro" in parts[2].split(",")
        else:
            source, target = volume.get("source"), volume["target"]
            read_only = bool(volume.get("read_only"))
        out.append((source, target, read_only))
    return out


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {k: ("" if v is None else str(v)) for k, v in env.items()}


def urls(argv: list[str]) -> list[str]:
    """The http(s) URLs written in a command's words."""
    return [u for word in argv for u in re.findall(r"https?://[^\s'\"]+", word)]


def healthcheck_words(service: dict) -> list[str]:
    assert "healthcheck" in service and "test" in service["healthcheck"], f"no healthcheck: {service}"
    test = service["healthcheck"]["test"]
    return shlex.split(test) if isinstance(test, str) else list(test)


@pytest.fixture
def config(tmp_path: Path) -> dict:
    return resolved(tmp_path)


def test_compose_has_the_api_and_postgres(config):
    assert {"api", "postgres"} <= set(config["services"])
    postgres = config["services"]["postgres"]
    assert postgres["image"].split(":") == ["postgres", "16"]
    env = environment(postgres)
    assert (env.get("POSTGRES_USER"), env.get("POSTGRES_PASSWORD"), env.get("POSTGRES_DB")) == ("storetune",) * 3
    api = config["services"]["api"]
    assert "build" in api, "the api is built from the Dockerfile"
    build = api["build"]
    context = Path(build["context"] if isinstance(build, dict) else build)
    assert context.resolve() == ROOT
    assert (context / (build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile")).is_file()
    ports = [p if isinstance(p, str) else f"{p['published']}:{p['target']}" for p in api.get("ports", [])]
    assert "8000:8000" in ports


def test_a_ray_head_and_scalable_workers_from_the_same_image(config):
    head, worker = config["services"]["ray-head"], config["services"]["ray-worker"]
    image = config["services"]["api"]["image"]
    assert head["image"] == worker["image"] == image  # the workers import the same StoreTune as the driver
    assert head["entrypoint"] == worker["entrypoint"] == ["ray"]
    assert head["command"][:2] == ["start", "--head"] and "--port=6379" in head["command"]
    assert "--address=ray-head:6379" in worker["command"] and "--block" in worker["command"]
    assert head.get("hostname") == "ray-head" and "container_name" not in worker  # a fixed name cannot scale
    resources = next(w for w in worker["command"] if w.startswith("--resources="))
    assert json.loads(resources.split("=", 1)[1]) == {"loop_slot": 0}
    assert "ray-head" in (worker.get("depends_on") or {})
    assert "--num-cpus=0" in head["command"]  # the head coordinates; the workers measure


def test_the_service_measures_on_the_cluster_it_ships_with(config):
    """The api is a node of the cluster (a Ray driver needs a local node) that runs no task, and its campaigns
    are Ray tasks on the workers; the same image everywhere, built once from the Dockerfile."""
    api = config["services"]["api"]
    env = environment(api)
    assert env["RAY_ADDRESS"] == "ray-head:6379" and env["STORETUNE_RAY_JOIN"] == "1"
    assert env["STORETUNE_ALLOW_COMMANDS"] == "0"  # the command runner stays off unless the operator says so
    assert "ray-head" in api["depends_on"]
    assert api["build"]["network"] == "host"  # pip and apt reach their registries through the host
    assert api["build"]["args"] == {"BASE_IMAGE": "python:3.11-slim-bookworm", "EXTRAS": "all"}


def test_the_base_images_are_variables_for_machines_without_a_registry(tmp_path):
    config = resolved(tmp_path, STORETUNE_BASE_IMAGE="storetune-base:bookworm", STORETUNE_EXTRAS="service,ray",
                      POSTGRES_IMAGE="storetune-postgres:local")
    assert config["services"]["postgres"]["image"] == "storetune-postgres:local"
    assert config["services"]["api"]["build"]["args"] == {"BASE_IMAGE": "storetune-base:bookworm",
                                                          "EXTRAS": "service,ray"}


def test_the_api_waits_for_a_healthy_postgres(config):
    depends = config["services"]["api"].get("depends_on")
    assert isinstance(depends, dict), f"depends_on must carry a condition, not be a bare list: {depends!r}"
    assert depends.get("postgres", {}).get("condition") == "service_healthy"


def test_both_services_have_healthchecks(config):
    postgres = healthcheck_words(config["services"]["postgres"])
    assert postgres[0] in ("CMD", "CMD-SHELL") and "pg_isready" in " ".join(postgres)
    api = healthcheck_words(config["services"]["api"])
    assert api[0] in ("CMD", "CMD-SHELL") and urls(api) == [HEALTH_URL], api
    for name in ("api", "postgres"):
        assert not config["services"][name]["healthcheck"].get("disable"), name


def test_the_volumes(config):
    assert {"pgdata", "datasets"} <= set(config.get("volumes") or {})
    assert ("pgdata", "/var/lib/postgresql/data", False) in mounts(config["services"]["postgres"])
    api = mounts(config["services"]["api"])
    assert ("datasets", "/data/datasets", False) in api
    shared = [m for m in api if m[1] == "/data/shared"]
    assert len(shared) == 1, api
    source, _, read_only = shared[0]
    assert read_only, "the shared datasets are mounted read-only"
    assert Path(source) == ROOT.parent / "shared" / "datasets", "a bind mount of ../shared/datasets"


def test_the_api_environment_points_at_the_postgres_service(config):
    env = environment(config["services"]["api"])
    url = urlsplit(env["STORETUNE_DATABASE_URL"])
    postgres = environment(config["services"]["postgres"])
    assert url.scheme in ("postgresql", "postgresql+psycopg")
    assert url.hostname == "postgres" and url.hostname in config["services"]
    assert url.port == 5432
    assert (url.username, url.password, url.path.lstrip("/")) == (
        postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"])
    assert env["STORETUNE_DATA_DIRS"].split(":") == ["/data/datasets", "/data/shared", "/app/datasets"]
    assert env["STORETUNE_TOKEN"] == TOKEN  # from the host
    assert env["STORETUNE_MAX_CAMPAIGNS"] == "2"  # unset on the host: two campaigns at once


def test_without_a_token_the_compose_file_refuses_to_start(tmp_path):
    """The api is published on every interface: an unset token must not mean an open service."""
    proc = compose_config(COMPOSE_FILE, tmp_path)
    assert proc.returncode != 0 and "set STORETUNE_TOKEN" in proc.stderr, proc.stderr


def test_the_host_environment_sets_the_token_and_the_campaign_limit(tmp_path):
    env = environment(resolved(tmp_path, STORETUNE_TOKEN="s3cret", STORETUNE_MAX_CAMPAIGNS="5")["services"]["api"])
    assert (env["STORETUNE_TOKEN"], env["STORETUNE_MAX_CAMPAIGNS"]) == ("s3cret", "5")


def test_docker_compose_config_rejects_a_broken_file(tmp_path):
    """The check above is not vacuous: the same command refuses a file with a bad depends_on condition."""
    text = COMPOSE_FILE.read_text()
    assert "condition: service_healthy" in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace("condition: service_healthy", "condition: service_happy"))
    proc = compose_config(broken, tmp_path, STORETUNE_TOKEN=TOKEN)
    assert proc.returncode != 0 and "service_happy" in proc.stderr, proc.stderr


# --- the Dockerfile, read as text ----------------------------------------------------------------------


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, current = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current.strip():
            keyword, _, args = current.strip().partition(" ")
            out.append((keyword.upper(), args.strip()))
        current = ""
    return out


def words(args: str) -> list[str]:
    """An instruction's exec form (a JSON array) or its shell form, as a list of words."""
    if args.startswith("["):
        return json.loads(args)
    return ["/bin/sh", "-c", args]


def last(keyword: str) -> str | None:
    found = [args for kw, args in instructions() if kw == keyword]
    return found[-1] if found else None


def test_the_image_runs_storetune_serve():
    entrypoint, cmd = last("ENTRYPOINT"), last("CMD")
    assert entrypoint or cmd, "the Dockerfile has neither ENTRYPOINT nor CMD"
    argv = (words(entrypoint) if entrypoint else []) + (words(cmd) if cmd else [])
    if argv[:2] == ["/bin/sh", "-c"]:
        argv = shlex.split(argv[2])
    assert argv[:2] == ["storetune", "serve"], argv
    rest = " ".join(argv[2:])
    assert "--host 0.0.0.0" in rest and "--port 8000" in rest, argv
    assert any(kw == "EXPOSE" and "8000" in args.split() for kw, args in instructions())


def arg_default(name: str) -> str | None:
    found = [args.partition("=")[2] for kw, args in instructions() if kw == "ARG" and args.partition("=")[0] == name]
    return found[0] if found else None


def test_the_image_installs_the_device_tools_and_the_project():
    base = last("FROM")
    assert base == "${BASE_IMAGE}", base
    default = arg_default("BASE_IMAGE")
    assert default and default.startswith("python:3.11") and "bookworm" in default  # the official image by default
    runs = " ".join(args for kw, args in instructions() if kw == "RUN")
    assert "apt-get install" in runs
    apt_words = set(runs.split())
    assert {"fio", "e2fsprogs", "xfsprogs", "btrfs-progs", "util-linux"} <= apt_words, runs
    assert 'pip install "/src${EXTRAS:+[$EXTRAS]}"' in runs and arg_default("EXTRAS") == "all", runs
    # the working folder holds no checkout: its storetune/ folder shadowed the installed namespace, and
    # `python -m storetune.tuner.execution.ray watch` (the service's cluster watcher) found no storetune.tuner
    assert "rm -rf /src" in runs and last("WORKDIR") == "/app", runs
    assert any(kw == "COPY" for kw, _ in instructions())


def healthcheck_argv() -> list[str]:
    found = [args for kw, args in instructions() if kw == "HEALTHCHECK"]
    assert found, "the Dockerfile has no HEALTHCHECK"
    args = found[-1]
    assert args.upper() != "NONE"
    head, _, command = args.partition("CMD ")
    assert command, f"HEALTHCHECK without CMD: {args}"
    argv = words(command.strip())
    return shlex.split(argv[2]) if argv[:2] == ["/bin/sh", "-c"] else argv


def test_the_dockerfile_healthcheck_hits_health():
    argv = healthcheck_argv()
    assert "curl" not in argv[0] and "wget" not in argv[0], "python:slim has neither curl nor wget"
    assert urls(argv) == [HEALTH_URL], argv


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802
        code = self.status if self.path == "/health" else 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *args):
        pass


def run_healthcheck(argv: list[str], status: int) -> int:
    """Run a health-check command with its URL pointed at a loopback server answering `status` on /health."""
    handler = type("Handler", (_Health,), {"status": status})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/health"
        argv = [w.replace(HEALTH_URL, url) for w in argv]
        if argv[0] in ("python", "python3"):
            argv = [sys.executable, *argv[1:]]
        return subprocess.run(argv, capture_output=True, timeout=30).returncode
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("source", ["Dockerfile", "docker-compose.yml"])
def test_the_healthchecks_pass_on_200_and_fail_otherwise(source, tmp_path):
    if source == "Dockerfile":
        argv = healthcheck_argv()
    else:
        argv = healthcheck_words(resolved(tmp_path)["services"]["api"])
        assert argv[0] == "CMD", argv
        argv = argv[1:]
    assert run_healthcheck(argv, 200) == 0
    assert run_healthcheck(argv, 503) != 0


def test_dockerignore_keeps_local_state_out_but_not_the_build_inputs():
    patterns = {line.strip() for line in DOCKERIGNORE.read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    for needed in (".venv", "results", "*.sqlite", ".git"):
        assert needed in patterns, needed
    assert patterns & {"__pycache__", "**/__pycache__"}
    # pip install '.[rl]' reads these (pyproject: readme, license-files).
    for kept in ("pyproject.toml", "README.md", "LICENSE", "api", "tuner", "runners", "search_spaces"):
        assert kept not in patterns, kept


def test_every_file_the_packages_read_is_installed_with_them(tmp_path):
    """The image installs the project with pip, which copies a package's Python and only the other files
    package-data names: the trace replayer's C source was left behind, and replaying a trace in the
    container failed with FileNotFoundError. A wheel built from the tracked files holds every one of them."""
    import zipfile

    tracked = subprocess.run(["git", "ls-files", "api", "tuner", "runners", "search_spaces", "storetune"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    assert "runners/device/replayer.c" in tracked
    source = tmp_path / "source"
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    source.mkdir()
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    for path in tracked:  # the working tree's files, committed or not
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes((ROOT / path).read_bytes())
    (source / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "wheel"), str(source)], check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "wheel").glob("*.whl")
    # installed under the one namespace: api/cli/main.py is storetune/api/cli/main.py
    installed = {name.removeprefix("storetune/") for name in zipfile.ZipFile(wheel).namelist()}
    tracked = [path.removeprefix("storetune/") for path in tracked]
    left = sorted(set(tracked) - installed)
    assert not left, f"not installed by pip (add them to [tool.setuptools.package-data]): {left}"


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


def test_every_package_folder_is_installed():
    """pyproject.toml lists StoreTune's packages one by one (a folder maps to a name under storetune): a new
    folder of code left off the list would be missing from every installed StoreTune."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: Path(folder) for name, folder in project["package-dir"].items()}
    listed = set(project["packages"])
    for top, folder in folders.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            package = ".".join([top, *init.parent.relative_to(ROOT / folder).parts])
            assert package in listed, f"{init.parent.relative_to(ROOT)} is not installed: add {package} to packages"
