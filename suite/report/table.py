"""Plain-text results table (the one thing commands print to stdout)."""

from __future__ import annotations

from collections.abc import Sequence

from suite.report.results import Results


def results_table(results: Sequence[Results]) -> str:
    """One row per (task, attack) and a worst-case row per task; accuracies in percent."""
    header = ("task", "model", "dataset", "n", "clean acc", "attack", "robust acc", "success", "queries", "seconds")
    rows = []
    for result in results:
        common = (result.task, result.model.name, f"{result.dataset.spec}:{result.dataset.split}", str(result.dataset.n),
                  f"{100 * result.clean_accuracy:.1f}%")
        for name, entry in result.attacks.items():
            rows.append((*common, name, f"{100 * entry.robust_accuracy:.1f}%", f"{100 * entry.success_rate:.1f}%",
                         f"{entry.mean_queries:.1f}", f"{entry.seconds:.1f}"))
        if len(result.attacks) > 1:
            rows.append((*common, "worst case", f"{100 * result.worst_case_robust_accuracy:.1f}%", "", "", ""))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
