"""The service's Ray cluster: a watcher process that reports its nodes, and (with ``ray_join``) the node
the service runs on.

Ray never runs inside the service. A child process (``python -m storetune.tuner.execution.ray watch ADDRESS``) joins
the cluster as a driver and prints its state as a JSON line every two seconds; when the head stops
answering, it says why and exits, and the monitor starts it again with backoff. So the service knows
within seconds whether its cluster is there (``ready``), ``GET /cluster`` and ``/health`` show the nodes
and what is in use, and a head that goes away takes down a child, never the service.

A Ray driver must run on a node of its cluster (it talks to a local raylet). A service on the head's
machine has one; a service in a container of its own (docker-compose.yml) joins the cluster with a node
of its own that offers no CPU (``STORETUNE_RAY_JOIN=1``): its campaign workers drive from there and
every task runs on the other nodes. The monitor keeps that node running too, and starts it again after
the head comes back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storetune.api.service.worker import die_with_parent

log = logging.getLogger(__name__)

STALE_S = 10.0  # a state older than this is no longer the cluster's
BACKOFF_S = (1.0, 2.0, 5.0, 10.0)  # between attempts to join, after each failure in a row


@dataclass(frozen=True)
class ClusterState:
    address: str
    state: str  # connecting | connected | unreachable
    reason: str | None = None
    checked_at: float | None = None
    nodes: list[dict[str, Any]] = field(default_factory=list)
    total: dict[str, float] = field(default_factory=dict)
    available: dict[str, float] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.state == "connected" and self.checked_at is not None and time.time() - self.checked_at < STALE_S

    def missing(self, needed: dict[str, float]) -> str | None:
        """Why the cluster cannot run a task that needs ``needed``: a resource no node advertises (None: it can)."""
        for name, amount in needed.items():
            if self.total.get(name, 0.0) < amount:
                custom = sorted(k for k in self.total if k not in ("CPU", "GPU"))
                return (f"no node of the Ray cluster at {self.address} advertises {name!r} (it has "
                        f"{', '.join(custom) or 'no custom resource'}): start a node with "
                        f"ray start --address {self.address} --resources='{{\"{name}\": 1}}'")
        return None

    def slots(self, needed: dict[str, float]) -> int:
        """How many such tasks the cluster runs at once (a CPU each when ``needed`` is empty)."""
        needed = needed or {"CPU": 1.0}
        return max(min(int(self.total.get(k, 0.0) // v) for k, v in needed.items()), 1)

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "state": self.state, "ready": self.ready, "reason": self.reason,
                "checked_at": self.checked_at, "nodes": self.nodes, "total": self.total, "available": self.available}


class ClusterMonitor:
    """Watches the Ray cluster at ``address`` from a child process; ``state`` is the latest report."""

    def __init__(self, address: str, join: bool = False, env: dict[str, str] | None = None):
        self.address, self.join = address, join
        self.env = {**os.environ, **(env or {}), "RAY_ADDRESS": address}
        self._state = ClusterState(address, "connecting")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: subprocess.Popen | None = None
        self._node: subprocess.Popen | None = None
        self._node_lock = threading.Lock()
        # where the service's node's process group is written: a successor stops what a killed service left
        self._node_file = Path(tempfile.gettempdir()) / (
            f"storetune-ray-node-{os.getuid()}-{hashlib.sha256(address.encode()).hexdigest()[:12]}.pgid")
        self._thread: threading.Thread | None = None
        self.changed = threading.Event()  # set at every change of readiness: the scheduler looks again

    @property
    def state(self) -> ClusterState:
        with self._lock:
            return self._state

    def _set(self, state: ClusterState) -> None:
        with self._lock:
            was, self._state = self._state.ready, state
        if was != state.ready or state.state != "connected":
            self.changed.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="storetune-ray-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching, and stop the service's own node (its whole process group: the raylet and the
        agents that `ray start` started)."""
        self._stop.set()
        if self._watcher is not None and self._watcher.poll() is None:
            self._watcher.terminate()
        with self._node_lock:  # a node being started now sees the stop when it takes the lock
            if self._node is not None:
                _stop_group(self._node.pid)
                self._node.poll()
        if self._watcher is not None:
            try:
                self._watcher.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._watcher.kill()
        if self._thread is not None:
            self._thread.join(timeout=20)

    # --- the watcher ----------------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            if self.join and not self._joined():
                failures += 1
                self._stop.wait(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])
                continue
            connected = self._watch()
            failures = 0 if connected else failures + 1
            self._stop.wait(BACKOFF_S[min(max(failures, 1), len(BACKOFF_S)) - 1])

    def _watch(self) -> bool:
        """Run one watcher until it exits; returns whether it ever connected. While nothing answers at the
        address, no watcher is started (a Python process with Ray every few seconds would cost a core's
        tenth): the port is checked from here."""
        from storetune.tuner.execution.ray import ExecutorError, reachable

        try:
            reachable(self.address, timeout=5.0)
        except ExecutorError as e:
            if self.state.state != "unreachable" or self.state.reason != str(e):
                log.warning("the Ray cluster at %s is unreachable: %s", self.address, e)
            self._set(ClusterState(self.address, "unreachable", str(e), time.time()))
            return False
        argv = [sys.executable, "-m", "storetune.tuner.execution.ray", "watch", self.address]
        connected, last = False, None
        try:
            self._watcher = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True,
                                             preexec_fn=die_with_parent)  # a killed service leaves no watcher
        except OSError as e:
            self._set(ClusterState(self.address, "unreachable", f"cannot start the cluster watcher: {e}"))
            return False
        errors: list[str] = []
        threading.Thread(target=_drain, args=(self._watcher.stderr, errors), daemon=True).start()
        assert self._watcher.stdout is not None
        for line in self._watcher.stdout:
            try:
                report = json.loads(line)
            except ValueError:
                continue
            last = report
            if report.get("state") == "connected":
                if not connected:
                    log.info("the Ray cluster at %s answers: %d nodes", self.address, len(report.get("nodes", [])))
                connected = True
            self._set(ClusterState(self.address, report.get("state", "unreachable"), report.get("reason"),
                                   report.get("checked_at"), report.get("nodes", []), report.get("total", {}),
                                   report.get("available", {})))
        self._watcher.wait()
        if self._stop.is_set():
            return connected
        reason = (last or {}).get("reason") if (last or {}).get("state") != "connected" else None
        if not reason:
            said = [e for e in errors if e.strip()]
            reason = f"the cluster watcher stopped (exit status {self._watcher.returncode})" + (
                f": {said[-1].strip()[:300]}" if said else "")
        if connected or self.state.state != "unreachable":
            log.warning("the Ray cluster at %s is unreachable: %s", self.address, reason)
        self._set(ClusterState(self.address, "unreachable", reason, time.time()))
        return connected

    # --- the service's own node (ray_join) ---------------------------------------------------------------
    def _joined(self) -> bool:
        """The service's node of the cluster is running, started now if it was not."""
        if self._node is not None and self._node.poll() is None:
            return True
        with self._node_lock:
            if self._stop.is_set():
                return False
            if self._node is not None:  # it ended (its head went away): what is left of its group goes too
                _stop_group(self._node.pid)
            else:
                self._stop_leftover()
            ray = str(Path(sys.executable).with_name("ray"))
            argv = [ray, "start", f"--address={self.address}", "--num-cpus=0", "--num-gpus=0", "--resources={}",
                    "--object-store-memory=134217728",  # 128 MiB: its drivers pass small objects only
                    "--disable-usage-stats", "--block"]
            try:
                self._node = subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                              text=True, start_new_session=True)
            except OSError as e:
                self._set(ClusterState(self.address, "unreachable", f"cannot start this service's Ray node: {e}"))
                return False
            self._node_file.write_text(str(self._node.pid))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self._stop.is_set():
            if self._node.poll() is not None:
                said = (self._node.stderr.read() if self._node.stderr else "").strip().splitlines()
                self._set(ClusterState(self.address, "unreachable", "this service's Ray node could not join: "
                                       + (said[-1][:300] if said else f"exit status {self._node.returncode}"),
                                       time.time()))
                return False
            if any(b"raylet" in argv0 for _, argv0 in _members(self._node.pid)):
                return True
            time.sleep(0.5)
        return self._node.poll() is None

    def _stop_leftover(self) -> None:
        """The node a killed predecessor of this service left running (its group, if it still holds a raylet)."""
        try:
            pgid = int(self._node_file.read_text())
        except (OSError, ValueError):
            return
        if any(b"raylet" in argv0 for _, argv0 in _members(pgid)):
            log.warning("stopping the Ray node a previous service left running (process group %d)", pgid)
            _stop_group(pgid)


def _stop_group(pgid: int) -> None:
    """SIGTERM to a process group started with a session of its own, then SIGKILL to what is left of it."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _members(pgid):
            time.sleep(0.2)


def _members(pgid: int) -> list[tuple[int, bytes]]:
    """The live processes of a process group (zombies left out: a container's pid 1 may not reap them), each
    with its program's name as its command line gives it."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                out.append((int(entry.name), (entry / "cmdline").read_bytes().split(b"\0")[0]))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _drain(stream: Any, into: list[str]) -> None:
    """Keep the last lines a child writes to stderr (Ray is talkative), so its pipe never fills."""
    for line in stream:
        into.append(line)
        del into[:-20]
