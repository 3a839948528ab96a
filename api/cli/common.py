"""What the commands share: consoles, common options, one-line user errors, runner settings."""

from __future__ import annotations

import functools
import inspect
import os
import signal
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from typer.core import TyperOption
from rich.markup import escape

from storetune.api.settings import Settings, default_database_url
from storetune.runners import SETTINGS, RunnerSettings, make_runner, parse_settings, settings_model
from storetune.runners.settings import field_extra, flag
from storetune.search_spaces import Config, format_config
from storetune.tuner import CampaignSpec, History

# SIGTERM and SIGHUP (kill, timeout, systemd, a closed terminal) stop a command as Ctrl-C does. Left to Python's
# defaults they ended it on the spot: fio kept running on a mounted loop device until the next start reaped it,
# and the campaign read "running".
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_stopped_by: list[int] = []


def stop_on_signals() -> None:
    """Make SIGTERM and SIGHUP a KeyboardInterrupt, as SIGINT is: a device run is torn down, an interrupted
    campaign is recorded and says how to resume. Only the first raises; a second must not cut the teardown short."""
    def stop(signum: int, _frame: object) -> None:
        if not _stopped_by:
            _stopped_by.append(signum)
            raise KeyboardInterrupt

    for number in STOP_SIGNALS:
        signal.signal(number, stop)


def interrupted_status() -> int:
    """The exit status of a stopped command, as a shell reports a signal: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + (_stopped_by[0] if _stopped_by else signal.SIGINT)


# typer (0.29) prints a type beside every option, <bool> beside flags that take no value: by hand,
# because typer has no setting for it, flags show none.
_display_type = TyperOption.display_type_rich
TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _display_type(self, ctx)  # type: ignore

# Piped output (files, CI logs) gets wide tables instead of rich's 80-column default.
console = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)

DbOption = Annotated[
    Optional[str], typer.Option("--db", help="History URL (default: $STORETUNE_DATABASE_URL or a SQLite file).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object as the last line.")]


class UserError(Exception):
    """Bad input: printed as one line, exit status 2."""


def database_url(db: str | None) -> str:
    """``--db``, else $STORETUNE_DATABASE_URL, else the default SQLite file. An empty ``--db`` (a shell
    variable that is not set) is refused: it used to mean the default history, written without a word."""
    if db is not None and not db.strip():
        raise UserError("--db is empty (an unset shell variable?): name the history, e.g. "
                        "sqlite:////path/to/history.sqlite, or leave --db out for the default one")
    return db or Settings().database_url


def db_flag(db: str | None) -> str:
    """`` --db URL`` for a printed command, quoted for the shell; empty for the default history. A URL from
    $STORETUNE_DATABASE_URL is named too (the variable may have been set for this command only), unless it
    holds a password: the variable, still set, serves it. A password given with ``--db`` is not printed (it
    would be on screen and in logs) but written ``<password>``, where the user puts it back: ``***`` read
    as the password itself and failed to log in."""
    import shlex

    from storetune.tuner.history.schema import has_password, shown_url

    url = database_url(db)
    if db is None and (url == default_database_url() or has_password(url)):
        return ""
    return f" --db {shlex.quote(shown_url(url, '<password>'))}"


def open_history(db: str | None, *, migrate: bool) -> History:
    """The history of ``--db``. Commands that write it migrate its schema (under a lock); commands
    that only read it pass ``migrate=False`` and refuse an old schema, naming `storetune db upgrade`."""
    return History(database_url(db), migrate=migrate)


def pairs(items: list[str], option: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{option} {item!r}: expected name=value")
        name = key.strip()
        if name in pairs:  # the last one silently won
            raise UserError(f"{option} names {name} twice ({name}={pairs[name]} and {item.strip()}): give it once")
        pairs[name] = value.strip()
    return pairs


# --- the runners' options, generated from their settings models ---------------------------------------


def _cli_type(annotation: Any) -> tuple[Any, Any]:
    """A settings field's type on the command line, and its default there: lists and mappings are repeated
    options (a mapping's items as name=value), the rest one optional value."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple) or annotation in (list, tuple):
        return list[str], []
    if origin is dict or annotation is dict:
        return list[str], []
    plain = [a for a in args if a is not type(None)] if origin in (typing.Union, types.UnionType) else [annotation]
    kinds = {bool: bool, int: int, float: float}
    kind = kinds.get(plain[0], str) if len(plain) == 1 and typing.get_origin(plain[0]) is not typing.Literal else str
    return Optional[kind], None


def _help(runners: list[str], name: str) -> str:
    """An option's help: the field's description, with the runners that take it (and its default, if one);
    runners that describe the same setting differently each say theirs."""
    said: dict[str, list[str]] = {}
    for runner in runners:
        text = (settings_model(runner).model_fields[name].description or "").rstrip(".")
        if text[1:2].islower() or text.startswith("A "):  # "The Filebench personality" reads "the ..." after a colon
            text = text[0].lower() + text[1:]
        said.setdefault(text, []).append(runner)
    parts = []
    for text, who in said.items():
        field = settings_model(who[0]).model_fields[name]
        default = field.get_default(call_default_factory=True) if len(who) == 1 else None
        shown = f" (default {default!r})" if default not in (None, [], {}) and not field.is_required() else ""
        parts.append(f"{' and '.join(who)} runner{'s' if len(who) > 1 else ''}: {text}{shown}")
    joined = "; ".join(parts)
    return f"{joined[0].upper()}{joined[1:]}."


def runner_fields(runners: tuple[str, ...] | None = None) -> dict[str, list[str]]:
    """Each runner setting the command line offers, with the runners that take it, in the registry's order."""
    out: dict[str, list[str]] = {}
    for runner, model in SETTINGS.items():
        if runners is not None and runner not in runners:
            continue
        for name in model.model_fields:
            if field_extra(model, name).get("cli", True):
                out.setdefault(name, []).append(runner)
    return out


def runner_option(name: str, runners: tuple[str, ...] | None = None) -> Any:
    """The typer option of a runner setting (of ``runners``, default every runner that has it): its flag, type
    and help, all from the settings models."""
    takers = runner_fields(runners)[name]
    model = settings_model(takers[0])
    kind, _ = _cli_type(model.model_fields[name].annotation)
    return Annotated[kind, typer.Option(flag(model, name), help=_help(takers, name))]


def with_runner_options(*runners: str) -> Any:
    """A command with one option per setting of ``runners`` (default every runner), generated from the settings
    models, gathered into its ``runner_options`` argument ({setting: value} of the options given; a mapping's
    name=value items parsed). Adding a runner, or a setting, adds its options here without an edit."""

    def decorate(command: Any) -> Any:
        fields = runner_fields(runners or None)
        base = inspect.signature(command, eval_str=True)
        params = [p for p in base.parameters.values() if p.name != "runner_options"]
        taken = {p.name for p in params}
        added = []
        for name, takers in fields.items():
            if name in taken:
                continue
            model = settings_model(takers[0])
            _, default = _cli_type(model.model_fields[name].annotation)
            added.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                           annotation=runner_option(name, runners or None)))
        mappings = {n for n, takers in fields.items()
                    if typing.get_origin(settings_model(takers[0]).model_fields[n].annotation) is dict}

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            options = {p.name: kwargs.pop(p.name) for p in added}
            for name in mappings & options.keys():
                options[name] = pairs(options[name], flag(settings_model(fields[name][0]), name))
            return command(*args, runner_options=options, **kwargs)

        run.__signature__ = base.replace(parameters=[*params, *added])  # type: ignore[attr-defined]
        return run

    return decorate


# The device runner's options for the commands that measure on a device alone (sweep, replay, fingerprint).
DeviceOpt = runner_option("device", ("device",))
AllowDeviceOpt = runner_option("allow_device", ("device",))
WorkloadOpt = runner_option("workload", ("device",))
EngineOpt = runner_option("engine", ("device",))
RuntimeOpt = runner_option("runtime_s", ("device",))
LoopDirOpt = runner_option("loop_dir", ("device",))
LoopSizeOpt = runner_option("loop_size_mib", ("device",))
FilesetOpt = runner_option("fileset_mib", ("device",))
WarmupOpt = runner_option("warmup_runs", ("device",))
DirtyLimitOpt = runner_option("dirty_limit_mib", ("device",))
HardwareOpt = runner_option("hardware", ("device",))

# Options every runner takes that are not runner settings (the campaign's objective).
CAMPAIGN_OPTIONS = ("metric",)


def runner_settings(runner: str, options: dict[str, Any]) -> RunnerSettings:
    """The runner's settings model from the command line's runner options (named as the settings
    are): the options given are validated by the runner's own model, the rest take its defaults;
    an option the runner does not take is refused by its flag."""
    model = settings_model(runner)
    given = {k: v for k, v in options.items() if v not in (None, [], (), {})}
    stray = [k for k in given if k not in model.model_fields and k not in CAMPAIGN_OPTIONS]
    if stray:
        other = settings_model(next(r for r, m in SETTINGS.items() if stray[0] in m.model_fields))
        # only the settings this command offers (a setting kept off the command line is the REST API's)
        takes = ", ".join(flag(model, k) for k in model.model_fields if k in options)
        raise UserError(f"{flag(other, stray[0])} does not apply to the {runner} runner; it takes {takes}")
    return parse_settings(runner, {k: v for k, v in given.items() if k in model.model_fields})


def table_settings(dataset: list[Path], context: list[str], metric: str | None) -> RunnerSettings:
    """The dataset runner's settings, for the commands that read a table (check, spaces, compare)."""
    return runner_settings("dataset", {"dataset": [str(p) for p in dataset], "context": pairs(context, "--context"),
                                       "metric": metric})


def literal(line: str) -> None:
    """Print a command as it is (job files have [sections] that rich would take for markup)."""
    console.print(line, markup=False, highlight=False)


ExecutorOpt = Annotated[Optional[str], typer.Option(
    "--executor", help="local (this machine's worker processes) or ray (an embedded Ray cluster, or the one at "
                       "RAY_ADDRESS, which selects ray unless --executor local).")]
MaxRetriesOpt = Annotated[int, typer.Option(
    "--max-retries", help="Ray: times a task is retried when its worker or node dies; then the trial is FAILED.")]


def executor_for(kind: str | None, workers: int | None, max_retries: int) -> Any:
    """The executor of a command: ``--executor``, RAY_ADDRESS, ``--parallel`` and ``--max-retries``."""
    from storetune.tuner.execution import make_executor

    address = os.environ.get("RAY_ADDRESS") or None
    if kind == "local":
        address = None
    return make_executor(kind, workers, address=address, max_retries=max_retries)


DRY_RUN_EVALUATIONS = 3


def show_dry_run(spec: CampaignSpec, evaluations: int = DRY_RUN_EVALUATIONS) -> None:
    """Print the commands of the first evaluations the campaign would make, through the same checks
    and loop as the real campaign. Nothing is run or recorded."""
    from storetune.runners import runner_class
    from storetune.tuner.search.campaign import dry_run

    cls = runner_class(spec.runner)
    if "dry_run" not in inspect.signature(cls).parameters:
        raise UserError(f"--dry-run is for the device runner; the {spec.runner} runner changes nothing anyway")
    runner = make_runner(spec.runner, spec.runner_settings, dry_run=True, echo=literal)
    getattr(runner, "check_device", lambda: None)()  # a refused device: one line, before any command

    def announce(number: int, config: Config) -> None:
        console.print(f"[bold]# evaluation {number + 1}: {escape(format_config(config))}[/]")

    try:
        shown = dry_run(spec, runner, evaluations, on_start=announce)
    finally:
        console.print("[bold]# teardown[/]")
        runner.close()
    console.print(f"dry run: the commands of the first {shown} of {spec.budget} evaluations"
                  f"{f', {spec.repeats} repeats each' if spec.repeats > 1 else ''}; nothing was run or recorded")
