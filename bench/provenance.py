"""What a benchmark's figures depend on: the code that measures and the libraries it uses. A resumed run
must have the same, or its seeds would mix two programs' figures."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("numpy", "scipy", "scikit-learn", "scikit-optimize", "deap", "optuna", "smac", "ConfigSpace", "torch",
             "stable-baselines3", "pandas")


def code_fingerprint(measuring: Sequence[str], libraries: Sequence[str] = LIBRARIES) -> dict:
    """A digest of the measuring files (folders: their .py and .yaml files, relative to the repository) and the
    installed versions of ``libraries``."""
    from importlib.metadata import PackageNotFoundError, version

    files = sorted(f for name in measuring for f in ([ROOT / name] if (ROOT / name).is_file()
                                                     else (ROOT / name).rglob("*")) if f.suffix in (".py", ".yaml"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.relative_to(ROOT)}\0".encode() + f.read_bytes())
    versions = {}
    for name in libraries:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return {"code": digest.hexdigest()[:16], "libraries": versions}
