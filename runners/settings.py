"""Each runner's settings, declared once as a pydantic model.

The CLI's options, the REST API's ``runner_settings``, a sweep and a worker that rebuilds a runner
all go through these models: defaults, domains and the error for a bad value live here only.
Importing this module loads no runner (the API lists the schemas without loading torch or fio).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SPACE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"  # a space by name, never a path


class RunnerSettings(BaseModel):
    """What every runner's settings share: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetSettings(RunnerSettings):
    """Replay an exhaustive table: each evaluation draws one of a configuration's measured repeats."""

    dataset: list[str] = Field(min_length=1, description="A CSV table, or a folder of them (a dataset with a manifest).")
    context: dict[str, Any] = Field(default_factory=dict,
                                    description="Pin setup columns, e.g. {\"workload\": \"varmail\"}.")
    metric: str | None = Field(None, description="The objective column, if the header does not mark it.")

    @field_validator("dataset", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else [str(v) for v in value] if isinstance(value, list | tuple) else value


class CommandSettings(RunnerSettings):
    """Run the user's own benchmark command; it prints its metrics as JSON on its last line."""

    command: str = Field(min_length=1, description="The benchmark, run as an argv: split into words as a shell "
                         "would, but not run by one (for pipes or ';', --command \"sh -c '...'\").")
    space: str = Field(min_length=1, max_length=100, pattern=SPACE_NAME, description="The search space, by name.")
    timeout_s: float = Field(3600.0, gt=0, allow_inf_nan=False, description="Seconds before a run counts as TIMEOUT.")
    workload: str | None = Field(None, description="A name for the workload (default: the command's program).")


class DeviceSettings(RunnerSettings):
    """mkfs, mount, queue settings and a benchmark on a loop device or an allow-listed block device."""

    space: str = Field("storage_v2", max_length=100, pattern=SPACE_NAME,
                       description="A file-system space: storage_v1 or storage_v2.")
    workload: Literal["fileserver", "varmail", "webserver", "oltp"] = Field(
        "fileserver", description="The Filebench personality.")
    device: str = Field("loop", min_length=1,
                        description="'loop' (a loop device StoreTune creates) or an allow-listed block device.")
    allow_device: list[str] = Field(default_factory=list, description="Block devices StoreTune may format.")
    hardware: str | None = Field(None, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description=(
        "The class of disk measured on, e.g. ssd-a: on a Ray cluster every measurement holds the resource "
        "disk:<class>, which only the nodes with such disks advertise, so one campaign never mixes two kinds."))
    engine: Literal["fio", "filebench"] = Field("fio", description="fio, or filebench if it is on PATH.")
    runtime_s: float = Field(10.0, gt=0, le=86_400, description="Seconds each benchmark runs: a whole number, 1 or more.")
    timeout_s: float | None = Field(None, gt=0, description="Seconds before a run is TIMEOUT (default: 3x runtime + setup).")
    loop_dir: str = Field("/var/tmp/storetune", min_length=1, description="Where the loop device's sparse file goes.")
    loop_size_mib: int = Field(1024, ge=300, description="Size of the loop device (mkfs.xfs needs 300 MiB).")
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

    trace: str = Field(min_length=1, description="A trace with per-I/O latency (FlashNet or MSR format).")
    space: str = Field("admission", max_length=100, pattern=SPACE_NAME, description="The admission search space.")
    train: float = Field(0.8, gt=0, lt=1, description="Share of the trace used to train and validate.")
    validation: float = Field(0.2, gt=0, lt=1, description="Share of the training part held out for tuning.")
    replica_cost_us: float = Field(0.0, ge=0, description="cost_us adds this per replica.")
    seed: int = Field(0, description="Seed of the models' training.")
    epochs: int = Field(10, ge=1, le=1000, description="Training epochs of the neural networks.")
    format: str | None = Field(None, description="msr, msr-csv or flashnet (default: detected).")


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
