"""Robust accuracy of a randomized ensemble against the probability α of its first member, per
attack, as a table, a CSV and a PNG: Dbouk & Shanbhag, "Adversarial Vulnerability of Randomized
Ensembles", ICML 2022, Fig. 3(a) and Fig. 7 (APGD, APGD-L, PGD-1 and ARC over α on a BAT
ensemble). Tasks that are not ensembles (the single adversarially trained model) are the
baseline: a dashed line per attack.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from suite.report.figures import save_figure, tight_layout
from suite.report.results import Results
from suite.report.study import write_csv

#: The worst case over every point-wise attack of a task, as a row of the table.
WORST = "worst case"


def alpha_rows(results: Sequence[Results]) -> list[dict[str, object]]:
    """One row per (task, attack) and the worst case: the task as the recipe names it, α (the
    first member's probability; ``None`` for a baseline that is not an ensemble) and the robust
    accuracy."""
    rows = []
    for result in results:
        members = result.model.members
        alpha = members[0].probability if members else None
        task = result.task
        if alpha is not None and task.endswith(f"-a{alpha:g}"):
            task = task[: -len(f"-a{alpha:g}")]
        entries = [(label, entry.robust_accuracy) for label, entry in result.attacks.items()]
        if result.worst_case_robust_accuracy is not None and len(entries) > 1:
            entries.append((WORST, result.worst_case_robust_accuracy))
        for label, value in entries:
            rows.append({"task": task, "model": result.model.name, "alpha": alpha, "attack": label,
                         "robust_accuracy": value, "clean_accuracy": result.clean_accuracy})
    return sorted(rows, key=lambda row: (row["alpha"] is None, row["task"], row["attack"], row["alpha"] or 0))


def alpha_table(rows: Sequence[dict[str, object]]) -> str:
    """Robust accuracy (%) per attack (rows) and α (columns); baselines in their own column."""
    from suite.report.table import format_rows

    alphas = sorted({row["alpha"] for row in rows if row["alpha"] is not None})
    grid: dict[str, dict[object, float]] = defaultdict(dict)
    baselines: dict[str, str] = {}
    for row in rows:
        if row["alpha"] is None:
            baselines[row["attack"]] = f"{100 * row['robust_accuracy']:.1f}% ({row['model']})"
        else:
            grid[row["attack"]][row["alpha"]] = row["robust_accuracy"]
    attacks = sorted(set(grid) | set(baselines), key=lambda name: (name == WORST, name))
    header = ["attack", *(f"a={alpha:g}" for alpha in alphas), "baseline"]
    lines = [[attack, *(f"{100 * grid[attack][a]:.1f}%" if a in grid[attack] else "-" for a in alphas),
              baselines.get(attack, "-")] for attack in attacks]
    return format_rows(header, lines)


def write_alpha_sweep(rows: Sequence[dict[str, object]], directory: Path, title: str) -> tuple[Path, Path]:
    """Write ``alpha_sweep.csv`` and ``alpha_sweep.png`` into ``directory``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    csv_path = write_csv(rows, directory / "alpha_sweep.csv")
    figure, axis = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    curves: dict[str, dict[float, float]] = defaultdict(dict)
    for row in rows:
        if row["alpha"] is not None:
            curves[row["attack"]][row["alpha"]] = 100 * row["robust_accuracy"]
    colours = {}
    for attack, points in sorted(curves.items(), key=lambda item: (item[0] == WORST, item[0])):
        alphas = sorted(points)
        (line,) = axis.plot(alphas, [points[a] for a in alphas], marker="o", markersize=3,
                            linewidth=2.2 if attack == WORST else 1.4, label=attack,
                            color="black" if attack == WORST else None)
        colours[attack] = line.get_color()
    for row in rows:
        if row["alpha"] is None:
            axis.axhline(100 * row["robust_accuracy"], linestyle="--", linewidth=1,
                         color=colours.get(row["attack"], "grey"), label=f"{row['model']}: {row['attack']}")
    axis.set_xlabel("α (probability of the first member)")
    axis.set_ylabel("robust accuracy (%)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    axis.set_title(title, fontsize=10)
    tight_layout(figure)
    png_path = save_figure(figure, directory / "alpha_sweep.png")
    return csv_path, png_path
