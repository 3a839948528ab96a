"""The Ray executor: the executor seam of tuner/executor.py on a Ray cluster.

``ProcessExecutor`` measures in worker processes on this machine; ``RayExecutor`` sends the same
tasks (a runner's name and declared settings, the workload, a job) to a Ray cluster: an embedded
one it starts and stops itself, or an existing one at ``RAY_ADDRESS``. The campaign driver stays
the only writer of the history: tasks return measurements and never open the database.

A measurement that needs a disk asks the cluster for it as a custom resource (``runner.resources()``:
``loop_slot`` for a loop device, ``device:/dev/nvme1n1`` for that disk), so a node runs as many as it
advertises, and a disk's measurements run one at a time on the node that has it. Such a runner is
kept for the campaign by an actor that holds the resource (``DeviceHolder``; the driver's side in ray_holders.py, the
workers' in ray_workers.py): its device is set up and warmed up once, not before every job, and released when the
executor closes. A worker killed mid-evaluation
is retried up to ``max_retries`` times (a task by Ray, a holder's job by the stream on another holder);
after that the trial is FAILED with Ray's reason. A head that goes away is no verdict on any
configuration: while the driver waits, it checks the head's port, and once the head has not answered
for ``LOST_AFTER_S`` it raises ``ExecutorLost`` (the campaign stops, its running trials are re-run when
it resumes).

An embedded cluster authenticates with a token of its own, passed by the environment to the processes
it starts: Ray's default would write ``~/.ray/auth_token``, after which every plain ``ray start --head``
of the user's turns token authentication on. Ray is imported here and in ray_workers.py only.

``python -m storetune.tuner.execution.ray watch ADDRESS`` prints the cluster's state (``cluster_state``) as one
JSON line every few seconds: the service reads it from that process, so Ray never runs inside it.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from storetune.runners import HostUnavailable, Measurement, Runner, Status, Workload
from storetune.runners.base import LOOP_SLOT, device_resource, hardware_resource
from storetune.tuner.execution.jobs import ExecutorLost, Job, Recorder, record_all, run_jobs
from storetune.tuner.execution.ray_holders import HeldStream, Holders
from storetune.tuner.execution.ray_workers import ActorBoard, BoardActor, call_task, measure_task

T = TypeVar("T")
R = TypeVar("R")

CONNECT_TIMEOUT_S = 10.0
WAIT_S = 2.0  # how long the driver waits for a result before it checks that the head still answers
LOST_AFTER_S = 6.0  # a head silent this long is lost
EMBEDDED_OBJECT_STORE = 256 * 1024 * 1024  # an embedded cluster's object store: tasks pass small objects only


class ExecutorError(ValueError):
    """The cluster cannot run this campaign (unreachable, or no node has what it needs): say why."""


class ClusterUnreachable(ExecutorError, ExecutorLost):
    """Nothing answers at the cluster's address: a one-line error for a command that starts, and for a campaign
    already recorded, a lost cluster (interrupted, resumed when it answers again) rather than a failure."""


class RayExecutor:
    """Measures on a Ray cluster, keeping ``workers`` tasks in flight.

    ``address``: an existing cluster (``host:port`` of its head, as ``RAY_ADDRESS`` gives it); None
    starts an embedded local cluster of ``workers`` CPUs for this executor's lifetime.
    """

    kind = "ray"
    asynchronous = True
    remote = True  # measures elsewhere: the driver's runner need not set a device up

    def __init__(self, workers: int | None = None, *, address: str | None = None, max_retries: int = 2):
        if workers is not None and workers < 1:
            raise ExecutorError(f"`parallel` must be at least 1, not {workers}")
        if max_retries < 0:
            raise ExecutorError(f"`max_retries` must be 0 or more, not {max_retries}")
        self.address, self.max_retries = address, max_retries
        self._asked = workers  # None: as many as the cluster has CPUs
        self.workers = workers or os.cpu_count() or 1
        self.nodes_used: set[str] = set()
        self.notes: list[str] = []
        self._started = False
        self._fitted: set[str] = set()
        self._restore_env: dict[str, str | None] = {}
        self._silent_since: float | None = None
        self._holders: dict[str, Holders] = {}  # a device runner's actors, by its name and settings

    # --- the cluster ------------------------------------------------------------------------------
    def _ray(self) -> Any:
        if not self._started and not self.address:
            self._private_token()
        from storetune.extras import need

        ray = need("ray", "ray")

        if self._started:
            return ray
        # no runtime_env: Ray starts every worker of a job with one anew, through its agent (0.4 s more per
        # campaign); the tasks set their threads themselves (one_thread_each), and import StoreTune as installed
        options: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        if self.address:
            reachable(self.address)
            try:
                ray.init(address=self.address, **options)
            except (ConnectionError, RuntimeError) as e:
                first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
                raise ExecutorError(
                    f"could not join the Ray cluster at {self.address} ({first.strip()}). If its head uses token "
                    "authentication (Ray 2.59+ turns it on when ~/.ray/auth_token exists), set RAY_AUTH_MODE=token "
                    "here, with the head's token in ~/.ray/auth_token or RAY_AUTH_TOKEN") from None
            if self._asked is None:
                self.workers = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        else:
            # one loop slot: this machine's loop devices share its disks, and two at once disturb each other
            ray.init(num_cpus=self.workers, object_store_memory=EMBEDDED_OBJECT_STORE,
                     resources={LOOP_SLOT: 1}, **options)
        self._started = True
        return ray

    def _private_token(self) -> None:
        """An embedded cluster's token, in this process's environment (inherited by the raylet and the
        workers Ray starts), unless the user chose an authentication mode: Ray would otherwise generate one
        into ~/.ray/auth_token. Restored by ``close``."""
        if "RAY_AUTH_MODE" in os.environ:
            return
        self._restore_env = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
        if "ray" in sys.modules:  # Ray read its configuration when it was imported: it reads it again
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()

    def start(self) -> None:
        """Join the cluster (or start the embedded one) now: its errors before anything is recorded."""
        self._ray()

    def fit(self, runner: Runner) -> str | None:
        """Check the cluster has what the runner's measurements need, and cap the tasks in flight to
        what it can run at once (a device campaign: its loop slots or disks). Says so when it caps."""
        needed = runner.resources()
        self._fitted.add(runner.name)
        slots = self.check_resources(needed)
        if self.workers > slots:
            what = " and ".join(f"{int(total)} {name}" for name, total in self._totals(needed or {"CPU": 1}).items())
            note = (f"`parallel` {self.workers} capped to {slots}: the Ray cluster advertises {what} "
                    "(one measurement per unit)")
            self.workers = slots
            self.notes.append(note)
            return note
        return None

    def _totals(self, needed: dict[str, float]) -> dict[str, float]:
        totals = self._ray().cluster_resources()
        return {name: totals.get(name, 0.0) for name in needed}

    def close(self) -> None:
        if self._started:
            import ray

            try:
                for holders in self._holders.values():
                    holders.release()
            except Exception:  # a cluster gone: its holders went with it, their devices are the reaper's
                pass
            finally:
                self._holders = {}
                ray.shutdown()  # an embedded cluster stops with it; an existing one only loses this driver
            self._started = False
        if self._restore_env:
            for name, value in self._restore_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            self._restore_env = {}
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()

    def describe(self) -> dict[str, Any]:
        """What ran the campaign, for its summary: the executor and the nodes its tasks ran on."""
        return {"kind": self.kind, "nodes": len(self.nodes_used), "address": self.address or "embedded",
                "workers": self.workers, **({"notes": self.notes} if self.notes else {})}

    # --- a head that goes away ----------------------------------------------------------------------
    def _check_head(self) -> None:
        """Raise ExecutorLost once the head of an existing cluster has not answered for LOST_AFTER_S (an
        embedded cluster lives in this process: it cannot be lost without it)."""
        if not self.address:
            return
        try:
            reachable(self.address, timeout=WAIT_S)
        except ExecutorError as e:
            now = time.monotonic()
            self._silent_since = self._silent_since or now
            if now - self._silent_since >= LOST_AFTER_S:
                raise ExecutorLost(f"the Ray cluster at {self.address} was lost: {e}") from None
        else:
            self._silent_since = None

    def _wait(self, ray: Any, refs: list[Any]) -> Any:
        """The first of ``refs`` to finish, checking between waits that the head still answers."""
        while True:
            done, _ = ray.wait(refs, num_returns=1, timeout=WAIT_S)
            if done:
                return done[0]
            self._check_head()

    def _lost(self, error: BaseException) -> bool:
        """Did a task fail because the head went away (no verdict on its configuration)? Asked when Ray
        reports a dead worker or node: the head is polled until it answers or is judged lost."""
        if not self.address:
            return False
        deadline = time.monotonic() + LOST_AFTER_S + WAIT_S
        while time.monotonic() < deadline:
            try:
                reachable(self.address, timeout=WAIT_S)
                return False
            except ExecutorError:
                time.sleep(0.5)
        return True

    def check_resources(self, needed: dict[str, float]) -> int:
        """How many of these tasks the cluster can run at once; refuses a resource no node has."""
        ray = self._ray()
        totals = ray.cluster_resources()
        if not needed:
            return max(int(totals.get("CPU", 1)), 1)
        slots = []
        for name, amount in needed.items():
            have = totals.get(name, 0.0)
            if have < amount:
                advertised = sorted(k for k in totals if k == LOOP_SLOT or k.startswith((device_resource(""),
                                                                                          hardware_resource(""))))
                raise ExecutorError(
                    f"no node of the Ray cluster advertises {name!r} (it has {', '.join(advertised) or 'none'}): "
                    f"start a node with ray start --resources='{{\"{name}\": 1}}'")
            slots.append(int(have // amount))
        return max(min(slots), 1)

    # --- the executor seam ------------------------------------------------------------------------
    def board(self, halving: Any) -> ActorBoard:
        """The campaign's rung record as a Ray actor (no CPU: it only keeps lists), which the tasks judge their
        runs on wherever they run; it ends with the driver's connection."""
        ray = self._ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)  # the driver's node
        actor = ray.remote(num_cpus=0, max_restarts=0)(BoardActor).options(scheduling_strategy=here).remote(halving)
        return ActorBoard(actor)

    def stream(self, runner: Runner, workload: Workload, record: Recorder | None = None,
               board: Any = None) -> _RayStream:
        """Jobs as Ray tasks; measurements are recorded here, by the only writer."""
        ray = self._ray()
        if runner.name not in self._fitted:
            self.fit(runner)
        needed = runner.resources()
        if needed:  # it holds a device: kept by actors for the campaign, one per loop slot or disk in use
            key = f"{runner.name}:{json.dumps(runner.settings(), sort_keys=True, default=str)}"
            if key not in self._holders:
                self._holders[key] = Holders(ray, runner.name, runner.settings(), needed, self.workers)
            return HeldStream(self, ray, self._holders[key], workload, record, board)
        options = dict(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)
        return _RayStream(self, ray, (ray.remote(measure_task), options), runner, workload, record, board)

    def run(self, runner: Runner, workload: Workload, jobs: Sequence[Job],
            record: Recorder | None = None) -> Iterator[tuple[Job, list[Measurement]]]:
        """Measure the jobs on the cluster, ``workers`` in flight, as each finishes."""
        return run_jobs(self.stream(runner, workload, record), jobs, self.workers)

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """``fn`` on every item as Ray tasks (a comparison's seeds), ``workers`` in flight."""
        ray = self._ray()
        task = ray.remote(call_task).options(num_cpus=1, max_retries=self.max_retries)
        queue = iter(items)
        pending = [task.remote(fn, item) for item in itertools.islice(queue, 2 * self.workers)]
        while pending:
            ref = self._wait(ray, pending)
            pending.remove(ref)
            try:
                result, node = ray.get(ref)
            except ray.exceptions.RayError as e:
                if not isinstance(e, ray.exceptions.RayTaskError) and self._lost(e):
                    raise ExecutorLost(f"the Ray cluster at {self.address} was lost: {type(e).__name__}") from None
                raise
            self.nodes_used.add(node)
            yield result
            nxt = next(queue, None)
            if nxt is not None:
                pending.append(task.remote(fn, nxt))

    def _result(self, ray: Any, ref: Any, runner_name: str,
                retried: Callable[[], bool] | None = None) -> list[Measurement] | None:
        """A job's measurements, or a FAILED one that says why there are none. ``retried``: asked when the
        worker died (its head still answers); True when the caller runs the job again (None returned)."""
        try:
            measurements, node = ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # the task raised: building the runner failed on that node
            cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
            if isinstance(cause, HostUnavailable):  # that node's host cannot measure now: the campaign stops
                raise cause from None
            return [Measurement.failed(Status.FAILED, f"on a Ray worker: {type(cause).__name__}: {cause}",
                                       env={"runner": runner_name, "executor": "ray"})]
        except ray.exceptions.RayError as e:  # the worker or its node died, on every try; or the head went away
            if self._lost(e):
                raise ExecutorLost(f"the Ray cluster at {self.address} was lost while it measured: "
                                   f"{type(e).__name__}") from None
            if retried is not None and retried():
                return None
            lines = [line for line in str(e).splitlines() if line.strip()]
            reason = f"{type(e).__name__}: {lines[0].strip()}" if lines else type(e).__name__
            return [Measurement.failed(Status.FAILED, f"the Ray task failed {self.max_retries + 1} times: {reason}",
                                       env={"runner": runner_name, "executor": "ray"})]
        self.nodes_used.add(node)
        return measurements


class _RayStream:
    """Jobs as Ray tasks. A job submitted as another finishes goes to the node that finished it, where a slot
    was just freed (a soft node affinity: anywhere else if that node cannot take it). Left to Ray, the next
    task leases a worker anew, and on another node than the driver's that cost about 85 ms a task here (two
    one-CPU nodes: 8% of a one-second evaluation); with the hint, under 2 ms."""

    def __init__(self, executor: RayExecutor, ray: Any, task: tuple[Any, dict[str, Any]], runner: Runner,
                 workload: Workload, record: Recorder | None, board: Any = None):
        self.executor, self.ray, self.task, self.workload, self.record = executor, ray, task, workload, record
        self.board = board
        self.name, self.settings = runner.name, runner.settings()
        self._refs: dict[Any, Job] = {}
        self._freed: list[str] = []  # nodes where a job of this stream just finished

    @property
    def pending(self) -> int:
        return len(self._refs)

    def submit(self, job: Job) -> None:
        function, options = self.task
        if self._freed:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options = {**options, "scheduling_strategy": NodeAffinitySchedulingStrategy(self._freed.pop(), soft=True)}
        board = self.board if job.rungs is not None or job.race else None
        self._refs[function.options(**options).remote(self.name, self.settings, self.workload, job, board)] = job

    def next(self) -> tuple[Job, list[Measurement]]:
        ref = self.executor._wait(self.ray, list(self._refs))
        job = self._refs.pop(ref)
        measurements = self.executor._result(self.ray, ref, self.name)
        assert measurements is not None  # Ray itself retries a task
        node = next((m.env.get("ray_node") for m in measurements if m.env.get("ray_node")), None)
        self._freed = [node] if node else []  # the loop submits the next job before it asks for another result
        record_all(self.record, job, measurements)
        return job, measurements

    def drop_queued(self) -> None:
        """None dropped: a task Ray has not placed yet cannot be told from one measuring, and cancelling one
        that measures would leave its device to the reaper. They all run, and the loop waits for them."""


def reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """An unreachable head fails in seconds with one line, not after Ray's long retries."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # [::1]:6379
    if not host or not port.isdigit():
        raise ExecutorError(f"RAY_ADDRESS {address!r} is not host:port (the head's GCS port, 6379 by default)")
    started = time.monotonic()
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as e:
        raise ClusterUnreachable(f"the Ray cluster at {address} is unreachable ({e.strerror or e}, after "
                            f"{time.monotonic() - started:.0f} s): start it with ray start --head, or unset "
                            "RAY_ADDRESS to run here") from None
    with sock:
        # Ray's GCS is a gRPC server: it answers HTTP/2's preface with a SETTINGS frame at once, where Ray
        # itself would retry another service's port (PostgreSQL's, StoreTune's own REST port) for minutes.
        # Written by hand: Ray has no bounded probe of an address (RAY_py_gcs_connect_timeout_s bounds one
        # attempt, not its retries). Not with TLS (as Ray reads RAY_USE_TLS), which would be spoken first.
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return
        try:
            sock.sendall(_HTTP2_PREFACE)
            answer = _read(sock, 9)
        except OSError:  # it took the connection and then reset it: a service of another protocol
            answer = b""
        if len(answer) < 9 or answer[3] != 0x04:
            raise ExecutorError(
                f"{address} answers, but not as a Ray head (no HTTP/2 from its port: another service listens "
                "there). RAY_ADDRESS is the head's GCS address, host:6379 by default, as ray start --head "
                "printed it")


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + an empty SETTINGS


def _read(sock: socket.socket, n: int) -> bytes:
    """Up to ``n`` bytes, fewer if the peer closes or stays silent for the socket's timeout."""
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except (TimeoutError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    return data


# --- the cluster's state, for the service -----------------------------------------------------------
WATCH_S = 2.0


def cluster_state(ray: Any) -> dict[str, Any]:
    """The nodes of the cluster this process joined, each with its resources (total and available), and the
    cluster's totals: what ``GET /cluster`` shows."""
    from ray._private.state import available_resources_per_node

    available = available_resources_per_node()
    nodes = []
    for n in ray.nodes():
        node_id = n.get("NodeID", "")
        nodes.append({
            "id": node_id, "name": f"{n.get('NodeManagerHostname', '?')}/{node_id[:6]}",
            "address": n.get("NodeManagerAddress"), "alive": bool(n.get("Alive")),
            "head": "node:__internal_head__" in (n.get("Resources") or {}),
            "resources": _public(n.get("Resources") or {}), "available": _public(available.get(node_id, {})),
        })
    return {"state": "connected", "nodes": nodes, "total": _public(ray.cluster_resources()),
            "available": _public(ray.available_resources())}


def _public(resources: dict[str, float]) -> dict[str, float]:
    """Resources as a person reads them: Ray's own bookkeeping (node:<ip>, memory in bytes) left out."""
    return {k: round(float(v), 3) for k, v in sorted(resources.items())
            if not k.startswith("node:") and k not in ("memory", "object_store_memory")}


def watch(address: str, interval: float = WATCH_S, out: Any = None) -> int:
    """Print the state of the cluster at ``address`` as a JSON line every ``interval`` seconds, until its
    head stops answering: then one line saying why, and exit status 3 (2: it could not join)."""
    out = out or sys.stdout

    def say(state: dict[str, Any]) -> None:
        print(json.dumps({**state, "address": address, "checked_at": time.time()}), file=out, flush=True)

    executor = RayExecutor(address=address)
    try:
        ray = executor._ray()
    except ExecutorError as e:
        say({"state": "unreachable", "reason": str(e)})
        return 2
    except Exception as e:  # Ray's own refusal (no local node to attach to, a version mismatch): its first line
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        say({"state": "unreachable", "reason": f"could not join the Ray cluster at {address}: {first}"})
        return 2
    while True:
        try:
            reachable(address, timeout=WAIT_S)
            say(cluster_state(ray))
        except ExecutorError as e:
            say({"state": "unreachable", "reason": str(e)})
            return 3
        time.sleep(interval)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "watch":
        sys.exit("usage: python -m storetune.tuner.execution.ray watch HOST:PORT")
    sys.exit(watch(sys.argv[2]))
