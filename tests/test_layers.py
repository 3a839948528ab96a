"""Imports point downwards only (api -> tuner -> runners -> search_spaces), and inside a layer from room to
room as the architecture says; everything imports StoreTune through its one namespace (storetune.*); heavy
libraries load only inside the modules that wrap them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

LAYERS = ["search_spaces", "runners", "tuner", "api"]  # each may import only those before it
HEAVY = ["torch", "stable_baselines3", "ray", "skopt", "sklearn", "deap", "gymnasium", "optuna", "pandas", "scipy",
         "matplotlib", "plotly", "statsmodels"]  # each costs a CLI command from 0.3 s to seconds at its start
# The rooms of tuner/, in order: each may import only the rooms before it (history, algorithms and execution
# stand alone, below the rest).
TUNER_ROOMS = {"history": set(), "algorithms": set(), "execution": set(), "objectives": {"history"},
               "analysis": {"history", "objectives", "algorithms"},
               "search": {"history", "algorithms", "execution", "objectives", "analysis"}}
# api/: the command line and the service never import each other; both may use the shared modules
API_APART = {"cli": "service", "service": "cli"}


def modules_imported(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved against its package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def storetune_modules(package: str) -> dict[str, set[str]]:
    """Per file of a layer: the storetune modules it imports, without the namespace (``tuner.search.loop``)."""
    return {str(path.relative_to(ROOT)): {n.removeprefix("storetune.") for n in modules_imported(path)
                                          if n.startswith("storetune.")}
            for path in (ROOT / package).rglob("*.py")}


def imported_packages(package: str) -> dict[str, set[str]]:
    """Per file: the top-level packages it imports (storetune's layers by their names)."""
    return {path: {n.split(".")[0] for n in names} for path, names in storetune_modules(package).items()}


@pytest.mark.parametrize("package", LAYERS)
def test_imports_point_downwards(package: str):
    above = set(LAYERS[LAYERS.index(package) + 1 :])
    for path, names in imported_packages(package).items():
        assert not names & above, f"{path} imports {sorted(names & above)}, a layer above {package}"


@pytest.mark.parametrize("package", [*LAYERS, "tests", "bench"])
def test_storetune_is_imported_through_its_namespace(package: str):
    """`tuner` and `api` are common names: installed, they are storetune.tuner and storetune.api, and a module
    imported both ways would be two modules."""
    for path in (ROOT / package).rglob("*.py"):
        bare = {n for n in modules_imported(path) if n.split(".")[0] in LAYERS}
        assert not bare, f"{path.relative_to(ROOT)} imports {sorted(bare)} without storetune."


@pytest.mark.parametrize("room", TUNER_ROOMS)
def test_the_rooms_of_tuner_import_only_the_rooms_below(room: str):
    allowed = TUNER_ROOMS[room] | {room}
    for path, names in storetune_modules(f"tuner/{room}").items():
        rooms = {n.split(".")[1] for n in names if n.startswith("tuner.") and n.count(".") >= 1}
        rooms = {r for r in rooms if r in TUNER_ROOMS}
        assert rooms <= allowed, f"{path} imports the rooms {sorted(rooms - allowed)} of tuner/"


def test_algorithms_know_nothing_of_the_history():
    for path, names in storetune_modules("tuner/algorithms").items():
        assert not {n for n in names if n.startswith("tuner.history")}, path


@pytest.mark.parametrize("room", API_APART)
def test_the_command_line_and_the_service_do_not_import_each_other(room: str):
    other = f"api.{API_APART[room]}"
    for path, names in storetune_modules(f"api/{room}").items():
        assert not {n for n in names if n == other or n.startswith(other + ".")}, f"{path} imports {other}"


def test_no_import_circles():
    """No two modules import each other (the admission model and its networks did, and the executor and
    Ray's): what both need lives in a third module."""
    edges: dict[str, set[str]] = {}
    for package in LAYERS:
        for path, names in storetune_modules(package).items():
            module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            edges[module] = {n for n in names}
    circles = sorted(f"{a} <-> {b}" for a, targets in edges.items() for b in targets
                     if b in edges and a in edges[b] and a < b)
    assert not circles, circles


def test_importing_storetune_loads_no_heavy_library():
    code = ("import sys, storetune, storetune.api.cli.main, storetune.tuner, storetune.runners, "
            "storetune.search_spaces; print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.split())
    assert not loaded & set(HEAVY), f"loaded at import time: {sorted(loaded & set(HEAVY))}"


def test_storetune_shows_its_version():
    out = subprocess.run([sys.executable, "-c", "import storetune; print(storetune.__version__)"],
                         capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    assert out and out != "0+unknown", out


def test_datasets_is_a_data_folder_not_a_package():
    assert not (ROOT / "datasets" / "__init__.py").exists()  # it would shadow HuggingFace's `datasets`


def test_ray_is_imported_only_by_the_ray_executor():
    """The executor, and what runs in its workers (ray_workers.py); the driver's side of the holders gets Ray from
    the executor."""
    importers = sorted(path for package in LAYERS for path in (ROOT / package).rglob("*.py")
                       if {n.split(".")[0] for n in modules_imported(path)} & {"ray"})
    assert [str(p.relative_to(ROOT)) for p in importers] == ["tuner/execution/ray.py", "tuner/execution/ray_workers.py"]
