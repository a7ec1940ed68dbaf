"""The mini-batch study: success rate against batch size, as a table, a CSV and a PNG.

Reproduces the figure of Redgrave & Crum ("Generating adversarial samples in mini-batches may be
detrimental to adversarial robustness"): one line per attack configuration (attack, loss
reduction, precision), success rate on the y axis, batch size (log scale) on the x axis.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from suite.paths import atomic_write_text
from suite.report.results import Results


def study_rows(results: Sequence[Results]) -> list[dict[str, object]]:
    """One row per (task, batch size, attack label), sorted."""
    rows = []
    for result in results:
        base = result.task.rsplit("-bs", 1)[0]
        for label, entry in result.attacks.items():
            rows.append({
                "task": base,
                "batch_size": result.batch_size,
                "attack": label,
                "success_rate": entry.success_rate,
                "robust_accuracy": entry.robust_accuracy,
                "n_attacked": entry.n_attacked,
                "seconds": entry.seconds,
            })
    return sorted(rows, key=lambda row: (row["task"], row["attack"], row["batch_size"]))


def study_table(rows: Sequence[dict[str, object]]) -> str:
    """Success rate (%) per attack configuration (rows) and batch size (columns)."""
    sizes = sorted({row["batch_size"] for row in rows})
    grid: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for row in rows:
        grid[(row["task"], row["attack"])][row["batch_size"]] = row["success_rate"]
    header = ["task", "attack", *(f"bs={size}" for size in sizes)]
    from suite.report.table import format_rows

    lines = [[task, attack, *(f"{100 * by_size[s]:.1f}%" if s in by_size else "-" for s in sizes)]
             for (task, attack), by_size in sorted(grid.items())]
    return format_rows(header, lines)


def write_csv(rows: Sequence[dict[str, object]], path: Path) -> Path:
    """Write ``rows`` (dicts with the same keys) as CSV, atomically; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["task"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_text(path, buffer.getvalue())


def write_study(rows: Sequence[dict[str, object]], directory: Path, title: str) -> tuple[Path, Path]:
    """Write ``study.csv`` and ``study.png`` into ``directory``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    csv_path = write_csv(rows, directory / "study.csv")

    series: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        series[(row["task"], row["attack"])].append((row["batch_size"], row["success_rate"]))
    figure, axis = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for (task, attack), points in sorted(series.items()):
        points.sort()
        dashed = "-mean" in attack
        axis.plot([p[0] for p in points], [100 * p[1] for p in points], marker="o", linestyle="--" if dashed else "-",
                  label=attack if len({t for t, _ in series}) == 1 else f"{task}: {attack}")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("batch size")
    axis.set_ylabel("attack success rate (%)")
    axis.set_ylim(-2, 102)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    png_path = directory / "study.png"
    temporary = directory / ".study.png.tmp"
    figure.savefig(temporary, format="png")
    plt.close(figure)
    temporary.replace(png_path)
    return csv_path, png_path
