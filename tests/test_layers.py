"""Imports point downwards only (api -> tuner -> runners -> search_spaces), and heavy libraries
load only inside the modules that wrap them."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from conftest import ROOT

LAYERS = ["search_spaces", "runners", "tuner", "api"]  # each may import only those before it
HEAVY = ["torch", "stable_baselines3", "ray", "skopt", "sklearn", "deap", "gymnasium", "optuna"]


def imported_packages(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize("package", LAYERS)
def test_imports_point_downwards(package: str):
    above = set(LAYERS[LAYERS.index(package) + 1 :])
    for path, names in imported_packages(package).items():
        assert not names & above, f"{path} imports {sorted(names & above)}, a layer above {package}"


def test_importing_storetune_loads_no_heavy_library():
    code = "import sys, api.cli, tuner, runners, search_spaces; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.split())
    assert not loaded & set(HEAVY), f"loaded at import time: {sorted(loaded & set(HEAVY))}"


def test_datasets_is_a_data_folder_not_a_package():
    assert not (ROOT / "datasets" / "__init__.py").exists()  # it would shadow HuggingFace's `datasets`


def test_ray_is_imported_only_by_the_ray_executor():
    importers = sorted(path for package in LAYERS for path, names in imported_packages(package).items()
                       if "ray" in names)
    assert importers == ["tuner/ray_executor.py"]
