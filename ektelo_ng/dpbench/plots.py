"""Figures of a DPBench replay (PNG, with matplotlib: ``pip install -e '.[plot]'`` in the repository).

- ``overview_<domain>_eps<epsilon>.png``: each algorithm's error relative to Identity against the
  scale (geometric mean over datasets): DPBench's headline picture, where data-dependent plans
  win at small scales and data-independent ones at large scales.
- ``error_vs_scale_<domain>_eps<epsilon>.png``: one panel per dataset, mean error against scale per
  algorithm, with the range over trials (lowest to highest) as error bars.
Data-independent plans are drawn with dashed lines.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from ektelo_ng import figures
from ektelo_ng.dpbench.report import Cell, Standing
from ektelo_ng.plans import info


def pyplot():
    return figures.pyplot("--plots")


def _style(algorithms: Sequence[str]) -> dict[str, dict]:
    plt = pyplot()
    palette = plt.get_cmap("tab20").colors
    colours = palette[0::2] + palette[1::2]  # the ten strong colours first
    return {
        a: {"color": colours[i % len(colours)], "linestyle": "-" if info[a].data_dependent else "--",
            "marker": "os^vD<>ph*"[i % 10], "markersize": 4}
        for i, a in enumerate(sorted(algorithms))
    }


def _slug(domain: str, epsilon: str) -> str:
    return f"{domain}_eps{epsilon.replace('/', '-')}"


def overview(standings: Sequence[Standing], out: Path, metric: str = "L2") -> list[Path]:
    """One overview figure per (domain, epsilon); returns the files written."""
    plt = pyplot()
    groups: dict[tuple, list[Standing]] = defaultdict(list)
    for s in standings:
        if s.relative_to_identity is not None:
            groups[(s.domain, s.epsilon)].append(s)
    written = []
    for (domain, epsilon), members in groups.items():
        style = _style({s.algorithm for s in members})
        fig, ax = plt.subplots(figsize=(8, 5.5))
        for algorithm in sorted(style):
            points = sorted((s.scale, s.relative_to_identity) for s in members if s.algorithm == algorithm)
            ax.plot(*zip(*points), label=algorithm, **style[algorithm])
        ax.set(xscale="log", yscale="log", xlabel="scale (records)",
               ylabel=f"{metric} error / Identity's (geometric mean over datasets)",
               title=f"DPBench replay: domain {domain}, epsilon {epsilon}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2, loc="best")
        fig.tight_layout()
        path = Path(out) / f"overview_{_slug(domain, epsilon)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def error_vs_scale(table: Sequence[Cell], out: Path, metric: str = "L2") -> list[Path]:
    """One figure per (domain, epsilon) with a panel per dataset; returns the files written."""
    plt = pyplot()
    groups: dict[tuple, list[Cell]] = defaultdict(list)
    for c in table:
        groups[(c.domain, c.epsilon)].append(c)
    written = []
    for (domain, epsilon), members in groups.items():
        datasets = sorted({c.dataset for c in members})
        style = _style({c.algorithm for c in members})
        columns = min(3, len(datasets))
        rows = math.ceil(len(datasets) / columns)
        fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
        for ax, dataset in zip(axes.flat, datasets):
            for algorithm in sorted(style):
                points = sorted((c.scale, c.mean, c.mean - c.low, c.high - c.mean) for c in members
                                if c.dataset == dataset and c.algorithm == algorithm)
                if points:
                    x, y, below, above = zip(*points)
                    ax.errorbar(x, y, yerr=(below, above), label=algorithm, capsize=2, **style[algorithm])
            ax.set(xscale="log", yscale="log", title=dataset, xlabel="scale", ylabel=f"{metric} error")
            ax.grid(True, which="both", alpha=0.3)
        for ax in list(axes.flat)[len(datasets):]:
            ax.axis("off")
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(8, len(labels)), fontsize=8)
        fig.suptitle(f"DPBench replay: domain {domain}, epsilon {epsilon}")
        fig.tight_layout(rect=(0, 0.04 + 0.02 * math.ceil(len(labels) / 8), 1, 0.97))
        path = Path(out) / f"error_vs_scale_{_slug(domain, epsilon)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
