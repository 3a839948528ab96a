"""Where trials are measured: one seam (``jobs``: the Job, the Stream and Executor protocols), two engines
(``local``: this process or this machine's worker processes; ``ray``: a Ray cluster, imported only when
asked for), and the factory that picks one for a command."""

from __future__ import annotations

from storetune.tuner.execution.jobs import Executor
from storetune.tuner.execution.local import LocalExecutor, ProcessExecutor

EXECUTORS = ("local", "ray")


def make_executor(kind: str | None, workers: int | None, *, address: str | None = None,
                  max_retries: int = 2) -> Executor:
    """The executor a command asked for. ``kind``: 'local' (this process for one worker, else this
    machine's worker processes) or 'ray' (the cluster at ``address``, else an embedded one); None
    picks Ray when an address is given. ``workers``: tasks in flight (None: one per core, or the
    cluster's CPUs)."""
    kind = kind or ("ray" if address else "local")
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor {kind!r}: {' or '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ValueError(f"`parallel` must be at least 1, not {workers}")
    if kind == "ray":
        from storetune.tuner.execution.ray import RayExecutor

        return RayExecutor(workers, address=address, max_retries=max_retries)
    if workers == 1:
        return LocalExecutor()
    return ProcessExecutor(workers)
