"""A worker process of the service: runs one campaign (or one comparison) to its end.

``python -m storetune.api.service.worker campaign 7 --handed-by PID`` (the history's URL in STORETUNE_DATABASE_URL). The service's scheduler starts one per running
campaign; it drives the campaign through the same ``Campaign.resume(...).run()`` as
``storetune tune --resume``, and is the campaign's only writer. It dies with the service (the
kernel sends it SIGKILL when its parent dies), so a restarted service finds the campaign RUNNING
under a dead driver and resumes it: the trials that were running become STALE and are re-run.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel for SIGKILL when the parent (the service) dies, however it dies. Written by
    hand: the standard library has no prctl, and this one call does not warrant a dependency."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the scheduler's shutdown still stops its workers
        pass


class Interrupt:
    """The service's stop, as a KeyboardInterrupt in the worker's main loop.

    Ctrl-C reaches a worker twice (from the terminal, to the whole process group, and from the
    stopping service): the second must not cut short the recording of the first, so only the first
    raises. A KeyboardInterrupt raised by a signal handler can land in a finaliser (a SQLAlchemy
    state's ``__del__``), where Python prints it and drops it; the request is therefore kept, and
    ``check`` raises it again after the next recorded trial, so the stop is never lost."""

    def __init__(self) -> None:
        self.requested = False

    def handler(self, _signum: int, _frame: object) -> None:
        if self.requested:
            return
        self.requested = True
        raise KeyboardInterrupt

    def check(self, *_: object) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def install(self) -> None:
        signal.signal(signal.SIGINT, self.handler)


def executor_of(kind: str, workers: int | None):  # type: ignore[no-untyped-def]
    """The executor a campaign or comparison was recorded to run on: the service's Ray cluster (RAY_ADDRESS,
    which the scheduler sets for the worker), else this machine (worker processes for more than one)."""
    from storetune.tuner.execution import make_executor

    if kind == "ray":
        address = os.environ.get("RAY_ADDRESS")
        if not address:
            raise RuntimeError("this campaign runs on a Ray cluster, and the service gave its worker none")
        return make_executor("ray", workers, address=address,
                             max_retries=int(os.environ.get("STORETUNE_RAY_MAX_RETRIES", "2")))
    return make_executor("local", workers)


def run_campaign(history, campaign_id: int, comparison_workers: int, handed_by: int | None,  # type: ignore[no-untyped-def]
                 interrupt: Interrupt) -> None:
    from storetune.tuner import Campaign

    record = history.campaign(campaign_id)
    executor = executor_of((record.executor or {}).get("kind", "local"), record.batch_size)
    Campaign.resume(history, campaign_id, executor, handed_by=handed_by).run(on_trial=interrupt.check)


def run_comparison(history, comparison_id: int, comparison_workers: int, handed_by: int | None,  # type: ignore[no-untyped-def]
                   interrupt: Interrupt) -> None:
    from storetune.tuner.search.compare import Comparison

    comparison = Comparison.load(history, comparison_id)
    kind = history.comparison(comparison_id).settings.get("executor", "local")
    # on the cluster, as many seeds at once as it has CPUs; here, the service's comparison workers
    executor = executor_of(kind, None if kind == "ray" else comparison_workers)
    comparison.run(executor, on_seed=interrupt.check)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m storetune.api.service.worker")
    parser.add_argument("kind", choices=("campaign", "comparison"))
    parser.add_argument("id", type=int)
    parser.add_argument("--db", default=os.environ.get("STORETUNE_DATABASE_URL"),
                        help="the history (default: $STORETUNE_DATABASE_URL, which keeps a password out of argv)")
    parser.add_argument("--handed-by", type=int, default=None, help="the service that claimed the campaign")
    parser.add_argument("--comparison-workers", type=int, default=1)
    args = parser.parse_args(argv)
    if not args.db:
        parser.error("no history: --db URL or STORETUNE_DATABASE_URL")
    die_with_parent()
    interrupt = Interrupt()
    interrupt.install()
    logging.basicConfig(level=logging.WARNING, format=f"worker {args.kind} {args.id}: %(levelname)s %(message)s")
    from storetune.runners import HostUnavailable
    from storetune.tuner import History
    from storetune.tuner.search.compare import ComparisonCancelled
    from storetune.tuner.execution.jobs import ExecutorLost

    history = History(args.db)
    run = run_campaign if args.kind == "campaign" else run_comparison
    try:
        run(history, args.id, args.comparison_workers, args.handed_by, interrupt)
    except KeyboardInterrupt:  # the service is stopping: the campaign is interrupted, resumed at the next start
        return 130
    except ComparisonCancelled:  # recorded as cancelled, its seeds kept
        return 0
    except ExecutorLost as e:  # recorded interrupted; the service queues it until its cluster is back
        logging.warning("stopped: %s", e)
        return 69  # EX_UNAVAILABLE (api/scheduler.py: EXIT_CLUSTER_LOST)
    except HostUnavailable as e:  # the campaign recorded itself failed, with why and how to resume; nothing is blamed
        logging.warning("stopped: %s", e)
        return 75  # EX_TEMPFAIL
    except Exception as e:  # the campaign cannot go on (a device vanished, a table changed): say why, in the history
        from storetune.tuner.history.schema import lost_connection

        if lost_connection(e):  # the history itself did not answer in time: nothing can be recorded now
            logging.warning("the history's database did not answer: %s", e)
            return 74  # EX_IOERR (api/scheduler.py: EXIT_DATABASE_LOST): the service queues it again
        if interrupt.requested:  # the stop landed inside a library that raised its own error instead (SQLAlchemy's
            logging.warning("interrupted: %s", e)  # rollback of a flush it cut short): still the service's stop
            return 130
        logging.exception("failed")
        message = f"{type(e).__name__}: {e}"
        if args.kind == "campaign":
            history.finish_campaign(args.id, "failed", message)
        else:
            history.finish_comparison(args.id, "failed", None, message)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
