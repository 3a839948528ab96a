"""Sweeps: a fixed grid of configurations measured on a device for several workloads, written out
as a dataset in the long format the dataset runner replays, with a manifest of how, where and when.

Each workload is one campaign (algorithm ``grid``) in the history, so a sweep resumes like any
campaign: run the same command again. The manifest names the campaigns; the dataset is exported
from the history once every campaign has finished.
"""

from __future__ import annotations

import csv
import json
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from storetune.runners import Measurement, Status
from storetune.runners.device.engines import SERIES_MS
from storetune.runners.device.personalities import job_version
from storetune.runners.device.runner import PROTOCOL
from storetune.runners.series import SERIES_METRICS
from storetune.runners.settings import DeviceSettings
from storetune.runners.tables import SERIES_PREFIX, load_table
from storetune.search_spaces import load_space
from storetune.tuner.search.campaign import Campaign
from storetune.tuner.search.spec import CampaignSpec
from storetune.tuner.algorithms.grid import GridSearch
from storetune.tuner.history.store import History
from storetune.tuner.search.loop import TrialResult, trial_seed
from storetune.tuner.objectives.objective import Objective

METRICS = ("ops_per_s", "mb_per_s", "read_ops_per_s", "write_ops_per_s", "read_mb_per_s", "write_mb_per_s",
           "lat_mean_us", "lat_p99_us", "lat_p999_us", "read_lat_mean_us", "read_lat_p99_us", "write_lat_mean_us",
           "write_lat_p99_us")
DIRECTIONS = {m: ("min" if "lat" in m else "max") for m in METRICS}
MEASUREMENTS = "measurements.csv"
# what a manifest written before these settings existed measured with
LEGACY_SETTINGS = {"protocol": 1, "jobs": 1, "warmup_runs": 0, "dirty_limit_mib": 0, "hardware": None}


@dataclass(frozen=True)
class SweepSpec:
    """A sweep: the device runner's settings (its workload is set per campaign), the workloads, and
    the grid. ``device`` is the device runner's own settings model: nothing here repeats its fields."""

    out: Path
    device: DeviceSettings = field(default_factory=DeviceSettings)
    workloads: tuple[str, ...] = ("fileserver", "varmail", "webserver", "oltp")
    repeats: int = 2
    per_stratum: int = 3
    seed: int = 0
    remeasure: tuple[str, ...] = ()  # workloads to measure again where their job file changed
    command: list[str] = field(default_factory=list)  # how it was invoked, for the manifest

    @property
    def space(self) -> str:
        return self.device.space

    def settings(self) -> dict[str, Any]:
        """What the manifest records and a resumed or extended sweep must match."""
        device = self.device.model_dump(exclude={"workload", "timeout_s"})
        return {"workloads": list(self.workloads), "space": device.pop("space"), "device": device.pop("device"),
                "allow_device": device.pop("allow_device"), "engine": device.pop("engine"),
                "runtime_s": device.pop("runtime_s"), "repeats": self.repeats, "per_stratum": self.per_stratum,
                "seed": self.seed, "protocol": PROTOCOL, "jobs": self.jobs(), **device}

    def jobs(self) -> dict[str, int]:
        """The version of the engine's job file for each workload."""
        return {w: job_version(self.device.engine, w) for w in self.workloads}

    def runner_settings(self, workload: str) -> DeviceSettings:
        return self.device.model_copy(update={"workload": workload})


def run_sweep(history: History, spec: SweepSpec, on_trial: Callable[[TrialResult], None] | None = None,
              on_campaign: Callable[[str, Campaign], None] | None = None) -> Path:
    """Measure (or finish measuring) the sweep, then export it; returns the manifest's path."""
    path = spec.out / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    grid = GridSearch(load_space(spec.space), seed=spec.seed, direction="max",
                      params={"per_stratum": spec.per_stratum}).grid
    if manifest:
        _same_protocol(spec, manifest)
        settings = _job_versions(spec, manifest)  # refused unless a changed job file's workload is --remeasure'd
        if settings != spec.settings():
            _check_extension(spec, settings, grid)  # only a larger --per-stratum; refused before anything is written
        _remeasure(spec, manifest, settings)
    if manifest and recorded_settings(manifest) != spec.settings():
        _extend(history, spec, manifest, grid)
    manifest.setdefault("settings", spec.settings())
    manifest.setdefault("started_at", _now())
    manifest.setdefault("campaigns", {})
    manifest["database"] = history.url
    spec.out.mkdir(parents=True, exist_ok=True)
    for workload in spec.workloads:
        known = manifest["campaigns"].get(workload)
        if known is not None and not _holds(history, known, spec, workload):
            campaign = _adopt(history, spec, manifest, workload, grid)  # a fresh clone: the committed data
            _save(path, manifest)
        elif known is None:
            campaign = Campaign.create(history, campaign_spec(spec, workload, len(grid)))
            manifest["campaigns"][workload] = campaign.id
            _save(path, manifest)
        else:
            campaign = Campaign.resume(history, known)
        if on_campaign is not None:
            on_campaign(workload, campaign)
        campaign.run(on_trial)
    return export(history, spec, manifest)


def campaign_spec(spec: SweepSpec, workload: str, grid_size: int) -> CampaignSpec:
    """The campaign that measures the grid for one workload."""
    return CampaignSpec(runner="device", runner_settings=spec.runner_settings(workload), algorithm="grid",
                        algorithm_params={"per_stratum": spec.per_stratum}, metric="ops_per_s", direction="max",
                        budget=grid_size, seed=spec.seed, repeats=spec.repeats)


def _holds(history: History, campaign_id: int, spec: SweepSpec, workload: str) -> bool:
    """Does this history hold the manifest's campaign for ``workload`` (not another campaign that
    happens to have its id)?"""
    try:
        record = history.campaign(campaign_id)
    except LookupError:
        return False
    return record.runner == "device" and record.algorithm == "grid" and record.workload_name == workload \
        and record.runner_settings.get("workload") == workload


def _adopt(history: History, spec: SweepSpec, manifest: dict[str, Any], workload: str, grid: list[Any]) -> Campaign:
    """A history without the sweep's campaigns (a fresh clone: history.sqlite is not committed) learns
    the committed measurements of ``workload`` as a campaign's finished trials, in grid order, so the
    sweep measures only what is missing. Each measurement's env says it was adopted, and from where."""
    rows = _rows(spec.out / MEASUREMENTS)
    mine = sum(r[0] == workload for r in rows[1:])
    if mine:
        table = load_table(spec.out, context={"workload": workload})
        measured = {**{c: None for c in table.repeats}, **{c: None for c in table.outcomes}}
    else:  # measured again after its job file changed (--remeasure), and stopped before it was exported
        table, measured = None, {}
    order = {config: i for i, config in enumerate(grid)}
    strangers = [c for c in measured if c not in order]
    if strangers:
        raise ValueError(f"{spec.out / MEASUREMENTS} holds {workload} configurations this sweep's grid does not draw "
                         f"(e.g. {dict(strangers[0])}); measure into another --out")
    campaign = Campaign.create(history, campaign_spec(spec, workload, len(grid)))
    objective = Objective("ops_per_s", "max")
    adopted = {"adopted_from": f"{spec.out.name}/{MEASUREMENTS}", "sha256": table.sha256 if table else None}
    metrics = list(table.metrics) if table else []
    for config in sorted(measured, key=order.__getitem__):
        assert table is not None
        if config in table.repeats:
            series = table.series.get(config, (None,) * len(table.repeats[config]))
            ms = [Measurement(Status.SUCCEEDED, {m: float(v) for m, v in zip(metrics, row) if np.isfinite(v)},
                              env=adopted, series=kept) for row, kept in zip(table.repeats[config], series)]
        else:
            status, reason = table.outcomes[config]
            ms = [Measurement.failed(status, reason or status.value, env=adopted)]
        [trial] = history.add_trials(campaign.id, [config], [trial_seed(spec.seed, config)])
        history.start_trials([trial.id])
        for repeat, m in enumerate(ms):
            history.add_measurement(trial.id, repeat, m)
        history.finish_trial(trial.id, *objective.outcome(ms))
    manifest["campaigns"][workload] = campaign.id
    manifest.setdefault("adopted", {})[workload] = {"at": _now(), "trials": len(measured), "campaign": campaign.id,
                                                    "database": history.url,
                                                    "wall_time_s": _wall_time(manifest, workload, rows)}
    return campaign


def _wall_time(manifest: dict[str, Any], workload: str, rows: list[list[str]]) -> float:
    """The time the dataset's measurements of ``workload`` took: the manifest's, or (written before it kept
    one per workload) the workload's share of the total by its rows in measurements.csv."""
    known = manifest.get("wall_time_s", {}).get(workload)
    if known is not None:
        return known
    mine = sum(r[0] == workload for r in rows[1:])
    return manifest.get("measured_wall_time_s", 0.0) * mine / max(1, len(rows) - 1)


def _rows(path: Path) -> list[list[str]]:
    if not path.exists():
        return [[]]
    with open(path, newline="") as f:
        return list(csv.reader(f)) or [[]]


def plan(spec: SweepSpec) -> dict[str, Any]:
    """What the sweep would measure, read without touching anything: the grid, the evaluations,
    the benchmark time they take at least, and the workloads a manifest in ``out`` already holds."""
    grid = GridSearch(load_space(spec.space), seed=spec.seed, direction="max",
                      params={"per_stratum": spec.per_stratum}).grid
    path = spec.out / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    runs = len(grid) * len(spec.workloads) * spec.repeats
    return {"configurations": len(grid), "workloads": list(spec.workloads), "repeats": spec.repeats,
            "benchmark_runs": runs, "benchmark_time_s": runs * spec.device.runtime_s,
            "resumes": sorted(set(manifest.get("campaigns", {})) & set(spec.workloads)),
            "settings_differ": bool(manifest) and _settings_after(spec, manifest) != spec.settings(),
            "jobs_changed": _jobs_changed(spec, manifest) if manifest else [],
            "first": campaign_spec(spec, spec.workloads[0], len(grid))}


def _settings_after(spec: SweepSpec, manifest: dict[str, Any]) -> dict[str, Any]:
    try:
        return _job_versions(spec, manifest)
    except ValueError:  # a changed job file not named by --remeasure: the dry run says so (jobs_changed)
        return recorded_settings(manifest)


def recorded_settings(manifest: dict[str, Any]) -> dict[str, Any]:
    """The settings a manifest records, with those it predates at the values it was measured with. A
    manifest from when job versions were per engine records one number for all its workloads."""
    settings = {**LEGACY_SETTINGS, **(manifest.get("settings") or {})}
    if isinstance(settings["jobs"], int):
        settings["jobs"] = {w: settings["jobs"] for w in settings.get("workloads", ())}
    return settings


def _same_protocol(spec: SweepSpec, manifest: dict[str, Any]) -> None:
    old = recorded_settings(manifest)["protocol"]
    if old != PROTOCOL:
        raise ValueError(f"{spec.out} was measured with measurement protocol {old}; this StoreTune measures with "
                         f"protocol {PROTOCOL} (README, 'The measurement protocol'), and the two are not mixed: "
                         "measure into another --out")


def _jobs_changed(spec: SweepSpec, manifest: dict[str, Any]) -> list[str]:
    """The workloads the manifest has measured whose job file has changed since (for the same engine)."""
    old = recorded_settings(manifest)
    if old["engine"] != spec.device.engine:
        return []
    return [w for w, v in spec.jobs().items() if w in manifest.get("campaigns", {}) and old["jobs"].get(w) != v]


def _job_versions(spec: SweepSpec, manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest's settings as they will be once the sweep goes on with today's job files: refused
    where a measured workload's job file changed and --remeasure does not name it; a workload not yet
    started simply takes today's version."""
    old = recorded_settings(manifest)
    wanted, changed = spec.jobs(), _jobs_changed(spec, manifest)
    refused = [w for w in changed if w not in spec.remeasure]
    if refused:
        what = "; ".join(f"{w} with version {old['jobs'].get(w)} of its job file, this StoreTune's is {wanted[w]}"
                         for w in refused)
        raise ValueError(f"{spec.out} measured {what} (JOB_VERSIONS in runners/device/personalities.py says what "
                         f"changed), and the two are not mixed: --remeasure {','.join(changed)} measures "
                         f"{'it' if len(changed) == 1 else 'them'} again and keeps the other workloads, or measure "
                         "into another --out")
    for w in spec.remeasure:
        done = [r for r in manifest.get("remeasured", []) if r["workload"] == w and r["jobs"][1] == wanted.get(w)]
        if w not in changed and not done:  # not a resumed remeasure either
            raise ValueError(f"--remeasure {w}: " + (
                f"{w} is not among this sweep's --workloads" if w not in wanted else
                f"{spec.out} measured {w} with version {wanted[w]} of its job file, today's: nothing to measure again "
                "(a changed job file needs its version raised in JOB_VERSIONS, runners/device/personalities.py)"))
    if old["engine"] != spec.device.engine:
        return old
    return {**old, "jobs": {**old["jobs"], **wanted}}


def _remeasure(spec: SweepSpec, manifest: dict[str, Any], settings: dict[str, Any]) -> None:
    """Each workload whose job file changed is measured again from its first configuration (a new
    campaign); the other workloads' measurements stay. Its old rows leave measurements.csv at once (git
    keeps them), so that a fresh clone resuming the sweep cannot adopt them into the new version."""
    changed = _jobs_changed(spec, manifest)
    if changed and (spec.out / MEASUREMENTS).exists():
        rows = _rows(spec.out / MEASUREMENTS)
        manifest["wall_time_s"] = {w: _wall_time(manifest, w, rows) for w in manifest["campaigns"]}  # rows go next
        with open(spec.out / MEASUREMENTS, "w", newline="") as f:
            csv.writer(f).writerows([rows[0], *(r for r in rows[1:] if r[0] not in changed)])
    old = recorded_settings(manifest)
    for w in changed:
        manifest.setdefault("remeasured", []).append({
            "at": _now(), "workload": w, "jobs": [old["jobs"].get(w), settings["jobs"][w]],
            "replaced_campaign": manifest["campaigns"].pop(w), "database": manifest.get("database"),
            "wall_time_s": manifest.get("wall_time_s", {}).pop(w, None), "command": " ".join(spec.command)})
        manifest.get("adopted", {}).pop(w, None)
    if changed or old["jobs"] != settings["jobs"]:
        manifest["settings"] = {**manifest.get("settings", {}), "jobs": settings["jobs"]}
        _save(spec.out / "manifest.json", manifest)


def _check_extension(spec: SweepSpec, old: dict[str, Any], grid: list[Any]) -> None:
    """Only a larger --per-stratum extends a sweep: the same seed draws the same configurations first."""
    wanted = spec.settings()
    if {k: v for k, v in old.items() if k != "per_stratum"} != {k: v for k, v in wanted.items() if k != "per_stratum"} \
            or wanted["per_stratum"] <= old.get("per_stratum", 0):
        # name what differs: the whole dict of both hid the one setting that did (a newcomer trial)
        differ = ", ".join(f"{k} {old.get(k)!r} (now {wanted.get(k)!r})" for k in sorted(set(old) | set(wanted))
                           if k != "per_stratum" and old.get(k) != wanted.get(k))
        if not differ:
            differ = f"per_stratum {old.get('per_stratum')!r} (now {wanted['per_stratum']!r}, which does not extend it)"
        raise ValueError(f"{spec.out} holds a sweep with other settings: {differ}; choose another --out, repeat that "
                         "sweep's settings to resume it, or raise only --per-stratum to extend it")
    previous = GridSearch(load_space(spec.space), seed=spec.seed, direction="max",
                          params={"per_stratum": old["per_stratum"]}).grid
    if not set(previous) <= set(grid):
        raise ValueError(f"{spec.out}: the larger grid does not contain the measured one; measure it into another --out")


def _extend(history: History, spec: SweepSpec, manifest: dict[str, Any], grid: list[Any]) -> None:
    """Grow a sweep to more configurations per stratum: the old grid is part of the new one, and nothing
    measured is measured again."""
    old = recorded_settings(manifest)
    _check_extension(spec, old, grid)
    for workload, campaign_id in manifest["campaigns"].items():
        if _holds(history, campaign_id, spec, workload):  # one this history lacks is adopted at the new size
            history.extend_campaign(campaign_id, len(grid), {"per_stratum": spec.per_stratum})
    manifest.setdefault("extended", []).append({"at": _now(), "per_stratum": [old["per_stratum"], spec.per_stratum],
                                                "command": " ".join(spec.command)})
    manifest["settings"] = spec.settings()


def export(history: History, spec: SweepSpec, manifest: dict[str, Any]) -> Path:
    """measurements.csv in the long format, and the manifest of how, where and when."""
    space = load_space(spec.space)
    rows, env, valid = [], {}, set()
    # in the order of the sweep's workloads (one measured again after a job change was created last)
    campaigns = manifest["campaigns"]
    manifest["campaigns"] = {**{w: campaigns[w] for w in spec.workloads if w in campaigns}, **campaigns}
    # the time each workload's measurements took: measured in this history, plus what adopted ones took
    wall = {w: manifest.get("adopted", {}).get(w, {}).get("wall_time_s", 0.0) for w in manifest["campaigns"]}
    for workload, campaign_id in manifest["campaigns"].items():
        for t in history.trials(campaign_id, measurements=True):
            if t.status == Status.STALE.value:
                continue
            adopted = any("adopted_from" in m.env for m in t.measurements)
            if t.started_at and t.finished_at and not adopted:
                wall[workload] += (t.finished_at - t.started_at).total_seconds()
            if t.status == Status.SUCCEEDED.value:
                valid.add(t.config_hash)
            for repeat, m in enumerate(t.measurements):
                env = env or ({} if adopted else dict(m.env))
                rows.append([workload, *(t.config.get(p.name, "") for p in space.parameters), repeat, m.status,
                             m.reason or "", *(_cell(m.metrics.get(k)) for k in METRICS),
                             *(_series_cell(m.series, k) for k in SERIES_METRICS)])
    # the per-second series, where the runs kept them: columns only then, so a dataset without keeps its bytes
    with_series = any(any(r[-len(SERIES_METRICS):]) for r in rows)
    if not with_series:
        rows = [r[:-len(SERIES_METRICS)] for r in rows]
    with open(spec.out / MEASUREMENTS, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["workload", *space.names, "repeat", "status", "reason", *METRICS,
                         *([f"{SERIES_PREFIX}{k}" for k in SERIES_METRICS] if with_series else [])])
        writer.writerows(rows)
    if with_series:
        manifest["series_interval_s"] = SERIES_MS / 1000
    manifest.update({
        "format": "long",
        "files": [MEASUREMENTS],
        "space": spec.space,
        "workloads": list(spec.workloads),
        "metrics": DIRECTIONS,
        "context": ["workload"],
        "finished_at": _now(),
        "measured_wall_time_s": round(sum(wall.values()), 1),
        "wall_time_s": {w: round(t, 1) for w, t in wall.items()},
        "rows": len(rows),
        "valid_configurations": len(valid),
        "how": {
            "command": " ".join(spec.command), "engine": spec.device.engine, "runtime_s": spec.device.runtime_s,
            "repeats": spec.repeats, "grid": f"{spec.per_stratum} configurations per file system x I/O scheduler "
            f"pair, seed {spec.seed}", "fileset_mib": spec.device.fileset_mib,
            "page_cache": "the files laid out, written back and dropped from the page cache before every timed run",
            "mkfs": "ext3/ext4 with lazy_itable_init=0,lazy_journal_init=0",
            "protocol": PROTOCOL, "jobs": spec.jobs(),
            "warmup_runs": spec.device.warmup_runs,
        },
        "where": manifest.get("where") if not env else {
            "host": platform.node(), "kernel": platform.release(), "machine": platform.machine(),
            "cpu": _cpu_model(), "device": env.get("device_kind"), "device_size_bytes": env.get("device_size_bytes"),
            "loop_direct_io": env.get("loop_direct_io"), "loop_backing_fs": env.get("loop_backing_fs"),
            "tools": {k: env.get(k) for k in ("fio_version", "filebench_version", "e2fsprogs", "xfsprogs",
                                              "btrfs_progs") if env.get(k)},
        },
    })
    manifest.pop("adopted_wall_time_s", None)  # kept per workload now (in "adopted")
    path = spec.out / "manifest.json"
    _save(path, manifest)
    # repeat noise of each workload's objective, read back from the dataset as a user of it reads it
    manifest["noise"] = {w: load_table(spec.out, context={"workload": w}).noise("ops_per_s")
                         for w in manifest["campaigns"]}
    _save(path, manifest)
    return path


def _save(path: Path, manifest: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=1, default=str) + "\n")


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _series_cell(series: dict[str, Any] | None, metric: str) -> str:
    """A kept series' values of ``metric``, space-separated (a long table's ``series:<metric>`` cell)."""
    values = (series or {}).get(metric) or ()
    return " ".join(f"{v:.6g}" for v in values)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def workloads_of(text: str, known: Sequence[str]) -> tuple[str, ...]:
    names = tuple(w.strip() for w in text.split(",") if w.strip())
    unknown = [w for w in names if w not in known]
    if unknown or not names:
        raise ValueError(f"unknown workload {unknown[0] if unknown else '(none)'!r}; known: {', '.join(known)}")
    return names
