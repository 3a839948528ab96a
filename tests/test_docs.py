"""The README and Getting started cannot lie: every command of their five-minute paths runs here, as written,
in a temporary folder that links the repository's `.venv` and `datasets/` (so the relative paths of the text
work and nothing is written into the checkout or the user's home), against a temporary history. A command
this file does not know how to run fails the test: a new line in the README gets a test here."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

README, STARTED = ROOT / "README.md", ROOT / "docs" / "getting-started.md"
# Lines the paths show that a test does not run as they are, and why.
NOT_RUN = {
    "git clone": "the reader's own clone",
    "make demo": "sets up the virtual environment the tests run in; the demo's campaign is test_cli's",
    "make test": "is this suite",
    "make docs": "make test builds the site with --strict",
    "make serve": "run here as `storetune serve` on a free port, with the same embedded defaults",
    "sudo make setup-devices": "make test installs the same packages",
}


def blocks(path: Path, heading: str) -> list[str]:
    """The commands of the fenced blocks under the heading that starts with ``heading``, continuation lines
    joined."""
    text = path.read_text()
    match = re.search(rf"^##+ {re.escape(heading)}.*?$(.*?)(?=^##+ |\Z)", text, re.S | re.M)
    assert match, f"{path.name} has no section '{heading}'"
    out: list[str] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", match.group(1), re.S | re.M):
        pending = ""
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():  # a quoted body spans lines: one command
            pending = f"{pending}\n{line}" if pending else line.strip()
            code = "\n".join(re.sub(r"\s#\s.*$", "", part) for part in pending.splitlines())  # not the comments
            if pending and code.count("'") % 2 == 0:
                out.append(pending)
                pending = ""
        assert not pending, f"{path.name}: an unclosed quote in: {pending}"
    assert out, f"{path.name}: no commands under '{heading}'"
    return out


def runnable(lines: list[str]) -> list[str]:
    run = []
    for line in lines:
        skipped = next((k for k in NOT_RUN if line.startswith(k)), None)
        if skipped:
            continue
        known = ("db=", ".venv/bin/storetune ", "curl ", "sudo .venv/bin/storetune ")
        assert line.startswith(known), f"a command the docs test does not know how to run: {line}"
        run.append(line.removeprefix("sudo "))  # the suite runs as root where it runs the device path
    return run


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A reader's working folder: the checkout's .venv and datasets/ linked in, results/ its own."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (tmp_path / "datasets").symlink_to(ROOT / "datasets")
    return tmp_path


def bash(home: Path, commands: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> str:
    script = "set -euo pipefail\n" + "\n".join(commands) + "\n"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("STORETUNE_")}
    proc = subprocess.run(["bash", "-c", script], cwd=home, env={**environment, **(env or {})}, text=True,
                          capture_output=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
def test_getting_started_and_the_offline_comparison_run_as_written(home: Path):
    first = runnable(blocks(STARTED, "Your first campaign"))
    bash(home, first)
    assert (home / "results" / "start.sqlite").is_file() and (home / "results" / "campaign-1.html").is_file()

    compare = runnable(blocks(README, "Five minutes: compare algorithms offline"))
    out = bash(home, compare)
    assert "comparison 1 on loop-storage-v3" in out and (home / "results" / "comparison-1.html").is_file()
    assert "random, exact" in out  # random search's exact success, beside the seeds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_service_path_runs_as_written(home: Path):
    port = _free_port()
    lines = runnable(blocks(README, "Five minutes: a campaign through the service"))
    assert any(line.startswith("make serve") for line in blocks(README, "Five minutes: a campaign through the service"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STORETUNE_")}
    # `make serve`'s embedded defaults: a SQLite history in results/, the checkout's datasets allowed
    server = subprocess.Popen([str(home / ".venv" / "bin" / "storetune"), "serve", "--port", str(port), "--db",
                               f"sqlite:///{home}/results/service.sqlite"], cwd=home, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        (home / "results").mkdir(exist_ok=True)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while subprocess.run(["curl", "-sf", f"{base}/health"], capture_output=True).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, "the service did not start"
            time.sleep(0.3)
        commands = [line.replace("http://127.0.0.1:8000", base) for line in lines]
        created = json.loads(bash(home, commands[:1]))
        assert created["id"] == 1 and created["state"] in ("queued", "running"), created
        deadline = time.monotonic() + 300
        while (state := json.loads(bash(home, [f"curl -s {base}/campaigns/1"]))["state"]) != "finished":
            assert state in ("queued", "running") and time.monotonic() < deadline, state
            time.sleep(0.5)
        outputs = [bash(home, [c]) for c in commands[1:]]
        near = json.loads(outputs[-1])
        assert near["items"] and near["best_value"] > 0
        report = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{base}/campaigns/1/report"],
                                capture_output=True, text=True).stdout
        assert report == "200"
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.skipif(os.geteuid() != 0, reason="the device path runs as root")
def test_the_device_path_runs_as_written(home: Path):
    lines = runnable(blocks(README, "Five minutes: tune a real device"))
    dry, real = lines
    assert "--dry-run" in dry and "--dry-run" not in real
    printed = bash(home, [dry])
    assert "mkfs." in printed and "losetup" in printed
    assert not (home / "results" / "device.sqlite").exists()  # a dry run records nothing
    bash(home, [real + " --json"], timeout=1200)
    from storetune.tuner import History

    history = History(f"sqlite:///{home}/results/device.sqlite")
    [campaign] = history.campaigns()
    assert campaign.state == "finished" and campaign.runner == "device"
    # each run kept its per-second series, and the report draws them: a 2 s run is shorter than the steady-state
    # window, so none of them reached steady state, and the report says so
    from storetune.api.report.page import campaign_figures
    from storetune.tuner.analysis.report import campaign_data

    runs = [m for t in history.trials(campaign.id, measurements=True) for m in t.measurements]
    assert runs and all(m.series and 1 <= len(m.series["ops_per_s"]) <= 2 for m in runs if m.status == "SUCCEEDED")
    data = campaign_data(history, campaign.id)
    succeeded = sum(m.status == "SUCCEEDED" for m in runs)
    assert data["series"]["total"] == succeeded == data["series"]["unsteady_runs"]
    assert f"{succeeded} of the {succeeded} never reached steady state" in campaign_figures(data)["series"]["caption"]
