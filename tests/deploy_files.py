"""The deployment files read as the tests read them: docker-compose.yml resolved by Debian's docker-compose,
the Dockerfile's instructions as text, and a health-check command run against a loopback server."""

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
from pathlib import Path

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


def arg_default(name: str) -> str | None:
    found = [args.partition("=")[2] for kw, args in instructions() if kw == "ARG" and args.partition("=")[0] == name]
    return found[0] if found else None


def healthcheck_argv() -> list[str]:
    found = [args for kw, args in instructions() if kw == "HEALTHCHECK"]
    assert found, "the Dockerfile has no HEALTHCHECK"
    args = found[-1]
    assert args.upper() != "NONE"
    head, _, command = args.partition("CMD ")
    assert command, f"HEALTHCHECK without CMD: {args}"
    argv = words(command.strip())
    return shlex.split(argv[2]) if argv[:2] == ["/bin/sh", "-c"] else argv


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
