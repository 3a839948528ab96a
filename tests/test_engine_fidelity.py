"""bench/engine_fidelity.py --datasets: fio against Filebench from two committed sweeps, no root, no Filebench."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fidelity():
    spec = importlib.util.spec_from_file_location("engine_fidelity", ROOT / "bench" / "engine_fidelity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep(folder: Path, engine: str, workloads: list[str], runs: dict[tuple[str, int], list[float | None]],
          runtime_s: float = 10.0) -> Path:
    """A sweep's dataset as `storetune sweep` writes it (long format, a manifest with its settings)."""
    folder.mkdir()
    rows = ["workload,x,repeat,status,reason,ops_per_s"]
    for (workload, x), values in runs.items():
        for r, v in enumerate(values):
            rows.append(f"{workload},{x},{r},SUCCEEDED,,{v}" if v is not None else f"{workload},{x},{r},FAILED,boom,")
    (folder / "measurements.csv").write_text("\n".join(rows) + "\n")
    settings = {"engine": engine, "workloads": workloads, "runtime_s": runtime_s, "repeats": 3, "per_stratum": 1}
    (folder / "manifest.json").write_text(json.dumps({"format": "long", "files": ["measurements.csv"],
                                                      "metrics": {"ops_per_s": "max"}, "settings": settings}))
    return folder


def test_two_sweeps_are_compared_on_the_configurations_both_measured(fidelity, tmp_path: Path, capsys):
    fio = {("varmail", x): [100.0 * x, 100.0 * x + 5, 100.0 * x - 5] for x in range(1, 7)}
    fio[("varmail", 6)] = [50.0, 52.0, 51.0]  # fio ranks configuration 6 last
    fio[("varmail", 4)] = [400.0, 405.0, 10.0]  # first on its first two repeats, below 3 on all three
    fb = {("varmail", x): [1000.0 * x, 1000.0 * x + 30] for x in range(1, 6)}  # 6 never measured by Filebench
    fb[("varmail", 5)] = [5000.0, None]  # a failed repeat: fewer than two runs, left out
    fb[("fileserver", 1)] = [1.0, 2.0]
    a = sweep(tmp_path / "fio", "fio", ["varmail", "webserver"], fio)
    b = sweep(tmp_path / "fb", "filebench", ["varmail", "fileserver"], fb, runtime_s=6.0)
    raw = fidelity.from_datasets(a, b, ["varmail", "fileserver", "webserver"])
    said = capsys.readouterr().out
    assert "differ in runtime_s: fio 10.0, Filebench 6.0" in said
    assert "only varmail of varmail, fileserver, webserver measured by both sweeps" in said
    assert "varmail: 1 of the 5 configurations" in said
    data = raw["varmail"]
    assert [c["x"] for c in data["configs"]] == [1, 2, 3, 4]
    # two repeats each (what both have), each repeat a pass of one run
    assert np.array(data["ops_per_s"]["fio"]).shape == (4, 2, 1)
    summary = fidelity.summarise("varmail", data)
    # ranks and the best from all of a sweep's repeats: fio's best is configuration 3, Filebench's 4
    fio_means = [100.0, 200.0, 300.0, 815.0 / 3]
    fb_means = [np.mean([1000.0 * x, 1000.0 * x + 30]) for x in range(1, 5)]
    assert summary["n"] == 4 and summary["spearman"] == pytest.approx(stats.spearmanr(fio_means, fb_means).statistic)
    assert summary["spearman"] == pytest.approx(0.8) and not summary["same_best"] and summary["top3_shared"] == 3
    assert summary["self_spearman"] == {"fio": 1.0, "filebench": 1.0}  # repeat 0 against repeat 1
    cv = np.median([np.std([100.0 * x, 100.0 * x + 5], ddof=1) / np.mean([100.0 * x, 100.0 * x + 5])
                    for x in range(1, 5)])
    assert summary["repeat_cv"]["fio"] == pytest.approx(cv)


def test_datasets_must_be_a_fio_sweep_then_a_filebench_sweep(fidelity, tmp_path: Path):
    a = sweep(tmp_path / "a", "fio", ["varmail"], {("varmail", 1): [1.0, 2.0]})
    b = sweep(tmp_path / "b", "fio", ["varmail"], {("varmail", 1): [1.0, 2.0]})
    with pytest.raises(SystemExit, match="a fio sweep, then a Filebench sweep"):
        fidelity.from_datasets(a, b, ["varmail"])


def test_the_committed_sweeps_are_drawn_with_their_figures_and_the_drawing_is_stable(fidelity, tmp_path: Path,
                                                                                       monkeypatch, capsys):
    """The results page's figure: one panel per workload, titled with the rho the table prints, and the same bytes
    when drawn again from the same data (a rerun that measured the same thing changes nothing)."""
    sweeps = [str(ROOT / "datasets" / "loop-storage-v3"), str(ROOT / "datasets" / "loop-storage-v2-filebench")]
    drawn = []
    for k in range(2):
        out = tmp_path / f"fidelity{k}.svg"
        monkeypatch.setattr("sys.argv", ["engine_fidelity.py", "--datasets", *sweeps, "--workloads",
                                         "varmail,fileserver", "--plot", str(out)])
        fidelity.main()
        drawn.append(out.read_bytes())
    printed = capsys.readouterr().out
    assert drawn[0] == drawn[1]
    svg = drawn[0].decode()
    for workload in ("varmail", "fileserver"):
        rho = next(line.split()[2] for line in printed.splitlines() if line.startswith(workload + " "))
        assert f"{workload}: n=" in svg and f"rho={rho}" in svg
    assert "fio: loop-storage-v3; filebench: loop-" in svg  # where, from the sweeps' manifests
    assert not re.search(r"20\d\d-\d\d-\d\d", svg)  # and no dates: the manifests keep when
