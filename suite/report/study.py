"""The mini-batch study: success rate against batch size, as a table, a CSV and a PNG.

Reproduces the figures of Redgrave & Crum ("Generating adversarial samples in mini-batches may be
detrimental to adversarial robustness", Figs. 2-3): one line per attack configuration (attack,
loss reduction, precision), success rate on the y axis, batch size (log scale) on the x axis.
With a seed sweep (Sec. 3.4: "we repeat all runs five times and take the average") each point is
the mean over the seeds; the table adds the sample standard deviation and the plot a min-max band.
"""

from __future__ import annotations

import csv
import io
import itertools
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from suite.paths import atomic_write_text
from suite.report.figures import save_figure, tight_layout
from suite.report.results import Results


def _base_task(result: Results, seed: int | None) -> str:
    """The recipe's task name of a sweep copy (``<task>-bs<size>-s<seed>``, see ``Sweep``)."""
    name = result.task
    for suffix in (f"-s{seed}" if seed is not None else None, f"-bs{result.batch_size}"):
        if suffix and name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _split_label(label: str, combos: Sequence[str]) -> tuple[str, str]:
    """``(configuration, setting)`` of a swept attack label ``<attack>-<values>`` (``Sweep``)."""
    for combo in combos:
        if label.endswith(f"-{combo}"):
            return label[: -len(combo) - 1], combo
    return label, ""


def study_rows(results: Sequence[Results], swept: Mapping[str, Sequence[Any]] | None = None) -> list[dict[str, object]]:
    """One row per (task, batch size, attack label, attack seed), sorted. With the recipe's
    swept ``params`` (``Sweep.params``), ``config`` and ``setting`` split a label such as
    ``pgd_l2-mean-fp16`` into the attack as the recipe lists it (``pgd_l2``) and the swept values
    (``mean-fp16``)."""
    combos = ["-".join(map(str, combo)) for combo in itertools.product(*(swept or {}).values())] if swept else []
    combos.sort(key=len, reverse=True)
    rows = []
    for result in results:
        configured = result.config.get("attack_seed")
        base = _base_task(result, configured)
        for label, entry in result.attacks.items():
            config, setting = _split_label(label, combos)
            rows.append({
                "task": base,
                "batch_size": result.batch_size,
                "attack": label,
                "success_rate": entry.success_rate,
                "robust_accuracy": entry.robust_accuracy,
                "n_attacked": entry.n_attacked,
                "seconds": entry.seconds,
                "seed": result.seed if configured is None else configured,
                "config": config,
                "setting": setting,
            })
    return sorted(rows, key=lambda row: (row["task"], row["attack"], row["batch_size"], row["seed"]))


def summarise(rows: Sequence[dict[str, object]]) -> dict[tuple[str, str], dict[int, list[float]]]:
    """Success rates over the seeds, per (task, attack) and batch size."""
    grid: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        grid[(row["task"], row["attack"])][row["batch_size"]].append(row["success_rate"])
    return grid


def _cell(rates: list[float]) -> str:
    if not rates:
        return "-"
    if len(rates) == 1:
        return f"{100 * rates[0]:.1f}%"
    return f"{100 * statistics.fmean(rates):.1f}±{100 * statistics.stdev(rates):.1f}%"


def study_table(rows: Sequence[dict[str, object]]) -> str:
    """Success rate (%) per attack configuration (rows) and batch size (columns); over several
    seeds, the mean ± the sample standard deviation."""
    sizes = sorted({row["batch_size"] for row in rows})
    grid = summarise(rows)
    seeds = len({row["seed"] for row in rows})
    header = ["task", "attack", *(f"bs={size}" for size in sizes)]
    from suite.report.table import format_rows

    lines = [[task, attack, *(_cell(by_size.get(s, [])) for s in sizes)]
             for (task, attack), by_size in sorted(grid.items())]
    table = format_rows(header, lines)
    return table if seeds == 1 else f"{table}\n(mean ± standard deviation over {seeds} attack seeds)"


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

    # One panel per (task, attack as listed in the recipe); one line per swept setting.
    panels: dict[tuple[str, str], dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for row in rows:
        panel = panels[(row["task"], row.get("config") or row["attack"])]
        panel[row.get("setting") or row["attack"]][row["batch_size"]].append(row["success_rate"])
    tasks = sorted({task for task, _ in panels})
    configs = sorted({config for _, config in panels})
    figure, axes = plt.subplots(len(tasks), len(configs), figsize=(3.2 * len(configs) + 1.5, 2.8 * len(tasks) + 0.8),
                                dpi=110, squeeze=False, sharex=True, sharey=True)
    for (i, task), (j, config) in itertools.product(enumerate(tasks), enumerate(configs)):
        axis = axes[i][j]
        for setting, by_size in sorted(panels.get((task, config), {}).items()):
            sizes = sorted(by_size)
            (line,) = axis.plot(sizes, [100 * statistics.fmean(by_size[size]) for size in sizes], marker="o",
                                markersize=3, linestyle="--" if "mean" in setting.split("-") else "-", label=setting)
            if any(len(by_size[size]) > 1 for size in sizes):  # the min-max band over the seeds
                axis.fill_between(sizes, [100 * min(by_size[size]) for size in sizes],
                                  [100 * max(by_size[size]) for size in sizes], color=line.get_color(), alpha=0.15,
                                  linewidth=0)
        axis.set_xscale("log", base=2)
        axis.set_ylim(-2, 102)
        axis.grid(True, alpha=0.3)
        axis.set_title(f"{task}: {config}" if len(tasks) > 1 else config, fontsize=8)
        if i == len(tasks) - 1:
            axis.set_xlabel("batch size", fontsize=8)
        if j == 0:
            axis.set_ylabel("success rate (%)", fontsize=8)
        axis.tick_params(labelsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize=7, loc="upper right")
    figure.suptitle(title, fontsize=10)
    tight_layout(figure, rect=(0, 0, 0.88 if len(configs) > 1 else 0.8, 0.95))
    png_path = save_figure(figure, directory / "study.png")
    return csv_path, png_path
