"""A Ray cluster of separate processes for tests: a head and a worker node started with `ray start` on 127.0.0.1,
in a temp dir of their own, stopped by their own processes (found by that dir), never with `ray stop`, which would
stop every cluster on the machine (a user's too)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A head and a worker node as separate `ray start` processes on 127.0.0.1, in a temp dir of their own."""

    def __init__(self, tmp: Path, auth: dict[str, str] | None = None, port: int | None = None):
        self.tmp, self.port, self.worker_port = tmp, port or free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Ray >= 2.59 turns token auth on for a head when ~/.ray/auth_token exists (an embedded ray.init writes
        # it), and then a node or a driver without the token cannot join: every process here says the same
        self.auth = {"RAY_USAGE_STATS_ENABLED": "0", **(auth or {"RAY_AUTH_MODE": "disabled"})}
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **self.auth}

    def start(self, worker: bool = True) -> None:
        self._start_node(1, "--head", f"--port={self.port}", "--num-cpus=1", f"--temp-dir={self.tmp}",
                         "--include-dashboard=false", "--disable-usage-stats", "--resources={\"loop_slot\": 1}")
        if worker:
            for attempt in (1, 2):  # a worker whose raylet never registered is stopped and started once more
                said = self._start_node(2, f"--address={self.address}", "--num-cpus=1",
                                        f"--node-manager-port={self.worker_port}", "--resources={\"loop_slot\": 1}",
                                        last=attempt == 2)
                if said is None:
                    break
                self._kill(self.worker_raylet_pids())
                self.worker_port = free_port()

    def _start_node(self, nodes: int, *args: str, last: bool = True) -> str | None:
        """`ray start` gives up when its raylet has not registered with the GCS within 30 s (hard-coded in
        ray/_private/node.py), but leaves the raylet running: on 2 cores busy with other tests it can register
        later (CI saw it once), or never (CI saw that too). So a failed start is waited for; if the cluster still
        has fewer than ``nodes``, it fails the test (``last``) or returns what was said, to be tried again."""
        proc = subprocess.run([RAY, "start", *args], env=self.env, capture_output=True, text=True, timeout=180)
        if proc.returncode == 0:
            return None
        alive, said = self.alive_nodes(at_least=nodes, within_s=60 if not last else 120)
        if alive >= nodes:
            return None
        message = f"{proc.stdout}{proc.stderr}\nthen {alive} nodes alive: {said}"
        assert not last, message
        return message

    def alive_nodes(self, at_least: int, within_s: float) -> tuple[int, str]:
        """How many nodes the GCS counts alive, polled by a driver of its own until ``at_least`` or ``within_s``
        (a driver cannot connect before a local raylet registers: it tries again), and what the poller said."""
        script = ("import sys, time, ray\n"
                  "deadline, alive = time.monotonic() + float(sys.argv[3]), 0\n"
                  "while time.monotonic() < deadline:\n"
                  "    try:\n"
                  "        ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                  "        break\n"
                  "    except Exception as e:\n"
                  "        print(f'not yet: {e}', file=sys.stderr)\n"
                  "        time.sleep(2)\n"
                  "while ray.is_initialized() and (alive := sum(n['Alive'] for n in ray.nodes())) < int(sys.argv[2]) "
                  "and time.monotonic() < deadline:\n"
                  "    time.sleep(1)\n"
                  "print(alive)\n")
        proc = subprocess.run([sys.executable, "-c", script, self.address, str(at_least), str(within_s)],
                              env=self.env, capture_output=True, text=True, timeout=within_s + 180)
        alive = int(proc.stdout.split()[-1]) if proc.returncode == 0 and proc.stdout.split() else 0
        return alive, proc.stderr.strip()[-2000:]

    def worker_raylet_pids(self) -> list[int]:
        return [pid for pid, cmdline in processes()
                if cmdline and "raylet" in cmdline[0] and f"--node_manager_port={self.worker_port}" in cmdline]

    def worker_raylet(self) -> int:
        for pid in self.worker_raylet_pids():
            return pid
        raise AssertionError("the worker node's raylet is not running")

    @staticmethod
    def _kill(pids: list[int]) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(1)

    def stop(self) -> None:
        """Every process of this cluster: its command line or its open files name the cluster's temp dir
        (Ray's agents rewrite their command line, but keep their logs there open); then the dir."""
        for _ in range(3):
            mine = [pid for pid, cmdline in processes() if any(str(self.tmp) in part for part in cmdline)
                    or any(str(self.tmp) in target for target in open_files(pid))]
            if not mine:
                break
            self._kill(mine)
        shutil.rmtree(self.tmp, ignore_errors=True)


def open_files(pid: int) -> list[str]:
    try:
        return [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:  # gone, or a descriptor closed while reading
        return []


def processes() -> list[tuple[int, list[str]]]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline and cmdline[0]:
                out.append((int(entry.name), [c.decode(errors="replace") for c in cmdline if c]))
    return out
