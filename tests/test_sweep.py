"""A small real sweep on a loop device, exported as a dataset and replayed by the dataset runner."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from storetune.runners import make_runner
from storetune.tuner import Campaign, CampaignSpec, History
from storetune.runners.settings import DeviceSettings
from storetune.tuner.search.sweep import SweepSpec, run_sweep

pytestmark = [
    pytest.mark.device,
    pytest.mark.skipif(os.geteuid() != 0, reason="the device runner needs root"),
    pytest.mark.skipif(shutil.which("fio") is None or shutil.which("mkfs.btrfs") is None,
                       reason="needs fio and btrfs-progs (make test)"),
]


def test_sweep_exports_a_dataset_the_dataset_runner_replays(tmp_path, monkeypatch):
    monkeypatch.setenv("STORETUNE_STATE_DIR", str(tmp_path / "state"))
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    device = DeviceSettings(space="storage_v1", runtime_s=1, loop_dir=str(tmp_path / "loops"), loop_size_mib=400,
                            fileset_mib=16)
    spec = SweepSpec(out=tmp_path / "ds", device=device, workloads=("varmail",), repeats=2, per_stratum=1,
                     command=["storetune", "sweep", "..."])
    manifest_path = run_sweep(history, spec)
    manifest = json.loads(manifest_path.read_text())
    assert manifest["format"] == "long" and manifest["space"] == "storage_v1"
    statuses = [line.split(",")[15] for line in (tmp_path / "ds" / "measurements.csv").read_text().splitlines()[1:]]
    assert manifest["rows"] == len(statuses) >= 5  # one configuration per file system, 2 repeats if it is valid
    assert manifest["valid_configurations"] == statuses.count("SUCCEEDED") / 2
    for line in (tmp_path / "ds" / "measurements.csv").read_text().splitlines()[1:]:
        if ",INVALID," in line:  # the tool's own words, not its usage text
            assert "refused:" in line and "Usage" not in line
    assert manifest["where"]["loop_direct_io"] is True and manifest["where"]["tools"]["fio_version"]
    assert manifest["measured_wall_time_s"] > 0 and manifest["how"]["engine"] == "fio"
    noise = manifest["noise"]["varmail"]  # from the file, so it matches what a user of the dataset reads
    assert noise["configurations"] == manifest["valid_configurations"] and 0 < noise["median_cv"] < 1
    header = (tmp_path / "ds" / "measurements.csv").read_text().splitlines()[0].split(",")
    assert header[:2] == ["workload", "fs"] and "repeat" in header and header[-1] == "write_lat_p99_us"

    runner = make_runner("dataset", dataset=str(tmp_path / "ds"), context={"workload": "varmail"})
    assert runner.space.cardinality() == 5 and runner.metrics()["ops_per_s"] == "max"
    summary = Campaign.create(history, CampaignSpec(runner="dataset", runner_settings=runner.settings(),
                                                    algorithm="ga", budget=5)).run()
    assert summary.trials_by_status.get("SUCCEEDED") == manifest["valid_configurations"]

    again = run_sweep(history, spec)  # finished: nothing is measured again
    assert json.loads(again.read_text())["rows"] == manifest["rows"]
    other = SweepSpec(**{**spec.__dict__, "repeats": 3})
    with pytest.raises(ValueError, match=r"holds a sweep with other settings: repeats 2 \(now 3\); choose another"):
        run_sweep(history, other)

    measured = {t.id for t in history.trials(manifest["campaigns"]["varmail"])}
    bigger = SweepSpec(**{**spec.__dict__, "per_stratum": 2})  # extend: more configurations per stratum
    extended = json.loads(run_sweep(history, bigger).read_text())
    trials = history.trials(manifest["campaigns"]["varmail"])
    assert measured < {t.id for t in trials} and len({t.config_hash for t in trials}) == len(trials) == 10
    assert extended["rows"] > manifest["rows"] and extended["extended"][0]["per_stratum"] == [1, 2]
    with pytest.raises(ValueError, match="raise only --per-stratum"):
        run_sweep(history, spec)  # shrinking is refused

    # a fresh clone has the committed dataset but not the history: it extends the dataset, measuring only
    # what is missing, and the committed rows come out as they went in
    committed = set((tmp_path / "ds" / "measurements.csv").read_text().splitlines())
    fresh = History(f"sqlite:///{tmp_path / 'fresh.sqlite'}")
    grown = json.loads(run_sweep(fresh, SweepSpec(**{**spec.__dict__, "per_stratum": 3})).read_text())
    trials = fresh.trials(grown["campaigns"]["varmail"], measurements=True)
    adopted = [t for t in trials if all(m.env.get("adopted_from") == "ds/measurements.csv" for m in t.measurements)]
    assert len(adopted) == grown["adopted"]["varmail"]["trials"] == 10 and len(trials) == 15
    assert [t.number for t in adopted] == list(range(10))  # in grid order, before the new ones
    assert committed < set((tmp_path / "ds" / "measurements.csv").read_text().splitlines())
    assert grown["rows"] > extended["rows"] and grown["measured_wall_time_s"] > extended["measured_wall_time_s"]
    assert grown["where"]["tools"]["fio_version"]


def test_a_fresh_clone_extends_the_committed_dataset_from_its_measurements(tmp_path, monkeypatch):
    """datasets/loop-storage-v2 without its git-ignored history: the same sweep command adopts every
    committed measurement, measures nothing again, and exports the same rows. It was measured with
    protocol 1 and version 1 of fio's job files: today's code refuses to mix either, so the adoption runs as
    that code would."""
    from conftest import ROOT

    import storetune.tuner.search.sweep as sweep_module

    monkeypatch.setenv("STORETUNE_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "loop-storage-v2"
    shutil.copytree(ROOT / "datasets" / "loop-storage-v2", out, ignore=shutil.ignore_patterns("*.sqlite*"))
    manifest = json.loads((out / "manifest.json").read_text())
    settings = dict(manifest["settings"])
    sweep = {k: settings.pop(k) for k in ("workloads", "repeats", "per_stratum", "seed")}
    spec = SweepSpec(out=out, device=DeviceSettings(**settings), **{**sweep, "workloads": tuple(sweep["workloads"])})
    with pytest.raises(ValueError, match="was measured with measurement protocol 1; this StoreTune measures with "
                                         "protocol 2 .* not mixed: measure into another --out"):
        run_sweep(History(f"sqlite:///{tmp_path / 'refused.sqlite'}"), spec)

    monkeypatch.setattr(sweep_module, "PROTOCOL", 1)
    spec = SweepSpec(out=out, device=DeviceSettings(**settings, warmup_runs=0),
                     **{**sweep, "workloads": tuple(sweep["workloads"])})
    from storetune.runners.device.personalities import JOB_VERSIONS

    with pytest.raises(ValueError, match=f"measured fileserver with version 1 of its job file, this StoreTune's is "
                                         f"{JOB_VERSIONS['fio']['fileserver']};.* oltp .* not mixed: --remeasure "
                                         "fileserver,varmail,webserver,oltp measures them again"):
        run_sweep(History(f"sqlite:///{tmp_path / 'refused-jobs.sqlite'}"), spec)  # varmail's job file changed
    for workload in JOB_VERSIONS["fio"]:
        monkeypatch.setitem(JOB_VERSIONS["fio"], workload, 1)
    measured = []
    run_sweep(History(f"sqlite:///{tmp_path / 'fresh.sqlite'}"), spec, on_trial=measured.append)
    assert measured == []
    committed = (ROOT / "datasets" / "loop-storage-v2" / "measurements.csv").read_text().splitlines()
    assert sorted((out / "measurements.csv").read_text().splitlines()) == sorted(committed)
    again = json.loads((out / "manifest.json").read_text())
    assert again["measured_wall_time_s"] == manifest["measured_wall_time_s"] and again["where"] == manifest["where"]


def test_a_changed_job_file_is_measured_again_when_asked_and_the_other_workloads_are_kept(tmp_path, monkeypatch):
    from storetune.runners.device.personalities import JOB_VERSIONS

    monkeypatch.setenv("STORETUNE_STATE_DIR", str(tmp_path / "state"))
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    device = DeviceSettings(space="storage_v1", runtime_s=1, loop_dir=str(tmp_path / "loops"), loop_size_mib=400,
                            fileset_mib=16, warmup_runs=0)
    spec = SweepSpec(out=tmp_path / "ds", device=device, workloads=("fileserver", "varmail"), repeats=1,
                     per_stratum=1, command=["storetune", "sweep", "..."])
    csv_path, manifest_path = tmp_path / "ds" / "measurements.csv", tmp_path / "ds" / "manifest.json"
    first = json.loads(run_sweep(history, spec).read_text())
    rows = csv_path.read_text().splitlines()
    fileserver = [r for r in rows if r.startswith("fileserver,")]
    assert len(fileserver) == 5 and len([r for r in rows if r.startswith("varmail,")]) == 5
    assert set(first["wall_time_s"]) == {"fileserver", "varmail"}
    assert first["measured_wall_time_s"] == pytest.approx(sum(first["wall_time_s"].values()), abs=0.2)

    version = JOB_VERSIONS["fio"]["varmail"]
    monkeypatch.setitem(JOB_VERSIONS["fio"], "varmail", version + 1)
    before = (csv_path.read_text(), manifest_path.read_text())
    with pytest.raises(ValueError, match=rf"measured varmail with version {version} of its job file, this "
                                         rf"StoreTune's is {version + 1} .* --remeasure varmail measures it again "
                                         "and keeps the other workloads"):
        run_sweep(history, spec)
    again = SweepSpec(**{**spec.__dict__, "remeasure": ("varmail",)})
    other = SweepSpec(**{**again.__dict__, "repeats": 2})
    with pytest.raises(ValueError, match="holds a sweep with other settings"):
        run_sweep(history, other)  # refused before --remeasure drops anything
    with pytest.raises(ValueError, match="--remeasure fileserver: .* nothing to measure again"):
        run_sweep(history, SweepSpec(**{**spec.__dict__, "remeasure": ("fileserver", "varmail")}))
    assert (csv_path.read_text(), manifest_path.read_text()) == before  # refused: nothing lost

    class Stop(Exception):
        pass

    def stop_at_varmail(workload, campaign):
        if workload == "varmail":
            raise Stop

    legacy = json.loads(manifest_path.read_text())  # as written before wall time was kept per workload
    del legacy["wall_time_s"]
    manifest_path.write_text(json.dumps(legacy))
    with pytest.raises(Stop):  # stopped once the remeasure began: varmail's old rows are gone already
        run_sweep(history, again, on_campaign=stop_at_varmail)
    assert not [r for r in csv_path.read_text().splitlines() if r.startswith("varmail,")]
    [record] = json.loads(manifest_path.read_text())["remeasured"]
    assert record["workload"] == "varmail" and record["replaced_campaign"] == first["campaigns"]["varmail"]
    assert record["jobs"] == [version, version + 1]
    assert record["wall_time_s"] == pytest.approx(first["measured_wall_time_s"] / 2)  # its share of the rows

    # a fresh clone (no history) resumes it: fileserver's rows are adopted, varmail is measured again
    fresh = History(f"sqlite:///{tmp_path / 'fresh.sqlite'}")
    measured = []
    manifest = json.loads(run_sweep(fresh, again, on_trial=measured.append).read_text())
    assert len(measured) == 5 and list(manifest["campaigns"]) == ["fileserver", "varmail"]
    assert manifest["settings"]["jobs"] == {"fileserver": JOB_VERSIONS["fio"]["fileserver"], "varmail": version + 1}
    now = csv_path.read_text().splitlines()
    assert [r for r in now if r.startswith("fileserver,")] == fileserver
    assert len([r for r in now if r.startswith("varmail,")]) == 5
    for t in fresh.trials(manifest["campaigns"]["varmail"], measurements=True):
        assert all(m.env["jobs"] == version + 1 for m in t.measurements)
    assert manifest["wall_time_s"]["fileserver"] == pytest.approx(first["measured_wall_time_s"] / 2, abs=0.1)
    assert 0 < manifest["wall_time_s"]["varmail"] and "adopted_wall_time_s" not in manifest
    assert json.loads(run_sweep(fresh, again).read_text())["rows"] == manifest["rows"]  # finished: a no-op


def test_an_interrupted_sweep_says_what_is_kept_and_the_same_command_finishes_it(tmp_path):
    """`storetune sweep` stopped with Ctrl-C used to exit 130 with only its progress bar; with --repeats 1
    it ended without a word about noise, where the README says each workload's noise is printed."""
    import signal
    import subprocess
    import time

    from conftest import ROOT, STORETUNE

    db = f"sqlite:///{tmp_path / 'h.sqlite'}"
    out = tmp_path / "ds"
    args = [*STORETUNE, "sweep", "--out", str(out), "--space", "storage_v1", "--workloads", "varmail",
            "--repeats", "1", "--per-stratum", "3", "--runtime", "1", "--loop-dir", str(tmp_path / "loops"),
            "--loop-size-mib", "400", "--fileset-mib", "16", "--warmup-runs", "0", "--db", db]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STORETUNE_STATE_DIR": str(tmp_path / "state")}
    # as a terminal's foreground job, so that SIGINT is not ignored (see test_kill_resume)
    proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    history, deadline = History(db), time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        campaigns = history.campaigns() if (tmp_path / "h.sqlite").exists() else []
        if campaigns and history.status_counts(campaigns[0].id).get("SUCCEEDED", 0) >= 1:
            break
        time.sleep(0.2)
    if proc.poll() is not None:  # it ended (or failed) before a measurement: say why, not ProcessLookupError
        pytest.fail(f"the sweep ended before it could be interrupted: {proc.communicate()[1]}")
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert " ".join(stderr.split()).endswith(
        f"interrupted: what was measured is kept in the history {db} (its campaigns are listed in "
        f"{out / 'manifest.json'}), and {out / 'measurements.csv'} is written when the sweep ends: run the same "
        "command again (the same --db) to resume, measuring only what is missing")
    kept = history.status_counts(1).get("SUCCEEDED", 0)
    assert kept >= 1 and not (out / "measurements.csv").exists()

    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "varmail: --repeats 1 measures each configuration once, so there is no repeat noise to report" \
        in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["campaigns"] == {"varmail": 1} and manifest["rows"] == 15  # 15 trials: time to interrupt


def test_a_sweep_keeps_each_run_s_series_and_a_fresh_clone_replays_it_at_any_length(tmp_path, monkeypatch):
    """Runs of 3 s: each repeat's per-second series goes into the dataset's series:<metric> columns, a fresh
    history adopts them with the measurements, and the dataset runner answers what 1 s would have said."""
    from storetune.runners.series import Series

    monkeypatch.setenv("STORETUNE_STATE_DIR", str(tmp_path / "state"))
    device = DeviceSettings(space="storage_v1", runtime_s=3, loop_dir=str(tmp_path / "loops"), loop_size_mib=400,
                            fileset_mib=16, warmup_runs=0)
    spec = SweepSpec(out=tmp_path / "ds", device=device, workloads=("varmail",), repeats=1, per_stratum=1,
                     command=["storetune", "sweep", "..."])
    history = History(f"sqlite:///{tmp_path / 'h.sqlite'}")
    manifest = json.loads(run_sweep(history, spec).read_text())
    header = (tmp_path / "ds" / "measurements.csv").read_text().splitlines()[0].split(",")
    assert header[-2:] == ["series:ops_per_s", "series:mb_per_s"] and manifest["series_interval_s"] == 1.0
    runner = make_runner("dataset", dataset=str(tmp_path / "ds"), context={"workload": "varmail"})
    kept = {c: s[0] for c, s in runner.table.series.items()}
    assert len(kept) == manifest["valid_configurations"] and all(s is not None and 2 <= len(s) <= 3 for s in kept.values())
    config, series = next(iter(kept.items()))
    short = runner.measure_at(config, runner.workload, seed=0, seconds=1, skip_s=1)
    assert short.metrics["ops_per_s"] == pytest.approx(series.values["ops_per_s"][1], rel=1e-5)

    fresh = History(f"sqlite:///{tmp_path / 'fresh.sqlite'}")  # a clone without the history: adopted from the file
    run_sweep(fresh, spec)
    adopted = {t.config_hash: m.series for t in fresh.trials(json.loads((tmp_path / "ds" / "manifest.json").read_text())
                                                             ["campaigns"]["varmail"], measurements=True)
               for m in t.measurements if m.status == "SUCCEEDED"}
    assert len(adopted) == len(kept)
    assert sorted(Series.from_dict(s).values["ops_per_s"] for s in adopted.values()) == \
        sorted(s.values["ops_per_s"] for s in kept.values())
