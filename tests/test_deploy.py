"""The deployment files: docker-compose.yml (validated by Debian's docker-compose), the Dockerfile, .dockerignore
and the packaging the image installs. No image is built and no container is started: `docker-compose config`
validates and resolves the compose file, and the Dockerfile is read as text (tests/deploy_files.py). The
health-check commands are run for real, against a small HTTP server on the loopback address.
tests/test_deploy_e2e.py starts the deployment itself, under `make test-deploy`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from deploy_files import (COMPOSE_FILE, DOCKERIGNORE, HEALTH_URL, ROOT, TOKEN, arg_default, compose_config, environment,
                          healthcheck_argv, healthcheck_words, instructions, last, mounts, resolved, run_healthcheck,
                          urls, words)


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


def test_the_dockerfile_healthcheck_hits_health():
    argv = healthcheck_argv()
    assert "curl" not in argv[0] and "wget" not in argv[0], "python:slim has neither curl nor wget"
    assert urls(argv) == [HEALTH_URL], argv


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
