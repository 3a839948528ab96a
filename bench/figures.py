"""The results pages' figures: the benchmarks draw them with matplotlib, to SVG, from the figures they print.

Every figure carries, under its title, the run's conditions: the host (cores, architecture, kernel) and its load
average before the run, so that a figure read out of its page still says where it was measured. When it started
is kept in the run's saved JSON (``Conditions.as_dict``), not on the figure: the pages carry no dates. The SVG
is byte-stable for the same data (no timestamp, a fixed hash salt), so a rerun that measured the same thing
leaves the repository unchanged.

matplotlib, not plotly: plotly's static export needs kaleido and a browser process; matplotlib writes SVG
by itself, offline (it is in the `bench` extra).
"""

from __future__ import annotations

import os
import platform
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One colour per contestant across every figure: ours in blue, the named peer in orange, random in grey.
COLOURS = {"auto": "#1f77b4", "optuna-tpe": "#ff7f0e", "random": "#7f7f7f", "sa": "#2ca02c", "ga": "#9467bd",
           "bo": "#8c564b", "dqn": "#e377c2", "storetune": "#1f77b4", "peer": "#ff7f0e", "fio": "#1f77b4",
           "filebench": "#ff7f0e"}


@dataclass(frozen=True)
class Conditions:
    """Where and when a benchmark ran, taken before it loads the machine."""

    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    cpus: int = field(default_factory=lambda: os.cpu_count() or 0)
    machine: str = field(default_factory=lambda: f"{platform.machine()}, Linux {platform.release()}")
    load: tuple[float, float, float] = field(default_factory=os.getloadavg)
    recorded: str | None = None  # a figure drawn from data measured earlier: where and when, from its manifest

    def caption(self) -> str:
        if self.recorded:
            return self.recorded
        one, five, fifteen = self.load
        return (f"{self.cpus} cores, {self.machine}; "
                f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min) before the run")

    def as_dict(self) -> dict[str, Any]:
        return {"started": self.started, "cpus": self.cpus, "machine": self.machine, "load": list(self.load)}

    @classmethod
    def of(cls, saved: dict[str, Any]) -> Conditions:
        """The conditions a saved run recorded with ``as_dict``."""
        return cls(started=saved["started"], cpus=saved["cpus"], machine=saved["machine"], load=tuple(saved["load"]))


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend, or a message naming the extra that installs it."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: .venv/bin/pip install -e '.[bench]'") from None
    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.hashsalt": "storetune", "svg.fonttype": "none", "font.size": 9})
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path, title: str, conditions: Conditions) -> Path:
    """Title and conditions on top, then an SVG without a timestamp (byte-stable for the same data)."""
    width = max(60, int(14 * fig.get_figwidth()))  # characters that fit the figure's width at this font size
    lines = textwrap.wrap(title, width) + textwrap.wrap(conditions.caption(), width)
    fig.suptitle("\n".join(lines), fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=path.suffix.lstrip(".") or "svg", bbox_inches="tight", metadata={"Date": None})
    pyplot().close(fig)
    print(f"drew {path}")
    return path


def legend(fig: Any, ax: Any) -> None:
    """One legend for the figure, under its panels, from the first panel's lines."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 7), frameon=False)


def grid(count: int, columns: int = 4, size: tuple[float, float] = (3.0, 2.4)) -> tuple[Any, list[Any]]:
    """A figure of ``count`` panels, ``columns`` to a row; the unused panels are hidden."""
    plt = pyplot()
    cols = max(1, min(columns, count))
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows + 0.9), squeeze=False,
                             layout="constrained")
    flat = [ax for row in axes for ax in row]
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]
