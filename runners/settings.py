"""Each runner's settings, declared once as a pydantic model.

The CLI's options, the REST API's ``runner_settings``, a sweep and a worker that rebuilds a runner
all go through these models: defaults, domains and the error for a bad value live here only, and so
does what the front ends need to know of a field (``setting``): its flag on the command line, and
which fields a server polices (a path inside its data directories, a device on its allow list, a
field only the server may set, a command it must allow). Importing this module loads no runner
(the API lists the schemas without loading torch or fio).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SPACE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"  # a space by name, never a path
# What a server checks of a field before it runs a client's runner (storetune.api.service.policy):
POLICIES = ("path", "device", "server", "command", "loop_size")


def setting(default: Any = ..., *, flag: str | None = None, cli: bool = True, policy: str | None = None,
            **field: Any) -> Any:
    """A settings field, with what the front ends read of it: ``flag``, its option on the command line (default
    ``--`` and its name with dashes); ``cli=False`` keeps it off the command line (it would clash with a
    campaign's own option); ``policy``, what a server checks before running it: a ``path`` inside its data
    directories, a ``device`` on its allow list (or loop), a field only the ``server`` sets, a ``command`` it
    must allow, a ``loop_size`` below its largest."""
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: {', '.join(POLICIES)}")
    extra = {k: v for k, v in (("flag", flag), ("cli", None if cli else False), ("policy", policy)) if v is not None}
    return Field(default, json_schema_extra=extra or None, **field)


def field_extra(model: type[BaseModel], name: str) -> dict[str, Any]:
    extra = model.model_fields[name].json_schema_extra
    return dict(extra) if isinstance(extra, dict) else {}


def flag(model: type[BaseModel], name: str) -> str:
    """A settings field's option on the command line."""
    return field_extra(model, name).get("flag") or "--" + name.replace("_", "-")


class RunnerSettings(BaseModel):
    """What every runner's settings share: unknown fields are errors, not silently dropped. ``runner`` names the
    runner class they build ("module:Class", imported only when a runner is made)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    runner: ClassVar[str]


class DatasetSettings(RunnerSettings):
    """Replay an exhaustive table: each evaluation draws one of a configuration's measured repeats."""

    runner: ClassVar[str] = "storetune.runners.dataset:DatasetRunner"

    dataset: list[str] = setting(policy="path", min_length=1,
                                 description="A CSV table, or a folder of them (a dataset with a manifest).")
    context: dict[str, Any] = Field(default_factory=dict,
                                    description="Pin setup columns, e.g. {\"workload\": \"varmail\"}.")
    metric: str | None = setting(None, cli=False,  # the campaign's --metric names it on the command line
                                 description="The objective column, if the header does not mark it.")
    drop: list[str] = Field(default_factory=list, description="Columns that are not knobs (an id, a timestamp): "
                            "left out, so rows that differ only there are repeats of one configuration.")

    @field_validator("dataset", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else [str(v) for v in value] if isinstance(value, list | tuple) else value


class CommandSettings(RunnerSettings):
    """Run the user's own benchmark command; it prints its metrics as JSON on its last line."""

    runner: ClassVar[str] = "storetune.runners.command:CommandRunner"

    command: str = setting(policy="command", min_length=1, description="The benchmark, run as an argv: split into words as a shell "
                         "would, but not run by one (for pipes or ';', --command \"sh -c '...'\").")
    space: str = Field(min_length=1, max_length=100, pattern=SPACE_NAME, description="The search space, by name.")
    timeout_s: float = setting(3600.0, flag="--timeout", gt=0, allow_inf_nan=False,
                               description="Seconds before a run counts as TIMEOUT.")
    workload: str | None = Field(None, description="A name for the workload (default: the command's program).")


class DeviceSettings(RunnerSettings):
    """mkfs, mount, queue settings and a benchmark on a loop device or an allow-listed block device."""

    runner: ClassVar[str] = "storetune.runners.device.runner:DeviceRunner"

    space: str = Field("storage_v2", max_length=100, pattern=SPACE_NAME,
                       description="A file-system space: storage_v1, storage_v2, or storage_full (storage_v2 with "
                                   "its many-valued knobs at their full ranges).")
    workload: Literal["fileserver", "varmail", "webserver", "oltp"] = Field(
        "fileserver", description="The Filebench personality.")
    device: str = setting("loop", policy="device", min_length=1,
                          description="'loop' (a loop device StoreTune creates) or an allow-listed block device.")
    allow_device: list[str] = setting(policy="server", default_factory=list,
                                      description="Block devices StoreTune may format.")
    hardware: str | None = Field(None, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description=(
        "The class of disk measured on, e.g. ssd-a: on a Ray cluster every measurement holds the resource "
        "disk:<class>, which only the nodes with such disks advertise, so one campaign never mixes two kinds."))
    engine: Literal["fio", "filebench"] = Field("fio", description="fio, or filebench if it is on PATH.")
    runtime_s: float = setting(10.0, flag="--runtime", gt=0, le=86_400,
                               description="Seconds each benchmark runs: a whole number, 1 or more.")
    timeout_s: float | None = setting(None, flag="--timeout", gt=0,
                                      description="Seconds before a run is TIMEOUT (default: 3x runtime + setup).")
    loop_dir: str = setting("/var/tmp/storetune", policy="server", min_length=1,
                            description="Where the loop device's sparse file goes.")
    loop_size_mib: int = setting(1024, policy="loop_size", ge=300,
                                 description="Size of the loop device (mkfs.xfs needs 300 MiB).")
    fileset_mib: int = Field(256, ge=1, description="Largest fileset a personality lays out.")
    warmup_runs: int = Field(1, ge=0, le=10, description="Runs measured and discarded before a runner's first "
                             "measurement.")
    dirty_limit_mib: int = Field(0, ge=0, description="The host's dirty page-cache limit during a run (vm.dirty_bytes;"
                                 " a quarter of it is vm.dirty_background_bytes), restored after; 0 leaves the host's.")

    @field_validator("runtime_s")
    @classmethod
    def _whole_seconds(cls, value: float) -> float:
        # fio reads runtime=1.9s as 1 s and 0.2s as none at all (every run then fails, and its configuration is
        # blamed); Filebench's `run` takes whole seconds too
        if value < 1 or not float(value).is_integer():
            raise ValueError(f"fio and Filebench run for whole seconds: give 1 or more, e.g. {max(1, round(value))}, "
                             f"not {value:g}")
        return value


class AdmissionSettings(RunnerSettings):
    """Train the admission model a configuration names on a trace and simulate failover."""

    runner: ClassVar[str] = "storetune.runners.admission.runner:AdmissionRunner"

    trace: str = setting(policy="path", min_length=1, description="A trace with per-I/O latency (FlashNet or MSR format).")
    space: str = Field("admission", max_length=100, pattern=SPACE_NAME, description="The admission search space.")
    train: float = Field(0.8, gt=0, lt=1, description="Share of the trace used to train and validate.")
    validation: float = Field(0.2, gt=0, lt=1, description="Share of the training part held out for tuning.")
    replica_cost_us: float = Field(0.0, ge=0, description="cost_us adds this per replica.")
    seed: int = setting(0, flag="--train-seed", description="Seed of the models' training.")
    epochs: int = Field(10, ge=1, le=1000, description="Training epochs of the neural networks.")
    format: str | None = setting(None, flag="--trace-format", description="msr, msr-csv or flashnet (default: detected).")


# The registry: a runner is its module, its settings model (which names the module) and one line here.
SETTINGS: dict[str, type[RunnerSettings]] = {
    "dataset": DatasetSettings,
    "command": CommandSettings,
    "device": DeviceSettings,
    "admission": AdmissionSettings,
}


def settings_model(runner: str) -> type[RunnerSettings]:
    try:
        return SETTINGS[runner]
    except KeyError:
        raise ValueError(f"unknown runner {runner!r}; known: {', '.join(SETTINGS)}") from None


def parse_settings(runner: str, values: Any) -> RunnerSettings:
    """The runner's validated settings; a bad field raises ValueError naming it, on one line."""
    model = settings_model(runner)
    if isinstance(values, model):
        return values
    try:
        return model.model_validate(values)
    except ValidationError as e:
        raise ValueError(f"{runner} runner: {one_line(e)}") from None


def one_line(error: ValidationError) -> str:
    """A pydantic error as one line per problem, joined: 'setting: message'."""
    parts = []
    for problem in error.errors():
        where = ".".join(str(p) for p in problem["loc"]) or "settings"
        message = problem["msg"]
        if problem["type"] == "extra_forbidden":
            message = "not a setting of this runner"
        elif problem["type"] == "value_error":  # a validator's own sentence, without pydantic's prefix
            message = str(problem.get("ctx", {}).get("error", message))
        parts.append(f"{where}: {message}")
    return "; ".join(parts)
