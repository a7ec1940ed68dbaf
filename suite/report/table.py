"""Plain-text results table (the one thing commands print to stdout)."""

from __future__ import annotations

from collections.abc import Sequence

from suite.report.results import Results
from suite.text import printable


def percent(value: float | None, interval: Sequence[float] | None = None) -> str:
    """``61.0%`` or, with its 95% interval, ``61.0% [54.2, 67.5]``."""
    if value is None:
        return "-"
    if not interval:
        return f"{100 * value:.1f}%"
    return f"{100 * value:.1f}% [{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]"


def results_table(results: Sequence[Results]) -> str:
    """One row per (task, attack), grouped by threat model (norm and ε, or text level), and a
    worst-case row per threat model; accuracies in percent with their 95% intervals."""
    header = ("task", "model", "dataset", "n", "clean acc [95% CI]", "threat", "attack", "robust acc [95% CI]",
              "success", "queries", "seconds")
    rows = []
    for result in results:
        common = (result.task, result.model.name, f"{result.dataset.spec}:{result.dataset.split}", str(result.dataset.n),
                  percent(result.clean_accuracy, result.clean_accuracy_ci))
        groups = result.threat_models or {"": None}
        for label, group in groups.items():
            keys = group.attacks if group is not None else list(result.attacks)
            for key in keys:
                entry = result.attacks[key]
                rows.append((*common, label or entry.threat.label, key,
                             percent(entry.robust_accuracy, entry.robust_accuracy_ci),
                             f"{100 * entry.success_rate:.1f}%", f"{entry.mean_queries:.1f}", f"{entry.seconds:.1f}"))
            if group is not None and len(keys) > 1:
                rows.append((*common, label, "worst case",
                             percent(group.worst_case_robust_accuracy, group.worst_case_robust_accuracy_ci), "", "", ""))
        for key, entry in result.distributional.items():
            rows.append((*common, entry.threat.label, f"{key} (distributional)", percent(entry.accuracy), "",
                         f"{entry.mean_queries:.1f}", f"{entry.seconds:.1f}"))
    return format_rows(header, [[printable(cell) for cell in row] for row in rows])


def format_rows(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns under a dashed rule."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


ADVERSARIES = ("none", "cal", "opt", "platt")


def adversary_rows(results: Sequence[Results]) -> list[dict[str, str]]:
    """Robust accuracy per (model, attack) under each adversary temperature (the IoR paper's Table 3)."""
    rows = []
    present = {entry.adversary for result in results for entry in result.attacks.values()}
    kinds = [kind for kind in ADVERSARIES if kind != "platt" or kind in present]
    for result in results:
        bases: dict[str, dict[str, object]] = {}
        for name, entry in result.attacks.items():
            bases.setdefault(entry.base_attack or name, {})[entry.adversary] = entry
        for base, by_kind in bases.items():
            row = {"task": result.task, "model": result.model.name, "attack": base}
            for kind in kinds:
                entry = by_kind.get(kind)
                row[kind] = f"{100 * entry.robust_accuracy:.1f}%" if entry is not None else "-"
                if kind in ("cal", "opt"):
                    row[f"T_{kind}"] = f"{entry.adversary_temperature:.3g}" if entry is not None else "-"
            flagged = result.illusion is not None and any(
                finding["reference"] == base for finding in result.illusion.findings
            )
            row["illusion"] = "YES" if flagged else ""
            rows.append(row)
    return rows


def adversary_table(results: Sequence[Results]) -> str:
    """Plain-text attack × adversary table."""
    rows = adversary_rows(results)
    if not rows:
        return ""
    header = list(rows[0])
    return format_rows(header, [[printable(row[column]) for column in header] for row in rows])


def has_adversaries(results: Sequence[Results]) -> bool:
    return any(entry.adversary != "none" for result in results for entry in result.attacks.values())
